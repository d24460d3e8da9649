//! secperf-engine: the data plane of secperf. One binary serves and drives
//! traffic (kinds `stream`, `rr`, `crr` over TCP and UDP, IPv4 and IPv6;
//! `flood`, a paced one-way packet flood)
//! and reports it as NDJSON records. The contract is docs/engine-protocol.md.

pub mod client;
pub mod control;
pub mod cpu;
pub mod crr;
pub mod error;
pub mod flood;
pub mod flood_spec;
pub mod kinds;
pub mod net;
pub mod pacing;
pub mod packet;
pub mod payload;
pub mod record;
pub mod rr;
pub mod server;
pub mod shared;
pub mod spec;
pub mod stream;
pub mod sys;
pub mod target;

pub use client::run;
pub use error::{EngineError, Result};
pub use record::{Record, Sink, StdoutSink};
pub use server::{ServeOptions, Server};
pub use spec::Spec;
