//! What a spec asks of the server that serves it: the addresses its data
//! comes from besides the control connection's peer, how many data
//! connections it opens, how much memory the server's side holds, and how
//! many helper processes it may start. The server lets in nothing more
//! (rt::guard); a spec whose server side would hold more than one test may
//! is refused here, on both sides, before any traffic.

use std::net::IpAddr;

use crate::error::{EngineError, Result};
use crate::rt::guard::{size_words, Peers, Prefix, MAX_HELPERS, MAX_TEST_MEMORY};
use crate::rt::net::SCRATCH;
use crate::rt::target;
use crate::spec::common::{Direction, Protocol};
use crate::spec::{ConnectionsSpec, Spec};

/// What a UDP receiving thread reads a datagram into.
const DATAGRAM: u64 = 65536;
/// TCP stream receivers read at least this much at once (kinds/stream.rs).
const MIN_READ: u64 = 128 << 10;
/// A latency server's state (its receive buffer, stamp ring and histograms),
/// whatever the spec.
const LATENCY: u64 = 8 << 20;
/// What the server keeps per held connection of a `connections` test.
const PER_CONNECTION: u64 = 256;

/// The server side's memory, with the field to lower and how it adds up.
struct Need {
    bytes: u64,
    field: &'static str,
    how: String,
}

fn need(bytes: u64, field: &'static str, how: String) -> Need {
    Need { bytes, field, how }
}

impl Spec {
    /// The addresses the spec declares its data comes from, besides the
    /// control connection's peer, each with the field that names it: `bind`,
    /// `sources` (latency, connections) and `peers` (the same through a NAT).
    pub fn declared_sources(&self) -> Vec<(String, Prefix)> {
        let one = |field: &str, ip: &Option<IpAddr>| {
            ip.iter()
                .map(|&ip| (field.to_string(), Prefix::from(ip)))
                .collect::<Vec<_>>()
        };
        let list = |field: &str, v: &[Prefix]| {
            v.iter()
                .enumerate()
                .map(|(i, &p)| (format!("{}[{}]", field, i), p))
                .collect::<Vec<_>>()
        };
        let addrs = |v: &[IpAddr]| v.iter().map(|&ip| Prefix::from(ip)).collect::<Vec<_>>();
        match self {
            Spec::Stream(s) => one("bind", &s.bind),
            Spec::Rr(s) => one("bind", &s.bind),
            Spec::Crr(s) => one("bind", &s.bind),
            Spec::Latency(s) => {
                [list("sources", &addrs(&s.sources)), list("peers", &s.peers)].concat()
            }
            Spec::Connections(s) => [
                one("bind", &s.bind),
                list("sources", &addrs(&s.sources)),
                list("peers", &s.peers),
            ]
            .concat(),
            Spec::Http(_) | Spec::Flood(_) | Spec::Mix(_) => Vec::new(),
        }
    }

    /// The sources a server serves for this test: the control connection's
    /// `peer` and what the spec declares, each of which (a source is one the
    /// server answers, so sends to) must lie in the testbed ranges unless the
    /// server runs with --allow-any-target.
    pub fn served_peers(&self, peer: IpAddr, allow_any: bool) -> Result<Peers> {
        let declared = self.declared_sources();
        for (field, p) in &declared {
            let (first, last) = p.ends();
            target::check(field, first, allow_any)?;
            target::check(field, last, allow_any)?;
        }
        Ok(Peers::new(peer, declared.into_iter().map(|(_, p)| p)))
    }

    /// How many data connections the test opens to the server in all (None:
    /// not counted here: UDP, or crr, whose server holds one connection at a
    /// time per accepting thread).
    pub fn data_connections(&self) -> Option<u64> {
        match self {
            Spec::Stream(s) if s.common.protocol == Protocol::Tcp => {
                let dirs = if s.direction == Direction::Both { 2 } else { 1 };
                Some(s.parallel as u64 * dirs)
            }
            Spec::Rr(s) if s.common.protocol == Protocol::Tcp => Some(1),
            Spec::Connections(s) => Some(s.connections),
            Spec::Stream(_)
            | Spec::Rr(_)
            | Spec::Crr(_)
            | Spec::Latency(_)
            | Spec::Http(_)
            | Spec::Flood(_)
            | Spec::Mix(_) => None,
        }
    }

    fn server_need(&self) -> Need {
        match self {
            Spec::Stream(s) => {
                let msg = s.message as u64;
                let (receivers, read) = match s.common.protocol {
                    Protocol::Tcp => (
                        if s.direction.client_sends() {
                            s.parallel as u64
                        } else {
                            0
                        },
                        msg.max(MIN_READ).max(s.rcvlowat as u64),
                    ),
                    Protocol::Udp => (
                        if s.direction == Direction::Receive {
                            1
                        } else {
                            s.parallel as u64
                        },
                        DATAGRAM,
                    ),
                };
                // The senders share one message.
                let send = if s.direction.client_receives() {
                    msg
                } else {
                    0
                };
                need(
                    receivers * read + send,
                    "message",
                    format!(
                        "{} receiving streams × {} read buffer + {} shared send buffer",
                        receivers,
                        size_words(read),
                        size_words(send)
                    ),
                )
            }
            Spec::Rr(s) => {
                let read = match s.common.protocol {
                    Protocol::Tcp => (s.request as u64).min(SCRATCH as u64),
                    Protocol::Udp => DATAGRAM,
                };
                need(
                    s.response as u64 + read,
                    "response",
                    format!(
                        "one {} response + {} read buffer",
                        size_words(s.response as u64),
                        size_words(read)
                    ),
                )
            }
            Spec::Crr(s) => {
                let threads = s.server_threads() as u64;
                let read = (s.request as u64).min(SCRATCH as u64);
                need(
                    s.response as u64 + threads * read,
                    "response",
                    format!(
                        "one {} response shared + {} threads × {} read buffer",
                        size_words(s.response as u64),
                        threads,
                        size_words(read)
                    ),
                )
            }
            Spec::Latency(_) => need(LATENCY, "kind", "a latency server's state".into()),
            Spec::Connections(s) => need(
                s.connections * PER_CONNECTION,
                "connections",
                format!("{} connections × {} B", s.connections, PER_CONNECTION),
            ),
            Spec::Http(_) | Spec::Flood(_) | Spec::Mix(_) => need(0, "kind", String::new()),
        }
    }

    /// The memory the server's side of this test holds (its buffers, as the
    /// spec sizes them), what the server reserves for it at `setup`.
    pub fn server_memory(&self) -> u64 {
        self.server_need().bytes
    }

    /// Refuses a spec whose server side would hold more than MAX_TEST_MEMORY,
    /// or start more than MAX_HELPERS helper processes.
    pub fn check_server_bounds(&self) -> Result<()> {
        let n = self.server_need();
        if n.bytes > MAX_TEST_MEMORY {
            return Err(EngineError::spec(
                n.field,
                format!(
                    "the server's side of this test would hold {} ({}), above the {} one test \
                     may hold: lower `{}` (or `parallel`)",
                    size_words(n.bytes),
                    n.how,
                    size_words(MAX_TEST_MEMORY),
                    n.field
                ),
            ));
        }
        if let Spec::Connections(c) = self {
            check_helpers(c, c.per_process)?;
        }
        Ok(())
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
