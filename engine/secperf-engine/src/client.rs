//! `run`: one test against a server. Sets the test up over the control
//! connection, starts the kind's data threads, takes snapshots at the
//! warm-up boundary and each interval, finishes, and builds the result.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::control::{self, CountersReply, LineConn, Request, SetupReply};
use crate::cpu::{self, CpuProbe, CpuReading};
use crate::error::{EngineError, Result};
use crate::kinds;
use crate::net;
use crate::record::{
    Clock, CpuTimes, Flow, Interval, IntervalLatency, Loss, Record, ResultRecord, SideCpu, Sink,
    Start, Totals, Transfer, FORMAT, VERSION,
};
use crate::shared::{Counters, Role, Shared};
use crate::spec::{Kind, Protocol, Spec};
use crate::sys;
use crate::target;

const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(5);
const FINISH_TIMEOUT: Duration = Duration::from_secs(25);
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Both sides' counters (and our CPU) at one moment of the test.
#[derive(Clone, Copy, Debug, Default)]
struct Snap {
    /// Seconds since the traffic started (client clock).
    at: f64,
    local: Counters,
    server: Option<Counters>,
    cpu: CpuTimes,
}

struct Run<'a> {
    spec: &'a Spec,
    conn: LineConn,
    shared: Arc<Shared>,
    began: Instant,
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

fn secs(ns: u64) -> f64 {
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

/// Runs one test; every record goes to `sink` (the caller writes the
/// `error` record if this returns Err). `began` is when the command started.
pub fn run(
    spec: &Spec,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<ResultRecord> {
    if spec.kind == Kind::Flood {
        return Err(EngineError::spec(
            "kind",
            "a flood is sent by secperf_engine::flood::run, not through a server",
        ));
    }
    target::check("server", spec.server.ip(), allow_any_target)?;
    spec.check_local_limits()?;
    let (conn, setup) = control::setup(spec)?;
    let data = SocketAddr::new(spec.server.ip(), setup.data_port);
    let shared = Shared::new();
    let mut run = Run {
        spec,
        conn,
        shared: shared.clone(),
        began,
    };
    let r = drive(&mut run, data, setup, sink);
    if r.is_err() {
        shared.abort.store(true, Relaxed);
        shared.stop.store(true, Relaxed);
    }
    r
}

fn drive(
    run: &mut Run<'_>,
    data: SocketAddr,
    setup: SetupReply,
    sink: &mut dyn Sink,
) -> Result<ResultRecord> {
    let spec = run.spec;
    let shared = run.shared.clone();
    // A fixed transfer is timed from before its connection opens: both sides'
    // counters and the CPU are read first, and everything after counts.
    let probe = CpuProbe::new(&spec.cpu_groups);
    let before = match spec.bytes {
        Some(_) => {
            shared.measuring.store(true, Relaxed);
            Some((run.snap(Instant::now(), true)?, probe.read()?))
        }
        None => None,
    };
    let started = kinds::start(spec, data, &shared)?;
    let t0 = Instant::now();
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let socket = net::probe_granted(spec);
    sink.emit(Record::Start(Box::new(Start {
        t: run.t(),
        format: FORMAT,
        engine: "secperf-engine",
        version: VERSION,
        spec: spec.to_value(),
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

    let (warm, warm_cpu, end, end_cpu) = match before {
        Some(before) => transfer_window(run, t0, before, &probe, sink)?,
        None => timed_window(run, t0, &probe, sink)?,
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
    if let Some(msg) = fin.error {
        return Err(EngineError::Server {
            field: None,
            message: format!("the server's side of the test failed: {}", msg),
        });
    }
    let server_warm = warm.server.unwrap_or_default();
    let server_final = fin.counters;

    let mut res = ResultRecord {
        t: 0.0,
        kind: spec.kind.name(),
        protocol: spec.protocol.name(),
        duration_s: 0.0,
        warmup_s: spec.warmup,
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
        close: (spec.kind == Kind::Crr).then_some(spec.close.name()),
        socket,
        server_socket: setup.socket,
        directions: None,
        transfer: None,
    };
    if spec.protocol == Protocol::Tcp && spec.kind != Kind::Crr {
        res.retransmits = Some(
            local_final
                .retransmits
                .saturating_sub(warm.local.retransmits)
                + server_final
                    .retransmits
                    .saturating_sub(server_warm.retransmits),
        );
    }
    match spec.kind {
        Kind::Stream => {
            // Each receiving side: bytes since the warm-up snapshot over
            // its own time from that snapshot to the last byte.
            let mut sides = Vec::new();
            if spec.direction.client_sends() {
                sides.push((server_warm, server_final, warm.local, local_final));
            }
            if spec.direction.client_receives() {
                sides.push((warm.local, local_final, server_warm, server_final));
            }
            let mut lost = 0u64;
            let mut sent_msgs = 0u64;
            // Received within the CPU window: up to the end snapshot, which has
            // the server's counters whenever the client sends.
            let mut in_window = 0u64;
            if spec.direction.client_sends() {
                let at_end = end.server.unwrap_or(server_final).bytes_received;
                in_window += at_end.saturating_sub(server_warm.bytes_received);
            }
            if spec.direction.client_receives() {
                in_window += end
                    .local
                    .bytes_received
                    .saturating_sub(warm.local.bytes_received);
            }
            res.window_bytes = Some(in_window);
            for (rw, rf, sw, sf) in sides {
                let bytes = rf.bytes_received.saturating_sub(rw.bytes_received);
                let msgs = rf.messages_received.saturating_sub(rw.messages_received);
                let elapsed = if rf.t_last_byte_ns > rw.t_ns {
                    secs(rf.t_last_byte_ns - rw.t_ns)
                } else {
                    spec.duration
                };
                res.bytes += bytes;
                res.messages += msgs;
                res.bits_per_second += bytes as f64 * 8.0 / elapsed;
                res.duration_s = res.duration_s.max(elapsed);
                res.receiver.bytes += bytes;
                res.receiver.messages += msgs;
                let s_msgs = sf.messages_sent.saturating_sub(sw.messages_sent);
                res.sender.bytes += sf.bytes_sent.saturating_sub(sw.bytes_sent);
                res.sender.messages += s_msgs;
                sent_msgs += s_msgs;
                lost += s_msgs.saturating_sub(msgs);
            }
            if let Some(total) = spec.bytes {
                if res.receiver.bytes != total {
                    return Err(EngineError::Measurement(format!(
                        "the fixed transfer was cut short: {} of {} bytes arrived (check that nothing in the path resets the connection)",
                        res.receiver.bytes, total
                    )));
                }
                res.transfer = Some(Transfer {
                    bytes: total,
                    seconds: res.duration_s,
                    kib_per_second: total as f64 / 1024.0 / res.duration_s.max(1e-9),
                });
            }
            if spec.protocol == Protocol::Udp {
                if sent_msgs == 0 {
                    return Err(EngineError::Measurement(format!(
                        "the UDP stream moved no traffic: no datagram of {} bytes was sent in the measured window (the kernel refused every send; a message larger than the path MTU needs a socket_buffer of about twice its size)",
                        spec.message_size
                    )));
                }
                res.loss = Some(Loss::of(lost, sent_msgs));
            }
        }
        Kind::Latency => {
            let window = (end.at - warm.at).max(1e-9);
            let server = fin.latency.clone().ok_or_else(|| {
                EngineError::Measurement(
                    "the server's finish reply has no latency report, so neither the c2s delays nor the s2c counts exist: run the same engine version on both sides".into(),
                )
            })?;
            let d = crate::latency::directions(spec, &shared, &server);
            crate::latency::check(&d)?;
            let c = &d.combined;
            let payload =
                crate::latency::payload_len(spec.frame_size, spec.server.is_ipv6()) as u64;
            res.duration_s = window;
            res.messages = c.received;
            res.bytes = c.received * payload;
            res.bits_per_second = res.bytes as f64 * 8.0 / window;
            res.sender = Flow {
                bytes: c.sent * payload,
                messages: c.sent,
            };
            res.receiver = Flow {
                bytes: res.bytes,
                messages: c.received,
            };
            res.loss = Some(Loss {
                lost: c.lost,
                ratio: c.loss_ratio,
            });
            res.latency_us = c.delay_us.clone();
            res.directions = Some(d);
        }
        // http and connections never come here (standalone::run_spec).
        // Floods never reach here: `run` refuses them first.
        Kind::Flood => {}
        Kind::Rr | Kind::Crr | Kind::Http | Kind::Connections => {
            let window = (end.at - warm.at).max(1e-9);
            let d = |f: fn(&Counters) -> u64| f(&end.local).saturating_sub(f(&warm.local));
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
            // crr with a rate or timeout counts failed connections instead of failing.
            let counts_failures =
                spec.kind == Kind::Crr && (spec.rate.is_some() || spec.timeout.is_some());
            if spec.protocol == Protocol::Udp || counts_failures {
                let lost = d(|c| c.lost);
                res.loss = Some(Loss::of(lost, lost + res.transactions));
            }
        }
    }
    res.t = run.t();
    sink.emit(Record::Result(Box::new(res.clone())));
    Ok(res)
}

/// The two ends of the measured window: both sides' counters and the CPU.
type Window = (Snap, CpuReading, Snap, CpuReading);

/// A timed test: snapshots at the warm-up boundary, every interval, and the
/// end of the measured window.
fn timed_window(
    run: &mut Run<'_>,
    t0: Instant,
    probe: &CpuProbe,
    sink: &mut dyn Sink,
) -> Result<Window> {
    let spec = run.spec;
    let shared = run.shared.clone();
    // Stream intervals need the receiver's bytes, which the server has
    // unless the client is the only receiver.
    let interval_needs_server = spec.kind == Kind::Stream && spec.direction.client_sends();
    let warm_at = Duration::from_secs_f64(spec.warmup);
    let end_at = warm_at + Duration::from_secs_f64(spec.duration);
    let events = schedule(spec.warmup, spec.duration, spec.interval);

    // CPU (each host's cgroup and the machine) is read at the same two
    // instants as the counters that the rates come from.
    let mut prev = run.snap(t0, interval_needs_server)?;
    let mut warm: Option<(Snap, CpuReading)> = None;
    if spec.warmup == 0.0 {
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
        if spec.interval > 0.0 {
            sink.emit(Record::Interval(interval(
                spec,
                &shared,
                &prev,
                &snap,
                run.t(),
                ev <= spec.warmup + 1e-9,
            )));
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

/// A fixed transfer (`bytes`): the window runs from `before` (read before the
/// connection opened) until the transfer is done: the client's sender has had
/// every byte acknowledged, or its receiver has read to EOF. Past `duration`
/// (the time limit) it is an error, never a partial figure.
fn transfer_window(
    run: &mut Run<'_>,
    t0: Instant,
    before: (Snap, CpuReading),
    probe: &CpuProbe,
    sink: &mut dyn Sink,
) -> Result<Window> {
    let spec = run.spec;
    let shared = run.shared.clone();
    let sends = spec.direction.client_sends();
    let role = if sends { Role::Active } else { Role::Passive };
    let limit = t0 + Duration::from_secs_f64(spec.duration);
    let every = Duration::from_secs_f64(spec.interval);
    let mut next = (spec.interval > 0.0).then(|| t0 + every);
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
            sink.emit(Record::Interval(interval(
                spec,
                &shared,
                &prev,
                &snap,
                run.t(),
                false,
            )));
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
                spec.bytes.unwrap_or(0),
                spec.duration,
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

fn interval(spec: &Spec, shared: &Shared, a: &Snap, b: &Snap, t: f64, warmup: bool) -> Interval {
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
    match spec.kind {
        Kind::Stream => {
            let mut add = |x: &Counters, y: &Counters| {
                rec.bytes += y.bytes_received.saturating_sub(x.bytes_received);
                rec.messages += y.messages_received.saturating_sub(x.messages_received);
            };
            if spec.direction.client_sends() {
                if let (Some(x), Some(y)) = (&a.server, &b.server) {
                    add(x, y);
                }
            }
            if spec.direction.client_receives() {
                add(&a.local, &b.local);
            }
        }
        Kind::Latency => {
            // Probes this side received (s2c) and their delays.
            rec.messages = b
                .local
                .messages_received
                .saturating_sub(a.local.messages_received);
            rec.rate = rec.messages as f64 / span;
            rec.bytes = b
                .local
                .bytes_received
                .saturating_sub(a.local.bytes_received);
            let l = shared.take_interval_latency();
            rec.latency_us = Some(IntervalLatency {
                mean: l.mean,
                p50: l.p50,
                p99: l.p99,
            });
        }
        // http and connections never come here (standalone::run_spec).
        // Floods never reach here: `run` refuses them first.
        Kind::Flood => {}
        Kind::Rr | Kind::Crr | Kind::Http | Kind::Connections => {
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
    }
    rec.bits_per_second = rec.bytes as f64 * 8.0 / span;
    rec
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
