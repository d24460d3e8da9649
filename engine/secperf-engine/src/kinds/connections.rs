//! Kind `connections` (RFC 3511 §5.2 and §5.4): open up to `connections`
//! TCP connections to the engine server at `rate` a second, hold them for
//! `hold` seconds, validate each with a one-byte request/response, then
//! close them all (a FIN each, at `close_rate` or as fast as possible).
//! The server holds every connection in one poll loop and reports how many
//! it accepted and validated, and when each FIN arrived: the teardown rate
//! is the server's (FINs processed per second). With `close = "fin"` (the
//! default) the server answers each FIN with its own (an orderly close: the
//! client keeps the TIME_WAIT, and the testbed's client port range and
//! `tcp_tw_reuse` let the next round reuse the ports); with `close = "reset"`
//! it answers with an RST (SO_LINGER 0), so neither side keeps TIME_WAIT.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use socket2::SockRef;

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, Extras, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::net::{self, SockOpts};
use crate::rt::shared::{Role, Shared};
use crate::rt::{sys, target};
use crate::spec::{Close, ConnectionsSpec, KindSpec};
use crate::wire::control::{CountersReply, LineConn, Request};
use crate::wire::http::{self as http_wire, Fail};
use crate::wire::record::{Record, Sink};

/// After this many failed opens the client stops trying (the limit is found).
const MAX_OPEN_FAILURES: u64 = 100;
const VALIDATE: u8 = b'V';
const ANSWER: u8 = b'v';

/// What the server reports (snapshot/finish `extra`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ServerState {
    pub accepted: u64,
    pub held: u64,
    pub held_max: u64,
    pub validated: u64,
    pub fins: u64,
    pub resets: u64,
    pub first_fin_ns: u64,
    pub last_fin_ns: u64,
    pub nofile: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn serve(
    spec: &ConnectionsSpec,
    shown: &Arc<Mutex<ServerState>>,
    env: &ServerEnv,
    sh: &Arc<Shared>,
) -> Result<ServerSetup> {
    let nofile = sys::raise_nofile();
    let sock = SockOpts {
        buffer: spec.socket_buffer,
        nodelay: spec.nodelay,
        bind: spec.bind,
    };
    let ports = env.ports(spec.data_port);
    let (listener, data_port, socket) = net::tcp_listen(&sock, env.ip, ports)?;
    listener.set_nonblocking(true).map_err(EngineError::io(
        "cannot make the data listener non-blocking",
    ))?;
    let state = ServerState {
        nofile,
        ..ServerState::default()
    };
    *lock(shown) = state;
    let close = spec.close;
    let shown = shown.clone();
    sh.spawn("conn-hold", Role::Active, move |sh, _st| {
        hold_loop(&listener, sh, state, &shown, close)
    })?;
    Ok(ServerSetup { data_port, socket })
}

fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // Safety: `fds` is a valid, exclusively borrowed slice of pollfd for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// One thread holds every connection: accept, answer validations, count FINs;
/// `shown` is the state the snapshot replies report.
fn hold_loop(
    listener: &TcpListener,
    sh: &Shared,
    mut st: ServerState,
    shown: &Mutex<ServerState>,
    close: Close,
) -> Result<()> {
    let mut held: HashMap<i32, TcpStream> = HashMap::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut buf = [0u8; 256];
    let mut dirty = true;
    while !sh.stopped() {
        // Take every pending connection.
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    st.accepted += 1;
                    held.insert(s.as_raw_fd(), s);
                    dirty = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => {
                    // Out of descriptors: the limit is reached; keep serving what is held.
                    break;
                }
                Err(e) => {
                    return Err(EngineError::io("accept failed on the connections listener")(e))
                }
            }
        }
        st.held = held.len() as u64;
        st.held_max = st.held_max.max(st.held);
        if dirty {
            fds.clear();
            fds.push(libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            fds.extend(held.keys().map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }));
            dirty = false;
        }
        *lock(shown) = st;
        if poll(&mut fds, 50).map_err(EngineError::io("poll failed on held connections"))? == 0 {
            continue;
        }
        for pfd in fds.iter_mut().skip(1) {
            if pfd.revents == 0 {
                continue;
            }
            pfd.revents = 0;
            let Some(s) = held.get(&pfd.fd) else {
                continue;
            };
            let mut io = s;
            match io.read(&mut buf) {
                Ok(0) => {
                    let now = sh.now_ns();
                    if st.fins == 0 {
                        st.first_fin_ns = now;
                    }
                    st.fins += 1;
                    st.last_fin_ns = now;
                    if close == Close::Reset {
                        // RST in answer: no TIME_WAIT on either side.
                        let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
                    }
                    // Else the drop below answers with our FIN.
                    held.remove(&pfd.fd);
                    dirty = true;
                }
                Ok(n) => {
                    let asks = buf[..n].iter().filter(|&&b| b == VALIDATE).count();
                    let answer = vec![ANSWER; asks];
                    if (&*s).write_all(&answer).is_ok() {
                        st.validated += asks as u64;
                    }
                }
                // A signal or a spurious wake-up is not the peer going away.
                Err(e) if net::would_block(&e) => {}
                Err(_) => {
                    st.resets += 1;
                    held.remove(&pfd.fd);
                    dirty = true;
                }
            }
        }
        st.held = held.len() as u64;
        *lock(shown) = st;
    }
    Ok(())
}

// ------------------------------------------------------------------ client

struct Paced {
    t0: Instant,
    rate: Option<f64>,
}

impl Paced {
    /// Waits until item `k` is due (no drift: due = k / rate from the phase's start).
    fn wait(&self, k: u64) {
        if let Some(r) = self.rate {
            let due = self.t0 + Duration::from_secs_f64(k as f64 / r);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }
}

fn server_state(conn: &mut LineConn) -> Result<ServerState> {
    let r: CountersReply = conn.call(&Request::Snapshot, Duration::from_secs(5))?;
    Ok(r.extra
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

fn fails_json(errors: &[u64]) -> Value {
    let mut m = Map::new();
    for f in Fail::ALL {
        if errors[f.index()] > 0 {
            m.insert(f.name().into(), json!(errors[f.index()]));
        }
    }
    Value::Object(m)
}

fn per_s(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

fn run(
    spec: &ConnectionsSpec,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<()> {
    let server = spec.common.server;
    target::check("server", server.ip(), allow_any_target)?;
    let nofile = sys::raise_nofile();
    let (mut conn, setup) = base::setup(server, spec.to_value())?;
    let data = SocketAddr::new(server.ip(), setup.data_port);
    sink.emit(base::start_record(
        spec.to_value(),
        began,
        Value::from(data.to_string()),
    ));
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));

    // 1. Open, paced.
    let mut open: Vec<TcpStream> = Vec::with_capacity(spec.connections.min(1 << 20) as usize);
    let mut open_errors = [0u64; Fail::ALL.len()];
    let mut failed = 0u64;
    let mut first_failure_at: Option<u64> = None;
    let open_until = Instant::now() + Duration::from_secs_f64(spec.common.duration);
    let pace = Paced {
        t0: Instant::now(),
        rate: spec.rate,
    };
    let mut limit_reason: Option<&str> = None;
    for k in 0..spec.connections {
        if Instant::now() >= open_until {
            limit_reason = Some("duration");
            break;
        }
        if failed >= MAX_OPEN_FAILURES {
            limit_reason = Some("failures");
            break;
        }
        pace.wait(k);
        match http_wire::connect(data, Instant::now() + timeout) {
            Ok(s) => open.push(s),
            Err(f) => {
                failed += 1;
                open_errors[f.index()] += 1;
                first_failure_at.get_or_insert(open.len() as u64);
            }
        }
    }
    let open_s = pace.t0.elapsed().as_secs_f64();
    let established = open.len() as u64;

    // 2. Hold.
    std::thread::sleep(Duration::from_secs_f64(spec.hold));

    // 3. Validate: ask on every connection, then read every answer.
    let mut val_errors = [0u64; Fail::ALL.len()];
    let mut ok = vec![false; open.len()];
    let v0 = Instant::now();
    for (i, s) in open.iter().enumerate() {
        match http_wire::write_all(s, &[VALIDATE], Instant::now() + timeout) {
            Ok(()) => ok[i] = true,
            Err(f) => val_errors[f.index()] += 1,
        }
    }
    let answer_deadline = Instant::now() + timeout;
    for (i, s) in open.iter().enumerate() {
        if !ok[i] {
            continue;
        }
        let mut b = [0u8; 1];
        match http_wire::read_some(s, &mut b, answer_deadline) {
            Ok(1) if b[0] == ANSWER => {}
            Ok(0) => {
                ok[i] = false;
                val_errors[Fail::Reset.index()] += 1;
            }
            Ok(_) => {
                ok[i] = false;
                val_errors[Fail::BadResponse.index()] += 1;
            }
            Err(f) => {
                ok[i] = false;
                val_errors[f.index()] += 1;
            }
        }
    }
    let validate_s = v0.elapsed().as_secs_f64();
    let validated = ok.iter().filter(|&&x| x).count() as u64;
    let at_hold = server_state(&mut conn)?;

    // 4. Close, paced: a FIN each; the server counts them as they arrive.
    let fins_before = at_hold.fins;
    let close_pace = Paced {
        t0: Instant::now(),
        rate: spec.close_rate,
    };
    let mut closed = 0u64;
    for (k, s) in open.iter().enumerate() {
        close_pace.wait(k as u64);
        if s.shutdown(Shutdown::Write).is_ok() {
            closed += 1;
        }
    }
    let close_s = close_pace.t0.elapsed().as_secs_f64();
    // Wait (with a deadline) until the server has seen every FIN.
    let drain_deadline = Instant::now() + timeout;
    let mut after = server_state(&mut conn)?;
    while after.fins - fins_before < closed && Instant::now() < drain_deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = server_state(&mut conn)?;
    }
    drop(open);
    let fin: CountersReply = conn.call(&Request::Finish, Duration::from_secs(25))?;
    if let Some(msg) = fin.error {
        return Err(EngineError::Server {
            field: None,
            message: format!("the server's side of the test failed: {}", msg),
        });
    }
    let fins = after.fins - fins_before;
    let span_s = after.last_fin_ns.saturating_sub(after.first_fin_ns) as f64 / 1e9;
    // n FINs spread over a span: n − 1 gaps (a single FIN has no rate).
    let teardown_rate = if fins > 1 && span_s > 0.0 {
        (fins - 1) as f64 / span_s
    } else {
        0.0
    };
    let attempted = established + failed;
    let rec = json!({
        "type": "result",
        "t": began.elapsed().as_secs_f64(),
        "kind": "connections",
        "protocol": "tcp",
        "target": spec.connections,
        "attempted": attempted,
        "established": established,
        "validated": validated,
        "capacity": validated,
        "failed": failed,
        "failure_ratio": if attempted > 0 { failed as f64 / attempted as f64 } else { 0.0 },
        "first_failure_at": first_failure_at,
        "stopped_by": limit_reason,
        "open_errors": fails_json(&open_errors),
        "validate_errors": fails_json(&val_errors),
        "open_s": open_s,
        "open_rate": per_s(established, open_s),
        "validate_s": validate_s,
        "server": {
            "accepted": at_hold.accepted,
            "held": at_hold.held,
            "held_max": at_hold.held_max,
            "validated": at_hold.validated,
            "fins_while_held": at_hold.fins,
            "resets_while_held": at_hold.resets,
            "resets": after.resets,
            "nofile": at_hold.nofile,
        },
        "teardown": {
            "closed": closed,
            "fins": fins,
            "missing": closed.saturating_sub(fins),
            "close_s": close_s,
            "client_rate": per_s(closed, close_s),
            "span_s": span_s,
            "rate": teardown_rate,
        },
        "teardown_rate": teardown_rate,
        "close": spec.close.name(),
        "nofile": nofile,
    });
    sink.emit(Record::Json(rec));
    Ok(())
}

// ------------------------------------------------------------------ the kind

/// Kind `connections`, one test on one side; the server side keeps the
/// state its snapshot replies report.
pub struct Connections {
    spec: ConnectionsSpec,
    shown: Arc<Mutex<ServerState>>,
}

impl Connections {
    pub fn new(spec: ConnectionsSpec) -> Connections {
        Connections {
            spec,
            shown: Arc::new(Mutex::new(ServerState::default())),
        }
    }

    fn extras(&self) -> Extras {
        Extras {
            extra: Some(json!(*lock(&self.shown))),
            latency: None,
        }
    }
}

impl Kind for Connections {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        serve(&self.spec, &self.shown, env, sh)
    }

    fn snapshot(&self, _: &Shared) -> Extras {
        self.extras()
    }

    fn finish(&self, _: &Shared) -> Extras {
        self.extras()
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        run(&self.spec, opts.allow_any_target, opts.began, sink)
    }
}
