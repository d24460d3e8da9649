//! `serve`: accepts control connections, one thread each; each runs one
//! test (setup → snapshots → finish) and tears it down when the connection
//! drops or the test overruns its time.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::error::{EngineError, Result};
use crate::kinds::{self, Kind, ServerEnv, ServerSetup};
use crate::rt::guard::{Admission, Budget, Reservation, MAX_SERVER_MEMORY};
use crate::rt::net::would_block;
use crate::rt::shared::Shared;
use crate::rt::target;
use crate::spec::Spec;
use crate::wire::control::{CountersReply, ErrorReply, LineConn, Recv, Request, SetupReply};
use crate::wire::record::{Listening, Record, Sink, VERSION};

/// Everything `serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// Server-chosen data ports come from this range (inclusive).
    pub data_ports: Option<(u16, u16)>,
    pub allow_any_target: bool,
}

/// How long a connection may stay idle before its `setup`.
const SETUP_WAIT: Duration = Duration::from_secs(30);
/// Grace beyond warm-up + duration before a test is torn down regardless.
const TEST_GRACE: Duration = Duration::from_secs(120);
/// How long `finish` waits for the receivers to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(15);
/// How long a test that ends waits for its threads before its memory goes
/// back to the budget.
const THREADS_END: Duration = Duration::from_secs(3);
/// Most control connections (each one test, its threads and buffers) one
/// server holds at once; one more is refused with an error reply. secperf
/// runs a handful at a time (one per generator); each may hold up to
/// 128 parallel sockets of 64 MiB buffers, so an unbounded number would let
/// any peer exhaust the host's memory and threads.
pub const MAX_TESTS: usize = 64;

/// A bound control listener.
pub struct Server {
    listener: TcpListener,
    opts: ServeOptions,
    /// The memory its concurrent tests may hold together.
    budget: Arc<Budget>,
}

impl Server {
    pub fn bind(opts: ServeOptions) -> Result<Server> {
        let addr = opts.listen;
        let fail = |e: std::io::Error| {
            EngineError::Io {
            context: format!(
                "cannot listen on {}: pick a free port with --listen, stop the process holding it, or use an address of this host",
                addr
            ),
            source: e,
        }
        };
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(fail)?;
        s.set_reuse_address(true).map_err(fail)?;
        if addr.is_ipv6() {
            // [::] takes IPv4 too, as the doc promises.
            s.set_only_v6(false).map_err(fail)?;
        }
        s.bind(&addr.into()).map_err(fail)?;
        s.listen(128).map_err(fail)?;
        // accept() wakes up to look at the shutdown flag.
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(fail)?;
        Ok(Server {
            listener: s.into(),
            opts,
            budget: Budget::new(MAX_SERVER_MEMORY),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(EngineError::io(
            "cannot read the control listener's address",
        ))
    }

    /// Emits `listening`, then serves until `shutdown` is set.
    pub fn run(self, shutdown: &AtomicBool, sink: &mut dyn Sink) -> Result<()> {
        sink.emit(Record::Listening(Listening {
            t: 0.0,
            listen: self.local_addr()?.to_string(),
            version: VERSION,
            pid: std::process::id(),
        }));
        let active = Arc::new(AtomicUsize::new(0));
        while !shutdown.load(Relaxed) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if active.fetch_add(1, SeqCst) >= MAX_TESTS {
                        active.fetch_sub(1, SeqCst);
                        refuse_busy(stream, peer);
                        continue;
                    }
                    let opts = self.opts.clone();
                    let slot = active.clone();
                    let budget = self.budget.clone();
                    let spawned =
                        std::thread::Builder::new()
                            .name("control".into())
                            .spawn(move || {
                                handle_control(stream, peer, &opts, &budget);
                                slot.fetch_sub(1, SeqCst);
                            });
                    if let Err(e) = spawned {
                        active.fetch_sub(1, SeqCst);
                        eprintln!("secperf-engine: cannot start a control thread: {}", e);
                    }
                }
                Err(e) if would_block(&e) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    return Err(EngineError::io("accept failed on the control listener")(e));
                }
            }
        }
        Ok(())
    }
}

/// One control connection too many: an error reply, then close.
fn refuse_busy(stream: TcpStream, peer: SocketAddr) {
    eprintln!(
        "secperf-engine: refused control connection from {}: {} tests already run",
        peer, MAX_TESTS
    );
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut conn = LineConn::new(stream);
    let e = EngineError::Server {
        field: None,
        message: format!(
            "this server already runs {} tests (its limit): wait for one to end, or start \
             another `secperf-engine serve`",
            MAX_TESTS
        ),
    };
    let _ = conn.send(&ErrorReply::from_error(&e));
}

fn handle_control(stream: TcpStream, peer: SocketAddr, opts: &ServeOptions, budget: &Arc<Budget>) {
    let local_ip = match stream.local_addr() {
        Ok(a) => a.ip().to_canonical(),
        Err(_) => return,
    };
    let mut conn = LineConn::new(stream);
    if let Err(e) = target::check("peer", peer.ip(), opts.allow_any_target) {
        eprintln!("secperf-engine: refused control connection from {}", peer);
        let _ = conn.send(&ErrorReply::from_error(&e));
        return;
    }
    if let Err(e) = run_test(&mut conn, local_ip, peer.ip(), opts, budget) {
        eprintln!("secperf-engine: test from {} ended: {}", peer, e);
        let _ = conn.send(&ErrorReply::from_error(&e));
    }
}

fn run_test(
    conn: &mut LineConn,
    local_ip: IpAddr,
    peer: IpAddr,
    opts: &ServeOptions,
    budget: &Arc<Budget>,
) -> Result<()> {
    let lost = |e: std::io::Error| EngineError::io("control connection failed")(e);
    let spec_value = match conn.recv(SETUP_WAIT).map_err(lost)? {
        Recv::Line(v) => match serde_json::from_value::<Request>(v) {
            Ok(Request::Setup { spec }) => spec,
            Ok(_) => return Err(EngineError::Server {
                field: None,
                message:
                    "the first request must be `setup`: run the same engine version on both sides"
                        .into(),
            }),
            Err(e) => {
                return Err(EngineError::Server {
                    field: None,
                    message: format!(
                        "malformed request ({}): run the same engine version on both sides",
                        e
                    ),
                })
            }
        },
        Recv::Eof | Recv::TimedOut => return Ok(()),
    };
    let spec = Spec::from_value(spec_value)?;
    spec.check_local_limits()?;
    // The test's memory, held until it ends (the spec's own cap was checked
    // as it was read).
    let _memory: Reservation = budget.reserve(spec.server_memory())?;
    // Its data sockets serve the peer and the addresses the spec declares,
    // and only as many connections as it opens.
    let peer = peer.to_canonical();
    let admit = Admission::new(
        spec.served_peers(peer, opts.allow_any_target)?,
        spec.data_connections(),
    );
    let env = ServerEnv {
        ip: local_ip,
        data_ports: opts.data_ports,
        admit: admit.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(spec.total_seconds()) + TEST_GRACE;
    let kind = kinds::of(spec);
    let shared = Shared::new();
    let setup = match kind.serve(&env, &shared) {
        Ok(s) => s,
        Err(e) => {
            shared.abort.store(true, Relaxed);
            return Err(e);
        }
    };
    let r = drive(conn, kind.as_ref(), &shared, setup, deadline);
    // Whatever happened, the test's threads end now, and its memory goes back
    // to the budget once they have (each sees the abort within WAKE).
    shared.stop.store(true, Relaxed);
    shared.abort.store(true, Relaxed);
    shared.wait_all(Instant::now() + THREADS_END);
    if let Some(what) = admit.refused() {
        eprintln!("secperf-engine: test from {}: {}", peer, what);
    }
    r
}

fn drive(
    conn: &mut LineConn,
    kind: &dyn Kind,
    shared: &Arc<Shared>,
    setup: ServerSetup,
    deadline: Instant,
) -> Result<()> {
    let lost = |e: std::io::Error| EngineError::io("control connection failed")(e);
    conn.send(&SetupReply {
        ok: true,
        data_port: setup.data_port,
        socket: setup.socket,
    })
    .map_err(lost)?;
    loop {
        if Instant::now() >= deadline {
            return Err(EngineError::Server {
                field: None,
                message:
                    "the test overran its duration by 120 s and was torn down: check the client"
                        .into(),
            });
        }
        let v = match conn.recv(Duration::from_secs(1)).map_err(lost)? {
            Recv::Line(v) => v,
            Recv::TimedOut => continue,
            Recv::Eof => return Ok(()),
        };
        let req: Request = serde_json::from_value(v).map_err(|e| EngineError::Server {
            field: None,
            message: format!(
                "malformed request ({}): run the same engine version on both sides",
                e
            ),
        })?;
        match req {
            Request::Snapshot => {
                let counters = shared.counters();
                let extras = kind.snapshot(shared);
                let reply = CountersReply {
                    ok: true,
                    counters,
                    error: None,
                    extra: extras.extra,
                    latency: extras.latency,
                };
                conn.send(&reply).map_err(lost)?;
            }
            Request::Finish => {
                shared.stop.store(true, Relaxed);
                shared.set_drain();
                shared.wait_all(Instant::now() + DRAIN_WAIT);
                let extras = kind.finish(shared);
                let reply = CountersReply {
                    ok: true,
                    counters: shared.counters(),
                    error: shared.take_error().map(|e| e.to_string()),
                    extra: extras.extra,
                    latency: extras.latency,
                };
                conn.send(&reply).map_err(lost)?;
                return Ok(());
            }
            Request::Setup { .. } => {
                return Err(EngineError::Server {
                    field: None,
                    message:
                        "one test per control connection: open a new connection for the next test"
                            .into(),
                })
            }
        }
    }
}

/// Parses `LO-HI` for --data-ports.
pub fn parse_port_range(s: &str) -> Result<(u16, u16)> {
    let bad = || EngineError::Spec {
        field: Some("data-ports".into()),
        message: format!("--data-ports {:?} is not LO-HI: give e.g. 5300-5399", s),
    };
    let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}
