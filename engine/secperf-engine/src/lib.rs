//! secperf-engine: the data plane of secperf. One binary serves and drives
//! traffic (kinds `stream`, `rr`, `crr` over TCP and UDP, `latency` over UDP, IPv4 and
//! IPv6; `http` against a web server; `connections` for held-connection capacity;
//! `flood`, a paced one-way packet flood; `mix`, HTTP and FTP virtual clients;
//! `flows`, a rule-set review's live flows)
//! and reports it as NDJSON records. The contract is docs/engine-protocol.md;
//! the layers (error, wire, rt, spec, kinds, then the server and this root)
//! are in engine/ARCHITECTURE-engine.md.

mod error;
mod kinds;
mod rt;
mod server;
pub mod spec;
mod wire;

use std::time::Instant;

pub use error::EngineError;
pub use server::{parse_port_range, ServeOptions, Server, MAX_TESTS};
pub use spec::Spec;
pub use wire::record::{
    ErrorRecord, FloodResult, Record, ResultRecord, Sink, StdoutSink, FORMAT, VERSION,
};

/// Runs a helper process that secperf-engine starts for a test it spreads
/// over several processes (the hidden `worker` command): `job` is its JSON.
pub fn worker(job: &str) -> Result<(), EngineError> {
    kinds::worker(job)
}

/// Runs one test of `spec`'s kind: as the client of an engine server (or a
/// web server), or alone (a flood, a mix). Every record goes to `sink`; on
/// failure the caller writes the `error` record. `began` is when the command
/// started (the records' `t`).
pub fn run(
    spec: Spec,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<(), EngineError> {
    // Every address the spec names is checked before any packet leaves.
    spec.check_targets(allow_any_target)?;
    let opts = kinds::RunOptions {
        allow_any_target,
        began,
    };
    kinds::of(spec).run(&opts, sink)
}
