//! Kind `crr`: connect, send a request, read the response, close, repeated
//! by `parallel` loops that `threads` event-loop threads share (the client
//! module). The server accepts on several threads at once.
//!
//! The close is the spec's `close` (spec::CloseOrder): `server-first` (the
//! default) as netperf's TCP_CRR and an HTTP/1.0 server: the server closes
//! right after its response, the client reads the response, then the end of
//! stream, then closes (the server keeps the TIME_WAIT). `client-first` (once
//! called `fin`): the client shuts down its write side after the response,
//! the server sees that end of stream and closes, the client reads it and
//! closes: half a round trip more, the client keeps the TIME_WAIT (the
//! testbed gives the client host a wide port range and `tcp_tw_reuse`).
//! `reset` closes with SO_LINGER 0: one RST, no FIN, no TIME_WAIT anywhere,
//! and a stateful DUT never sees a normal teardown.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::error::Result;
use crate::kinds::base::{ClientStart, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::timed::{self, Plan, Snap, Timed, Window};
use crate::rt::net::{self, SockOpts};
use crate::rt::payload;
use crate::rt::shared::{Role, Shared, Tally};
use crate::spec::{CloseOrder, CrrSpec, KindSpec, Resolved};
use crate::wire::record::{Interval, ResultRecord, Sink};

mod client;

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
    // One response for the test, shared by its threads.
    let resp: Arc<[u8]> = payload::make(spec.payload, spec.response, 99).into();
    // One thread per loop of the client (at most 64): one loop,
    // one thread, as netserver (two threads taking turns would wake a thread
    // per connection that last ran elsewhere). Each serves one connection at
    // a time: the accept guard checks each one's source, the threads bound
    // how many the server holds.
    for _ in 0..spec.server_threads() {
        let (listener, spec, resp) = (listener.clone(), spec.clone(), resp.clone());
        let admit = env.admit.clone();
        sh.spawn("crr-accept", Role::Active, move |sh, st| {
            let mut req = vec![0u8; spec.request.min(net::SCRATCH)];
            let mut t = Tally::default();
            let mut connections = 0u64;
            let r = net::accept_loop(&listener, sh, &admit, |s| {
                connections += 1;
                st.connections.store(connections, Relaxed);
                serve_one(&s, &spec, &mut req, &resp, &mut t, sh);
                t.publish(st);
                Ok(())
            });
            t.publish(st);
            r
        })?;
    }
    Ok(ServerSetup { data_port, socket })
}

/// One connection: request in, response out, then the close `close` says.
/// A client that resets early only costs its transaction.
fn serve_one(
    s: &TcpStream,
    spec: &CrrSpec,
    scratch: &mut [u8],
    resp: &[u8],
    t: &mut Tally,
    sh: &Shared,
) {
    // No timeouts to set: the socket has the listener's (WAKE), two system
    // calls a connection fewer (a test in rt::net checks the inheritance).
    let mut io = s;
    if !matches!(
        net::read_discard(&mut io, spec.request, scratch, sh),
        Ok(true)
    ) {
        return;
    }
    t.received(spec.request);
    if !matches!(net::write_full(&mut io, resp, sh), Ok(true)) {
        return;
    }
    t.sent(resp.len());
    t.transactions += 1;
    if spec.close == CloseOrder::ServerFirst {
        return; // the drop closes now: our FIN follows the response
    }
    // Wait for the client's close: EOF after its FIN (then this drop sends
    // ours, and the TIME_WAIT stays on the client), or an error after its RST.
    let mut b = [0u8; 64];
    let _ = net::read_full(&mut io, &mut b[..1], sh);
}

fn start(spec: &CrrSpec, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
    let paced = spec.rate.is_some();
    let sched = client::Schedule::new();
    let threads = spec.threads.clamp(1, spec.parallel);
    for i in 0..threads {
        // The loops, spread evenly over the threads.
        let loops = spec.parallel / threads + usize::from(i < spec.parallel % threads);
        let (spec, sched) = (spec.clone(), sched.clone());
        sh.spawn(&format!("crr-{}", i), Role::Active, move |sh, st| {
            let sched = paced.then_some(&*sched);
            client::thread(&spec, data, loops, sched, sh, st)
        })?;
    }
    Ok(ClientStart { local: None })
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
