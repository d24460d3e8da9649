//! Kind `connections` (RFC 3511 §5.2 and §5.4): open, hold, validate and
//! close many TCP connections to the engine server.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::rt::guard::MAX_HELPERS;
use crate::spec::common::{
    self, bind_of, peers_of, per_second_of, server_kind_raw, socket_buffer_of, sources_of,
    tcp_only, timeout_of, Close, Common, KindSpec, Names, Payload, Prefix, Protocol,
};
use crate::spec::resolved::Resolved;
use crate::spec::serving::{self, need, Declared, Need};

/// Most connections one `connections` test may open (each is a file descriptor on both sides).
pub const MAX_CONNECTIONS: u64 = 1_000_000;

server_kind_raw! {
    /// A connections spec as given.
    struct Raw {
        /// Client-side source address for data connections.
        /// Value: address, optional, same family as `server`
        bind: Option<IpAddr>,
        /// Fixed server data port (for ACLs that match ports); default: the server picks one
        /// (from its `--data-ports` range if given, else ephemeral)
        /// Value: u16, optional
        data_port: Option<u16>,
        /// SO_SNDBUF and SO_RCVBUF on both sides; above `net.core.{w,r}mem_max` (on either
        /// host: the server checks its own) is an error; the granted sizes are reported.
        /// Value: bytes ≥ 1024, optional
        socket_buffer: Option<u64>,
        /// TCP_NODELAY.
        /// Value: bool, default true for rr/crr, false for stream
        nodelay: Option<bool>,
        /// Accepted for a common spec shape; the connections do not use it.
        /// Value: `"random"` | `"zeros"` | `"text"`, default random
        payload: Option<Payload>,
        /// Http: new fetches/s; crr: new connections/s shared by the `parallel` loops;
        /// connections: opens/s. An absolute schedule (item *k* due at *k*/rate), so no drift.
        /// Value: float/s, optional
        rate: Option<f64>,
        /// Deadline per connect and per response; a miss is counted, never fatal. crr with
        /// `rate` or `timeout` counts failures in `loss` instead of failing after 50 in a row.
        /// Value: seconds, default 5 (http, connections), none (crr)
        timeout: Option<f64>,
        /// How many to open.
        /// Value: 1..=1e6, default 1000
        connections: Option<u64>,
        /// Held before validation.
        /// Value: seconds 0..600, default 1
        hold: Option<f64>,
        /// FINs sent per second at teardown (default: as fast as possible)
        /// Value: float/s, optional
        close_rate: Option<f64>,
        /// How the server answers each client FIN, with its own FIN (orderly) or an RST
        /// (SO_LINGER 0). The result records it as `close`.
        /// Value: `"fin"` | `"reset"`, default `"fin"`
        close: Option<Close>,
        /// The client's source addresses, round-robin by connection: each gives the kernel's
        /// port range again (~64 k connections to the server's one port)
        /// Value: list of addresses of the server's family, at most 4096, none twice; default
        /// `[bind]`, or the kernel's choice (http: not with `bind`)
        sources: Option<Vec<IpAddr>>,
        /// Most connections one engine process holds; default its RLIMIT_NOFILE (raised to the
        /// hard limit) less 256. Beyond it both sides start helper processes (the same binary)
        /// that share the connections: the server's share its data listener, the client's open,
        /// validate and close their shares when told; the result sums them (`processes`)
        /// Value: 100..=1e6, optional
        per_process: Option<u64>,
        /// What the server may also see the connections come from (the `sources` behind a NAT);
        /// see "What a server accepts".
        /// Value: list of addresses or prefixes, at most 4096, default []
        peers: Option<Vec<Prefix>>,
    }
}

/// A resolved connections spec. It measures its own phases: no warm-up, no
/// intervals; `duration` bounds the opening phase. `payload` is accepted but
/// not used.
#[derive(Clone, Debug, Serialize)]
pub struct ConnectionsSpec {
    #[serde(flatten)]
    pub common: Common,
    pub bind: Option<IpAddr>,
    pub data_port: Option<u16>,
    pub socket_buffer: Option<u64>,
    pub nodelay: bool,
    pub payload: Payload,
    /// Opens/s (None: as fast as possible).
    pub rate: Option<f64>,
    /// Deadline of each connect and validation.
    pub timeout: Option<f64>,
    /// How many to open.
    pub connections: u64,
    /// Seconds held before validation.
    pub hold: f64,
    /// FINs sent per second at teardown (None: as fast as possible).
    pub close_rate: Option<f64>,
    /// How the server answers each client FIN.
    pub close: Close,
    /// Source addresses the client binds its connections to, round-robin (a
    /// port each from the kernel, per destination): ~64 k connections per
    /// address. Empty: the kernel's choice (one address). `bind` alone is one.
    pub sources: Vec<IpAddr>,
    /// Most connections one engine process holds (None: its descriptor limit
    /// less a margin); beyond it, helper processes share them, on both sides.
    pub per_process: Option<u64>,
    /// Addresses or prefixes the server may also see the connections come
    /// from (a NAT between the hosts translates `sources`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<Prefix>,
}

impl KindSpec for ConnectionsSpec {
    const NAME: &'static str = "connections";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Tcp);
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, _: &Names) -> Result<ConnectionsSpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Tcp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        tcp_only(
            protocol,
            "connections is TCP only: set protocol to \"tcp\" or leave it out",
        )?;
        let bind = bind_of(raw.bind, common.server)?;
        let socket_buffer = socket_buffer_of(raw.socket_buffer)?;
        let rate = per_second_of("rate", raw.rate)?;
        let close_rate = per_second_of("close_rate", raw.close_rate)?;
        let timeout = timeout_of(raw.timeout, Some(5.0))?;
        let connections = raw.connections.unwrap_or(1000);
        if !(1..=MAX_CONNECTIONS).contains(&connections) {
            return Err(EngineError::spec(
                "connections",
                format!(
                    "connections must be 1..={} (got {}): give e.g. 10000",
                    MAX_CONNECTIONS, connections
                ),
            ));
        }
        let hold = raw.hold.unwrap_or(1.0);
        if !(hold.is_finite() && (0.0..=600.0).contains(&hold)) {
            return Err(EngineError::spec(
                "hold",
                format!("hold must be 0..=600 seconds (got {}): give e.g. 1", hold),
            ));
        }
        let sources = sources_of(raw.sources, bind, &common)?;
        let peers = peers_of(raw.peers, &common)?;
        Ok(ConnectionsSpec {
            common,
            bind,
            data_port: raw.data_port,
            socket_buffer,
            nodelay: raw.nodelay.unwrap_or(true),
            payload: raw.payload.unwrap_or(Payload::Random),
            rate,
            timeout,
            connections,
            hold,
            close_rate,
            close: raw.close.unwrap_or_default(),
            sources,
            per_process: per_process_of(raw.per_process)?,
            peers,
        })
    }
}

/// `per_process`: at least 100 connections a process.
fn per_process_of(v: Option<u64>) -> Result<Option<u64>> {
    match v {
        Some(n) if !(100..=MAX_CONNECTIONS).contains(&n) => Err(EngineError::spec(
            "per_process",
            format!(
                "per_process must be 100..={} connections (got {}): leave it out for the descriptor limit",
                MAX_CONNECTIONS, n
            ),
        )),
        v => Ok(v),
    }
}

/// What the server keeps per held connection.
const PER_CONNECTION: u64 = 256;

impl Resolved for ConnectionsSpec {
    /// How long the server may keep the test: open (at most `duration`),
    /// hold, validate, close and drain.
    fn total_seconds(&self) -> f64 {
        self.common.duration + self.hold + 2.0 * self.timeout.unwrap_or(5.0)
    }

    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.common.server_target()
    }

    /// A socket buffer this host's sysctls would silently cap.
    fn check_local_limits(&self) -> Result<()> {
        common::check_socket_buffer(self.socket_buffer)
    }

    fn declared_sources(&self) -> Vec<Declared> {
        [
            serving::bind(&self.bind),
            serving::list("sources", &self.sources),
            serving::list("peers", &self.peers),
        ]
        .concat()
    }

    fn data_connections(&self) -> Option<u64> {
        Some(self.connections)
    }

    /// A few bytes a held connection.
    fn server_need(&self) -> Need {
        need(
            self.connections * PER_CONNECTION,
            "connections",
            format!("{} connections × {} B", self.connections, PER_CONNECTION),
        )
    }

    fn check_server_extra(&self) -> Result<()> {
        check_helpers(self, self.per_process)
    }
}

/// Refuses a connections test that `per_process` (the one asked, or the
/// server's own descriptor limit) would spread over more than MAX_HELPERS
/// helper processes besides the first.
pub fn check_helpers(spec: &ConnectionsSpec, per_process: Option<u64>) -> Result<()> {
    let Some(cap) = per_process.filter(|&c| c > 0) else {
        return Ok(());
    };
    let helpers = spec.connections.div_ceil(cap).saturating_sub(1);
    if helpers > MAX_HELPERS {
        return Err(EngineError::spec(
            "per_process",
            format!(
                "{} connections at {} a process need {} helper processes, above the {} one \
                 test may start: raise per_process to at least {} (and the descriptor limit, \
                 ulimit -n), or ask fewer connections",
                spec.connections,
                cap,
                helpers,
                MAX_HELPERS,
                spec.connections.div_ceil(MAX_HELPERS + 1)
            ),
        ));
    }
    Ok(())
}
