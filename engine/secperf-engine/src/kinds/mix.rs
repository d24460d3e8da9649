//! Kind `mix`: document 001's NSTL load. Each virtual client (one thread)
//! makes `requests` fetches one after the other, with `think` seconds between
//! them: a server drawn by its `hit` weight, HTTP with that server's
//! `http_share` (else FTP), a file from the protocol's size set (HTTP: HTML or
//! GIF, even odds). HTTP is one GET on a new connection (`Connection: close`,
//! the server closes first); FTP a new control connection, anonymous login,
//! a passive or active data connection, `RETR`, `QUIT` (crate::ftp_wire).
//!
//! The spec is its own (it has many servers and no engine server). The
//! result holds this process's summary and every fetch as `[protocol,
//! failure, bytes, start, end]` (wall-clock seconds), so that the records of
//! several client hosts merge into one figure.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{EngineError, Result};
use crate::kinds::base::{self, no_server, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::cpu::CpuProbe;
use crate::rt::shared::Shared;
use crate::rt::{sys, target};
use crate::spec::MixSpec;
use crate::wire::ftp::{self as ftp_wire, FtpFail};
use crate::wire::http::{self as http_wire, Fail};
use crate::wire::record::{Record, Sink};

/// splitmix64: a small, seedable generator (each virtual client its own).
struct Rng(u64);

impl Rng {
    fn new(seed: &str, client: u64) -> Rng {
        // FNV-1a over the seed text, mixed with the client's id.
        let mut h: u64 = 0xcbf29ce484222325;
        for b in seed.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        Rng(h ^ client.wrapping_mul(0x9e3779b97f4a7c15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<'a, T>(&mut self, list: &'a [T]) -> &'a T {
        &list[(self.next() % list.len() as u64) as usize]
    }
}

/// A failed fetch's kind, as the workload reports it.
fn kind_name(f: FtpFail) -> &'static str {
    match f {
        FtpFail::Connect => "connect",
        FtpFail::Timeout => "timeout",
        FtpFail::Short => "short",
        FtpFail::Refused => "refused",
    }
}

fn http_fail(f: Fail) -> FtpFail {
    match f {
        Fail::ConnectRefused | Fail::ConnectTimeout | Fail::Unreachable => FtpFail::Connect,
        Fail::Timeout => FtpFail::Timeout,
        Fail::BadStatus => FtpFail::Refused,
        _ => FtpFail::Short,
    }
}

/// One HTTP GET on a new connection; every read waits at most `timeout`.
fn http_get(
    peer: SocketAddr,
    via: Option<SocketAddr>,
    host: &str,
    path: &str,
    expect: u64,
    timeout: Duration,
) -> std::result::Result<u64, FtpFail> {
    let step = || Instant::now() + timeout;
    let s = ftp_wire::open(peer, via, timeout)?;
    let req = http_wire::request(path, host, false);
    http_wire::write_all_bounded(&s, &req, step()).map_err(http_fail)?;
    let mut buf: Vec<u8> = Vec::with_capacity(16384);
    let mut chunk = vec![0u8; 65536];
    let head_end = loop {
        let n = http_wire::read_some_bounded(&s, &mut chunk, step()).map_err(http_fail)?;
        if n == 0 {
            return Err(FtpFail::Short);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(FtpFail::Short);
        }
    };
    let (status, length, _) = http_wire::parse_head(&buf[..head_end]).ok_or(FtpFail::Short)?;
    let mut body = (buf.len() - head_end) as u64;
    match length {
        Some(len) => {
            while body < len {
                let n = http_wire::read_some_bounded(&s, &mut chunk, step()).map_err(http_fail)?;
                if n == 0 {
                    break;
                }
                body += n as u64;
            }
            // Wait for the server's close: it, not the client, keeps the TIME_WAIT.
            http_wire::await_close_bounded(&s, step());
        }
        None => loop {
            let n = http_wire::read_some_bounded(&s, &mut chunk, step()).map_err(http_fail)?;
            if n == 0 {
                break;
            }
            body += n as u64;
        },
    }
    if !(200..300).contains(&status) {
        return Err(FtpFail::Refused);
    }
    if body != expect {
        return Err(FtpFail::Short);
    }
    Ok(body)
}

/// One fetch: [protocol, failure or null, bytes, start, end].
type Row = (bool, Option<FtpFail>, u64, f64, f64);

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn virtual_client(spec: &MixSpec, id: u64, total_hit: f64) -> Vec<Row> {
    let mut rng = Rng::new(&spec.seed, id);
    let timeout = Duration::from_secs_f64(spec.timeout);
    let mut rows = Vec::with_capacity(spec.requests as usize);
    for k in 0..spec.requests {
        if k > 0 && spec.think > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(spec.think));
        }
        let mut r = rng.unit() * total_hit;
        let mut server = &spec.servers[0];
        for s in spec.servers.iter().filter(|s| s.hit > 0.0) {
            server = s;
            if r < s.hit {
                break;
            }
            r -= s.hit;
        }
        let http = rng.unit() < server.http_share;
        let size = if http {
            let html = rng.unit() < 0.5;
            let set = match (html, spec.html_files.is_empty(), spec.gif_files.is_empty()) {
                (_, true, _) => &spec.gif_files,
                (_, _, true) => &spec.html_files,
                (true, _, _) => &spec.html_files,
                (false, _, _) => &spec.gif_files,
            };
            *rng.pick(set)
        } else {
            *rng.pick(&spec.ftp_files)
        };
        let start = wall();
        let r = if http {
            let peer = SocketAddr::new(server.address, spec.http_port);
            let host = match peer {
                SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
                SocketAddr::V4(a) => a.to_string(),
            };
            http_get(
                peer,
                spec.socks,
                &host,
                &format!("/files/{}.bin", size),
                size,
                timeout,
            )
        } else {
            let peer = SocketAddr::new(server.address, spec.ftp_port);
            ftp_wire::get(
                peer,
                spec.socks,
                &format!("files/{}.bin", size),
                size,
                spec.ftp_mode,
                timeout,
            )
            .map(|g| g.bytes)
        };
        let end = wall();
        match r {
            Ok(n) => rows.push((http, None, n, start, end)),
            Err(f) => rows.push((http, Some(f), 0, start, end)),
        }
    }
    rows
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
    let nofile = sys::raise_nofile();
    // The spec as given, as it always was for this kind.
    sink.emit(base::start_record(spec.given.clone(), began, Value::Null));
    let total_hit: f64 = spec.servers.iter().map(|s| s.hit).sum();
    let probe = CpuProbe::new(&spec.cpu_groups);
    let (cpu0, stat0) = (sys::process_cpu(), probe.read());
    let mut handles = Vec::new();
    for &id in &spec.clients {
        let s = spec.clone();
        let h = std::thread::Builder::new()
            .name(format!("mix-{}", id))
            .stack_size(256 * 1024)
            .spawn(move || virtual_client(&s, id, total_hit))
            .map_err(|e| {
                EngineError::io(format!(
                    "cannot start virtual client {}: give fewer clients to this host or raise the thread limit",
                    id
                ))(e)
            })?;
        handles.push(h);
    }
    let mut rows: Vec<Row> = Vec::new();
    for h in handles {
        match h.join() {
            Ok(mut r) => rows.append(&mut r),
            Err(_) => {
                return Err(EngineError::Internal(
                    "a virtual client thread panicked: report this bug".into(),
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
