//! secperf-engine: the data plane of secperf. One binary serves and drives
//! traffic (kinds `stream`, `rr`, `crr` over TCP and UDP, `latency` over UDP, IPv4 and
//! IPv6; `http` against a web server; `connections` for held-connection capacity;
//! `flood`, a paced one-way packet flood; `mix`, HTTP and FTP virtual clients)
//! and reports it as NDJSON records. The contract is docs/engine-protocol.md.

pub mod client;
pub mod connections;
pub mod control;
pub mod cpu;
pub mod crr;
pub mod crr_paced;
pub mod error;
pub mod flood;
pub mod flood_spec;
pub mod frame;
pub mod ftp_wire;
pub mod http;
pub mod http_wire;
pub mod kinds;
pub mod latency;
pub mod latency_load;
pub mod mix;
pub mod net;
pub mod pacing;
pub mod packet;
pub mod packet_tx;
pub mod payload;
pub mod record;
pub mod rr;
pub mod server;
pub mod shared;
pub mod socks;
pub mod spec;
pub mod spec_extra;
pub mod standalone;
pub mod stream;
pub mod sys;
pub mod target;
pub mod tstamp;

pub use client::run;
pub use error::{EngineError, Result};
pub use record::{Record, Sink, StdoutSink};
pub use server::{ServeOptions, Server};
pub use spec::Spec;
pub use standalone::run_spec;
