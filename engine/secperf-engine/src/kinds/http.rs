//! Kind `http` (the http_load analog): HTTP/1.1 GETs against a web server
//! (nginx), one fetch per connection unless `keepalive`. Either `parallel`
//! fetches in flight as fast as they go, or `rate` new fetches a second on
//! an absolute schedule (fetch k is due at k / rate, so the rate does not
//! drift), with at most `parallel` in flight. There is no engine server: the
//! body length is checked against Content-Length.
//!
//! A fetch belongs to the window it is due (rate) or starts (parallel) in,
//! so with a rate the measured count is exactly rate × duration.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, no_server, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::cpu::CpuProbe;
use crate::rt::shared::{new_histogram, summarize, Shared};
use crate::rt::{sys, target};
use crate::spec::{HttpSpec, KindSpec};
use crate::wire::http::{self as http_wire, Fail};
use crate::wire::record::{Record, Sink};

/// A fetch more than this behind its due time counts as `late` (the client
/// could not keep the rate).
const LATE: Duration = Duration::from_millis(10);

#[derive(Clone)]
struct Tally {
    fetches: u64,
    bytes: u64,
    header_bytes: u64,
    started: u64,
    connections: u64,
    late: u64,
    errors: [u64; Fail::ALL.len()],
    connect: Histogram<u64>,
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
            errors: [0; Fail::ALL.len()],
            connect: new_histogram(),
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
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a += b;
        }
        let _ = self.connect.add(&o.connect);
        let _ = self.first_byte.add(&o.first_byte);
        let _ = self.total.add(&o.total);
    }

    fn failed(&self) -> u64 {
        self.errors.iter().sum()
    }
}

fn ns(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

struct Plan {
    spec: HttpSpec,
    peer: SocketAddr,
    /// Each url's request, written once.
    requests: Vec<Vec<u8>>,
    t0: Instant,
    warm: Duration,
    end: Duration,
    ticket: AtomicU64,
    abort: AtomicBool,
    measured: Mutex<Tally>,
    all: Mutex<Tally>,
}

/// One fetch on `conn` (or a new connection); updates the tallies.
fn fetch(
    p: &Plan,
    req: &[u8],
    conn: &mut Option<TcpStream>,
    buf: &mut Vec<u8>,
) -> (
    Result<http_wire::Response, Fail>,
    Option<Duration>,
    Duration,
) {
    let timeout = Duration::from_secs_f64(p.spec.timeout.unwrap_or(5.0));
    let start = Instant::now();
    let mut connect_time = None;
    // A kept-alive connection the server closed meanwhile is reopened once, not counted.
    for attempt in 0..2 {
        let deadline = Instant::now() + timeout;
        let fresh = conn.is_none();
        if fresh {
            match http_wire::connect_bounded(p.peer, timeout) {
                Ok(s) => {
                    connect_time = Some(start.elapsed());
                    *conn = Some(s);
                }
                Err(f) => return (Err(f), None, start.elapsed()),
            }
        }
        let Some(s) = conn.as_ref() else {
            return (Err(Fail::Other), connect_time, start.elapsed());
        };
        let sent = Instant::now();
        let r = http_wire::write_all_bounded(s, req, deadline)
            .and_then(|_| http_wire::read_response_bounded(s, buf, sent, deadline));
        match r {
            Err(Fail::Reset) if !fresh && attempt == 0 => {
                *conn = None;
                continue;
            }
            Err(f) => {
                *conn = None;
                return (Err(f), connect_time, start.elapsed());
            }
            Ok(mut resp) => {
                resp.first_byte += sent - start;
                let total = start.elapsed();
                if !(p.spec.keepalive && resp.reusable) {
                    if let Some(s) = conn.take() {
                        http_wire::await_close_bounded(&s, Instant::now() + timeout);
                    }
                }
                return (Ok(resp), connect_time, total);
            }
        }
    }
    (Err(Fail::Reset), connect_time, start.elapsed())
}

fn worker(p: &Plan) {
    let n = p.spec.urls.len() as u64;
    let mut measured = Tally::new();
    let mut all = Tally::new();
    let mut conn: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(65536);
    while !p.abort.load(Relaxed) {
        let k = p.ticket.fetch_add(1, Relaxed);
        // When this fetch belongs: its due time (rate) or its start.
        let at = match p.spec.rate {
            Some(r) => {
                let due = Duration::from_secs_f64(k as f64 / r);
                if due >= p.end {
                    break;
                }
                loop {
                    let now = p.t0.elapsed();
                    if now >= due || p.abort.load(Relaxed) {
                        break;
                    }
                    std::thread::sleep((due - now).min(Duration::from_millis(100)));
                }
                due
            }
            None => {
                let now = p.t0.elapsed();
                if now >= p.end {
                    break;
                }
                now
            }
        };
        let in_window = at >= p.warm;
        let late = p.t0.elapsed().saturating_sub(at) > LATE;
        let req = &p.requests[(k % n) as usize];
        let (r, connect, total) = fetch(p, req, &mut conn, &mut buf);
        let tallies: &mut [&mut Tally] = if in_window {
            &mut [&mut all, &mut measured]
        } else {
            &mut [&mut all]
        };
        for t in tallies.iter_mut() {
            t.started += 1;
            t.late += late as u64;
            if let Some(c) = connect {
                t.connections += 1;
                t.connect.saturating_record(ns(c));
            }
            match &r {
                Ok(resp) => {
                    t.fetches += 1;
                    t.bytes += resp.body;
                    t.header_bytes += resp.header_bytes;
                    t.first_byte.saturating_record(ns(resp.first_byte));
                    t.total.saturating_record(ns(total));
                }
                Err(f) => t.errors[f.index()] += 1,
            }
        }
    }
    if let Ok(mut g) = p.measured.lock() {
        g.add(&measured);
    }
    if let Ok(mut g) = p.all.lock() {
        g.add(&all);
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
    let nofile = sys::raise_nofile();
    let threads = spec.parallel;
    let host = match server {
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        SocketAddr::V4(a) => a.to_string(),
    };
    let warm = Duration::from_secs_f64(spec.warmup);
    let plan = Arc::new(Plan {
        spec: spec.clone(),
        peer: server,
        requests: spec
            .urls
            .iter()
            .map(|u| http_wire::request(u, &host, spec.keepalive))
            .collect(),
        t0: Instant::now(),
        warm,
        end: warm + Duration::from_secs_f64(spec.common.duration),
        ticket: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        measured: Mutex::new(Tally::new()),
        all: Mutex::new(Tally::new()),
    });
    sink.emit(base::start_record(
        spec.to_value(),
        began,
        Value::from(server.to_string()),
    ));
    let mut handles = Vec::new();
    for i in 0..threads {
        let p = plan.clone();
        let h = std::thread::Builder::new()
            .name(format!("http-{}", i))
            .stack_size(256 * 1024)
            .spawn(move || worker(&p))
            .map_err(|e| {
                plan.abort.store(true, Relaxed);
                EngineError::io(format!(
                    "cannot start fetch thread {}: lower parallel or raise the thread limit",
                    i
                ))(e)
            })?;
        handles.push(h);
    }
    // CPU over the measured window, as the other kinds report it.
    let sleep_to = |d: Duration| {
        let now = plan.t0.elapsed();
        if d > now {
            std::thread::sleep(d - now);
        }
    };
    sleep_to(plan.warm);
    let probe = CpuProbe::new(&spec.common.cpu_groups);
    let (cpu0, stat0) = (sys::process_cpu(), probe.read());
    sleep_to(plan.end);
    let (cpu1, stat1) = (sys::process_cpu(), probe.read());
    // Fetches already under way end by their own timeout; then give up on them.
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));
    let give_up = Instant::now() + 2 * timeout + Duration::from_secs(2);
    for h in handles {
        while !h.is_finished() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        } else {
            plan.abort.store(true, Relaxed);
        }
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
        "bytes": m.bytes,
        "bytes_per_second": m.bytes as f64 / window,
        "bits_per_second": m.bytes as f64 * 8.0 / window,
        "header_bytes": m.header_bytes,
        "errors": errors_json(&m),
        "latency_us": {
            "connect": summarize(&m.connect),
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
            "bytes": a.bytes, "connections": a.connections, "errors": errors_json(&a),
        }},
    });
    sink.emit(Record::Json(rec));
    Ok(())
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
