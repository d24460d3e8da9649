//! Kind `mix`: document 001's NSTL load. Each virtual client makes
//! `requests` fetches one after the other, with `think` seconds between
//! them: a server drawn by its `hit` weight, HTTP with that server's
//! `http_share` (else FTP), a file from the protocol's size set (HTTP: HTML or
//! GIF, even odds). HTTP is one GET on a new connection (`Connection: close`,
//! the server closes first); FTP a new control connection, anonymous login,
//! a passive or active data connection, `RETR`, `QUIT` (the ftp module).
//! Every virtual client is a machine of the event loop (rt::evloop); the
//! spec's `threads` threads share them, so a thousand virtual clients are a
//! thousand state machines, not a thousand threads.
//!
//! The spec is its own (it has many servers and no engine server). The
//! result holds this process's summary and every fetch as `[protocol,
//! failure, bytes, start, end]` (wall-clock seconds), so that the records of
//! several client hosts merge into one figure.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, no_server, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::cpu::CpuProbe;
use crate::rt::evloop;
use crate::rt::shared::Shared;
use crate::rt::{sys, target};
use crate::spec::MixSpec;
use crate::wire::ftp::FtpFail;
use crate::wire::record::{Record, Sink};

mod client;
mod ftp;
mod link;
mod rng;

use client::Row;

/// A failed fetch's kind, as the workload reports it.
fn kind_name(f: FtpFail) -> &'static str {
    match f {
        FtpFail::Connect => "connect",
        FtpFail::Timeout => "timeout",
        FtpFail::Short => "short",
        FtpFail::Refused => "refused",
    }
}

fn percentile(sorted: &[f64], q: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let i = ((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
    json!(sorted[i])
}

/// This process's summary of its fetches (the workload merges the rows of every host).
pub fn summarize(rows: &[Row], clients: usize) -> Value {
    let attempted = rows.len() as u64;
    let ok = rows.iter().filter(|r| r.1.is_none()).count() as u64;
    let start = rows.iter().map(|r| r.3).fold(f64::INFINITY, f64::min);
    let end = rows.iter().map(|r| r.4).fold(f64::NEG_INFINITY, f64::max);
    let elapsed = if attempted > 0 && end > start {
        Some(end - start)
    } else {
        None
    };
    let bytes: u64 = rows.iter().filter(|r| r.1.is_none()).map(|r| r.2).sum();
    let mut failures = serde_json::Map::new();
    for f in [
        FtpFail::Connect,
        FtpFail::Timeout,
        FtpFail::Short,
        FtpFail::Refused,
    ] {
        let n = rows.iter().filter(|r| r.1 == Some(f)).count();
        failures.insert(kind_name(f).into(), json!(n));
    }
    let mut protocols = serde_json::Map::new();
    for (name, is_http) in [("http", true), ("ftp", false)] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.0 == is_http).collect();
        let mut ms: Vec<f64> = mine
            .iter()
            .filter(|r| r.1.is_none())
            .map(|r| (r.4 - r.3) * 1e3)
            .collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        let mean = if ms.is_empty() {
            Value::Null
        } else {
            json!(ms.iter().sum::<f64>() / ms.len() as f64)
        };
        protocols.insert(
            name.into(),
            json!({
                "attempted": mine.len(),
                "ok": ms.len(),
                "failed": mine.len() - ms.len(),
                "bytes": mine.iter().filter(|r| r.1.is_none()).map(|r| r.2).sum::<u64>(),
                "fetch_ms": {
                    "count": ms.len(),
                    "p50": percentile(&ms, 0.5),
                    "p95": percentile(&ms, 0.95),
                    "p99": percentile(&ms, 0.99),
                    "mean": mean,
                },
            }),
        );
    }
    json!({
        "virtual_clients": clients,
        "attempted": attempted,
        "transactions": ok,
        "elapsed_s": elapsed,
        "tpm": elapsed.map(|e| ok as f64 / e * 60.0),
        "bytes": bytes,
        "bits_per_second": elapsed.map(|e| bytes as f64 * 8.0 / e),
        "failure_ratio": if attempted > 0 { json!((attempted - ok) as f64 / attempted as f64) } else { Value::Null },
        "failures": failures,
        "protocols": protocols,
    })
}

/// One thread: the virtual clients `ids`, to their last request.
fn clients(spec: &MixSpec, ids: &[u64], total_hit: f64) -> Result<Vec<Row>> {
    let mut cx = client::Cx {
        spec,
        total_hit,
        scratch: vec![0u8; 64 * 1024],
        rows: Vec::with_capacity(ids.len() * spec.requests.min(1 << 16) as usize),
    };
    let mut ms: Vec<client::Vc<'_>> = ids.iter().map(|&id| client::Vc::new(spec, id)).collect();
    // No busy poll: a mix's virtual clients think between requests.
    evloop::drive(&mut ms, &mut cx, std::time::Duration::ZERO)
        .map_err(EngineError::io("the mix's event loop failed"))?;
    Ok(cx.rows)
}

/// Runs the virtual clients of `spec` to their last request; the records go to `sink`.
fn run(spec: &MixSpec, allow_any_target: bool, began: Instant, sink: &mut dyn Sink) -> Result<()> {
    let spec = Arc::new(spec.clone());
    for (i, s) in spec.servers.iter().enumerate() {
        target::check(
            &format!("servers[{}].address", i),
            s.address,
            allow_any_target,
        )?;
    }
    // A virtual client holds at most three descriptors (control, data, listener).
    let nofile = sys::raise_nofile_to(3 * spec.clients.len() as u64 + 64);
    // The spec as given, as it always was for this kind.
    sink.emit(base::start_record(spec.given.clone(), began, Value::Null));
    let total_hit: f64 = spec.servers.iter().map(|s| s.hit).sum();
    let probe = CpuProbe::new(&spec.cpu_groups);
    let (cpu0, stat0) = (sys::process_cpu(), probe.read());
    // The virtual clients, dealt round-robin to the threads.
    let threads = spec.threads().clamp(1, spec.clients.len());
    let mut handles = Vec::new();
    for t in 0..threads {
        let s = spec.clone();
        let ids: Vec<u64> = spec
            .clients
            .iter()
            .skip(t)
            .step_by(threads)
            .copied()
            .collect();
        let h = std::thread::Builder::new()
            .name(format!("mix-{}", t))
            .spawn(move || clients(&s, &ids, total_hit))
            .map_err(|e| {
                EngineError::io(format!(
                    "cannot start the virtual clients' thread {}: give fewer threads or raise the thread limit",
                    t
                ))(e)
            })?;
        handles.push(h);
    }
    let mut rows: Vec<Row> = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(mut r)) => rows.append(&mut r),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(EngineError::Internal(
                    "a virtual clients' thread panicked: report this bug".into(),
                ))
            }
        }
    }
    let (cpu1, stat1) = (sys::process_cpu(), probe.read());
    let (machine_cpu, host_cpu) = probe.window(&stat0?, &stat1?);
    let mut rec = summarize(&rows, spec.clients.len());
    let fetches: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!([
                if r.0 { "http" } else { "ftp" },
                r.1.map(kind_name),
                r.2,
                r.3,
                r.4
            ])
        })
        .collect();
    if let Value::Object(m) = &mut rec {
        m.insert("type".into(), json!("result"));
        m.insert("t".into(), json!(began.elapsed().as_secs_f64()));
        m.insert("kind".into(), json!("mix"));
        m.insert("ftp_mode".into(), json!(spec.ftp_mode));
        m.insert("requests".into(), json!(spec.requests));
        m.insert("cpu".into(), json!({"client": cpu1.minus(cpu0)}));
        m.insert("machine_cpu".into(), json!(machine_cpu));
        m.insert("host_cpu".into(), json!(host_cpu));
        m.insert("nofile".into(), json!(nofile));
        m.insert("fetches".into(), Value::Array(fetches));
    }
    sink.emit(Record::Json(rec));
    Ok(())
}

/// Kind `mix`: the virtual clients of this process (no engine server).
pub struct Mix {
    spec: MixSpec,
}

impl Mix {
    pub fn new(spec: MixSpec) -> Mix {
        Mix { spec }
    }
}

impl Kind for Mix {
    fn serve(&self, _: &ServerEnv, _: &Arc<Shared>) -> Result<ServerSetup> {
        Err(no_server(
            "kind mix runs against web and FTP servers (nginx, vsftpd), not an engine server: run it with `secperf-engine run`",
        ))
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        run(&self.spec, opts.allow_any_target, opts.began, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> String {
        format!(
            r#"{{"kind":"mix","servers":[{{"address":"198.18.2.2","hit":1,"http_share":0.5}}],"clients":[0],"requests":2,"html_files":[1024],"ftp_files":[2048]{}}}"#,
            extra
        )
    }

    #[test]
    fn parses_and_refuses() {
        use crate::spec::Spec;
        use crate::wire::ftp::Mode;
        let Ok(Spec::Mix(s)) = Spec::parse(&spec("")) else {
            panic!("a mix spec")
        };
        assert_eq!(s.ftp_mode, Mode::Passive);
        assert_eq!(s.http_port, 5380);
        assert_eq!(s.given["clients"], json!([0]), "the spec as given is kept");
        assert!(Spec::parse(&spec(r#","ftp_mode":"active""#)).is_ok());
        for (bad, field) in [
            (r#","bogus":1"#, "bogus"),
            (r#","timeout":0"#, "timeout"),
            (r#","ftp_files":[]"#, "ftp_files"),
            (r#","requests":0"#, "requests"),
            (r#","ftp_mode":"sideways""#, "ftp_mode"),
            (r#","server":"198.18.2.2:1""#, "server"),
        ] {
            let e = Spec::parse(&spec(bad)).expect_err(bad);
            assert_eq!(e.field(), Some(field), "{}: {}", bad, e);
        }
    }

    #[test]
    fn draws_follow_the_weights() {
        use rng::Rng;
        let mut rng = Rng::new("x", 3);
        let n = 20000;
        let hits = (0..n).filter(|_| rng.unit() < 0.9).count();
        assert!((hits as f64 / n as f64 - 0.9).abs() < 0.02);
        let mut a = Rng::new("x", 3);
        let mut b = Rng::new("x", 4);
        assert_ne!(a.next(), b.next());
    }

    #[test]
    fn summary_counts_and_times() {
        let rows: Vec<Row> = vec![
            (true, None, 1000, 10.0, 10.5),
            (false, None, 3000, 10.0, 11.0),
            (false, Some(FtpFail::Short), 0, 11.0, 12.0),
        ];
        let v = summarize(&rows, 2);
        assert_eq!(v["attempted"], 3);
        assert_eq!(v["transactions"], 2);
        assert_eq!(v["elapsed_s"], 2.0);
        assert_eq!(v["tpm"], 60.0);
        assert_eq!(v["failures"]["short"], 1);
        assert_eq!(v["protocols"]["ftp"]["failed"], 1);
        assert_eq!(v["protocols"]["http"]["fetch_ms"]["p50"], 500.0);
        assert_eq!(summarize(&[], 1)["tpm"], Value::Null);
    }
}
