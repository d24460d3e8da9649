//! Kind `crr`: connect, request, response, close, by `parallel` loops; with
//! `rate` and/or `timeout`, paced and counting failures.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::Result;
use crate::rt::guard::size_words;
use crate::rt::net::SCRATCH;
use crate::spec::common::{
    self, bind_of, busy_poll_of, interval_of, parallel_of, per_second_of, server_kind_raw, size,
    socket_buffer_of, tcp_only, threads_of, timeout_of, warmup_of, CloseOrder, Common, KindSpec,
    Names, Payload, Protocol,
};
use crate::spec::resolved::Resolved;
use crate::spec::serving::{self, need, Declared, Need};

server_kind_raw! {
    /// A crr spec as given.
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
        /// Stream: streams (threads); crr: connections under way at once (each a loop: connect,
        /// request, response, close, again), machines of the event loop.
        /// Value: int 1..=128 (stream), 1..=1024 (crr), default 1
        parallel: Option<u64>,
        /// Value: bytes ≥ 1, default 1; UDP ≤ 65507
        #[serde(alias = "request_size")]
        request: Option<u64>,
        /// Value: bytes ≥ 1, default 1; UDP ≤ 65507
        #[serde(alias = "response_size")]
        response: Option<u64>,
        /// Http: new fetches/s; crr: new connections/s shared by the `parallel` loops;
        /// connections: opens/s. An absolute schedule (item *k* due at *k*/rate), so no drift.
        /// Value: float/s, optional
        rate: Option<f64>,
        /// Deadline per connect and per response; a miss is counted, never fatal. crr with
        /// `rate` or `timeout` counts failures in `loss` instead of failing after 50 in a row.
        /// Value: seconds, default 5 (http, connections), none (crr)
        timeout: Option<f64>,
        /// How each connection ends (see "Data connections"). The result records it as `close`.
        /// Value: `"server-first"` | `"client-first"` | `"reset"`, default `"server-first"`;
        /// `"fin"` reads as `"client-first"`
        close: Option<CloseOrder>,
        /// The event-loop threads that share the connections (an epoll set each, mio; a thread
        /// with one connection blocks on its socket instead)
        /// Value: int 1..=64, default one per CPU the process may use, never more than
        /// `parallel` (mix: its virtual clients)
        threads: Option<u64>,
        /// How long an event-loop thread that finds nothing ready keeps asking (epoll_wait with
        /// no wait) before it sleeps; with it even one connection runs on the epoll set. It
        /// trades CPU for wake-ups: on a virtual machine a thread that sleeps between answers
        /// makes whoever delivers the next answer (the server, the DUT) pay for waking an idle
        /// CPU. Leave it 0 where the generator shares a CPU with what it measures (it would
        /// take that CPU); docs/performance.md shows both.
        /// Value: int 0..=10000, default 0
        busy_poll_us: Option<u64>,
    }
}

/// A resolved crr spec.
#[derive(Clone, Debug, Serialize)]
pub struct CrrSpec {
    #[serde(flatten)]
    pub common: Common,
    pub warmup: f64,
    pub interval: f64,
    pub bind: Option<IpAddr>,
    pub data_port: Option<u16>,
    pub socket_buffer: Option<u64>,
    pub nodelay: bool,
    pub payload: Payload,
    /// Connections under way at once (each a loop: connect, request,
    /// response, close, again).
    pub parallel: usize,
    /// Event-loop threads that share the `parallel` loops.
    pub threads: usize,
    /// How long a loop thread spins before it sleeps (µs; 0: it sleeps at once).
    pub busy_poll_us: u64,
    pub request: usize,
    pub response: usize,
    /// New connections/s across the loops, on one absolute schedule.
    pub rate: Option<f64>,
    /// Deadline of each connection (connect to close); a miss is counted, not fatal.
    pub timeout: Option<f64>,
    /// How each connection ends.
    pub close: CloseOrder,
}

impl KindSpec for CrrSpec {
    const NAME: &'static str = "crr";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Tcp);
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, names: &Names) -> Result<CrrSpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Tcp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        tcp_only(
            protocol,
            "crr (connect-request-response) is TCP only: set protocol to \"tcp\" or use kind \"rr\" for UDP",
        )?;
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let bind = bind_of(raw.bind, common.server)?;
        let socket_buffer = socket_buffer_of(raw.socket_buffer)?;
        let parallel = parallel_of(raw.parallel, 1024)?;
        let threads = threads_of(raw.threads, parallel)?;
        let busy_poll_us = busy_poll_of(raw.busy_poll_us)?;
        let rate = per_second_of("rate", raw.rate)?;
        // Without a timeout crr fails after repeated failures (netperf's TCP_CRR).
        let timeout = timeout_of(raw.timeout, None)?;
        let request = size(names.of("request"), raw.request, 1, protocol)?;
        let response = size(names.of("response"), raw.response, 1, protocol)?;
        Ok(CrrSpec {
            common,
            warmup,
            interval,
            bind,
            data_port: raw.data_port,
            socket_buffer,
            nodelay: raw.nodelay.unwrap_or(true),
            payload: raw.payload.unwrap_or(Payload::Random),
            parallel,
            threads,
            busy_poll_us,
            request,
            response,
            rate,
            timeout,
            close: raw.close.unwrap_or_default(),
        })
    }
}

impl CrrSpec {
    /// The server's accepting threads: one per loop of the client, at most 64.
    pub fn server_threads(&self) -> usize {
        self.parallel.clamp(1, 64)
    }
}

impl Resolved for CrrSpec {
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

    /// One response shared by the server's threads, a read buffer each.
    fn server_need(&self) -> Need {
        let threads = self.server_threads() as u64;
        let read = (self.request as u64).min(SCRATCH as u64);
        need(
            self.response as u64 + threads * read,
            "response",
            format!(
                "one {} response shared + {} threads × {} read buffer",
                size_words(self.response as u64),
                threads,
                size_words(read)
            ),
        )
    }
}
