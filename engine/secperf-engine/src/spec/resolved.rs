//! What the engine asks of every kind's resolved spec, each kind answering in
//! its own module (`impl Resolved for …Spec`): how long a test lasts, where it
//! sends, which host limits it must respect, and what it asks of the server
//! that serves it. `Spec` (spec/mod.rs) dispatches to it from the one list of
//! kinds; a kind that needs nothing beyond the defaults says only its time and
//! its targets.

use std::net::IpAddr;

use crate::error::Result;
use crate::rt::target;
use crate::spec::serving::{self, Declared, Need};

pub(crate) trait Resolved {
    /// How long a test lasts at most (a mix: its timeouts bound it, not a time: 0).
    fn total_seconds(&self) -> f64;

    /// Every address the test can make the engine send to, with the field that
    /// names it. Local addresses (`bind`, latency `sources`) are not targets.
    fn targets(&self) -> Vec<(String, IpAddr)>;

    /// The target guard: every target in the testbed ranges and loopback, unless
    /// `allow_any`.
    fn check_targets(&self, allow_any: bool) -> Result<()> {
        for (field, ip) in self.targets() {
            target::check(&field, ip, allow_any)?;
        }
        Ok(())
    }

    /// Refuses a socket buffer (or stream `rcvlowat`) above what this host's
    /// sysctls allow (the kernel would silently clamp it).
    fn check_local_limits(&self) -> Result<()> {
        Ok(())
    }

    /// The addresses its data comes from besides the control connection's peer.
    fn declared_sources(&self) -> Vec<Declared> {
        Vec::new()
    }

    /// How many data connections it opens to the server (None: not counted).
    fn data_connections(&self) -> Option<u64> {
        None
    }

    /// What the server's side holds (a kind without an engine server: nothing).
    fn server_need(&self) -> Need {
        serving::no_need()
    }

    /// The server-side bounds beyond memory (connections: its helper processes).
    fn check_server_extra(&self) -> Result<()> {
        Ok(())
    }
}
