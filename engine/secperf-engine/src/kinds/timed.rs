//! The client side of the kinds measured over a timed window against an
//! engine server (stream, rr, crr, latency): sets the test up over the
//! control connection, lets the kind start its traffic, takes snapshots at
//! the warm-up boundary and each interval, finishes, and builds the result.
//! What differs by kind (starting the traffic, an interval's figures, the
//! result's) is the kind's, behind `Timed`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, ClientStart, RunOptions};
use crate::rt::cpu::{self, CpuProbe, CpuReading};
use crate::rt::net::{self, SockOpts};
use crate::rt::shared::{Role, Shared};
use crate::rt::{sys, target};
use crate::spec::Common;
use crate::wire::control::{Counters, CountersReply, LineConn, Request, SetupReply};
use crate::wire::record::{
    Clock, CpuTimes, Flow, Interval, IntervalLatency, Loss, Record, ResultRecord, SideCpu, Sink,
    Start, Totals, FORMAT, VERSION,
};

const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(5);
const FINISH_TIMEOUT: Duration = Duration::from_secs(25);
const STOP_WAIT: Duration = Duration::from_secs(10);

/// A kind measured over a timed window against an engine server.
pub trait Timed {
    /// The test as the driver needs it.
    fn plan(&self) -> Plan<'_>;
    /// Opens the data connections or sockets to the server's data port and
    /// starts the traffic.
    fn start(&self, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart>;
    /// Fills an interval record's figures from two snapshots.
    fn interval(&self, a: &Snap, b: &Snap, sh: &Shared, rec: &mut Interval);
    /// Fills the result's figures from the measured window (the driver has
    /// filled the times, CPU, totals and sockets).
    fn result(&self, w: &Window, sh: &Shared, res: &mut ResultRecord) -> Result<()>;
}

/// What the driver needs of a timed kind's spec.
pub struct Plan<'a> {
    /// The kind's name (the result's `kind`).
    pub kind: &'static str,
    /// The resolved spec, for `setup` and the `start` record.
    pub spec: Value,
    pub common: &'a Common,
    pub warmup: f64,
    pub interval: f64,
    /// The client's data socket options (for the `socket` the kernel grants).
    pub sock: SockOpts,
    /// A fixed transfer (stream `bytes`): its bytes and whether the client
    /// is the sender. The window runs from before the connection opens to
    /// its last byte.
    pub transfer: Option<(u64, bool)>,
    /// Intervals need the server's counters (it is a receiver).
    pub server_intervals: bool,
}

/// Both sides' counters (and our CPU) at one moment of the test.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snap {
    /// Seconds since the traffic started (client clock).
    pub at: f64,
    pub local: Counters,
    pub server: Option<Counters>,
    pub cpu: CpuTimes,
}

/// The measured window and the test's final counters, for `Timed::result`.
pub struct Window {
    pub warm: Snap,
    pub end: Snap,
    /// The client's counters once its threads have ended.
    pub local_final: Counters,
    /// The server's counters at the warm-up snapshot.
    pub server_warm: Counters,
    /// The server's `finish` reply (its final counters, its own report).
    pub fin: CountersReply,
}

impl Window {
    /// The server's final counters.
    pub fn server_final(&self) -> Counters {
        self.fin.counters
    }

    /// Retransmits of the sending TCP sockets on both sides over the window.
    pub fn retransmits(&self) -> u64 {
        self.local_final
            .retransmits
            .saturating_sub(self.warm.local.retransmits)
            + self
                .fin
                .counters
                .retransmits
                .saturating_sub(self.server_warm.retransmits)
    }

    /// The window's length on the client's clock.
    pub fn seconds(&self) -> f64 {
        (self.end.at - self.warm.at).max(1e-9)
    }
}

struct Run<'a> {
    conn: LineConn,
    shared: Arc<Shared>,
    began: Instant,
    plan: Plan<'a>,
}

impl Run<'_> {
    fn snap(&mut self, t0: Instant, with_server: bool) -> Result<Snap> {
        let local = self.shared.counters();
        let server = if with_server {
            let r: CountersReply = self.conn.call(&Request::Snapshot, SNAPSHOT_TIMEOUT)?;
            Some(r.counters)
        } else {
            None
        };
        Ok(Snap {
            at: t0.elapsed().as_secs_f64(),
            local,
            server,
            cpu: sys::process_cpu(),
        })
    }

    fn t(&self) -> f64 {
        self.began.elapsed().as_secs_f64()
    }
}

/// Seconds from nanoseconds.
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Sleeps until `when`, waking to fail fast if a data thread failed.
fn sleep_until(when: Instant, shared: &Shared) -> Result<()> {
    loop {
        if let Some(e) = shared.take_error() {
            return Err(e);
        }
        let now = Instant::now();
        if now >= when {
            return Ok(());
        }
        std::thread::sleep((when - now).min(Duration::from_millis(50)));
    }
}

/// Runs one timed test of `kind`; every record goes to `sink` (the caller
/// writes the `error` record if this returns Err).
pub fn run<K: Timed>(kind: &K, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
    let plan = kind.plan();
    target::check("server", plan.common.server.ip(), opts.allow_any_target)?;
    let (conn, setup) = base::setup(plan.common.server, plan.spec.clone())?;
    let data = SocketAddr::new(plan.common.server.ip(), setup.data_port);
    let shared = Shared::new();
    let mut run = Run {
        conn,
        shared: shared.clone(),
        began: opts.began,
        plan,
    };
    let r = drive(kind, &mut run, data, setup, sink);
    if r.is_err() {
        shared.abort.store(true, Relaxed);
        shared.stop.store(true, Relaxed);
    }
    r
}

fn drive<K: Timed>(
    kind: &K,
    run: &mut Run<'_>,
    data: SocketAddr,
    setup: SetupReply,
    sink: &mut dyn Sink,
) -> Result<()> {
    let shared = run.shared.clone();
    // A fixed transfer is timed from before its connection opens: both sides'
    // counters and the CPU are read first, and everything after counts.
    let probe = CpuProbe::new(&run.plan.common.cpu_groups);
    let before = match run.plan.transfer {
        Some(_) => {
            shared.measuring.store(true, Relaxed);
            Some((run.snap(Instant::now(), true)?, probe.read()?))
        }
        None => None,
    };
    let started = kind.start(data, &shared)?;
    let t0 = Instant::now();
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let socket = net::probe_granted(
        run.plan.common.server,
        run.plan.common.protocol,
        &run.plan.sock,
    );
    sink.emit(Record::Start(Box::new(Start {
        t: run.t(),
        format: FORMAT,
        engine: "secperf-engine",
        version: VERSION,
        spec: run.plan.spec.clone(),
        clock: Clock {
            realtime_ns,
            monotonic_ns: sys::monotonic_ns(),
        },
        local: started.local.map(|a| a.to_string()),
        data: data.to_string(),
        socket,
        server_socket: setup.socket,
        host: cpu::host(),
    })));

    let (warm, warm_cpu, end, end_cpu) = match (before, run.plan.transfer) {
        (Some(before), Some(transfer)) => {
            transfer_window(kind, run, t0, before, transfer, &probe, sink)?
        }
        _ => timed_window(kind, run, t0, &probe, sink)?,
    };
    let (machine, host_cpu) = probe.window(&warm_cpu, &end_cpu);

    // Stop: senders finish their message and shut down; loops drain.
    shared.stop.store(true, Relaxed);
    if !shared.wait_role(Role::Active, Instant::now() + STOP_WAIT) {
        shared.abort.store(true, Relaxed);
    }
    let fin: CountersReply = run.conn.call(&Request::Finish, FINISH_TIMEOUT)?;
    shared.set_drain();
    shared.wait_all(Instant::now() + STOP_WAIT);
    let local_final = shared.counters();
    if let Some(e) = shared.take_error() {
        return Err(e);
    }
    if let Some(msg) = &fin.error {
        return Err(EngineError::Server {
            field: None,
            message: format!("the server's side of the test failed: {}", msg),
        });
    }
    let server_warm = warm.server.unwrap_or_default();
    let server_final = fin.counters;

    let mut res = ResultRecord {
        t: 0.0,
        kind: run.plan.kind,
        protocol: run.plan.common.protocol.name(),
        duration_s: 0.0,
        warmup_s: run.plan.warmup,
        bytes: 0,
        bits_per_second: 0.0,
        messages: 0,
        sender: Flow::default(),
        receiver: Flow::default(),
        loss: None,
        retransmits: None,
        transactions: 0,
        transactions_per_second: 0.0,
        latency_us: shared.measured_latency(),
        cpu: SideCpu {
            // Both processes over the measured window, like host_cpu.
            client: end.cpu.minus(warm.cpu),
            server: end
                .server
                .unwrap_or(server_final)
                .cpu()
                .minus(server_warm.cpu()),
        },
        machine_cpu: machine,
        host_cpu,
        window_bytes: None,
        totals: Totals {
            client: local_final.totals(),
            server: server_final.totals(),
        },
        close: None,
        socket,
        server_socket: setup.socket,
        directions: None,
        transfer: None,
    };
    let w = Window {
        warm,
        end,
        local_final,
        server_warm,
        fin,
    };
    kind.result(&w, &shared, &mut res)?;
    res.t = run.t();
    sink.emit(Record::Result(Box::new(res)));
    Ok(())
}

/// The two ends of the measured window: both sides' counters and the CPU.
type Edges = (Snap, CpuReading, Snap, CpuReading);

/// A timed test: snapshots at the warm-up boundary, every interval, and the
/// end of the measured window.
fn timed_window<K: Timed>(
    kind: &K,
    run: &mut Run<'_>,
    t0: Instant,
    probe: &CpuProbe,
    sink: &mut dyn Sink,
) -> Result<Edges> {
    let shared = run.shared.clone();
    let (warmup, duration, every) = (run.plan.warmup, run.plan.common.duration, run.plan.interval);
    // Stream intervals need the receiver's bytes, which the server has
    // unless the client is the only receiver.
    let interval_needs_server = run.plan.server_intervals;
    let warm_at = Duration::from_secs_f64(warmup);
    let end_at = warm_at + Duration::from_secs_f64(duration);
    let events = schedule(warmup, duration, every);

    // CPU (each host's cgroup and the machine) is read at the same two
    // instants as the counters that the rates come from.
    let mut prev = run.snap(t0, interval_needs_server)?;
    let mut warm: Option<(Snap, CpuReading)> = None;
    if warmup == 0.0 {
        shared.measuring.store(true, Relaxed);
        let snap = run.snap(t0, true)?;
        warm = Some((snap, probe.read()?));
    }
    let mut end = prev;
    let mut end_cpu: Option<CpuReading> = None;
    for ev in events {
        sleep_until(t0 + Duration::from_secs_f64(ev), &shared)?;
        let is_warm = warm.is_none() && t0.elapsed() >= warm_at;
        let is_end = ev >= end_at.as_secs_f64() - 1e-9;
        if is_end {
            shared.measuring.store(false, Relaxed);
        }
        let snap = run.snap(t0, interval_needs_server || is_warm || is_end)?;
        if is_end {
            end_cpu = Some(probe.read()?);
        }
        if is_warm {
            shared.measuring.store(true, Relaxed);
            warm = Some((snap, probe.read()?));
        }
        if every > 0.0 {
            let rec = interval(kind, &shared, &prev, &snap, run.t(), ev <= warmup + 1e-9);
            sink.emit(Record::Interval(rec));
        }
        prev = snap;
        if is_end {
            end = snap;
        }
    }
    let (warm, warm_cpu) =
        warm.ok_or_else(|| EngineError::Internal("no warm-up snapshot: report this bug".into()))?;
    let end_cpu = end_cpu.ok_or_else(|| {
        EngineError::Internal("no end-of-window CPU reading: report this bug".into())
    })?;
    Ok((warm, warm_cpu, end, end_cpu))
}

/// A fixed transfer: the window runs from `before` (read before the
/// connection opened) until the transfer is done: the client's sender has had
/// every byte acknowledged, or its receiver has read to EOF. Past `duration`
/// (the time limit) it is an error, never a partial figure.
fn transfer_window<K: Timed>(
    kind: &K,
    run: &mut Run<'_>,
    t0: Instant,
    before: (Snap, CpuReading),
    (bytes, sends): (u64, bool),
    probe: &CpuProbe,
    sink: &mut dyn Sink,
) -> Result<Edges> {
    let shared = run.shared.clone();
    let (duration, every_s) = (run.plan.common.duration, run.plan.interval);
    let role = if sends { Role::Active } else { Role::Passive };
    let limit = t0 + Duration::from_secs_f64(duration);
    let every = Duration::from_secs_f64(every_s);
    let mut next = (every_s > 0.0).then(|| t0 + every);
    let mut prev = before.0;
    loop {
        if let Some(e) = shared.take_error() {
            return Err(e);
        }
        let mut until = (Instant::now() + Duration::from_millis(50)).min(limit);
        if let Some(t) = next {
            until = until.min(t);
        }
        if shared.wait_role(role, until) {
            break;
        }
        if next.is_some_and(|t| Instant::now() >= t) {
            let snap = run.snap(t0, sends)?;
            let rec = interval(kind, &shared, &prev, &snap, run.t(), false);
            sink.emit(Record::Interval(rec));
            prev = snap;
            next = next.map(|t| t + every);
        }
        if Instant::now() >= limit {
            let c = shared.counters();
            let moved = if sends {
                c.bytes_sent
            } else {
                c.bytes_received
            };
            return Err(EngineError::Measurement(format!(
                "the fixed transfer of {} bytes did not finish within its time limit (duration {} s): {} bytes had been {}; give a longer duration or fewer bytes",
                bytes,
                duration,
                moved,
                if sends { "sent" } else { "received" }
            )));
        }
    }
    shared.measuring.store(false, Relaxed);
    // The server's counters come from its finish reply: it may still be
    // reading acknowledged bytes from its socket buffer now.
    let end = run.snap(t0, false)?;
    let end_cpu = probe.read()?;
    Ok((before.0, before.1, end, end_cpu))
}

/// Snapshot times (seconds after the traffic starts): every `interval`
/// from the start, one at the warm-up boundary, every `interval` after it,
/// and the end of the measured window.
pub fn schedule(warmup: f64, duration: f64, interval: f64) -> Vec<f64> {
    let end = warmup + duration;
    let mut v = Vec::new();
    if interval > 0.0 {
        let mut k = 1.0;
        while k * interval < warmup - 1e-9 {
            v.push(k * interval);
            k += 1.0;
        }
    }
    if warmup > 0.0 {
        v.push(warmup);
    }
    if interval > 0.0 {
        let mut k = 1.0;
        while warmup + k * interval < end - 1e-9 {
            v.push(warmup + k * interval);
            k += 1.0;
        }
    }
    v.push(end);
    v
}

fn interval<K: Timed>(
    kind: &K,
    shared: &Shared,
    a: &Snap,
    b: &Snap,
    t: f64,
    warmup: bool,
) -> Interval {
    let span = (b.at - a.at).max(1e-9);
    let mut rec = Interval {
        t,
        t_start: a.at,
        t_end: b.at,
        warmup,
        bytes: 0,
        bits_per_second: 0.0,
        messages: 0,
        transactions: 0,
        rate: 0.0,
        latency_us: None,
    };
    kind.interval(a, b, shared, &mut rec);
    rec.bits_per_second = rec.bytes as f64 * 8.0 / span;
    rec
}

/// An interval of a transaction kind (rr, crr): the client's transactions,
/// bytes sent and received, and round trips.
pub fn transactions_interval(a: &Snap, b: &Snap, shared: &Shared, rec: &mut Interval) {
    let span = (b.at - a.at).max(1e-9);
    rec.transactions = b.local.transactions.saturating_sub(a.local.transactions);
    rec.rate = rec.transactions as f64 / span;
    rec.bytes = b.local.bytes.saturating_sub(a.local.bytes);
    rec.messages = b.local.messages.saturating_sub(a.local.messages);
    let l = shared.take_interval_latency();
    rec.latency_us = Some(IntervalLatency {
        mean: l.mean,
        p50: l.p50,
        p99: l.p99,
    });
}

/// The result of a transaction kind (rr, crr): the client's transactions
/// over the window; `loss` when failures are counted instead of fatal.
pub fn transactions_result(w: &Window, res: &mut ResultRecord, counts_failures: bool) {
    let window = w.seconds();
    let d = |f: fn(&Counters) -> u64| f(&w.end.local).saturating_sub(f(&w.warm.local));
    res.duration_s = window;
    res.transactions = d(|c| c.transactions);
    res.transactions_per_second = res.transactions as f64 / window;
    res.bytes = d(|c| c.bytes);
    res.bits_per_second = res.bytes as f64 * 8.0 / window;
    res.messages = d(|c| c.messages);
    res.sender = Flow {
        bytes: d(|c| c.bytes_sent),
        messages: d(|c| c.messages_sent),
    };
    res.receiver = Flow {
        bytes: d(|c| c.bytes_received),
        messages: d(|c| c.messages_received),
    };
    if counts_failures {
        let lost = d(|c| c.lost);
        res.loss = Some(Loss::of(lost, lost + res.transactions));
    }
}

#[cfg(test)]
mod tests {
    use super::schedule;

    #[test]
    fn schedule_has_warm_boundary_and_end() {
        assert_eq!(schedule(1.0, 3.0, 1.0), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(schedule(1.5, 1.0, 1.0), vec![1.0, 1.5, 2.5]);
        assert_eq!(schedule(0.0, 2.0, 0.0), vec![2.0]);
        assert_eq!(schedule(0.5, 0.3, 0.0), vec![0.5, 0.8]);
    }
}
