//! Kind `http` (the http_load analog): HTTP/1.1 GETs against a web server.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::spec::common::{
    bind_of, interval_of, parallel_of, per_second_of, server_kind_raw, tcp_only, threads_of,
    timeout_of, warmup_of, Common, KindSpec, Names, Payload, Protocol,
};

server_kind_raw! {
    /// An http spec as given.
    struct Raw {
        warmup: Option<f64>,
        interval: Option<f64>,
        bind: Option<IpAddr>,
        nodelay: Option<bool>,
        payload: Option<Payload>,
        parallel: Option<u64>,
        urls: Option<Vec<String>>,
        keepalive: Option<bool>,
        rate: Option<f64>,
        timeout: Option<f64>,
        threads: Option<u64>,
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
    /// Paths fetched round-robin.
    pub urls: Vec<String>,
    pub keepalive: bool,
    /// New fetches/s on an absolute schedule (None: as fast as `parallel` goes).
    pub rate: Option<f64>,
    /// Deadline of each connect and response; a miss is counted, not fatal.
    pub timeout: Option<f64>,
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
        let parallel = parallel_of(raw.parallel, 10_000)?;
        let threads = threads_of(raw.threads, parallel)?;
        let urls = urls_of(raw.urls)?;
        let rate = per_second_of("rate", raw.rate)?;
        let timeout = timeout_of(raw.timeout, Some(5.0))?;
        Ok(HttpSpec {
            common,
            warmup,
            interval,
            bind,
            nodelay: raw.nodelay.unwrap_or(true),
            payload: raw.payload.unwrap_or(Payload::Random),
            parallel,
            threads,
            urls,
            keepalive: raw.keepalive.unwrap_or(false),
            rate,
            timeout,
        })
    }
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
