//! The daemon's one error type: each variant says what failed and what to check.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

pub type Result<T, E = NfqError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum NfqError {
    /// Opening the netlink socket or binding the queue failed.
    #[error("cannot bind NFQUEUE {queue}: {source} (run as root inside the namespace; is another daemon bound to this queue?)")]
    Bind {
        queue: u16,
        #[source]
        source: io::Error,
    },
    /// Receiving a packet or sending a verdict failed.
    #[error("NFQUEUE {queue}: {what}: {source}")]
    Queue {
        queue: u16,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The connection log could not be opened or written.
    #[error("connection log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Installing the signal handlers failed.
    #[error("cannot install the {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    /// The IPS rule file could not be loaded or compiled.
    #[error(transparent)]
    Rules(#[from] crate::ips::RulesError),
    /// The packet socket (IDS mode) could not be opened or read.
    #[error("packet socket on {iface}: {what}: {source}")]
    Socket {
        iface: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}
