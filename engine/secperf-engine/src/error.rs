//! The one error type of the engine. Every variant maps to an `error` record
//! (`kind`, optional `field`, a message that says what to do) and an exit code.

use std::io;
use std::net::SocketAddr;

use thiserror::Error;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum EngineError {
    /// The spec (or a command-line argument) is wrong.
    #[error("{message}")]
    Spec {
        field: Option<String>,
        message: String,
    },
    /// The target address is outside the testbed ranges.
    #[error("{message}")]
    Target { field: String, message: String },
    /// A connection could not be made.
    #[error("cannot connect to the {what} at {addr}: {source}; {fix}")]
    Connect {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
        fix: &'static str,
    },
    /// The server refused or failed the test.
    #[error("server: {message}")]
    Server {
        field: Option<String>,
        message: String,
    },
    /// A socket, file or thread operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The test ran but what it measured cannot stand as a result (it moved
    /// no traffic, a report is missing, too many probes went unstamped).
    #[error("{0}")]
    Measurement(String),
    /// A bug or an impossible state; the message says what to report.
    #[error("{0}")]
    Internal(String),
}

impl EngineError {
    pub fn spec(field: &str, message: impl Into<String>) -> Self {
        EngineError::Spec {
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// For `map_err`: wraps an io::Error with what was being done and what to do.
    pub fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| EngineError::Io { context, source }
    }

    /// The `kind` of the error record.
    pub fn kind(&self) -> &'static str {
        match self {
            EngineError::Spec { .. } => "spec",
            EngineError::Target { .. } => "target",
            EngineError::Connect { .. } => "connect",
            EngineError::Server { .. } => "server",
            EngineError::Io { .. } => "io",
            EngineError::Measurement(_) => "measurement",
            EngineError::Internal(_) => "internal",
        }
    }

    pub fn field(&self) -> Option<&str> {
        match self {
            EngineError::Spec { field, .. } | EngineError::Server { field, .. } => field.as_deref(),
            EngineError::Target { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Exit code of the binary: 2 bad spec, 3 network/server failure, 4 refused target.
    pub fn exit_code(&self) -> i32 {
        match self {
            EngineError::Spec { .. } => 2,
            EngineError::Target { .. } => 4,
            _ => 3,
        }
    }
}
