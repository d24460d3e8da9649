//! What a spec asks of the server that serves it, kind by kind (`Spec`'s
//! methods in spec/mod.rs pick the kind): the addresses its data comes from
//! besides the control connection's peer, how many data connections it
//! opens, how much memory the server's side holds, and how many helper
//! processes it may start. The server lets in nothing more (rt::guard); a
//! spec whose server side would hold more than one test may is refused when
//! it is read, on both sides, before any traffic.

use std::net::IpAddr;

use crate::error::{EngineError, Result};
use crate::rt::guard::{size_words, Peers, Prefix, MAX_HELPERS, MAX_TEST_MEMORY};
use crate::rt::net::SCRATCH;
use crate::rt::target;
use crate::spec::common::{Direction, Protocol};
use crate::spec::connections::ConnectionsSpec;
use crate::spec::crr::CrrSpec;
use crate::spec::rr::RrSpec;
use crate::spec::stream::StreamSpec;

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
pub struct Need {
    pub bytes: u64,
    field: &'static str,
    how: String,
}

fn need(bytes: u64, field: &'static str, how: String) -> Need {
    Need { bytes, field, how }
}

/// A declared address and the field that names it.
pub type Declared = (String, Prefix);

/// `bind`, if given.
pub fn bind(ip: &Option<IpAddr>) -> Vec<Declared> {
    ip.iter()
        .map(|&ip| ("bind".to_string(), Prefix::from(ip)))
        .collect()
}

/// A list field, each entry named `field[i]`.
pub fn list<T: Copy + Into<Prefix>>(field: &str, v: &[T]) -> Vec<Declared> {
    v.iter()
        .enumerate()
        .map(|(i, &p)| (format!("{}[{}]", field, i), p.into()))
        .collect()
}

/// The sources a server serves for a test: the control connection's `peer`
/// and what the spec declares, each of which (the server answers a source,
/// so sends to it) must lie in the testbed ranges unless the server runs
/// with --allow-any-target.
pub fn served(peer: IpAddr, declared: Vec<Declared>, allow_any: bool) -> Result<Peers> {
    for (field, p) in &declared {
        let (first, last) = p.ends();
        target::check(field, first, allow_any)?;
        target::check(field, last, allow_any)?;
    }
    Ok(Peers::new(peer, declared.into_iter().map(|(_, p)| p)))
}

/// Data connections a stream test opens: `parallel` per direction (TCP).
pub fn stream_connections(s: &StreamSpec) -> Option<u64> {
    let dirs = if s.direction == Direction::Both { 2 } else { 1 };
    (s.common.protocol == Protocol::Tcp).then_some(s.parallel as u64 * dirs)
}

/// An rr test opens one data connection (TCP).
pub fn rr_connections(s: &RrSpec) -> Option<u64> {
    (s.common.protocol == Protocol::Tcp).then_some(1)
}

/// A stream server: a read buffer per receiving stream, one shared message.
pub fn stream_need(s: &StreamSpec) -> Need {
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

/// An rr server: one response, a bounded read buffer.
pub fn rr_need(s: &RrSpec) -> Need {
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

/// A crr server: one response shared by its threads, a read buffer each.
pub fn crr_need(s: &CrrSpec) -> Need {
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

/// A latency server: its state, whatever the spec.
pub fn latency_need() -> Need {
    need(LATENCY, "kind", "a latency server's state".into())
}

/// A connections server: a few bytes a held connection.
pub fn connections_need(s: &ConnectionsSpec) -> Need {
    need(
        s.connections * PER_CONNECTION,
        "connections",
        format!("{} connections × {} B", s.connections, PER_CONNECTION),
    )
}

/// A kind without an engine server.
pub fn no_need() -> Need {
    need(0, "kind", String::new())
}

/// Refuses a test whose server side would hold more than MAX_TEST_MEMORY.
pub fn check_need(n: &Need) -> Result<()> {
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
    Ok(())
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
