//! What a spec asks of the server that serves it, as each kind says in its
//! `Resolved` impl (spec/resolved.rs): the addresses its data comes from
//! besides the control connection's peer, how many data connections it
//! opens, how much memory the server's side holds, and how many helper
//! processes it may start; here the parts they share. The server lets in nothing more (rt::guard); a
//! spec whose server side would hold more than one test may is refused when
//! it is read, on both sides, before any traffic.

use std::net::IpAddr;

use crate::error::{EngineError, Result};
use crate::rt::guard::{size_words, Peers, Prefix, MAX_TEST_MEMORY};
use crate::rt::target;

/// What a UDP receiving thread reads a datagram into.
pub const DATAGRAM: u64 = 65536;

/// The server side's memory, with the field to lower and how it adds up.
pub struct Need {
    pub bytes: u64,
    field: &'static str,
    how: String,
}

pub fn need(bytes: u64, field: &'static str, how: String) -> Need {
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
