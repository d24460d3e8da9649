//! Kind `connections` (RFC 3511 §5.2 and §5.4): open up to `connections`
//! TCP connections to the engine server at `rate` a second, hold them for
//! `hold` seconds, validate each with a one-byte request/response, then
//! close them all (a FIN each, at `close_rate` or as fast as possible).
//!
//! Both sides run one epoll loop (rt::evloop's `Poller`), so a connection
//! costs a descriptor and a few bytes of the engine's memory (`memory` in the
//! result says how many), not a thread. The client opens with up to `WINDOW`
//! connects under way at once, its sources spread over `sources` (each
//! address gives the kernel's whole port range again, to each destination),
//! and stops when every asked connection is open, when connects keep failing
//! (`MAX_OPEN_FAILURES`: the limit of the path is found), or at a bound of its
//! own (`duration`, its descriptors, its source ports, memory): then the
//! result says which (`stopped_by`), and the count is a lower bound.
//!
//! The server holds every connection and reports how many it accepted and
//! validated, and when each FIN arrived: the teardown rate is the server's
//! (FINs processed per second). With `close = "fin"` (the default) the server
//! answers each FIN with its own (an orderly close: the client keeps the
//! TIME_WAIT, and the testbed's client port range and `tcp_tw_reuse` let the
//! next round reuse the ports); with `close = "reset"` it answers with an RST
//! (SO_LINGER 0), so neither side keeps TIME_WAIT.

use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use socket2::SockRef;

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, Extras, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::evloop::{self, Dial, Got, Poller};
use crate::rt::net::{self, SockOpts};
use crate::rt::shared::{Role, Shared};
use crate::rt::{sys, target};
use crate::spec::{Close, ConnectionsSpec, KindSpec};
use crate::wire::control::{CountersReply, LineConn, Request};
use crate::wire::http::Fail;
use crate::wire::record::{Record, Sink};

/// After this many failed opens the client stops trying (the limit is found).
const MAX_OPEN_FAILURES: u64 = 100;
/// Connects under way at once.
const WINDOW: usize = 512;
/// How often the loops look at their flags and deadlines.
const TICK: Duration = Duration::from_millis(50);
const VALIDATE: u8 = b'V';
const ANSWER: u8 = b'v';
/// Descriptors beyond the connections (listeners, control, epoll, stdio).
const SPARE_FDS: u64 = 256;

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
    /// Accepts refused for want of descriptors.
    #[serde(default)]
    pub accept_emfile: u64,
    /// The server process's resident memory when the state was read.
    #[serde(default)]
    pub rss_bytes: u64,
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
    let nofile = sys::raise_nofile_to(spec.connections + SPARE_FDS);
    let sock = SockOpts {
        buffer: spec.socket_buffer,
        nodelay: spec.nodelay,
        bind: None,
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

/// The server's held connections: a slab (token = index + 1; the listener is 0).
struct Held {
    conns: Vec<Option<TcpStream>>,
    free: Vec<usize>,
    n: usize,
}

impl Held {
    fn insert(&mut self, s: TcpStream) -> usize {
        self.n += 1;
        match self.free.pop() {
            Some(i) => {
                self.conns[i] = Some(s);
                i
            }
            None => {
                self.conns.push(Some(s));
                self.conns.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<TcpStream> {
        let s = self.conns.get_mut(i)?.take()?;
        self.free.push(i);
        self.n -= 1;
        Some(s)
    }
}

fn emfile(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
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
    let fail = |what: &'static str| EngineError::io(what);
    let mut poll = Poller::new().map_err(fail("cannot create the server's epoll set"))?;
    poll.add(listener, 0)
        .map_err(fail("cannot watch the connections listener"))?;
    let mut held = Held {
        conns: Vec::new(),
        free: Vec::new(),
        n: 0,
    };
    let mut buf = [0u8; 256];
    // Out of descriptors: the queue is retried each tick (no new edge comes).
    let mut accept_blocked = false;
    let mut ready: Vec<usize> = Vec::new();
    while !sh.stopped() {
        poll.wait(&mut ready, Some(TICK))
            .map_err(fail("epoll failed on held connections"))?;
        if accept_blocked || ready.contains(&0) {
            accept_blocked = false;
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        let i = held.insert(s);
                        let Some(Some(s)) = held.conns.get(i) else {
                            continue;
                        };
                        if poll.add(s, i + 1).is_err() {
                            held.remove(i);
                            continue;
                        }
                        st.accepted += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if emfile(&e) => {
                        // The limit is reached; keep serving what is held.
                        st.accept_emfile += 1;
                        accept_blocked = true;
                        break;
                    }
                    Err(e) => {
                        return Err(EngineError::io("accept failed on the connections listener")(e))
                    }
                }
            }
        }
        for &t in ready.iter().filter(|&&t| t > 0) {
            let i = t - 1;
            // Read until it would block (edge-triggered).
            while let Some(Some(s)) = held.conns.get(i) {
                match evloop::read(s, &mut buf) {
                    Ok(Got::Eof) => {
                        let now = sh.now_ns();
                        if st.fins == 0 {
                            st.first_fin_ns = now;
                        }
                        st.fins += 1;
                        st.last_fin_ns = now;
                        if let Some(s) = held.remove(i) {
                            if close == Close::Reset {
                                // RST in answer: no TIME_WAIT on either side.
                                let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
                            }
                            // Else the drop answers with our FIN.
                        }
                        break;
                    }
                    Ok(Got::Data(n)) => {
                        let asks = buf[..n].iter().filter(|&&b| b == VALIDATE).count();
                        let answer = vec![ANSWER; asks];
                        if matches!(evloop::write(s, &answer), Ok(Some(k)) if k == asks) {
                            st.validated += asks as u64;
                        }
                    }
                    Ok(Got::Wait) => break,
                    Err(_) => {
                        st.resets += 1;
                        held.remove(i);
                        break;
                    }
                }
            }
        }
        st.held = held.n as u64;
        st.held_max = st.held_max.max(st.held);
        *lock(shown) = st;
    }
    Ok(())
}

// ------------------------------------------------------------------ client

/// Why the opening phase ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Every asked connection was tried.
    Target,
    /// Connects kept failing: the limit of the path (DUT, server) is found.
    Failures,
    /// `duration` ran out.
    Duration,
    /// This process's descriptors ran out (RLIMIT_NOFILE, fs.file-max).
    Nofile,
    /// Every source address's ports to the server are in use.
    Ports,
    /// The kernel had no memory or buffers for another socket.
    Memory,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Target => "target",
            Stop::Failures => "failures",
            Stop::Duration => "duration",
            Stop::Nofile => "nofile",
            Stop::Ports => "ports",
            Stop::Memory => "memory",
        }
    }

    /// A connect error that ends the phase for want of the client's own resources.
    fn of(e: &io::Error) -> Option<Stop> {
        match e.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => Some(Stop::Nofile),
            Some(libc::EADDRNOTAVAIL) | Some(libc::EADDRINUSE) => Some(Stop::Ports),
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) => Some(Stop::Memory),
            _ => None,
        }
    }
}

const PENDING: u8 = 0;
const OPEN: u8 = 1;
const DEAD: u8 = 2;
const VALID: u8 = 3;

/// One attempted connection: 8 bytes (the descriptor and a state).
struct Slot {
    s: Option<TcpStream>,
    st: u8,
}

struct Paced {
    t0: Instant,
    rate: Option<f64>,
}

impl Paced {
    /// When item `k` is due (no drift: due = k / rate from the phase's start).
    fn due(&self, k: u64) -> Instant {
        match self.rate {
            Some(r) => self.t0 + Duration::from_secs_f64(k as f64 / r),
            None => self.t0,
        }
    }

    fn wait(&self, k: u64) {
        let due = self.due(k);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
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

/// The opening phase's outcome.
struct Opened {
    slots: Vec<Slot>,
    established: u64,
    failed: u64,
    abandoned: u64,
    errors: [u64; Fail::ALL.len()],
    first_failure_at: Option<u64>,
    stop: Stop,
    seconds: f64,
}

/// Opens up to `spec.connections`, paced, at most WINDOW under way.
fn open_all(spec: &ConnectionsSpec, data: SocketAddr, poll: &mut Poller) -> Result<Opened> {
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));
    let target = spec.connections as usize;
    let mut o = Opened {
        slots: Vec::with_capacity(target.min(1 << 20)),
        established: 0,
        failed: 0,
        abandoned: 0,
        errors: [0; Fail::ALL.len()],
        first_failure_at: None,
        stop: Stop::Target,
        seconds: 0.0,
    };
    let pace = Paced {
        t0: Instant::now(),
        rate: spec.rate,
    };
    let open_until = pace.t0 + Duration::from_secs_f64(spec.common.duration);
    let mut dial = Dial::to(data, timeout);
    dial.nodelay = spec.nodelay;
    dial.buffer = spec.socket_buffer;
    let mut pending = 0usize;
    let mut deadlines: VecDeque<(usize, Instant)> = VecDeque::new();
    let mut ready: Vec<usize> = Vec::new();
    let fail = |o: &mut Opened, f: Fail| {
        o.failed += 1;
        o.errors[f.index()] += 1;
        o.first_failure_at.get_or_insert(o.established);
    };
    loop {
        let now = Instant::now();
        if o.slots.len() == target && pending == 0 {
            o.stop = Stop::Target;
            break;
        }
        if o.failed >= MAX_OPEN_FAILURES {
            o.stop = Stop::Failures;
            break;
        }
        if now >= open_until {
            o.stop = Stop::Duration;
            break;
        }
        // Start what is due.
        let mut stop = None;
        while pending < WINDOW && o.slots.len() < target {
            let k = o.slots.len();
            if pace.due(k as u64) > now {
                break;
            }
            if !spec.sources.is_empty() {
                dial.bind = Some(spec.sources[k % spec.sources.len()]);
            }
            match poll.io(k).connect(&dial) {
                Ok(s) => {
                    o.slots.push(Slot {
                        s: Some(s),
                        st: PENDING,
                    });
                    pending += 1;
                    deadlines.push_back((k, now + timeout));
                }
                Err(e) => match Stop::of(&e) {
                    Some(why) => {
                        stop = Some(why);
                        break;
                    }
                    None => {
                        o.slots.push(Slot { s: None, st: DEAD });
                        fail(&mut o, Fail::from_connect(&e));
                    }
                },
            }
        }
        if let Some(why) = stop {
            o.stop = why;
            break;
        }
        // Wait for connects to finish, the next start, or the first deadline.
        let mut wake = now + TICK;
        if o.slots.len() < target && pending < WINDOW {
            wake = wake.min(pace.due(o.slots.len() as u64));
        }
        if let Some((_, d)) = deadlines.front() {
            wake = wake.min(*d);
        }
        poll.wait(&mut ready, Some(wake.saturating_duration_since(now)))
            .map_err(EngineError::io("epoll failed while opening connections"))?;
        for &k in &ready {
            let Some(slot) = o.slots.get_mut(k) else {
                continue;
            };
            if slot.st != PENDING {
                continue;
            }
            let Some(s) = slot.s.as_ref() else {
                continue;
            };
            match evloop::connected(s) {
                Ok(true) => {
                    slot.st = OPEN;
                    pending -= 1;
                    o.established += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    slot.s = None;
                    slot.st = DEAD;
                    pending -= 1;
                    if let Some(why) = Stop::of(&e) {
                        o.stop = why;
                    }
                    fail(&mut o, Fail::from_connect(&e));
                }
            }
        }
        let now = Instant::now();
        while let Some(&(k, d)) = deadlines.front() {
            if d > now {
                break;
            }
            deadlines.pop_front();
            let slot = &mut o.slots[k];
            if slot.st == PENDING {
                slot.s = None;
                slot.st = DEAD;
                pending -= 1;
                fail(&mut o, Fail::ConnectTimeout);
            }
        }
        if o.stop != Stop::Target {
            break;
        }
    }
    // Connects still under way when the phase stopped: dropped, in no count.
    for slot in o.slots.iter_mut().filter(|s| s.st == PENDING) {
        slot.s = None;
        slot.st = DEAD;
        o.abandoned += 1;
    }
    o.seconds = pace.t0.elapsed().as_secs_f64();
    Ok(o)
}

/// Asks on every open connection, then reads every answer (one epoll loop).
fn validate(
    slots: &mut [Slot],
    poll: &mut Poller,
    timeout: Duration,
    errors: &mut [u64; Fail::ALL.len()],
) -> Result<u64> {
    let mut waiting = 0u64;
    for slot in slots.iter_mut().filter(|s| s.st == OPEN) {
        let Some(s) = slot.s.as_ref() else { continue };
        match evloop::write(s, &[VALIDATE]) {
            Ok(Some(1)) => waiting += 1,
            Ok(_) => {
                slot.st = DEAD;
                errors[Fail::Timeout.index()] += 1;
            }
            Err(e) => {
                slot.st = DEAD;
                errors[Fail::from_io(&e).index()] += 1;
            }
        }
    }
    let deadline = Instant::now() + timeout;
    let mut valid = 0u64;
    let mut ready: Vec<usize> = Vec::new();
    // The answers' edges come after the questions: the first wait reports them.
    let mut look: Vec<usize> = Vec::new();
    while waiting > 0 {
        for &k in &look {
            let slot = &mut slots[k];
            if slot.st != OPEN {
                continue;
            }
            let Some(s) = slot.s.as_ref() else { continue };
            let mut b = [0u8; 1];
            let bad = match evloop::read(s, &mut b) {
                Ok(Got::Wait) => continue,
                Ok(Got::Data(_)) if b[0] == ANSWER => None,
                Ok(Got::Data(_)) => Some(Fail::BadResponse),
                Ok(Got::Eof) => Some(Fail::Reset),
                Err(e) => Some(Fail::from_io(&e)),
            };
            waiting -= 1;
            match bad {
                None => {
                    slot.st = VALID;
                    valid += 1;
                }
                Some(f) => {
                    slot.st = DEAD;
                    errors[f.index()] += 1;
                }
            }
        }
        let now = Instant::now();
        if waiting == 0 || now >= deadline {
            break;
        }
        poll.wait(&mut ready, Some((deadline - now).min(TICK)))
            .map_err(EngineError::io("epoll failed while validating connections"))?;
        look.clear();
        look.extend_from_slice(&ready);
    }
    for slot in slots.iter_mut().filter(|s| s.st == OPEN) {
        slot.st = DEAD;
        errors[Fail::Timeout.index()] += 1;
    }
    for slot in slots.iter_mut().filter(|s| s.st == VALID) {
        slot.st = OPEN;
    }
    Ok(valid)
}

fn run(
    spec: &ConnectionsSpec,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<()> {
    let server = spec.common.server;
    target::check("server", server.ip(), allow_any_target)?;
    for (i, ip) in spec.sources.iter().enumerate() {
        target::check(&format!("sources[{}]", i), *ip, allow_any_target)?;
    }
    let nofile = sys::raise_nofile_to(spec.connections + SPARE_FDS);
    let (mut conn, setup) = base::setup(server, spec.to_value())?;
    let data = SocketAddr::new(server.ip(), setup.data_port);
    sink.emit(base::start_record(
        spec.to_value(),
        began,
        Value::from(data.to_string()),
    ));
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));
    let mut poll = Poller::new().map_err(EngineError::io("cannot create an epoll set"))?;
    let rss_before = sys::rss_bytes();

    // 1. Open, paced.
    let mut opened = open_all(spec, data, &mut poll)?;
    let established = opened.established;
    let rss_held = sys::rss_bytes();

    // 2. Hold.
    std::thread::sleep(Duration::from_secs_f64(spec.hold));

    // 3. Validate: ask on every connection, then read every answer.
    let mut val_errors = [0u64; Fail::ALL.len()];
    let v0 = Instant::now();
    let validated = validate(&mut opened.slots, &mut poll, timeout, &mut val_errors)?;
    let validate_s = v0.elapsed().as_secs_f64();
    let at_hold = server_state(&mut conn)?;

    // 4. Close, paced: a FIN each on every connection still up; the server
    // counts them as they arrive.
    let fins_before = at_hold.fins;
    let close_pace = Paced {
        t0: Instant::now(),
        rate: spec.close_rate,
    };
    let mut closed = 0u64;
    for slot in opened.slots.iter().filter(|s| s.st == OPEN) {
        close_pace.wait(closed);
        if let Some(s) = slot.s.as_ref() {
            if s.shutdown(Shutdown::Write).is_ok() {
                closed += 1;
            }
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
    drop(opened.slots);
    drop(poll);
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
    let failed = opened.failed;
    let attempted = established + failed;
    let per_conn = |before: Option<u64>, held: Option<u64>| match (before, held) {
        (Some(b), Some(h)) if established > 0 => {
            json!(h.saturating_sub(b) as f64 / established as f64)
        }
        _ => Value::Null,
    };
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
        "abandoned": opened.abandoned,
        "failure_ratio": if attempted > 0 { failed as f64 / attempted as f64 } else { 0.0 },
        "first_failure_at": opened.first_failure_at,
        "stopped_by": opened.stop.name(),
        "limit_found": opened.stop == Stop::Failures,
        "sources": spec.sources.len().max(1),
        "open_errors": fails_json(&opened.errors),
        "validate_errors": fails_json(&val_errors),
        "open_s": opened.seconds,
        "open_rate": per_s(established, opened.seconds),
        "validate_s": validate_s,
        "memory": {
            "client_rss_bytes": rss_held,
            "client_bytes_per_connection": per_conn(rss_before, rss_held),
            "server_rss_bytes": at_hold.rss_bytes,
        },
        "server": {
            "accepted": at_hold.accepted,
            "held": at_hold.held,
            "held_max": at_hold.held_max,
            "validated": at_hold.validated,
            "fins_while_held": at_hold.fins,
            "resets_while_held": at_hold.resets,
            "resets": after.resets,
            "accept_emfile": at_hold.accept_emfile,
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
        let mut st = *lock(&self.shown);
        st.rss_bytes = sys::rss_bytes().unwrap_or(0);
        Extras {
            extra: Some(json!(st)),
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
