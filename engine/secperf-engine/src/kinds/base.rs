//! The trait every kind implements, and what the server and the client hand
//! to it. A kind is one value per test and side, made from its spec by
//! `kinds::of`; it owns whatever state that test keeps (latency's reports,
//! the connections server's counts), so nothing kind-specific travels through
//! the shared runtime.
//!
//! How a kind drives its traffic is its own business: `serve` and `run` (or
//! `timed::Timed::start`) may start a thread per connection, a few threads
//! each driving many connections (an event loop per core), or none; the
//! counters go through `rt::shared::Shared`, whose per-thread stats any
//! thread may own.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{EngineError, Result};
use crate::rt::guard::Admission;
use crate::rt::net::{PortPolicy, CONNECT_TIMEOUT};
use crate::rt::shared::Shared;
use crate::rt::{cpu, sys};
use crate::wire::control::{LineConn, Request, SetupReply, SideReport};
use crate::wire::record::{Record, Sink, SocketBufs, FORMAT, VERSION};

/// How long the server may take to set a test up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

/// One test of one kind, on the side that runs it.
pub trait Kind {
    /// Server side: binds the test's data socket(s) where `env` says and
    /// starts serving; returns once traffic is accepted. A kind without an
    /// engine server returns a `spec` error that says where its peer is.
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup>;

    /// Server side, at each `snapshot` request: what the kind adds to the
    /// reply beside the counters (and what it does at that moment).
    fn snapshot(&self, _sh: &Shared) -> Extras {
        Extras::default()
    }

    /// Server side, at `finish`, once the test's threads have ended: what
    /// the kind adds to the reply.
    fn finish(&self, _sh: &Shared) -> Extras {
        Extras::default()
    }

    /// Client side: runs the whole test; every record goes to `sink` (the
    /// caller writes the `error` record if this fails).
    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()>;
}

/// Where the server side of a test lives, and whom it serves.
#[derive(Clone, Debug)]
pub struct ServerEnv {
    /// The control connection's local address: data sockets bind here.
    pub ip: IpAddr,
    /// `--data-ports`: the range server-chosen data ports come from.
    pub data_ports: Option<(u16, u16)>,
    /// The accept guard (the client this test serves, the control
    /// connection's peer, is the first of its peers): the peer and the spec's declared addresses, and
    /// how many data connections the test may open.
    pub admit: Arc<Admission>,
}

impl ServerEnv {
    /// Whether a UDP data socket may answer (or send to) `from`: the control
    /// connection's peer or an address its spec declared (`bind`,
    /// `sources`). Anything else may be a spoofed source, and answering it
    /// would reflect the test's traffic at whoever owns that address.
    pub fn answers(&self, from: SocketAddr) -> bool {
        self.admit.answers(from)
    }

    /// The data ports to bind: the spec's `data_port`, else the range.
    pub fn ports(&self, data_port: Option<u16>) -> PortPolicy {
        PortPolicy {
            fixed: data_port,
            range: self.data_ports,
        }
    }
}

/// What the server tells the client after `setup`.
#[derive(Clone, Copy, Debug)]
pub struct ServerSetup {
    pub data_port: u16,
    pub socket: SocketBufs,
}

/// What the client side knows once its data sockets are up.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientStart {
    pub local: Option<SocketAddr>,
}

/// What a kind adds to a `snapshot` or `finish` reply.
#[derive(Debug, Default)]
pub struct Extras {
    /// Kind-specific server state (connections: held, validated, FINs seen).
    pub extra: Option<Value>,
    /// Kind latency: the server's own measurements (finish only).
    pub latency: Option<SideReport>,
}

/// What the command line gives a client run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// `--allow-any-target`: a server outside the testbed ranges is allowed.
    pub allow_any_target: bool,
    /// When the command started (records' `t` count from here).
    pub began: Instant,
}

/// The error of a kind that has no engine server.
pub fn no_server(message: &str) -> EngineError {
    EngineError::spec("kind", message)
}

/// Client side: connects to the server's control port and sets the test up
/// with the resolved `spec`.
pub fn setup(server: SocketAddr, spec: Value) -> Result<(LineConn, SetupReply)> {
    let stream = TcpStream::connect_timeout(&server, CONNECT_TIMEOUT).map_err(|source| {
        EngineError::Connect {
            what: "server's control port",
            addr: server,
            source,
            fix: "start `secperf-engine serve --listen ADDR:PORT` there, or fix `server`",
        }
    })?;
    let mut conn = LineConn::new(stream);
    let reply = conn.call(&Request::Setup { spec }, SETUP_TIMEOUT)?;
    Ok((conn, reply))
}

/// The `start` record of a kind with its own result shape (the same fields
/// as the others' where they mean something).
pub fn start_record(spec: Value, began: Instant, data: Value) -> Record {
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Record::Json(json!({
        "type": "start",
        "t": began.elapsed().as_secs_f64(),
        "format": FORMAT,
        "engine": "secperf-engine",
        "version": VERSION,
        "spec": spec,
        "clock": {"realtime_ns": realtime_ns as u64, "monotonic_ns": sys::monotonic_ns()},
        "local": Value::Null,
        "data": data,
        "host": serde_json::to_value(cpu::host()).unwrap_or(Value::Null),
    }))
}
