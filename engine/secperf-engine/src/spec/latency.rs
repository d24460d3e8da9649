//! Kind `latency`: timestamped UDP probes at a fixed rate, both directions;
//! with `probe_every`, inside a whole stream of frames (latency under load).

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::spec::common::{
    interval_of, peers_of, server_kind_raw, warmup_of, Common, KindSpec, Names, Prefix, Protocol,
    Sources,
};
use crate::spec::resolved::Resolved;
use crate::spec::serving::{self, need, Declared, Need};
use crate::wire::probe::{payload_len, HEADER};

pub const FRAME_MIN: u64 = 64;
pub const FRAME_MAX: u64 = 1518;
pub const RATE_PPS_MAX: f64 = 10_000_000.0;
pub const ADDRESSES_MAX: usize = 4096;
/// Most frames between two probes of latency under load.
pub const PROBE_EVERY_MAX: u64 = 1_000_000;

/// Latency probes: both directions at once, or alternating (the server
/// answers each probe with one of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Duplex {
    Full,
    Half,
}

/// Where latency stamps come from: the kernel (SO_TIMESTAMPING) or user space
/// (clock reads around send/recv; for measuring what kernel stamping costs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timestamps {
    Kernel,
    User,
}

server_kind_raw! {
    /// A latency spec as given.
    struct Raw {
        /// Run but excluded from the result.
        /// Value: float, default 1, 0 ≤ w ≤ 600
        warmup: Option<f64>,
        /// Interval record period.
        /// Value: float, default 1; 0 = no interval records; else ≥ 0.01
        interval: Option<f64>,
        /// Fixed server data port (for ACLs that match ports); default: the server picks one
        /// (from its `--data-ports` range if given, else ephemeral)
        /// Value: u16, optional
        data_port: Option<u16>,
        /// On-wire Ethernet frame incl. 14 B header and 4 B FCS; UDP payload = frame − 18 − IP
        /// header (20/40) − 8, at least 18 B (IPv6 needs ≥ 84)
        /// Value: 64..=1518, default 64
        frame_size: Option<u64>,
        /// Probes/s per direction, on an absolute schedule; a probe due within 20 µs leaves at
        /// once; a sender more than 1 ms behind skips ahead (a shortfall shows in
        /// `achieved_pps`, never hidden)
        /// Value: float, 0 < r ≤ 1e7, default 1000
        rate_pps: Option<f64>,
        /// Full: the server sends its own paced probes at the same time (to every (local
        /// address, client address) pair it has heard from, round robin); half: the server
        /// answers each probe with one probe of its own.
        /// Value: `"full"` | `"half"`, default full
        duplex: Option<Duplex>,
        /// A list of addresses.
        /// Value: list of addresses, default [] (the kernel's choice)
        sources: Option<Sources>,
        /// Server-side addresses, paired i↔i with `sources` (equal lengths, or one of them a
        /// single address)
        /// Value: list of addresses, default [] (the server's control address)
        destinations: Option<Vec<IpAddr>>,
        /// User: clock reads around sendmsg/recvmsg, no SO_TIMESTAMPING (to measure what kernel
        /// stamping costs)
        /// Value: `"kernel"` | `"user"`, default kernel
        timestamps: Option<Timestamps>,
        /// Latency under load: `rate_pps` is the whole stream of frames a direction, sent on an
        /// AF_PACKET socket, one frame in `probe_every` a probe (IPv4, full duplex, kernel
        /// stamps only); below.
        /// Value: 1..=1000000, default none
        probe_every: Option<u64>,
        /// What the server may also see the probes come from: the `sources` as a NAT between
        /// the hosts translates them (secperf fills it from the variant's NAT); the server
        /// answers these too (see "What a server accepts")
        /// Value: list of addresses or prefixes (`"198.18.5.0/24"`) of the server's family, at
        /// most 4096, default []
        peers: Option<Vec<Prefix>>,
    }
}

/// A resolved latency spec.
#[derive(Clone, Debug, Serialize)]
pub struct LatencySpec {
    #[serde(flatten)]
    pub common: Common,
    pub warmup: f64,
    pub interval: f64,
    pub data_port: Option<u16>,
    /// On-wire Ethernet frame of a probe, header and FCS included.
    pub frame_size: usize,
    /// Probes (or, under load, frames) per second and direction.
    pub rate_pps: f64,
    pub duplex: Duplex,
    pub sources: Vec<IpAddr>,
    pub destinations: Vec<IpAddr>,
    pub timestamps: Timestamps,
    /// Latency under load: the whole stream of `rate_pps` frames leaves on a
    /// packet socket and one in this many is a timestamped probe (None: every
    /// frame is a probe on a UDP socket).
    pub probe_every: Option<u64>,
    /// Addresses or prefixes the server may also see the probes come from
    /// (a NAT between the hosts translates `sources`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<Prefix>,
}

impl KindSpec for LatencySpec {
    const NAME: &'static str = "latency";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Udp);
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, _: &Names) -> Result<LatencySpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Udp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        let server = common.server;
        if protocol == Protocol::Tcp {
            return Err(EngineError::spec(
                "protocol",
                "latency probes are UDP: set protocol to \"udp\" or leave it out",
            ));
        }
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let frame_size = raw.frame_size.unwrap_or(FRAME_MIN);
        if !(FRAME_MIN..=FRAME_MAX).contains(&frame_size) {
            return Err(EngineError::spec(
                "frame_size",
                format!(
                    "frame_size {} is outside {}..={} (an Ethernet frame with its 14 B header and 4 B FCS): give e.g. 64",
                    frame_size, FRAME_MIN, FRAME_MAX
                ),
            ));
        }
        let payload = payload_len(frame_size as usize, server.is_ipv6());
        if payload < HEADER {
            return Err(EngineError::spec(
                "frame_size",
                format!(
                    "frame_size {} leaves {} bytes of UDP payload over IPv{}, fewer than the {} a probe needs: use at least {}",
                    frame_size,
                    payload,
                    if server.is_ipv6() { 6 } else { 4 },
                    HEADER,
                    18 + if server.is_ipv6() { 40 } else { 20 } + 8 + HEADER
                ),
            ));
        }
        let rate_pps = raw.rate_pps.unwrap_or(1000.0);
        if !rate_pps.is_finite() || rate_pps <= 0.0 || rate_pps > RATE_PPS_MAX {
            return Err(EngineError::spec(
                "rate_pps",
                format!(
                    "rate_pps must be > 0 and ≤ {} probes/s per direction (got {}): give e.g. 1000",
                    RATE_PPS_MAX, rate_pps
                ),
            ));
        }
        let sources =
            match raw.sources {
                None => Vec::new(),
                Some(Sources::List(list)) => list,
                Some(Sources::Cidr(_)) => return Err(EngineError::spec(
                    "sources",
                    "latency sources is a list of addresses such as [\"198.18.1.10\"], not a CIDR",
                )),
            };
        let probe_every = probe_every_of(raw.probe_every, raw.duplex, raw.timestamps, server)?;
        let destinations = raw.destinations.unwrap_or_default();
        check_addresses(&sources, &destinations, server)?;
        let peers = peers_of(raw.peers, &common)?;
        Ok(LatencySpec {
            common,
            warmup,
            interval,
            data_port: raw.data_port,
            frame_size: frame_size as usize,
            rate_pps,
            duplex: raw.duplex.unwrap_or(Duplex::Full),
            sources,
            destinations,
            timestamps: raw.timestamps.unwrap_or(Timestamps::Kernel),
            probe_every,
            peers,
        })
    }
}

/// `sources` and `destinations`: of the server's family, paired i↔i.
fn check_addresses(sources: &[IpAddr], destinations: &[IpAddr], server: SocketAddr) -> Result<()> {
    for (field, list) in [("sources", sources), ("destinations", destinations)] {
        if list.len() > ADDRESSES_MAX {
            return Err(EngineError::spec(
                field,
                format!(
                    "{} lists {} addresses: give at most {}",
                    field,
                    list.len(),
                    ADDRESSES_MAX
                ),
            ));
        }
        if let Some(a) = list.iter().find(|a| a.is_ipv4() != server.is_ipv4()) {
            return Err(EngineError::spec(
                field,
                format!(
                    "{} {} is not of the server's IP family ({}): give addresses of one family",
                    field, a, server
                ),
            ));
        }
    }
    if !sources.is_empty()
        && !destinations.is_empty()
        && sources.len() != destinations.len()
        && sources.len() != 1
        && destinations.len() != 1
    {
        return Err(EngineError::spec(
            "destinations",
            format!(
                "sources ({}) and destinations ({}) are paired i↔i: give lists of the same length, or one of them with a single address",
                sources.len(),
                destinations.len()
            ),
        ));
    }
    Ok(())
}

/// `probe_every`: latency under load needs IPv4, full duplex and kernel stamps.
fn probe_every_of(
    probe_every: Option<u64>,
    duplex: Option<Duplex>,
    timestamps: Option<Timestamps>,
    server: SocketAddr,
) -> Result<Option<u64>> {
    let Some(n) = probe_every else {
        return Ok(None);
    };
    let refuse = |m: &str| Err(EngineError::spec("probe_every", m.to_string()));
    if !(1..=PROBE_EVERY_MAX).contains(&n) {
        return Err(EngineError::spec(
            "probe_every",
            format!(
                "probe_every {} is outside 1..={}: give e.g. 100 (one frame in 100 is a probe)",
                n, PROBE_EVERY_MAX
            ),
        ));
    }
    if server.is_ipv6() {
        return refuse("latency under load (probe_every) sends IPv4 frames: use an IPv4 server, or leave probe_every out");
    }
    if duplex == Some(Duplex::Half) {
        return refuse("latency under load (probe_every) runs full duplex (both ends send the load): set duplex to \"full\" or leave probe_every out");
    }
    if timestamps == Some(Timestamps::User) {
        return refuse(
            "latency under load (probe_every) takes kernel stamps only: leave timestamps out",
        );
    }
    Ok(Some(n))
}

/// A latency server's state (its receive buffer, stamp ring and histograms),
/// whatever the spec.
const SERVER_STATE: u64 = 8 << 20;

impl Resolved for LatencySpec {
    fn total_seconds(&self) -> f64 {
        self.warmup + self.common.duration
    }

    /// The server and every one of `destinations`.
    fn targets(&self) -> Vec<(String, IpAddr)> {
        let mut out = self.common.server_target();
        out.extend(
            self.destinations
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("destinations[{}]", i), *a)),
        );
        out
    }

    fn declared_sources(&self) -> Vec<Declared> {
        [
            serving::list("sources", &self.sources),
            serving::list("peers", &self.peers),
        ]
        .concat()
    }

    fn server_need(&self) -> Need {
        need(SERVER_STATE, "kind", "a latency server's state".into())
    }
}
