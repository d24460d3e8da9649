//! The one dispatch point from a spec's kind to its module, on each side.
//! A new kind adds a module with `serve` and `start` and one arm here.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::error::EngineError;
use crate::error::Result;
use crate::net::PortPolicy;
use crate::record::SocketBufs;
use crate::shared::Shared;
use crate::spec::{Kind, Spec};
use crate::{connections, crr, latency, rr, stream};

/// Where the server side of a test lives.
#[derive(Clone, Copy, Debug)]
pub struct ServerEnv {
    /// The control connection's local address: data sockets bind here.
    pub ip: IpAddr,
    pub ports: PortPolicy,
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

/// A flood is one-way: `run` sends it directly (crate::flood), never through a server.
fn no_server() -> crate::error::EngineError {
    crate::error::EngineError::spec(
        "kind",
        "kind flood has no server side: run it with `secperf-engine run` (no `serve` needed)",
    )
}

/// Server side: binds the test's data socket(s) and starts its threads.
pub fn serve(spec: &Spec, env: &ServerEnv, shared: &Arc<Shared>) -> Result<ServerSetup> {
    match spec.kind {
        Kind::Stream => stream::serve(spec, env, shared),
        Kind::Rr => rr::serve(spec, env, shared),
        Kind::Crr => crr::serve(spec, env, shared),
        Kind::Connections => connections::serve(spec, env, shared),
        Kind::Http => Err(EngineError::spec(
            "kind",
            "kind http runs against a web server (nginx), not an engine server: point `server` at the web server",
        )),
        Kind::Latency => latency::serve(spec, env, shared),
        Kind::Flood => Err(no_server()),
    }
}

/// Client side: opens the data connections, then starts the traffic threads.
pub fn start(spec: &Spec, data: SocketAddr, shared: &Arc<Shared>) -> Result<ClientStart> {
    match spec.kind {
        Kind::Stream => stream::start(spec, data, shared),
        Kind::Rr => rr::start(spec, data, shared),
        Kind::Crr => crr::start(spec, data, shared),
        Kind::Http | Kind::Connections => Err(EngineError::Internal(
            "http and connections have their own client (standalone::run_spec): report this bug"
                .into(),
        )),
        Kind::Latency => latency::start(spec, data, shared),
        Kind::Flood => Err(no_server()),
    }
}

/// Server side, at `finish`: what the kind measured itself, for the client.
pub fn server_report(spec: &Spec, shared: &Shared) -> Option<latency::SideReport> {
    match spec.kind {
        Kind::Latency => latency::server_report(shared),
        _ => None,
    }
}
