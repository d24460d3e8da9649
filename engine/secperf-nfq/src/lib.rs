//! secperf-nfq: the appliance's user-space daemon.
//!
//! It binds one NFQUEUE, gives every queued packet a verdict (accept, for now:
//! the IPS comes later) and writes one JSON line per new connection it sees.
//! The parts that need no root (packet parsing, the log line, de-duplication)
//! live here so that `cargo test` checks them.

pub mod connlog;
pub mod error;
pub mod packet;
pub mod timefmt;

pub use connlog::{ConnLog, LogLine, SeenSet};
pub use error::{NfqError, Result};
pub use packet::{parse_five_tuple, FiveTuple, ParseError};
