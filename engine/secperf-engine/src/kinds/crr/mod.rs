//! Kind `crr`: connect, send a request, read the response, close, repeated
//! by `parallel` loops. The server accepts on several threads at once.
//!
//! The close is the spec's `close`: `fin` (the default) is an orderly close
//! as netperf's TCP_CRR and real clients make it: the client shuts down its
//! write side after the response, the server sees EOF and closes, the client
//! reads that EOF and closes; FINs cross the path both ways and the client
//! keeps the TIME_WAIT (the testbed gives the client host a wide port range
//! and `tcp_tw_reuse`). `reset` closes with SO_LINGER 0: one RST, no FIN, no
//! TIME_WAIT anywhere, and a stateful DUT never sees a normal teardown.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;

use crate::error::{EngineError, Result};
use crate::kinds::base::{ClientStart, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::timed::{self, Plan, Snap, Timed, Window};
use crate::rt::net::{self, SockOpts};
use crate::rt::payload;
use crate::rt::shared::{Role, Shared, Tally, ThreadStats};
use crate::spec::{Close, CrrSpec, KindSpec};
use crate::wire::record::{Interval, ResultRecord, Sink};

mod paced;

/// Consecutive failed connects after which the test fails.
const MAX_CONSECUTIVE_FAILURES: u32 = 50;

fn data_err(what: &str) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| {
        EngineError::io(format!(
            "crr {} failed (check that the server still runs and nothing in the path resets or blocks the connection)",
            what
        ))(e)
    }
}

/// The data sockets' options.
fn sock(spec: &CrrSpec) -> SockOpts {
    SockOpts {
        buffer: spec.socket_buffer,
        nodelay: spec.nodelay,
        bind: spec.bind,
    }
}

fn serve(spec: &CrrSpec, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
    let ports = env.ports(spec.data_port);
    let (listener, data_port, socket) = net::tcp_listen(&sock(spec), env.ip, ports)?;
    let listener = Arc::new(listener);
    for _ in 0..spec.parallel.clamp(2, 64) {
        let (listener, spec) = (listener.clone(), spec.clone());
        sh.spawn("crr-accept", Role::Active, move |sh, st| {
            let mut req = vec![0u8; spec.request];
            let resp = payload::make(spec.payload, spec.response, 99);
            let mut t = Tally::default();
            let mut connections = 0u64;
            let r = net::accept_loop(&listener, sh, |s| {
                connections += 1;
                st.connections.store(connections, Relaxed);
                serve_one(&s, &mut req, &resp, &mut t, sh);
                t.publish(st);
                Ok(())
            });
            t.publish(st);
            r
        })?;
    }
    Ok(ServerSetup { data_port, socket })
}

/// One connection: request in, response out, then wait for the client's close.
/// A client that resets early only costs its transaction.
fn serve_one(s: &TcpStream, req: &mut [u8], resp: &[u8], t: &mut Tally, sh: &Shared) {
    if net::set_wake_timeouts(s).is_err() {
        return;
    }
    let mut io = s;
    if !matches!(net::read_full(&mut io, req, sh), Ok(true)) {
        return;
    }
    t.received(req.len());
    if !matches!(net::write_full(&mut io, resp, sh), Ok(true)) {
        return;
    }
    t.sent(resp.len());
    t.transactions += 1;
    // Wait for the client's close: EOF after its FIN (then this drop sends
    // ours), or an error after its RST. The client closes first, so the
    // TIME_WAIT stays on the client, not here.
    let mut b = [0u8; 64];
    let _ = net::read_full(&mut io, &mut b[..1], sh);
}

/// Ends a client's connection the way `close` says. `fin`: shutdown(Write),
/// then read to the server's EOF (its FIN), then close: Ok(false) if the
/// test aborted first. `reset`: SO_LINGER 0 and close (an RST).
fn close_client(s: TcpStream, close: Close, sh: &Shared) -> std::io::Result<bool> {
    match close {
        Close::Reset => {
            SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
        }
        Close::Fin => {
            s.shutdown(Shutdown::Write)?;
            let mut io = &s;
            let mut b = [0u8; 64];
            // The server sends nothing more: the first read returns its EOF.
            if net::read_full(&mut io, &mut b[..1], sh)? {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the server sent data after its response",
                ));
            }
            if sh.aborted() {
                return Ok(false);
            }
        }
    }
    drop(s);
    Ok(true)
}

fn start(spec: &CrrSpec, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
    if spec.rate.is_some() || spec.timeout.is_some() {
        let sched = paced::Schedule::new();
        for i in 0..spec.parallel {
            let (spec, sched) = (spec.clone(), sched.clone());
            sh.spawn(&format!("crr-{}", i), Role::Active, move |sh, st| {
                paced::client_loop(&spec, data, &sched, sh, st)
            })?;
        }
        return Ok(ClientStart { local: None });
    }
    for i in 0..spec.parallel {
        let spec = spec.clone();
        sh.spawn(&format!("crr-{}", i), Role::Active, move |sh, st| {
            client_loop(&spec, data, sh, st)
        })?;
    }
    Ok(ClientStart { local: None })
}

fn client_loop(spec: &CrrSpec, data: SocketAddr, sh: &Shared, st: &ThreadStats) -> Result<()> {
    let req = payload::make(spec.payload, spec.request, 5);
    let mut resp = vec![0u8; spec.response];
    let opts = sock(spec);
    let mut t = Tally::default();
    let (mut connections, mut failed, mut consecutive) = (0u64, 0u64, 0u32);
    while !sh.stopped() {
        let t0 = Instant::now();
        let s = match net::tcp_connect(&opts, data, None) {
            Ok(s) => s,
            Err(e) => {
                failed += 1;
                consecutive += 1;
                st.lost.store(failed, Relaxed);
                if consecutive >= MAX_CONSECUTIVE_FAILURES {
                    return Err(e);
                }
                continue;
            }
        };
        consecutive = 0;
        connections += 1;
        st.connections.store(connections, Relaxed);
        net::set_wake_timeouts(&s).map_err(data_err("socket setup"))?;
        let mut io = &s;
        if !net::write_full(&mut io, &req, sh).map_err(data_err("request"))? {
            break;
        }
        t.sent(req.len());
        if !net::read_full(&mut io, &mut resp, sh).map_err(data_err("response"))? {
            if sh.aborted() {
                break;
            }
            return Err(EngineError::Server {
                field: None,
                message:
                    "the server closed a crr connection before answering: check the server's stderr"
                        .into(),
            });
        }
        sh.record_rtt(t0.elapsed());
        t.received(resp.len());
        t.transactions += 1;
        t.publish(st);
        if !close_client(s, spec.close, sh).map_err(data_err("close"))? {
            break;
        }
    }
    t.publish(st);
    Ok(())
}

// ---------------------------------------------------------------- the kind

/// Kind `crr`, one test on one side.
pub struct Crr {
    spec: CrrSpec,
}

impl Crr {
    pub fn new(spec: CrrSpec) -> Crr {
        Crr { spec }
    }
}

impl Kind for Crr {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        serve(&self.spec, env, sh)
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        self.spec.check_local_limits()?;
        timed::run(self, opts, sink)
    }
}

impl Timed for Crr {
    fn plan(&self) -> Plan<'_> {
        let s = &self.spec;
        Plan {
            kind: CrrSpec::NAME,
            spec: s.to_value(),
            common: &s.common,
            warmup: s.warmup,
            interval: s.interval,
            sock: sock(s),
            transfer: None,
            server_intervals: false,
        }
    }

    fn start(&self, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
        start(&self.spec, data, sh)
    }

    fn interval(&self, a: &Snap, b: &Snap, sh: &Shared, rec: &mut Interval) {
        timed::transactions_interval(a, b, sh, rec);
    }

    fn result(&self, w: &Window, _: &Shared, res: &mut ResultRecord) -> Result<()> {
        res.close = Some(self.spec.close.name());
        // With a rate or timeout, failed connections are counted instead of failing.
        let counts_failures = self.spec.rate.is_some() || self.spec.timeout.is_some();
        timed::transactions_result(w, res, counts_failures);
        Ok(())
    }
}
