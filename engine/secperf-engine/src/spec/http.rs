//! Kind `http` (the http_load analog): HTTP/1.1 GETs against a web server.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::rt::tls::{self, TlsOptions};
use crate::spec::common::{
    bind_of, busy_poll_of, interval_of, parallel_of, per_second_of, server_kind_raw, sources_of,
    tcp_only, threads_of, timeout_of, warmup_of, Common, KindSpec, Names, Payload, Protocol,
    PER_SOURCE,
};
use crate::spec::resolved::Resolved;

/// Most connections one http test holds (each a descriptor; beyond PER_SOURCE
/// they need more `sources`).
pub const MAX_PARALLEL: u64 = 1_000_000;

server_kind_raw! {
    /// An http spec as given.
    struct Raw {
        /// Run but excluded from the result.
        /// Value: float, default 1, 0 ≤ w ≤ 600
        warmup: Option<f64>,
        /// Interval record period.
        /// Value: float, default 1; 0 = no interval records; else ≥ 0.01
        interval: Option<f64>,
        /// Client-side source address for data connections.
        /// Value: address, optional, same family as `server`
        bind: Option<IpAddr>,
        /// TCP_NODELAY.
        /// Value: bool, default true for rr/crr, false for stream
        nodelay: Option<bool>,
        /// Accepted for a common spec shape; the fetches do not use it.
        /// Value: `"random"` | `"zeros"` | `"text"`, default random
        payload: Option<Payload>,
        /// Fetches in flight, each on its own connection (without `rate`: as fast as they go);
        /// machines of `threads` event-loop threads (above), not a thread each.
        /// Value: 1..=1000000, at most 60,000 per source address, default 1
        parallel: Option<u64>,
        /// Fetched round-robin (fetch *k* gets `urls[k mod n]`)
        /// Value: list of paths, default `["/"]`
        urls: Option<Vec<String>>,
        /// Reuse a connection (HTTP/1.1 keep-alive); default one fetch per connection, like
        /// http_load.
        /// Value: bool, default false
        keepalive: Option<bool>,
        /// Http: new fetches/s; crr: new connections/s shared by the `parallel` loops;
        /// connections: opens/s. An absolute schedule (item *k* due at *k*/rate), so no drift.
        /// Value: float/s, optional
        rate: Option<f64>,
        /// The longest any one step may wait (connect, a reply, each read): an idle timeout, so
        /// a slow transfer that keeps moving is not cut.
        /// Value: seconds, default 10
        timeout: Option<f64>,
        /// The event-loop threads that share the connections (an epoll set each, mio; a thread
        /// with one connection blocks on its socket instead)
        /// Value: int 1..=64, default one per CPU the process may use, never more than
        /// `parallel` (mix: its virtual clients)
        threads: Option<u64>,
        /// How long an event-loop thread that finds nothing ready keeps asking (epoll_wait with
        /// no wait) before it sleeps; with it even one connection runs on the epoll set. It
        /// trades CPU for wake-ups: on a virtual machine a thread that sleeps between answers
        /// makes whoever delivers the next answer (the server, the DUT) pay for waking an idle
        /// CPU. Leave it 0 where the generator shares a CPU with what it measures (it would
        /// take that CPU); docs/performance.md shows both.
        /// Value: int 0..=10000, default 0
        busy_poll_us: Option<u64>,
        /// HTTPS: each connection does a TLS handshake (rustls, `ring` provider) before its
        /// first request.
        /// Value: bool, default false
        tls: Option<bool>,
        /// The only version offered.
        /// Value: `"1.2"` | `"1.3"`, default both
        tls_version: Option<String>,
        /// The only cipher suite offered: `TLS13_AES_128_GCM_SHA256`,
        /// `TLS13_AES_256_GCM_SHA384`, `TLS13_CHACHA20_POLY1305_SHA256`,
        /// `TLS_ECDHE_{ECDSA,RSA}_WITH_{AES_128_GCM_SHA256,AES_256_GCM_SHA384,CHACHA20_POLY1305_SHA256}`;
        /// it must belong to `tls_version`.
        /// Value: IANA name, default all
        cipher: Option<String>,
        /// Key-exchange groups in order of preference: `X25519`, `secp256r1`, `secp384r1`.
        /// Value: list, default all
        groups: Option<Vec<String>>,
        /// Session resumption (TLS 1.3 tickets, TLS 1.2 session ids/tickets), from a cache
        /// shared by the test's connections.
        /// Value: bool, default true
        resumption: Option<bool>,
        /// PEM file of the CA(s) the client trusts; nothing else is trusted.
        /// Value: path, required with `tls`
        ca_file: Option<String>,
        /// The name the certificate must carry, sent as SNI; default the server's address (no
        /// SNI)
        /// Value: host name, optional
        server_name: Option<String>,
        /// The client's source addresses, round-robin by connection: each gives the kernel's
        /// port range again (~64 k connections to the server's one port)
        /// Value: list of addresses of the server's family, at most 4096, none twice; default
        /// `[bind]`, or the kernel's choice (http: not with `bind`)
        sources: Option<Vec<IpAddr>>,
        /// The first `parallel` fetches (each opens its connection) due evenly over these
        /// seconds, fetch *k* ≥ `parallel` at `ramp_up` + (*k* − `parallel`)/`rate`:
        /// connections opened at an open rate of their own (RFC 9411's ramp-up), then held at a
        /// modest fetch rate.
        /// Value: seconds, optional, needs `rate`, at most `warmup`
        ramp_up: Option<f64>,
    }
}

/// A resolved http spec. `server` is the web server (no engine server is
/// involved); `bind`, `nodelay` and `payload` are accepted but not used by the
/// fetches.
#[derive(Clone, Debug, Serialize)]
pub struct HttpSpec {
    #[serde(flatten)]
    pub common: Common,
    pub warmup: f64,
    pub interval: f64,
    pub bind: Option<IpAddr>,
    pub nodelay: bool,
    pub payload: Payload,
    /// Fetches in flight (each on its own connection).
    pub parallel: usize,
    /// Event-loop threads that share the `parallel` connections.
    pub threads: usize,
    /// How long a loop thread spins before it sleeps (µs; 0: it sleeps at once).
    pub busy_poll_us: u64,
    /// Paths fetched round-robin.
    pub urls: Vec<String>,
    pub keepalive: bool,
    /// New fetches/s on an absolute schedule (None: as fast as `parallel` goes).
    pub rate: Option<f64>,
    /// Deadline of each connect and response; a miss is counted, not fatal.
    pub timeout: Option<f64>,
    /// HTTPS: the TLS settings (None: plain HTTP).
    pub tls: Option<TlsOptions>,
    /// Source addresses the connections bind to, round-robin by connection
    /// (empty: `bind`, or the route's address).
    pub sources: Vec<IpAddr>,
    /// With `rate`: the first `parallel` fetches (the ones that open the
    /// connections) spread evenly over these seconds from the start, the rest
    /// at `rate` after it (None: every fetch at `rate`).
    pub ramp_up: Option<f64>,
}

impl KindSpec for HttpSpec {
    const NAME: &'static str = "http";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Tcp);
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, _: &Names) -> Result<HttpSpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Tcp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        tcp_only(
            protocol,
            "http is TCP only: set protocol to \"tcp\" or leave it out",
        )?;
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let bind = bind_of(raw.bind, common.server)?;
        // http's parallel is connections in flight (http_load -parallel), not threads of a stream.
        let parallel = parallel_of(raw.parallel, MAX_PARALLEL)?;
        if raw.sources.is_some() && raw.bind.is_some() {
            return Err(EngineError::spec(
                "sources",
                "sources and bind both name the client's addresses: give one of them",
            ));
        }
        let sources = sources_of(raw.sources, None, &common)?;
        let addresses = sources.len().max(1) as u64;
        if parallel as u64 > addresses * PER_SOURCE {
            return Err(EngineError::spec(
                "parallel",
                format!(
                    "parallel {} needs {} source addresses (~{} connections each to the server's one port) but {} given: list more in sources, or ask fewer",
                    parallel,
                    (parallel as u64).div_ceil(PER_SOURCE),
                    PER_SOURCE,
                    addresses
                ),
            ));
        }
        let threads = threads_of(raw.threads, parallel)?;
        let busy_poll_us = busy_poll_of(raw.busy_poll_us)?;
        let urls = urls_of(raw.urls)?;
        let rate = per_second_of("rate", raw.rate)?;
        let timeout = timeout_of(raw.timeout, Some(5.0))?;
        let ramp_up = ramp_up_of(raw.ramp_up, rate, warmup)?;
        let raw_tls = RawTls {
            tls: raw.tls,
            tls_version: raw.tls_version,
            cipher: raw.cipher,
            groups: raw.groups,
            resumption: raw.resumption,
            ca_file: raw.ca_file,
            server_name: raw.server_name,
        };
        Ok(HttpSpec {
            common,
            warmup,
            interval,
            bind,
            nodelay: raw.nodelay.unwrap_or(true),
            payload: raw.payload.unwrap_or(Payload::Random),
            parallel,
            threads,
            busy_poll_us,
            urls,
            keepalive: raw.keepalive.unwrap_or(false),
            rate,
            timeout,
            tls: tls_of(&raw_tls)?,
            sources,
            ramp_up,
        })
    }
}

/// `ramp_up`: only with `rate` (it shapes that schedule's start), within the
/// warm-up (the measured window is the steady state after it).
fn ramp_up_of(ramp_up: Option<f64>, rate: Option<f64>, warmup: f64) -> Result<Option<f64>> {
    let Some(r) = ramp_up else {
        return Ok(None);
    };
    if rate.is_none() {
        return Err(EngineError::spec(
            "ramp_up",
            "ramp_up paces the first fetches of a `rate` schedule: set rate, or leave ramp_up out",
        ));
    }
    if !(r.is_finite() && r > 0.0 && r <= warmup) {
        return Err(EngineError::spec(
            "ramp_up",
            format!(
                "ramp_up must be above 0 and at most warmup ({} s) (got {}): the connections open before the measured window",
                warmup, r
            ),
        ));
    }
    Ok(Some(r))
}

/// The TLS keys as given.
struct RawTls {
    tls: Option<bool>,
    tls_version: Option<String>,
    cipher: Option<String>,
    groups: Option<Vec<String>>,
    resumption: Option<bool>,
    ca_file: Option<String>,
    server_name: Option<String>,
}

/// The TLS settings: refused unless `tls` is on, each name checked against
/// what the engine's TLS library offers.
fn tls_of(r: &RawTls) -> Result<Option<TlsOptions>> {
    if !r.tls.unwrap_or(false) {
        for (key, set) in [
            ("tls_version", r.tls_version.is_some()),
            ("cipher", r.cipher.is_some()),
            ("groups", r.groups.is_some()),
            ("resumption", r.resumption.is_some()),
            ("ca_file", r.ca_file.is_some()),
            ("server_name", r.server_name.is_some()),
        ] {
            if set {
                return Err(EngineError::spec(
                    key,
                    format!(
                        "{} is a TLS setting: set tls = true, or leave {} out",
                        key, key
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let versions: Vec<String> = match r.tls_version.as_deref() {
        None => vec!["1.3".into(), "1.2".into()],
        Some(v @ ("1.2" | "1.3")) => vec![v.to_string()],
        Some(v) => {
            return Err(EngineError::spec(
                "tls_version",
                format!("tls_version {:?} is not offered: give \"1.2\" or \"1.3\", or leave it out for both", v),
            ))
        }
    };
    if let Some(c) = &r.cipher {
        match tls::cipher_version(c) {
            None => {
                return Err(EngineError::spec(
                    "cipher",
                    format!(
                        "cipher {:?} is not offered: give one of {}",
                        c,
                        tls::cipher_names().join(", ")
                    ),
                ))
            }
            Some(v) if !versions.iter().any(|x| x == v) => {
                return Err(EngineError::spec(
                    "cipher",
                    format!(
                        "cipher {} is a TLS {} suite but tls_version is {}: pick a suite of that version",
                        c, v, versions[0]
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let groups = r.groups.clone().unwrap_or_default();
    if r.groups.is_some() && groups.is_empty() {
        return Err(EngineError::spec(
            "groups",
            "groups is empty: give at least one key-exchange group, or leave it out",
        ));
    }
    let offered = tls::group_names();
    for g in &groups {
        if !offered.contains(g) {
            return Err(EngineError::spec(
                "groups",
                format!(
                    "group {:?} is not offered: give some of {}",
                    g,
                    offered.join(", ")
                ),
            ));
        }
    }
    let Some(ca_file) = r.ca_file.clone() else {
        return Err(EngineError::spec(
            "ca_file",
            "tls = true needs ca_file: the PEM file of the CA that signed the server's certificate",
        ));
    };
    if let Some(n) = &r.server_name {
        if n.is_empty() || n.bytes().any(|b| b <= b' ') {
            return Err(EngineError::spec(
                "server_name",
                format!("server_name {:?} is not a host name", n),
            ));
        }
    }
    Ok(Some(TlsOptions {
        versions,
        cipher: r.cipher.clone(),
        groups,
        resumption: r.resumption.unwrap_or(true),
        ca_file,
        server_name: r.server_name.clone(),
    }))
}

/// `urls`: at least one path on the server (no host, no spaces).
fn urls_of(urls: Option<Vec<String>>) -> Result<Vec<String>> {
    let urls = urls.unwrap_or_else(|| vec!["/".to_string()]);
    if urls.is_empty() {
        return Err(EngineError::spec(
            "urls",
            "urls is empty: give at least one path such as \"/index.html\"",
        ));
    }
    for u in &urls {
        if !u.starts_with('/') || u.len() > 2048 || u.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(EngineError::spec(
                "urls",
                format!(
                    "url {:?} is not a path: give paths on the server such as \"/files/a.html\" (no host, no spaces)",
                    u
                ),
            ));
        }
    }
    Ok(urls)
}

impl Resolved for HttpSpec {
    fn total_seconds(&self) -> f64 {
        self.warmup + self.common.duration
    }

    /// The web server.
    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.common.server_target()
    }
}
