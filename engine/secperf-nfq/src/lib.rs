//! secperf-nfq: the appliance's user-space daemon.
//!
//! It binds one or more NFQUEUEs (a thread each), gives every queued packet a
//! verdict, batched (nfqueue: netlink spoken directly), and writes one JSON
//! line per new connection it sees. With `--rules` it is an IPS: every
//! packet's payload is matched against signatures (Hyperscan) and `drop` rules
//! decide a drop verdict; with `--packet-socket IFACE` the same matcher reads a
//! packet socket instead and only alerts (the IDS on a mirror).
//! The parts that need no root (packet parsing, the log line, de-duplication)
//! live here so that `cargo test` checks them.

pub mod connlog;
pub mod error;
pub mod ips;
pub mod nfqueue;
pub mod packet;
pub mod reasm;
pub mod timefmt;
pub mod worker;

pub use connlog::{ConnLog, LogLine, SeenSet};
pub use error::{NfqError, Result};
pub use ips::{IpsCounters, Matcher, Outcome, RulesError};
pub use packet::{parse_five_tuple, parse_with_l4, payload_offset, FiveTuple, ParseError};
pub use reasm::{Reassembly, ReassemblyCounters};
