//! Kind `http` (the http_load analog): HTTP/1.1 GETs against a web server
//! (nginx), one fetch per connection unless `keepalive`. Either `parallel`
//! fetches in flight as fast as they go, or `rate` new fetches a second on
//! an absolute schedule (fetch k is due at k / rate, so the rate does not
//! drift), with at most `parallel` in flight. Each of the `parallel`
//! connections is a machine of the event loop (rt::evloop); `threads`
//! threads share them. There is no engine server: the body length is checked
//! against Content-Length.
//!
//! With `tls`, each connection is HTTPS (rustls, rt::tls): the handshake is
//! a state of the connection's machine, timed from the TCP connect's end to
//! the handshake's end, and resumed when the session cache allows it.
//!
//! A fetch belongs to the window it is due (rate) or starts (parallel) in,
//! so with a rate the measured count is exactly rate × duration.
//!
//! Every `interval` an `interval` record says what ended in it (fetches,
//! failures, bytes, by the time each fetch ended) and how many connections
//! were open on average (sampled every 10 ms): the figures RFC 9411's
//! "constant rate" and "constant concurrent connections" criteria are
//! judged on.

use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rustls::ClientConnection;
use serde_json::{json, Map, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, no_server, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::timed::schedule;
use crate::rt::cpu::CpuProbe;
use crate::rt::evloop::{self, Dial, Flags, Got, Io, Machine, Want};
use crate::rt::shared::{new_histogram, summarize, Shared};
use crate::rt::tls::{self, Recv, Step, TlsFail};
use crate::rt::{sys, target};
use crate::spec::{HttpSpec, KindSpec};
use crate::wire::http::{self as http_wire, Fail, Progress, Response, ResponseReader};
use crate::wire::record::{Record, Sink};

/// A fetch more than this behind its due time counts as `late` (the client
/// could not keep the rate).
const LATE: Duration = Duration::from_millis(10);
/// How often the open connections are sampled for an interval's mean.
const OPEN_SAMPLE: Duration = Duration::from_millis(10);
/// Read size of a thread's scratch buffer (the responses' bytes are counted, not kept).
const SCRATCH: usize = 64 * 1024;

#[derive(Clone)]
struct Tally {
    fetches: u64,
    bytes: u64,
    header_bytes: u64,
    started: u64,
    connections: u64,
    late: u64,
    handshakes: u64,
    resumed: u64,
    errors: [u64; Fail::ALL.len()],
    connect: Histogram<u64>,
    handshake: Histogram<u64>,
    first_byte: Histogram<u64>,
    total: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            fetches: 0,
            bytes: 0,
            header_bytes: 0,
            started: 0,
            connections: 0,
            late: 0,
            handshakes: 0,
            resumed: 0,
            errors: [0; Fail::ALL.len()],
            connect: new_histogram(),
            handshake: new_histogram(),
            first_byte: new_histogram(),
            total: new_histogram(),
        }
    }

    fn add(&mut self, o: &Tally) {
        self.fetches += o.fetches;
        self.bytes += o.bytes;
        self.header_bytes += o.header_bytes;
        self.started += o.started;
        self.connections += o.connections;
        self.late += o.late;
        self.handshakes += o.handshakes;
        self.resumed += o.resumed;
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a += b;
        }
        let _ = self.connect.add(&o.connect);
        let _ = self.handshake.add(&o.handshake);
        let _ = self.first_byte.add(&o.first_byte);
        let _ = self.total.add(&o.total);
    }

    fn failed(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// One fetch's outcome.
    fn count(&mut self, f: &Done) {
        self.started += 1;
        self.late += f.late as u64;
        if let Some(c) = f.connect {
            self.connections += 1;
            self.connect.saturating_record(ns(c));
        }
        if let Some(h) = f.handshake {
            self.handshakes += 1;
            self.resumed += f.resumed as u64;
            self.handshake.saturating_record(ns(h));
        }
        match &f.outcome {
            Ok(resp) => {
                self.fetches += 1;
                self.bytes += resp.body;
                self.header_bytes += resp.header_bytes;
                self.first_byte.saturating_record(ns(f.first_byte));
                self.total.saturating_record(ns(f.total));
            }
            Err(fail) => self.errors[fail.index()] += 1,
        }
    }
}

fn ns(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

/// What the interval records read while the threads run: each fetch counted
/// as it ends (warm-up included), and the connections open now. Kept only
/// when interval records are asked for (`on`): the threads share its cache
/// lines, which costs a busy client a few per cent.
#[derive(Default)]
struct Live {
    on: bool,
    fetches: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    open: Arc<AtomicI64>,
}

/// A snapshot of `Live` (and the open connections' mean since the last one).
#[derive(Clone, Copy, Default)]
struct LiveSnap {
    fetches: u64,
    failed: u64,
    bytes: u64,
    open: i64,
    open_mean: f64,
}

impl Live {
    fn snap(&self) -> LiveSnap {
        LiveSnap {
            fetches: self.fetches.load(Relaxed),
            failed: self.failed.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            open: self.open.load(Relaxed),
            open_mean: 0.0,
        }
    }
}

/// A connection's socket, counted in `Live::open` while it exists (every
/// way a connection ends drops it).
struct Sock {
    s: TcpStream,
    open: Option<Arc<AtomicI64>>,
}

impl Sock {
    fn new(s: TcpStream, live: &Live) -> Sock {
        let open = live.on.then(|| live.open.clone());
        if let Some(o) = &open {
            o.fetch_add(1, Relaxed);
        }
        Sock { s, open }
    }
}

impl Deref for Sock {
    type Target = TcpStream;
    fn deref(&self) -> &TcpStream {
        &self.s
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        if let Some(o) = &self.open {
            o.fetch_sub(1, Relaxed);
        }
    }
}

struct Plan {
    spec: HttpSpec,
    peer: SocketAddr,
    /// Each url's request, written once.
    requests: Vec<Vec<u8>>,
    /// HTTPS: the client configuration all connections share.
    tls: Option<tls::Client>,
    t0: Instant,
    warm: Duration,
    end: Duration,
    ticket: AtomicU64,
    abort: AtomicBool,
    measured: Mutex<Tally>,
    all: Mutex<Tally>,
    live: Live,
}

/// A finished fetch.
struct Done {
    outcome: std::result::Result<Response, Fail>,
    late: bool,
    connect: Option<Duration>,
    /// TLS: the handshake of the connection opened for this fetch.
    handshake: Option<Duration>,
    resumed: bool,
    first_byte: Duration,
    total: Duration,
}

/// What one thread's connections share.
struct Cx<'a> {
    plan: &'a Plan,
    dial: Dial,
    timeout: Duration,
    measured: Tally,
    all: Tally,
    scratch: Vec<u8>,
}

impl Flags for Cx<'_> {
    fn stopped(&self) -> bool {
        self.plan.t0.elapsed() >= self.plan.end
    }
    fn aborted(&self) -> bool {
        self.plan.abort.load(Relaxed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Between fetches.
    Idle,
    /// Rate: the fetch is due then.
    Due(Instant),
    /// A non-blocking connect just begun: wait for its socket's event.
    Dialing,
    /// That event came: the connect has ended (well or not).
    Connecting,
    /// TLS: the handshake under way.
    Handshake,
    Sending(usize),
    Receiving,
    /// After a `Connection: close` response: waiting for the server's FIN, so
    /// that the server, not the client, keeps the TIME_WAIT (as http_load).
    Closing,
}

/// One connection: its fetches, one after the other.
struct Conn<'a> {
    /// The source address this connection binds to (None: the route's).
    src: Option<IpAddr>,
    s: Option<Sock>,
    /// TLS: the session on `s`.
    tls: Option<ClientConnection>,
    st: St,
    /// The fetch under way: its ticket, when it belongs, whether it is late.
    k: u64,
    at: Duration,
    late: bool,
    start: Instant,
    sent: Instant,
    connect: Option<Duration>,
    handshake: Option<Duration>,
    resumed: bool,
    first_byte: Option<Duration>,
    /// The connection was opened for this fetch (a kept-alive one was not).
    fresh: bool,
    retried: bool,
    deadline: Option<Instant>,
    reader: ResponseReader,
    _cx: PhantomData<fn(&'a ())>,
}

impl Conn<'_> {
    fn new(src: Option<IpAddr>) -> Self {
        let now = Instant::now();
        Conn {
            src,
            s: None,
            tls: None,
            st: St::Idle,
            k: 0,
            at: Duration::ZERO,
            late: false,
            start: now,
            sent: now,
            connect: None,
            handshake: None,
            resumed: false,
            first_byte: None,
            fresh: false,
            retried: false,
            deadline: None,
            reader: ResponseReader::default(),
            _cx: PhantomData,
        }
    }

    /// Takes the next ticket, or says when it is due, or that this connection is done.
    fn next(&mut self, cx: &mut Cx<'_>) -> Option<Want> {
        let p = cx.plan;
        if self.st == St::Idle {
            self.k = p.ticket.fetch_add(1, Relaxed);
            match p.spec.rate {
                Some(r) => {
                    let due = due_of(self.k, r, p.spec.parallel, p.spec.ramp_up);
                    if due >= p.end {
                        // Nothing more due: the connection stays open to the
                        // window's end, as the concurrent connections count.
                        let end = p.t0 + p.end;
                        return Some(if Instant::now() < end {
                            Want::Until(end)
                        } else {
                            Want::Done
                        });
                    }
                    self.at = due;
                    self.st = St::Due(p.t0 + due);
                }
                None => {
                    let now = p.t0.elapsed();
                    if now >= p.end {
                        return Some(Want::Done);
                    }
                    self.at = now;
                }
            }
        }
        if let St::Due(t) = self.st {
            if Instant::now() < t {
                return Some(Want::Until(t));
            }
        }
        self.late = p.t0.elapsed().saturating_sub(self.at) > LATE;
        self.start = Instant::now();
        self.connect = None;
        self.handshake = None;
        self.resumed = false;
        self.first_byte = None;
        self.retried = false;
        None
    }

    /// Opens a connection for the fetch under way (or records its failure).
    fn open(&mut self, io: &mut Io<'_>, cx: &mut Cx<'_>) {
        self.deadline = Some(Instant::now() + cx.timeout);
        self.fresh = true;
        self.tls = None;
        if self.src.is_some() {
            cx.dial.bind = self.src;
        }
        match io.connect(&cx.dial) {
            Ok(s) => {
                self.s = Some(Sock::new(s, &cx.plan.live));
                if io.blocking() {
                    self.connect = Some(self.start.elapsed());
                    self.connected(cx);
                } else {
                    self.st = St::Dialing;
                }
            }
            Err(e) => self.finish(cx, Err(Fail::from_connect(&e))),
        }
    }

    /// Sends the request on the connection kept alive, or on a new one.
    fn begin(&mut self, io: &mut Io<'_>, cx: &mut Cx<'_>) {
        if self.s.is_some() {
            self.fresh = false;
            self.deadline = Some(Instant::now() + cx.timeout);
            self.st = St::Sending(0);
        } else {
            self.open(io, cx);
        }
    }

    /// The fetch failed with `f` after the connection was up: a kept-alive
    /// connection the server closed meanwhile is reopened once, not counted.
    fn broke(&mut self, io: &mut Io<'_>, cx: &mut Cx<'_>, f: Fail) {
        self.s = None;
        if f == Fail::Reset && !self.fresh && !self.retried && !self.reader.begun() {
            self.retried = true;
            self.open(io, cx);
            return;
        }
        self.finish(cx, Err(f));
    }

    /// The TCP connection is up: the TLS handshake next, or the request.
    fn connected(&mut self, cx: &mut Cx<'_>) {
        let Some(client) = &cx.plan.tls else {
            self.st = St::Sending(0);
            return;
        };
        match client.session() {
            Ok(c) => {
                self.tls = Some(c);
                self.st = St::Handshake;
            }
            Err(_) => {
                self.s = None;
                self.finish(cx, Err(Fail::Tls));
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>, outcome: std::result::Result<Response, Fail>) {
        let done = Done {
            outcome,
            late: self.late,
            connect: self.connect,
            handshake: self.handshake,
            resumed: self.resumed,
            first_byte: self.first_byte.unwrap_or_default(),
            total: self.start.elapsed(),
        };
        if done.outcome.is_err() {
            self.s = None;
        }
        let live = &cx.plan.live;
        match &done.outcome {
            Ok(r) if live.on => {
                live.fetches.fetch_add(1, Relaxed);
                live.bytes.fetch_add(r.body, Relaxed);
            }
            Err(_) if live.on => {
                live.failed.fetch_add(1, Relaxed);
            }
            _ => {}
        }
        cx.all.count(&done);
        if self.at >= cx.plan.warm {
            cx.measured.count(&done);
        }
        self.deadline = None;
        self.st = match (&done.outcome, &self.s) {
            (Ok(resp), Some(_)) if !(cx.plan.spec.keepalive && resp.reusable) => {
                self.deadline = Some(Instant::now() + cx.timeout);
                St::Closing
            }
            _ => St::Idle,
        };
    }
}

impl<'a> Machine for Conn<'a> {
    type Cx = Cx<'a>;

    fn step(&mut self, io: &mut Io<'_>, cx: &mut Cx<'a>) -> Want {
        loop {
            match self.st {
                St::Idle | St::Due(_) => {
                    if let Some(w) = self.next(cx) {
                        return w;
                    }
                    self.begin(io, cx);
                }
                St::Dialing => {
                    self.st = St::Connecting;
                    return Want::Write;
                }
                St::Connecting => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    // Stepped here only on an event of its socket: the connect has ended.
                    match evloop::connect_error(s) {
                        Ok(()) => {
                            self.connect = Some(self.start.elapsed());
                            self.connected(cx);
                        }
                        Err(e) => {
                            self.s = None;
                            self.finish(cx, Err(Fail::from_connect(&e)));
                        }
                    }
                }
                St::Handshake => {
                    let (Some(s), Some(c)) = (self.s.as_ref(), self.tls.as_mut()) else {
                        self.st = St::Idle;
                        continue;
                    };
                    match tls::handshake(c, s) {
                        Ok(Step::Done) => {
                            let up = self.connect.unwrap_or_default();
                            self.handshake = Some(self.start.elapsed().saturating_sub(up));
                            self.resumed = tls::resumed(c);
                            self.st = St::Sending(0);
                        }
                        Ok(Step::Read) => return Want::Read,
                        Ok(Step::Write) => return Want::Write,
                        Err(e) => {
                            self.s = None;
                            self.tls = None;
                            self.finish(cx, Err(tls_fail(e, Fail::Tls)));
                        }
                    }
                }
                St::Sending(off) if self.tls.is_some() => {
                    let (Some(s), Some(c)) = (self.s.as_ref(), self.tls.as_mut()) else {
                        self.st = St::Idle;
                        continue;
                    };
                    // 0: the request is not queued yet; 1: it is, being flushed.
                    if off == 0 {
                        let req =
                            &cx.plan.requests[(self.k % cx.plan.requests.len() as u64) as usize];
                        if let Err(e) = tls::queue(c, req) {
                            self.broke(io, cx, Fail::from_io(&e));
                            continue;
                        }
                        self.st = St::Sending(1);
                    }
                    match tls::flush(c, s) {
                        Ok(Step::Done) => {
                            self.sent = Instant::now();
                            self.reader.start(false);
                            self.st = St::Receiving;
                            if !io.blocking() {
                                return Want::Read; // as for plain HTTP below
                            }
                        }
                        Ok(_) => return Want::Write,
                        Err(e) => self.broke(io, cx, tls_fail(e, Fail::Reset)),
                    }
                }
                St::Receiving if self.tls.is_some() => {
                    let (Some(s), Some(c)) = (self.s.as_ref(), self.tls.as_mut()) else {
                        self.st = St::Idle;
                        continue;
                    };
                    match tls::read(c, s, &mut cx.scratch) {
                        Ok(Recv::Data(n)) => {
                            self.first_byte.get_or_insert_with(|| self.start.elapsed());
                            match self.reader.feed(&cx.scratch[..n]) {
                                Ok(Progress::More) => {}
                                Ok(Progress::Done(resp)) => self.finish(cx, resp.judged()),
                                Err(f) => {
                                    self.s = None;
                                    self.finish(cx, Err(f));
                                }
                            }
                        }
                        Ok(Recv::Wait) => return Want::Read,
                        Ok(Recv::Eof) => match self.reader.eof() {
                            Err(f) => self.broke(io, cx, f),
                            Ok(resp) => {
                                self.s = None;
                                self.finish(cx, resp.judged());
                            }
                        },
                        Err(e) => self.broke(io, cx, tls_fail(e, Fail::Reset)),
                    }
                }
                St::Closing if self.tls.is_some() => {
                    let (Some(s), Some(c)) = (self.s.as_ref(), self.tls.as_mut()) else {
                        self.st = St::Idle;
                        continue;
                    };
                    match tls::read(c, s, &mut cx.scratch) {
                        Ok(Recv::Wait) => return Want::Read,
                        Ok(Recv::Data(_)) => {}
                        Ok(Recv::Eof) | Err(_) => {
                            self.s = None;
                            self.tls = None;
                            self.deadline = None;
                            self.st = St::Idle;
                        }
                    }
                }
                St::Sending(off) => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    let req = &cx.plan.requests[(self.k % cx.plan.requests.len() as u64) as usize];
                    match evloop::write(s, &req[off..]) {
                        Ok(Some(n)) if off + n == req.len() => {
                            self.sent = Instant::now();
                            self.reader.start(false);
                            self.st = St::Receiving;
                            if !io.blocking() {
                                // The answer cannot be there yet: wait for it
                                // without a read that would only say so.
                                return Want::Read;
                            }
                        }
                        Ok(Some(n)) => self.st = St::Sending(off + n),
                        Ok(None) => return Want::Write,
                        Err(e) => self.broke(io, cx, Fail::from_io(&e)),
                    }
                }
                St::Receiving => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    match evloop::read(s, &mut cx.scratch) {
                        Ok(Got::Data(n)) => {
                            self.first_byte.get_or_insert_with(|| self.start.elapsed());
                            match self.reader.feed(&cx.scratch[..n]) {
                                Ok(Progress::More) => {}
                                Ok(Progress::Done(resp)) => self.finish(cx, resp.judged()),
                                Err(f) => {
                                    self.s = None;
                                    self.finish(cx, Err(f));
                                }
                            }
                        }
                        Ok(Got::Wait) => return Want::Read,
                        Ok(Got::Eof) => match self.reader.eof() {
                            Err(f) => self.broke(io, cx, f),
                            Ok(resp) => {
                                self.s = None;
                                self.finish(cx, resp.judged());
                            }
                        },
                        Err(e) => self.broke(io, cx, Fail::from_io(&e)),
                    }
                }
                St::Closing => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    match evloop::read(s, &mut cx.scratch) {
                        Ok(Got::Wait) => return Want::Read,
                        Ok(Got::Data(_)) => {}
                        Ok(Got::Eof) | Err(_) => {
                            self.s = None;
                            self.deadline = None;
                            self.st = St::Idle;
                        }
                    }
                }
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn expire(&mut self, cx: &mut Cx<'a>) {
        match self.st {
            St::Dialing | St::Connecting => {
                self.s = None;
                self.finish(cx, Err(Fail::ConnectTimeout));
            }
            St::Handshake => {
                self.s = None;
                self.tls = None;
                self.finish(cx, Err(Fail::Timeout));
            }
            St::Sending(_) | St::Receiving => {
                self.s = None;
                self.finish(cx, Err(Fail::Timeout));
            }
            _ => {
                // A close the server did not finish in time: not the fetch's failure.
                self.s = None;
                self.deadline = None;
                self.st = St::Idle;
            }
        }
    }
}

/// Descriptors beside the connections: the event loops, the CPU counters, std's.
const NOFILE_MARGIN: u64 = 64;

/// When fetch `k` of a `rate` schedule is due, from the start: with a ramp-up
/// the first `parallel` (each opens its connection) spread evenly over it,
/// then the rest at `rate`.
fn due_of(k: u64, rate: f64, parallel: usize, ramp_up: Option<f64>) -> Duration {
    let n = parallel as u64;
    Duration::from_secs_f64(match ramp_up {
        Some(r) if k < n => k as f64 * r / n as f64,
        Some(r) => r + (k - n) as f64 / rate,
        None => k as f64 / rate,
    })
}

/// One thread: connections `first..first + conns` of the test, to the end of the window.
fn worker(p: &Plan, first: usize, conns: usize) -> Result<()> {
    let timeout = Duration::from_secs_f64(p.spec.timeout.unwrap_or(5.0));
    let mut cx = Cx {
        plan: p,
        dial: Dial {
            peer: p.peer,
            bind: p.spec.bind,
            nodelay: p.spec.nodelay,
            buffer: None,
            timeout,
        },
        timeout,
        measured: Tally::new(),
        all: Tally::new(),
        scratch: vec![0u8; SCRATCH],
    };
    let src = |i: usize| {
        let all = &p.spec.sources;
        (!all.is_empty()).then(|| all[i % all.len()])
    };
    let mut ms: Vec<Conn<'_>> = (first..first + conns).map(|i| Conn::new(src(i))).collect();
    let busy = Duration::from_micros(p.spec.busy_poll_us);
    let r = evloop::drive(&mut ms, &mut cx, busy);
    if let Ok(mut g) = p.measured.lock() {
        g.add(&cx.measured);
    }
    if let Ok(mut g) = p.all.lock() {
        g.add(&cx.all);
    }
    r.map_err(EngineError::io("the http event loop failed"))
}

/// Sorts a TLS move's failure; `eof` is what the peer's close means here.
fn tls_fail(e: TlsFail, eof: Fail) -> Fail {
    match e {
        TlsFail::Eof => eof,
        TlsFail::Io(e) => Fail::from_io(&e),
        TlsFail::Tls => Fail::Tls,
    }
}

fn errors_json(t: &Tally) -> Value {
    let mut m = Map::new();
    for f in Fail::ALL {
        m.insert(f.name().into(), json!(t.errors[f.index()]));
    }
    Value::Object(m)
}

fn run(spec: &HttpSpec, allow_any_target: bool, began: Instant, sink: &mut dyn Sink) -> Result<()> {
    let server = spec.common.server;
    target::check("server", server.ip(), allow_any_target)?;
    // A connection is a descriptor: short of them, connects would fail with
    // EMFILE and read as the path's failures, so the test is refused instead.
    let need = spec.parallel as u64 + NOFILE_MARGIN;
    let nofile = sys::raise_nofile_to(need);
    if nofile < need {
        return Err(EngineError::spec(
            "parallel",
            format!(
                "parallel {} needs {} descriptors but this process may open {} (RLIMIT_NOFILE; \
                 raising its hard limit needs CAP_SYS_RESOURCE): ask at most {}, or raise the \
                 hard limit (ulimit -Hn) before secperf starts",
                spec.parallel,
                need,
                nofile,
                nofile.saturating_sub(NOFILE_MARGIN)
            ),
        ));
    }
    let threads = spec.threads.clamp(1, spec.parallel);
    let host = match server {
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        SocketAddr::V4(a) => a.to_string(),
    };
    let warm = Duration::from_secs_f64(spec.warmup);
    let tls = match &spec.tls {
        Some(o) => {
            Some(tls::Client::new(o, server.ip()).map_err(|e| EngineError::spec("ca_file", e.0))?)
        }
        None => None,
    };
    let plan = Arc::new(Plan {
        spec: spec.clone(),
        peer: server,
        requests: spec
            .urls
            .iter()
            .map(|u| http_wire::request(u, &host, spec.keepalive))
            .collect(),
        tls,
        t0: Instant::now(),
        warm,
        end: warm + Duration::from_secs_f64(spec.common.duration),
        ticket: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        measured: Mutex::new(Tally::new()),
        all: Mutex::new(Tally::new()),
        live: Live {
            on: spec.interval > 0.0,
            ..Live::default()
        },
    });
    sink.emit(base::start_record(
        spec.to_value(),
        began,
        Value::from(server.to_string()),
    ));
    let mut handles = Vec::new();
    let mut first = 0;
    for i in 0..threads {
        // The connections, spread evenly over the threads.
        let conns = spec.parallel / threads + usize::from(i < spec.parallel % threads);
        let p = plan.clone();
        let h = std::thread::Builder::new()
            .name(format!("http-{}", i))
            .spawn(move || worker(&p, first, conns))
            .map_err(|e| {
                plan.abort.store(true, Relaxed);
                EngineError::io(format!(
                    "cannot start fetch thread {}: lower threads or raise the thread limit",
                    i
                ))(e)
            })?;
        handles.push(h);
        first += conns;
    }
    // CPU over the measured window, as the other kinds report it.
    // Waits until `d` after the start; with interval records, sampling the
    // open connections every OPEN_SAMPLE meanwhile (their sum and count).
    let sample = spec.interval > 0.0;
    let sleep_to = |d: Duration, open: &mut (i64, u64)| loop {
        let now = plan.t0.elapsed();
        if d <= now {
            break;
        }
        std::thread::sleep(if sample {
            (d - now).min(OPEN_SAMPLE)
        } else {
            d - now
        });
        if sample {
            open.0 += plan.live.open.load(Relaxed).max(0);
            open.1 += 1;
        }
    };
    // CPU at the warm-up boundary and at the end; an interval record at each
    // boundary of the schedule when `interval` asks for them.
    let probe = CpuProbe::new(&spec.common.cpu_groups);
    let mut at_warm = (spec.warmup <= 0.0).then(|| (sys::process_cpu(), probe.read()));
    let (mut last, mut last_t) = (LiveSnap::default(), 0.0);
    for b in schedule(spec.warmup, spec.common.duration, spec.interval) {
        let mut open = (0, 0);
        sleep_to(Duration::from_secs_f64(b), &mut open);
        let mut now = plan.live.snap();
        now.open_mean = if open.1 > 0 {
            open.0 as f64 / open.1 as f64
        } else {
            now.open as f64
        };
        if at_warm.is_none() && b >= spec.warmup - 1e-9 {
            at_warm = Some((sys::process_cpu(), probe.read()));
        }
        if spec.interval > 0.0 {
            sink.emit(interval_record(
                last_t,
                b,
                b <= spec.warmup + 1e-9 && spec.warmup > 0.0,
                &last,
                &now,
                began,
            ));
        }
        (last, last_t) = (now, b);
    }
    let Some((cpu0, stat0)) = at_warm else {
        return Err(EngineError::Internal(
            "the warm-up boundary was not reached: report this bug".into(),
        ));
    };
    let (cpu1, stat1) = (sys::process_cpu(), probe.read());
    // Fetches already under way end by their own timeout; then give up on them.
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));
    let give_up = Instant::now() + 2 * timeout + Duration::from_secs(2);
    let mut failure = None;
    for h in handles {
        while !h.is_finished() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !h.is_finished() {
            plan.abort.store(true, Relaxed);
            // Aborted, it ends within a tick of its loop.
            while !h.is_finished() && Instant::now() < give_up + Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if h.is_finished() {
            match h.join() {
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Ok(Ok(())) => {}
                Err(_) => {
                    failure = failure.or(Some(EngineError::Internal(
                        "an http thread panicked: report this bug with the spec".into(),
                    )))
                }
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let m = plan
        .measured
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|_| Tally::new());
    let a = plan
        .all
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|_| Tally::new());
    // Read errors surface only now, after the fetch threads have ended.
    let (machine_cpu, host_cpu) = probe.window(&stat0?, &stat1?);
    let window = spec.common.duration;
    let cpu = cpu1.minus(cpu0);
    let rec = json!({
        "type": "result",
        "t": began.elapsed().as_secs_f64(),
        "kind": "http",
        "protocol": "tcp",
        "tls": spec.tls.is_some(),
        "duration_s": window,
        "warmup_s": spec.warmup,
        "fetches": m.fetches,
        "fetches_per_second": m.fetches as f64 / window,
        "transactions": m.fetches,
        "transactions_per_second": m.fetches as f64 / window,
        "started": m.started,
        "failed": m.failed(),
        "failure_ratio": if m.started > 0 { m.failed() as f64 / m.started as f64 } else { 0.0 },
        "late": m.late,
        "connections": m.connections,
        "handshakes": m.handshakes,
        "resumed": m.resumed,
        "bytes": m.bytes,
        "bytes_per_second": m.bytes as f64 / window,
        "bits_per_second": m.bytes as f64 * 8.0 / window,
        "header_bytes": m.header_bytes,
        "errors": errors_json(&m),
        "latency_us": {
            "connect": summarize(&m.connect),
            "handshake": summarize(&m.handshake),
            "first_byte": summarize(&m.first_byte),
            "total": summarize(&m.total),
            "count": m.total.len(),
            "mean": summarize(&m.total).mean,
            "p99": summarize(&m.total).p99,
        },
        "cpu": {"client": cpu},
        "machine_cpu": machine_cpu,
        "host_cpu": host_cpu,
        "nofile": nofile,
        "totals": {"client": {
            "fetches": a.fetches, "started": a.started, "failed": a.failed(),
            "bytes": a.bytes, "connections": a.connections,
            "handshakes": a.handshakes, "resumed": a.resumed, "errors": errors_json(&a),
        }},
    });
    sink.emit(Record::Json(rec));
    Ok(())
}

/// What ended between two snapshots, `t0`..`t1` seconds after the traffic
/// started: fetches, failures and body bytes by the time each fetch ended,
/// and the connections open (their mean over the interval, and at `t1`).
fn interval_record(
    t0: f64,
    t1: f64,
    warmup: bool,
    a: &LiveSnap,
    b: &LiveSnap,
    began: Instant,
) -> Record {
    let span = (t1 - t0).max(1e-9);
    let fetches = b.fetches.saturating_sub(a.fetches);
    let bytes = b.bytes.saturating_sub(a.bytes);
    Record::Json(json!({
        "type": "interval",
        "t": began.elapsed().as_secs_f64(),
        "kind": "http",
        "t_start": t0,
        "t_end": t1,
        "warmup": warmup,
        "fetches": fetches,
        "transactions": fetches,
        "rate": fetches as f64 / span,
        "failed": b.failed.saturating_sub(a.failed),
        "bytes": bytes,
        "bits_per_second": bytes as f64 * 8.0 / span,
        "open": b.open_mean,
        "open_end": b.open.max(0),
    }))
}

/// Kind `http`: the client alone, against a web server.
pub struct Http {
    spec: HttpSpec,
}

impl Http {
    pub fn new(spec: HttpSpec) -> Http {
        Http { spec }
    }
}

impl Kind for Http {
    fn serve(&self, _: &ServerEnv, _: &Arc<Shared>) -> Result<ServerSetup> {
        Err(no_server(
            "kind http runs against a web server (nginx), not an engine server: point `server` at the web server",
        ))
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        run(&self.spec, opts.allow_any_target, opts.began, sink)
    }
}
