//! Kind `mix`: document 001's NSTL load. Each virtual client (one thread)
//! makes `requests` fetches one after the other, with `think` seconds between
//! them: a server drawn by its `hit` weight, HTTP with that server's
//! `http_share` (else FTP), a file from the protocol's size set (HTTP: HTML or
//! GIF, even odds). HTTP is one GET on a new connection (`Connection: close`,
//! the server closes first); FTP a new control connection, anonymous login,
//! a passive or active data connection, `RETR`, `QUIT` (crate::ftp_wire).
//!
//! The spec is its own (it has many servers and no engine server), parsed
//! here and dispatched by main before the common spec. The result holds
//! this process's summary and every fetch as `[protocol, failure, bytes,
//! start, end]` (wall-clock seconds), so that the records of several client
//! hosts merge into one figure.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::cpu::{self, CpuGroup, CpuProbe};
use crate::error::{EngineError, Result};
use crate::ftp_wire::{self, FtpFail, Mode};
use crate::http_wire::{self, Fail};
use crate::record::{Record, Sink, FORMAT, VERSION};
use crate::{standalone, sys, target};

/// Most virtual clients one process runs (one thread each).
pub const MAX_CLIENTS: usize = 4096;
pub const HTTP_PORT: u16 = 5380;
pub const FTP_PORT: u16 = 5321;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixServer {
    pub address: IpAddr,
    /// Relative share of the fetches (the paper's Table 2).
    #[serde(default = "one")]
    pub hit: f64,
    /// Share of this server's fetches over HTTP (the paper's Table 1).
    #[serde(default = "one")]
    pub http_share: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    pub kind: String,
    pub servers: Vec<MixServer>,
    /// The ids of the virtual clients this process runs (each seeds its own draws).
    pub clients: Vec<u64>,
    #[serde(default = "hundred")]
    pub requests: u64,
    #[serde(default)]
    pub seed: String,
    /// Idle timeout of every step of a fetch, seconds.
    #[serde(default = "ten")]
    pub timeout: f64,
    #[serde(default)]
    pub think: f64,
    #[serde(default = "http_port")]
    pub http_port: u16,
    #[serde(default = "ftp_port")]
    pub ftp_port: u16,
    #[serde(default)]
    pub ftp_mode: Mode,
    #[serde(default)]
    pub html_files: Vec<u64>,
    #[serde(default)]
    pub gif_files: Vec<u64>,
    #[serde(default)]
    pub ftp_files: Vec<u64>,
    /// A SOCKS5 proxy (the circuit-level kind) every connection goes through.
    #[serde(default)]
    pub socks: Option<SocketAddr>,
    #[serde(default)]
    pub cpu_groups: Vec<CpuGroup>,
}

fn hundred() -> u64 {
    100
}
fn ten() -> f64 {
    10.0
}
fn http_port() -> u16 {
    HTTP_PORT
}
fn ftp_port() -> u16 {
    FTP_PORT
}

/// Whether a spec's text asks for kind `mix` (main sends it here, not to Spec).
pub fn is_mix(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str().map(|k| k == "mix")))
        .unwrap_or(false)
}

fn bad(field: &str, msg: String) -> EngineError {
    EngineError::spec(field, msg)
}

impl MixSpec {
    pub fn parse(text: &str) -> Result<MixSpec> {
        let mut de = serde_json::Deserializer::from_str(text);
        let spec: MixSpec = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.inner().to_string();
            let inner = inner.split(" at line ").next().unwrap_or("").to_string();
            EngineError::Spec {
                message: format!(
                    "mix spec: `{}` is malformed: {}; fix its value",
                    field, inner
                ),
                field: Some(field),
            }
        })?;
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(bad(
                "servers",
                "a mix needs at least one server: give [{\"address\": \"198.18.2.2\", \"hit\": 1, \"http_share\": 0.9}]".into(),
            ));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if !(s.hit.is_finite() && s.hit >= 0.0) {
                return Err(bad(
                    &format!("servers[{}].hit", i),
                    format!("hit must be a weight ≥ 0 (got {})", s.hit),
                ));
            }
            if !(0.0..=1.0).contains(&s.http_share) {
                return Err(bad(
                    &format!("servers[{}].http_share", i),
                    format!("http_share is a share of 0..1 (got {})", s.http_share),
                ));
            }
        }
        if self.servers.iter().map(|s| s.hit).sum::<f64>() <= 0.0 {
            return Err(bad(
                "servers",
                "every server's hit is 0: give at least one a positive weight".into(),
            ));
        }
        if self.clients.is_empty() || self.clients.len() > MAX_CLIENTS {
            return Err(bad(
                "clients",
                format!(
                    "clients lists the ids of this process's virtual clients: give 1 to {} ids (got {})",
                    MAX_CLIENTS,
                    self.clients.len()
                ),
            ));
        }
        if !(1..=1_000_000).contains(&self.requests) {
            return Err(bad(
                "requests",
                format!(
                    "requests per virtual client must be 1..=1000000 (got {})",
                    self.requests
                ),
            ));
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 600.0) {
            return Err(bad(
                "timeout",
                format!(
                    "timeout must be > 0 and ≤ 600 seconds (got {}): give e.g. 10",
                    self.timeout
                ),
            ));
        }
        if !(self.think.is_finite() && (0.0..=3600.0).contains(&self.think)) {
            return Err(bad(
                "think",
                format!(
                    "think must be 0..=3600 seconds (got {}): 0 is none",
                    self.think
                ),
            ));
        }
        let any_http = self
            .servers
            .iter()
            .any(|s| s.hit > 0.0 && s.http_share > 0.0);
        let any_ftp = self
            .servers
            .iter()
            .any(|s| s.hit > 0.0 && s.http_share < 1.0);
        if any_http && self.html_files.is_empty() && self.gif_files.is_empty() {
            return Err(bad(
                "html_files",
                "some fetches are HTTP but html_files and gif_files are both empty: give sizes in bytes".into(),
            ));
        }
        if any_ftp && self.ftp_files.is_empty() {
            return Err(bad(
                "ftp_files",
                "some fetches are FTP but ftp_files is empty: give sizes in bytes".into(),
            ));
        }
        for (field, list) in [
            ("html_files", &self.html_files),
            ("gif_files", &self.gif_files),
            ("ftp_files", &self.ftp_files),
        ] {
            if let Some(v) = list.iter().find(|&&v| v == 0 || v > 1 << 32) {
                return Err(bad(
                    field,
                    format!("file size {} is not 1 byte to 4 GiB", v),
                ));
            }
        }
        if self.socks.is_some() && self.ftp_mode == Mode::Active {
            return Err(bad(
                "ftp_mode",
                "active FTP through a SOCKS proxy needs its BIND command, which the engine does not speak: use passive".into(),
            ));
        }
        for g in &self.cpu_groups {
            g.check()?;
        }
        Ok(())
    }
}

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
pub fn run(
    text: &str,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<Value> {
    let spec = Arc::new(MixSpec::parse(text)?);
    for (i, s) in spec.servers.iter().enumerate() {
        target::check(
            &format!("servers[{}].address", i),
            s.address,
            allow_any_target,
        )?;
    }
    let nofile = standalone::raise_nofile();
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let raw: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    sink.emit(Record::Json(json!({
        "type": "start",
        "t": began.elapsed().as_secs_f64(),
        "format": FORMAT,
        "engine": "secperf-engine",
        "version": VERSION,
        "spec": raw,
        "clock": {"realtime_ns": realtime_ns, "monotonic_ns": sys::monotonic_ns()},
        "local": Value::Null,
        "data": Value::Null,
        "host": serde_json::to_value(cpu::host()).unwrap_or(Value::Null),
    })));
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
    sink.emit(Record::Json(rec.clone()));
    Ok(rec)
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
        assert!(is_mix(&spec("")));
        assert!(!is_mix(r#"{"kind":"http"}"#));
        let s = MixSpec::parse(&spec("")).unwrap();
        assert_eq!(s.ftp_mode, Mode::Passive);
        assert_eq!(s.http_port, HTTP_PORT);
        assert!(MixSpec::parse(&spec(r#","ftp_mode":"active""#)).is_ok());
        for bad in [
            r#","bogus":1"#,
            r#","timeout":0"#,
            r#","ftp_files":[]"#,
            r#","requests":0"#,
            r#","ftp_mode":"sideways""#,
        ] {
            let e = MixSpec::parse(&spec(bad));
            assert!(e.is_err(), "{} was accepted", bad);
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
