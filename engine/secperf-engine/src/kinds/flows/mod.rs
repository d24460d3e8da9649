//! Kind `flows`: a rule-set review's traffic, a mix of live flows, each a
//! real TCP connection (handshake, request, response, the server's FIN
//! first) or UDP exchange (a datagram, its answer) from the flow's own
//! source to its own destination, so that stateful rules see every flow
//! as production traffic.
//!
//! Both sides are one `run` each, no control connection (the flows of one
//! server may come from several client hosts at once): `role = "server"`
//! binds every (protocol, address, port) its flows declare, writes its
//! `start` record, and answers only the sources in `allow` until SIGINT or
//! SIGTERM (or its time bound), then writes its `result`. `role = "client"`
//! makes the attempts (the client module) and writes `start`, `interval`s
//! and `result`, with a figure per flow.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::cpu::CpuProbe;
use crate::rt::shared::Shared;
use crate::rt::sys;
use crate::spec::{FlowsSpec, KindSpec, Resolved, Role};
use crate::wire::record::{Record, Sink};

mod client;
mod icmp;
mod sched;
mod server;

use client::{Fail, Plan, Tally};

fn fails_json(t: &Tally) -> Value {
    let mut m = Map::new();
    for f in Fail::ALL {
        m.insert(f.name().into(), json!(t.fails[f as usize]));
    }
    Value::Object(m)
}

fn summary(h: &Option<hdrhistogram::Histogram<u64>>) -> Value {
    match h {
        Some(h) if !h.is_empty() => json!({
            "count": h.len(),
            "mean": h.mean(),
            "p50": h.value_at_quantile(0.5),
            "p90": h.value_at_quantile(0.9),
            "p99": h.value_at_quantile(0.99),
            "max": h.max(),
        }),
        _ => Value::Null,
    }
}

fn merge(into: &mut Tally, t: &Tally) {
    into.attempts += t.attempts;
    into.ok += t.ok;
    into.bytes += t.bytes;
    into.late += t.late;
    for (a, b) in into.fails.iter_mut().zip(t.fails) {
        *a += b;
    }
    for (mine, theirs) in [
        (&mut into.total_us, &t.total_us),
        (&mut into.connect_us, &t.connect_us),
    ] {
        if let Some(h) = theirs {
            match mine {
                Some(m) => {
                    let _ = m.add(h);
                }
                None => *mine = Some(h.clone()),
            }
        }
    }
}

/// The interval boundaries: every `interval` through the warm-up, its end,
/// then every `interval` through the measured window, its end.
fn boundaries(warmup: f64, duration: f64, interval: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let end = warmup + duration;
    if interval > 0.0 {
        let mut t = interval;
        while t < warmup - 1e-9 {
            out.push(t);
            t += interval;
        }
    }
    if warmup > 0.0 {
        out.push(warmup);
    }
    if interval > 0.0 {
        let mut t = warmup + interval;
        while t < end - 1e-9 {
            out.push(t);
            t += interval;
        }
    }
    out.push(end);
    out
}

fn run_client(spec: &FlowsSpec, began: Instant, sink: &mut dyn Sink) -> Result<()> {
    let data: Vec<String> = spec
        .flows
        .iter()
        .filter_map(|f| {
            let dst = f.dst?;
            Some(match f.dport {
                Some(p) => format!(
                    "{} {}",
                    f.protocol.name(),
                    std::net::SocketAddr::new(dst, p)
                ),
                None => format!("{} {}", f.protocol.name(), dst),
            })
        })
        .collect();
    let plan = Arc::new(Plan::new(spec.clone()));
    sink.emit(base::start_record(spec.to_value(), began, json!(data)));
    let mut handles = Vec::new();
    let spawn = |name: String, f: Box<dyn FnOnce() -> Result<()> + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(EngineError::io(
                "cannot start a flows thread: lower parallel or raise the thread limit (ulimit -u)",
            ))
    };
    let rated: Vec<usize> = (0..spec.flows.len())
        .filter(|&i| spec.flows[i].rate.is_some())
        .collect();
    let mut started = Ok(());
    for i in 0..spec.parallel {
        let p = plan.clone();
        match spawn(
            format!("flows-{}", i),
            Box::new(move || client::weighted_loop(&p)),
        ) {
            Ok(h) => handles.push(h),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    for (j, &i) in rated.iter().enumerate() {
        if started.is_err() {
            break;
        }
        let p = plan.clone();
        let phase = j as f64 / rated.len() as f64;
        match spawn(
            format!("flows-probe-{}", j),
            Box::new(move || client::rated_loop(&p, i, phase)),
        ) {
            Ok(h) => handles.push(h),
            Err(e) => started = Err(e),
        }
    }
    if let Err(e) = started {
        plan.abort.store(true, Relaxed);
        return Err(e);
    }
    let probe = CpuProbe::new(&spec.cpu_groups);
    let mut at_warm = (spec.warmup <= 0.0).then(|| (sys::process_cpu(), probe.read()));
    let live = |p: &Plan| {
        [
            p.live.attempts.load(Relaxed),
            p.live.ok.load(Relaxed),
            p.live.failed.load(Relaxed),
            p.live.bytes.load(Relaxed),
        ]
    };
    let (mut last, mut last_t) = ([0u64; 4], 0.0);
    for b in boundaries(spec.warmup, spec.duration, spec.interval) {
        let at = Duration::from_secs_f64(b);
        while plan.t0.elapsed() < at {
            std::thread::sleep((at - plan.t0.elapsed()).min(Duration::from_millis(50)));
        }
        let now = live(&plan);
        if at_warm.is_none() && b >= spec.warmup - 1e-9 {
            at_warm = Some((sys::process_cpu(), probe.read()));
        }
        if spec.interval > 0.0 {
            let span = (b - last_t).max(1e-9);
            let d = |k: usize| now[k].saturating_sub(last[k]);
            sink.emit(Record::Json(json!({
                "type": "interval",
                "t": began.elapsed().as_secs_f64(),
                "kind": "flows",
                "t_start": last_t,
                "t_end": b,
                "warmup": b <= spec.warmup + 1e-9 && spec.warmup > 0.0,
                "attempts": d(0),
                "transactions": d(1),
                "rate": d(1) as f64 / span,
                "failed": d(2),
                "bytes": d(3),
                "bits_per_second": d(3) as f64 * 8.0 / span,
            })));
        }
        (last, last_t) = (now, b);
    }
    let Some((cpu0, stat0)) = at_warm else {
        return Err(EngineError::Internal(
            "the warm-up boundary was not reached: report this bug".into(),
        ));
    };
    let (cpu1, stat1) = (sys::process_cpu(), probe.read());
    // Attempts under way end by their own deadline; then give up on them.
    let give_up = Instant::now() + Duration::from_secs_f64(2.0 * spec.timeout + 2.0);
    let mut failure = None;
    for h in handles {
        while !h.is_finished() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !h.is_finished() {
            plan.abort.store(true, Relaxed);
            failure = failure.or(Some(EngineError::Internal(
                "a flows loop did not end after its attempt's deadline: report this bug".into(),
            )));
            continue;
        }
        match h.join() {
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Ok(Ok(())) => {}
            Err(_) => {
                failure = failure.or(Some(EngineError::Internal(
                    "a flows thread panicked: report this bug with the spec".into(),
                )))
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let (machine_cpu, host_cpu) = probe.window(&stat0?, &stat1?);
    let tallies = plan
        .tallies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let rec = client_result(spec, &tallies, began);
    let mut rec = rec?;
    rec["cpu"] = json!({"client": cpu1.minus(cpu0)});
    rec["machine_cpu"] = json!(machine_cpu);
    rec["host_cpu"] = json!(host_cpu);
    sink.emit(Record::Json(rec));
    Ok(())
}

fn client_result(spec: &FlowsSpec, tallies: &[(Tally, Tally)], began: Instant) -> Result<Value> {
    let window = spec.duration;
    let (mut m, mut all, mut weighted) = (Tally::default(), Tally::default(), 0u64);
    for (f, (t, a)) in spec.flows.iter().zip(tallies) {
        merge(&mut m, t);
        merge(&mut all, a);
        if f.weight.is_some() {
            weighted += t.attempts;
        }
    }
    if m.attempts == 0 {
        return Err(EngineError::Measurement(
            "no flow was attempted in the measured window (moved no traffic): lengthen \
             duration, or check the rate"
                .into(),
        ));
    }
    let wsum: f64 = spec.flows.iter().filter_map(|f| f.weight).sum();
    let flows: Vec<Value> = spec
        .flows
        .iter()
        .zip(tallies)
        .map(|(f, (t, _))| {
            let share = f
                .weight
                .map(|_| t.attempts as f64 / (weighted.max(1)) as f64);
            json!({
                "name": f.name,
                "id": f.id,
                "protocol": f.protocol.name(),
                "src": f.src,
                "dst": f.dst,
                "dport": f.dport,
                "weight": f.weight,
                "rate": f.rate,
                "weight_share": f.weight.map(|w| w / wsum),
                "share": share,
                "attempts": t.attempts,
                "ok": t.ok,
                "failed": t.failed(),
                "failures": fails_json(t),
                "ok_per_second": t.ok as f64 / window,
                "attempts_per_second": t.attempts as f64 / window,
                "late": t.late,
                "bytes": t.bytes,
                "connect_us": summary(&t.connect_us),
                "total_us": summary(&t.total_us),
            })
        })
        .collect();
    let lat = match &m.total_us {
        Some(h) if !h.is_empty() => json!({
            "count": h.len(), "min": h.min(), "mean": h.mean(), "stddev": h.stdev(),
            "p50": h.value_at_quantile(0.5), "p90": h.value_at_quantile(0.9),
            "p99": h.value_at_quantile(0.99), "p999": h.value_at_quantile(0.999),
            "max": h.max(),
        }),
        _ => Value::Null,
    };
    Ok(json!({
        "type": "result",
        "t": began.elapsed().as_secs_f64(),
        "kind": "flows",
        "role": "client",
        "duration_s": window,
        "warmup_s": spec.warmup,
        "parallel": spec.parallel,
        "rate": spec.rate,
        "timeout": spec.timeout,
        "attempts": m.attempts,
        "ok": m.ok,
        "failed": m.failed(),
        "failures": fails_json(&m),
        "late": m.late,
        "attempts_per_second": m.attempts as f64 / window,
        "transactions": m.ok,
        "transactions_per_second": m.ok as f64 / window,
        "bytes": m.bytes,
        "bits_per_second": m.bytes as f64 * 8.0 / window,
        "latency_us": lat,
        "connect_us": summary(&m.connect_us),
        "flows": flows,
        "totals": {"client": {
            "attempts": all.attempts, "ok": all.ok, "failed": all.failed(),
            "failures": fails_json(&all), "bytes": all.bytes,
        }},
    }))
}

fn run_server(spec: &FlowsSpec, began: Instant, sink: &mut dyn Sink) -> Result<()> {
    let socks = server::bind(spec)?;
    let names: Vec<String> = socks.iter().map(server::Sock::name).collect();
    let stop_sig = Arc::new(AtomicBool::new(false));
    let mut registered = Vec::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let id = signal_hook::flag::register(sig, stop_sig.clone())
            .map_err(EngineError::io("cannot install the SIGINT/SIGTERM handler"))?;
        registered.push(id);
    }
    let st = Arc::new(server::State::new(spec.clone(), socks));
    let handles = server::start(&st)?;
    sink.emit(base::start_record(spec.to_value(), began, json!(names)));
    let bound = Duration::from_secs_f64(spec.total_seconds());
    let t0 = Instant::now();
    let mut stopped_by = "duration";
    while t0.elapsed() < bound {
        if stop_sig.load(Relaxed) {
            stopped_by = "signal";
            break;
        }
        if handles.iter().any(|h| h.is_finished()) {
            stopped_by = "failure";
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    st.stop.store(true, Relaxed);
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Ok(Ok(())) => {}
            Err(_) => {
                failure = failure.or(Some(EngineError::Internal(
                    "a flows server thread panicked: report this bug with the spec".into(),
                )))
            }
        }
    }
    for id in registered {
        signal_hook::low_level::unregister(id);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let listens: Vec<Value> = st
        .socks
        .iter()
        .map(|s| {
            json!({
                "protocol": s.listen.protocol.name(),
                "address": s.listen.address,
                "port": s.listen.port,
                "flows": s.listen.flows.iter().map(|&i| spec.flows[i].name.clone()).collect::<Vec<_>>(),
                "taken": n(&s.counts.taken),
                "answered": n(&s.counts.answered),
                "refused_sources": n(&s.counts.refused_sources),
                "bad_requests": n(&s.counts.bad_requests),
                "bytes": n(&s.counts.bytes),
            })
        })
        .collect();
    let sum = |f: fn(&server::Counts) -> &std::sync::atomic::AtomicU64| -> u64 {
        st.socks.iter().map(|s| n(f(&s.counts))).sum()
    };
    sink.emit(Record::Json(json!({
        "type": "result",
        "t": began.elapsed().as_secs_f64(),
        "kind": "flows",
        "role": "server",
        "stopped_by": stopped_by,
        "taken": sum(|c| &c.taken),
        "answered": sum(|c| &c.answered),
        "refused_sources": sum(|c| &c.refused_sources),
        "bad_requests": sum(|c| &c.bad_requests),
        "bytes": sum(|c| &c.bytes),
        "busy_max": st.busy_max.load(Relaxed),
        "parallel": spec.parallel,
        "allow": spec.allow,
        "listens": listens,
    })));
    Ok(())
}

/// Kind `flows`, one side of one test.
pub struct Flows {
    spec: FlowsSpec,
}

impl Flows {
    pub fn new(spec: FlowsSpec) -> Flows {
        Flows { spec }
    }
}

impl Kind for Flows {
    fn serve(&self, _: &ServerEnv, _: &Arc<Shared>) -> Result<ServerSetup> {
        Err(base::no_server(
            "kind flows has no engine control server: run its server side with \
             `secperf-engine run` and a spec with \"role\": \"server\" in the host that answers",
        ))
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        match self.spec.role {
            Role::Client => run_client(&self.spec, opts.began, sink),
            Role::Server => run_server(&self.spec, opts.began, sink),
        }
    }
}
