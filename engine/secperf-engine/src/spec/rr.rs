//! Kind `rr`: request/response on one connection (TCP) or socket (UDP);
//! closed loop (the next request when a response arrives, `inflight` at once)
//! or, with `rate`, open loop (requests on a schedule whatever the replies).

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::rt::guard::size_words;
use crate::rt::net::SCRATCH;
use crate::spec::common::{
    self, bind_of, interval_of, per_second_of, seconds, server_kind_raw, size, socket_buffer_of,
    warmup_of, Common, KindSpec, Names, Payload, Protocol,
};
use crate::spec::resolved::Resolved;
use crate::spec::serving::{self, need, Declared, Need, DATAGRAM};

/// Pipelined rr must fit the default socket buffers, or both ends block writing.
pub const INFLIGHT_BYTES_MAX: usize = 64 << 10;
/// Open loop (`rate`): the most transactions outstanding at once unless `inflight`
/// says otherwise (a reader drains the responses, so no buffer limit applies).
pub const PACED_INFLIGHT: usize = 64;
/// Open loop: at most this many outstanding (the schedule's bookkeeping).
pub const PACED_INFLIGHT_MAX: usize = 4096;

server_kind_raw! {
    /// An rr spec as given.
    struct Raw {
        /// Run but excluded from the result.
        /// Value: float, default 1, 0 ≤ w ≤ 600
        warmup: Option<f64>,
        /// Interval record period.
        /// Value: float, default 1; 0 = no interval records; else ≥ 0.01
        interval: Option<f64>,
        /// Client-side source address for data connections.
        /// Value: address, optional, same family as `server`
        bind: Option<IpAddr>,
        /// Fixed server data port (for ACLs that match ports); default: the server picks one
        /// (from its `--data-ports` range if given, else ephemeral)
        /// Value: u16, optional
        data_port: Option<u16>,
        /// Fixed client source port; stream connection *i* (0-based, senders first) uses
        /// `client_port + i`.
        /// Value: u16, optional
        client_port: Option<u16>,
        /// SO_SNDBUF and SO_RCVBUF on both sides; above `net.core.{w,r}mem_max` (on either
        /// host: the server checks its own) is an error; the granted sizes are reported.
        /// Value: bytes ≥ 1024, optional
        socket_buffer: Option<u64>,
        /// TCP_NODELAY.
        /// Value: bool, default true for rr/crr, false for stream
        nodelay: Option<bool>,
        /// Text is compressible English-like text.
        /// Value: `"random"` | `"zeros"` | `"text"`, default random
        payload: Option<Payload>,
        /// Value: bytes ≥ 1, default 1; UDP ≤ 65507
        #[serde(alias = "request_size")]
        request: Option<u64>,
        /// Value: bytes ≥ 1, default 1; UDP ≤ 65507
        #[serde(alias = "response_size")]
        response: Option<u64>,
        /// Closed loop: transactions outstanding at once on the one connection/socket
        /// (pipelined); the bound keeps both ends from blocking on full buffers. Open loop: the
        /// most the schedule may have outstanding; a request due beyond it waits (and its
        /// latency shows the wait)
        /// Value: int 1..=64, default 1; with inflight > 1, inflight × (request + response) ≤
        /// 65536. With `rate`: 1..=4096, default 64, no byte bound (a receiver drains the
        /// responses); UDP: at most the sequence numbers the requests carry (256 for 1-byte
        /// requests or responses)
        inflight: Option<u64>,
        /// A request with no response after this is counted lost and a new one sent.
        /// Value: float, 0 < t ≤ 60, default 0.1
        udp_timeout: Option<f64>,
        /// Open loop: requests per second on an absolute schedule (request i due at i / rate; a
        /// sender that wakes late sends what is due at once) whatever the replies, a sender and
        /// a receiver thread on the one connection/socket; each transaction's latency counts
        /// from its request's scheduled time, so queueing in the path shows instead of slowing
        /// the schedule. Absent: closed loop.
        /// Value: float > 0, ≤ 1e7, default absent
        rate: Option<f64>,
    }
}

/// A resolved rr spec.
#[derive(Clone, Debug, Serialize)]
pub struct RrSpec {
    #[serde(flatten)]
    pub common: Common,
    pub warmup: f64,
    pub interval: f64,
    pub bind: Option<IpAddr>,
    pub data_port: Option<u16>,
    pub client_port: Option<u16>,
    pub socket_buffer: Option<u64>,
    pub nodelay: bool,
    pub payload: Payload,
    /// Bytes of each request.
    pub request: usize,
    /// Bytes of each response.
    pub response: usize,
    /// Transactions outstanding at once: closed loop, pipelined; open loop, the
    /// most the schedule may have outstanding (a request due beyond it waits).
    pub inflight: usize,
    /// UDP: a request unanswered after this many seconds is lost.
    pub udp_timeout: f64,
    /// Open loop: requests per second on an absolute schedule, whatever the
    /// replies; latency counts from each request's scheduled time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl KindSpec for RrSpec {
    const NAME: &'static str = "rr";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Tcp);
    const PROTOCOL_ONLY: &'static [(&'static str, Protocol)] =
        &[("nodelay", Protocol::Tcp), ("udp_timeout", Protocol::Udp)];
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, names: &Names) -> Result<RrSpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Tcp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let bind = bind_of(raw.bind, common.server)?;
        let socket_buffer = socket_buffer_of(raw.socket_buffer)?;
        let request = size(names.of("request"), raw.request, 1, protocol)?;
        let response = size(names.of("response"), raw.response, 1, protocol)?;
        let rate = per_second_of("rate", raw.rate)?;
        let paced = rate.is_some();
        let (default, most) = if paced {
            (PACED_INFLIGHT as u64, PACED_INFLIGHT_MAX as u64)
        } else {
            (1, 64)
        };
        let inflight = raw.inflight.unwrap_or(default);
        if !(1..=most).contains(&inflight) {
            return Err(EngineError::spec(
                "inflight",
                format!(
                    "inflight must be 1..={} (got {}): give e.g. {}",
                    most, inflight, default
                ),
            ));
        }
        let inflight = inflight as usize;
        if !paced && inflight > 1 && inflight * (request + response) > INFLIGHT_BYTES_MAX {
            return Err(EngineError::spec(
                "inflight",
                format!(
                    "inflight {} × (request + response) = {} bytes is above {}: both ends could block writing; lower inflight or the sizes",
                    inflight,
                    inflight * (request + response),
                    INFLIGHT_BYTES_MAX
                ),
            ));
        }
        let seq_bytes = request.min(response).min(8);
        if paced && protocol == Protocol::Udp && seq_bytes < 8 && inflight >> (8 * seq_bytes) > 0 {
            return Err(EngineError::spec(
                "inflight",
                format!(
                    "inflight {} is more than the {} sequence numbers {}-byte requests and responses carry: lower inflight or make both sizes at least {} bytes",
                    inflight,
                    1usize << (8 * seq_bytes),
                    seq_bytes,
                    seq_bytes + 1
                ),
            ));
        }
        let udp_timeout = seconds(
            "udp_timeout",
            raw.udp_timeout.unwrap_or(0.1),
            true,
            0.0,
            60.0,
            "0.1",
        )?;
        Ok(RrSpec {
            common,
            warmup,
            interval,
            bind,
            data_port: raw.data_port,
            client_port: raw.client_port,
            socket_buffer,
            nodelay: raw.nodelay.unwrap_or(true),
            payload: raw.payload.unwrap_or(Payload::Random),
            request,
            response,
            inflight,
            udp_timeout,
            rate,
        })
    }
}

impl Resolved for RrSpec {
    fn total_seconds(&self) -> f64 {
        self.warmup + self.common.duration
    }

    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.common.server_target()
    }

    /// A socket buffer this host's sysctls would silently cap.
    fn check_local_limits(&self) -> Result<()> {
        common::check_socket_buffer(self.socket_buffer)
    }

    fn declared_sources(&self) -> Vec<Declared> {
        serving::bind(&self.bind)
    }

    /// One data connection (TCP).
    fn data_connections(&self) -> Option<u64> {
        (self.common.protocol == Protocol::Tcp).then_some(1)
    }

    /// One response, a bounded read buffer.
    fn server_need(&self) -> Need {
        let read = match self.common.protocol {
            Protocol::Tcp => (self.request as u64).min(SCRATCH as u64),
            Protocol::Udp => DATAGRAM,
        };
        need(
            self.response as u64 + read,
            "response",
            format!(
                "one {} response + {} read buffer",
                size_words(self.response as u64),
                size_words(read)
            ),
        )
    }
}
