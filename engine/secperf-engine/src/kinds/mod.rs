//! The kinds: one module each, behind one trait (`base::Kind`); the kinds
//! measured over a timed window against an engine server share the client
//! flow in `timed`. `of` is the one place that maps a spec to its kind.

mod base;
mod connections;
mod crr;
mod flood;
mod flows;
mod http;
mod latency;
mod mix;
mod rr;
mod stream;
mod timed;

pub use base::{Kind, RunOptions, ServerEnv, ServerSetup};

use crate::error::Result;
use crate::spec::Spec;

/// The kind that runs `spec`, holding it (one per test and side).
pub fn of(spec: Spec) -> Box<dyn Kind> {
    match spec {
        Spec::Stream(s) => Box::new(stream::Stream::new(s)),
        Spec::Rr(s) => Box::new(rr::Rr::new(s)),
        Spec::Crr(s) => Box::new(crr::Crr::new(s)),
        Spec::Latency(s) => Box::new(latency::Latency::new(s)),
        Spec::Http(s) => Box::new(http::Http::new(s)),
        Spec::Connections(s) => Box::new(connections::Connections::new(s)),
        Spec::Flood(s) => Box::new(flood::Flood::new(s)),
        Spec::Mix(s) => Box::new(mix::Mix::new(s)),
        Spec::Flows(s) => Box::new(flows::Flows::new(s)),
    }
}

/// Runs a helper process of a kind that spreads one test over several
/// processes (the hidden `worker` command; only `connections` does).
pub fn worker(job: &str) -> Result<()> {
    connections::worker(job)
}
