//! Kind `connections` (RFC 3511 §5.2 and §5.4): open up to `connections`
//! TCP connections to the engine server at `rate` a second, hold them for
//! `hold` seconds, validate each with a one-byte request/response, then
//! close them all (a FIN each, at `close_rate` or as fast as possible).
//!
//! Each side runs an epoll loop (rt::evloop's `Poller`) per process, so a
//! connection costs a descriptor and a few bytes of the engine's memory
//! (`memory` in the result says how many), not a thread. The client opens with
//! up to 512 connects under way a process, its sources spread over `sources`
//! (each address gives the kernel's whole port range again, to each
//! destination), and stops when every asked connection is open, when connects
//! keep failing (100 a process: the limit of the path is found), or at a
//! bound of its own (`duration`, its descriptors, its source ports, memory):
//! then the result says which (`stopped_by`), and the count is a lower bound.
//!
//! A process holds at most its descriptor limit's worth of connections
//! (`per_process`); beyond it both sides share the connections among helper
//! processes (the shard module): the server's share its data listener, the
//! client's open, validate and close their shares when told.
//!
//! The server reports how many it accepted and validated, and when each FIN
//! arrived: the teardown rate is the server's (FINs processed per second).
//! With `close = "fin"` (the default) the server answers each FIN with its own
//! (an orderly close: the client keeps the TIME_WAIT, and the testbed's client
//! port range and `tcp_tw_reuse` let the next round reuse the ports); with
//! `close = "reset"` it answers with an RST (SO_LINGER 0), so neither side
//! keeps TIME_WAIT.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, Extras, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::guard::HelperSlots;
use crate::rt::net::{self, SockOpts};
use crate::rt::shared::{Role, Shared};
use crate::rt::{sys, target};
use crate::spec::{check_helpers, ConnectionsSpec, KindSpec};
use crate::wire::control::{CountersReply, LineConn, Request};
use crate::wire::http::Fail;
use crate::wire::record::{Record, Sink};

mod client;
mod server;
mod shard;

use client::{Closed, Opened, Stop, Validated};
use server::ServerState;
use shard::Helper;

/// Descriptors beyond the connections (listeners, control, epoll, stdio).
const SPARE_FDS: u64 = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connections one process may hold: `asked`, else its descriptor limit less a margin.
fn per_process(asked: Option<u64>, nofile: u64) -> u64 {
    let own = nofile.saturating_sub(SPARE_FDS).max(1);
    asked.map_or(own, |a| a.min(own))
}

// ------------------------------------------------------------------ server

/// The server side's state: its own process's, and each helper's last report.
#[derive(Default)]
struct Shown {
    mine: ServerState,
    helpers: Vec<ServerState>,
}

fn serve(
    spec: &ConnectionsSpec,
    shown: &Arc<Mutex<Shown>>,
    helpers: &Mutex<Vec<Helper>>,
    slots: &Mutex<HelperSlots>,
    env: &ServerEnv,
    sh: &Arc<Shared>,
) -> Result<ServerSetup> {
    let nofile = sys::raise_nofile_to(spec.connections + SPARE_FDS);
    let cap = per_process(spec.per_process, nofile);
    // The server's own clamp: with its descriptor limit, at most MAX_HELPERS
    // helpers for the test, and MAX_SERVER_HELPERS for all its tests.
    check_helpers(spec, Some(cap))?;
    let procs = shard::processes(spec.connections, cap);
    *lock(slots) = HelperSlots::take(usize::try_from(procs - 1).unwrap_or(usize::MAX))?;
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
    // Helpers share the listener, each holding up to its share of the
    // connections (so the processes together hold no more than asked), each
    // serving the test's peers only.
    let peers = env.admit.peers().clone();
    let mut started = Vec::new();
    for i in 1..procs {
        let job = json!({
            "role": "hold",
            "cap": shard::share(spec.connections, procs, i),
            "peers": peers.addresses(),
            "close": spec.close,
            "nofile_want": cap + SPARE_FDS,
        });
        started.push(Helper::start(&job, Some(listener.as_raw_fd()))?);
    }
    let st = ServerState {
        nofile,
        processes: 1,
        ..ServerState::default()
    };
    *lock(shown) = Shown {
        mine: st,
        helpers: vec![ServerState::default(); started.len()],
    };
    *lock(helpers) = started;
    let close = spec.close;
    let shown = shown.clone();
    let cap = usize::try_from(shard::share(spec.connections, procs, 0)).unwrap_or(usize::MAX);
    sh.spawn("conn-hold", Role::Active, move |sh, _st| {
        let stop = || sh.stopped();
        let mut report = |s: &ServerState| lock(&shown).mine = *s;
        server::hold_loop(&listener, &stop, &peers, cap, close, st, &mut report)
    })?;
    Ok(ServerSetup { data_port, socket })
}

// ------------------------------------------------------------------ client

fn server_state(conn: &mut LineConn) -> Result<ServerState> {
    let r: CountersReply = conn.call(&Request::Snapshot, Duration::from_secs(5))?;
    Ok(r.extra
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

fn fails_json(errors: &[u64]) -> Value {
    let mut m = Map::new();
    for f in Fail::ALL {
        let n = errors.get(f.index()).copied().unwrap_or(0);
        if n > 0 {
            m.insert(f.name().into(), json!(n));
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

fn add(into: &mut [u64], from: &[u64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// The opening phases of every process as one.
fn merge_opened(all: &[Opened]) -> Opened {
    let failed_any = all.iter().any(|o| o.first_failure_at.is_some());
    let mut t = Opened {
        established: 0,
        failed: 0,
        abandoned: 0,
        errors: vec![0; Fail::ALL.len()],
        // Connections open across the processes when each first failed.
        first_failure_at: failed_any.then(|| {
            all.iter()
                .map(|o| o.first_failure_at.unwrap_or(o.established))
                .sum()
        }),
        // The most telling reason: a limit found, else the client's own bound.
        stop: all.iter().map(|o| o.stop).max().unwrap_or(Stop::Target),
        seconds: 0.0,
        rss_before: Some(0),
        rss_held: Some(0),
        nofile: all.iter().map(|o| o.nofile).min().unwrap_or(0),
    };
    for o in all {
        t.established += o.established;
        t.failed += o.failed;
        t.abandoned += o.abandoned;
        add(&mut t.errors, &o.errors);
        t.seconds = t.seconds.max(o.seconds);
        t.rss_before = t.rss_before.zip(o.rss_before).map(|(a, b)| a + b);
        t.rss_held = t.rss_held.zip(o.rss_held).map(|(a, b)| a + b);
    }
    t
}

/// A helper's report of one phase, `key` naming it.
fn phase<T: for<'de> Deserialize<'de>>(h: &mut Helper, key: &str, within: Duration) -> Result<T> {
    let v = h.recv(within)?;
    v.get(key)
        .cloned()
        .and_then(|x| serde_json::from_value(x).ok())
        .ok_or_else(|| {
            EngineError::Internal(format!(
                "a helper reported {} instead of {}: report this bug",
                v, key
            ))
        })
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
    let cap = per_process(spec.per_process, nofile);
    // At most MAX_HELPERS helper processes on this side too.
    check_helpers(spec, Some(cap))?;
    let procs = shard::processes(spec.connections, cap);
    let (mut conn, setup) = base::setup(server, spec.to_value())?;
    let data = SocketAddr::new(server.ip(), setup.data_port);
    sink.emit(base::start_record(
        spec.to_value(),
        began,
        Value::from(data.to_string()),
    ));
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(5.0));
    // Share i's k-th connection is the test's (offset_i + k)-th: the sources
    // go round-robin over the whole test.
    let mut offset = 0usize;
    let mut jobs = Vec::new();
    for i in 0..procs {
        let n = shard::share(spec.connections, procs, i);
        jobs.push(client::OpenJob {
            data,
            target: n,
            sources: spec.sources.clone(),
            offset,
            rate: spec.rate.map(|r| r / procs as f64),
            timeout: timeout.as_secs_f64(),
            duration: spec.common.duration,
            nodelay: spec.nodelay,
            buffer: spec.socket_buffer,
            nofile_want: cap + SPARE_FDS,
        });
        offset += usize::try_from(n).unwrap_or(0);
    }
    let mut helpers = Vec::new();
    for job in jobs.iter().skip(1) {
        let mut v = serde_json::to_value(job).unwrap_or(Value::Null);
        v["role"] = json!("open");
        helpers.push(Helper::start(&v, None)?);
    }
    let phase_wait =
        Duration::from_secs_f64(spec.common.duration) + 2 * timeout + Duration::from_secs(60);

    // 1. Open, paced (every process at once).
    let (mut share, mine) = client::open(&jobs[0])?;
    let mut opened = vec![mine];
    for h in helpers.iter_mut() {
        opened.push(phase::<Opened>(h, "opened", phase_wait)?);
    }
    let o = merge_opened(&opened);

    // 2. Hold.
    std::thread::sleep(Duration::from_secs_f64(spec.hold));

    // 3. Validate: ask on every connection, then read every answer.
    let v0 = Instant::now();
    for h in helpers.iter_mut() {
        h.send(r#"{"do":"validate"}"#)?;
    }
    let mut val = vec![share.validate()?];
    for h in helpers.iter_mut() {
        val.push(phase::<Validated>(
            h,
            "validated",
            2 * timeout + Duration::from_secs(60),
        )?);
    }
    let validate_s = v0.elapsed().as_secs_f64();
    let validated: u64 = val.iter().map(|v| v.validated).sum();
    let mut val_errors = vec![0u64; Fail::ALL.len()];
    for v in &val {
        add(&mut val_errors, &v.errors);
    }
    let at_hold = server_state(&mut conn)?;

    // 4. Close, paced: a FIN each on every connection still up; the server
    // counts them as they arrive.
    let fins_before = at_hold.fins;
    let rate = spec.close_rate.map(|r| r / procs as f64);
    let c0 = Instant::now();
    let cmd = json!({"do": "close", "rate": rate}).to_string();
    for h in helpers.iter_mut() {
        h.send(&cmd)?;
    }
    let mut closes: Vec<Closed> = vec![share.close(rate)];
    for h in helpers.iter_mut() {
        closes.push(phase::<Closed>(h, "closed", phase_wait)?);
    }
    let close_s = c0.elapsed().as_secs_f64();
    let closed: u64 = closes.iter().map(|c| c.closed).sum();
    // Wait (with a deadline) until the server has seen every FIN.
    let drain_deadline = Instant::now() + timeout;
    let mut after = server_state(&mut conn)?;
    while after.fins - fins_before < closed && Instant::now() < drain_deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = server_state(&mut conn)?;
    }
    drop(share);
    drop(helpers);
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
    let established = o.established;
    let failed = o.failed;
    let attempted = established + failed;
    let per_conn = match (o.rss_before, o.rss_held) {
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
        "abandoned": o.abandoned,
        "failure_ratio": if attempted > 0 { failed as f64 / attempted as f64 } else { 0.0 },
        "first_failure_at": o.first_failure_at,
        "stopped_by": o.stop.name(),
        "limit_found": o.stop == Stop::Failures,
        "sources": spec.sources.len().max(1),
        "processes": procs,
        "open_errors": fails_json(&o.errors),
        "validate_errors": fails_json(&val_errors),
        "open_s": o.seconds,
        "open_rate": per_s(established, o.seconds),
        "validate_s": validate_s,
        "memory": {
            "client_rss_bytes": o.rss_held,
            "client_bytes_per_connection": per_conn,
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
            "processes": at_hold.processes,
            "refused": at_hold.refused,
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
        "nofile": o.nofile,
    });
    sink.emit(Record::Json(rec));
    Ok(())
}

// ------------------------------------------------------------------ helpers

/// A helper process's job, as its `worker` command gets it.
#[derive(Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Job {
    Hold(server::HoldJob),
    Open(client::OpenJob),
}

/// Runs a helper process of a connections test (the hidden `worker` command).
pub fn worker(job: &str) -> Result<()> {
    let job: Job = serde_json::from_str(job).map_err(|e| EngineError::Spec {
        field: Some("job".into()),
        message: format!(
            "not a helper's job ({}): the `worker` command is started by secperf-engine itself",
            e
        ),
    })?;
    match job {
        Job::Hold(j) => server::hold_worker(j),
        Job::Open(j) => client::open_worker(j),
    }
}

// ------------------------------------------------------------------ the kind

/// Kind `connections`, one test on one side; the server side keeps the
/// state its snapshot replies report, and its helper processes.
pub struct Connections {
    spec: ConnectionsSpec,
    shown: Arc<Mutex<Shown>>,
    helpers: Mutex<Vec<Helper>>,
    /// The server's slots for the helpers, given back with the test.
    slots: Mutex<HelperSlots>,
}

impl Connections {
    pub fn new(spec: ConnectionsSpec) -> Connections {
        Connections {
            spec,
            shown: Arc::new(Mutex::new(Shown::default())),
            helpers: Mutex::new(Vec::new()),
            slots: Mutex::new(HelperSlots::default()),
        }
    }

    fn extras(&self) -> Extras {
        let mut helpers = lock(&self.helpers);
        let mut shown = lock(&self.shown);
        for (i, h) in helpers.iter_mut().enumerate() {
            // The state as it is now (a helper reports within its 50 ms tick);
            // what it last said if it cannot answer.
            if let Some(v) = h.ask(Duration::from_secs(2)).or_else(|| h.latest()) {
                if let (Ok(s), Some(slot)) = (serde_json::from_value(v), shown.helpers.get_mut(i)) {
                    *slot = s;
                }
            }
        }
        let mut mine = shown.mine;
        mine.rss_bytes = sys::rss_bytes().unwrap_or(0);
        let mut all = vec![mine];
        all.extend(shown.helpers.iter().copied());
        Extras {
            extra: Some(json!(ServerState::sum(&all))),
            latency: None,
        }
    }
}

impl Kind for Connections {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        serve(&self.spec, &self.shown, &self.helpers, &self.slots, env, sh)
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
