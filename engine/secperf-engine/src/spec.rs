//! The test spec: parsing (unknown fields and bad values are errors naming the
//! field and the fix), defaults, and which fields apply to which kind.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cpu::CpuGroup;
use crate::error::{EngineError, Result};
use crate::flood_spec::{self, FloodRaw, FloodSender, FloodSpec};
use crate::packet::FloodProto;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Stream,
    Rr,
    Crr,
    Http,
    Connections,
    Latency,
    /// One-way packet flood from a raw socket (no server side).
    Flood,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Rr => "rr",
            Kind::Crr => "crr",
            Kind::Http => "http",
            Kind::Connections => "connections",
            Kind::Latency => "latency",
            Kind::Flood => "flood",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// client → server
    Send,
    /// server → client
    Receive,
    Both,
}

impl Direction {
    pub fn client_sends(self) -> bool {
        matches!(self, Direction::Send | Direction::Both)
    }
    pub fn client_receives(self) -> bool {
        matches!(self, Direction::Receive | Direction::Both)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Payload {
    Random,
    Zeros,
    Text,
}

/// Latency probes: both directions at once, or alternating (the server
/// answers each probe with one of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Duplex {
    Full,
    Half,
}

/// Where latency stamps come from: the kernel (SO_TIMESTAMPING) or user space
/// (clock reads around send/recv; for measuring what kernel stamping costs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timestamps {
    Kernel,
    User,
}

/// How crr and connections end a TCP connection: `fin`, an orderly close
/// (FIN both ways, the client keeps the TIME_WAIT, as netperf's TCP_CRR and
/// real clients do), or `reset`, SO_LINGER 0 (an RST, no TIME_WAIT, no FIN
/// for a stateful DUT to see).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Close {
    #[default]
    Fin,
    Reset,
}

impl Close {
    pub fn name(self) -> &'static str {
        match self {
            Close::Fin => "fin",
            Close::Reset => "reset",
        }
    }
}

pub const FRAME_MIN: u64 = 64;
pub const FRAME_MAX: u64 = 1518;
pub const RATE_PPS_MAX: f64 = 10_000_000.0;
pub const ADDRESSES_MAX: usize = 4096;

/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const UDP_MAX: usize = 65507;
/// Sanity bound for TCP message/request/response sizes.
pub const TCP_MAX: usize = 64 << 20;
/// Streams of messages this large or larger wake their receiver once per
/// message by default (`rcvlowat` = message size); smaller ones on any data.
/// docs/performance.md has the measurements behind the choice.
pub const RCVLOWAT_FROM: usize = 128 << 10;
/// The default low-water mark stays below half of the smallest usual
/// `net.ipv4.tcp_rmem` maximum (the kernel caps it there).
pub const RCVLOWAT_DEFAULT_MAX: usize = 2 << 20;
/// Pipelined rr must fit the default socket buffers, or both ends block writing.
pub const INFLIGHT_BYTES_MAX: usize = 64 << 10;

/// `sources` means a list of addresses (latency) or one CIDR (flood).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Sources {
    List(Vec<IpAddr>),
    Cidr(String),
}

/// A flood's `rate_pps` is a whole number of packets a second.
fn flood_rate(rate: Option<f64>) -> Result<Option<u64>> {
    match rate {
        None => Ok(None),
        Some(r) if r.is_finite() && r >= 0.0 && r.fract() == 0.0 => Ok(Some(r as u64)),
        Some(r) => Err(EngineError::spec(
            "rate_pps",
            format!("a flood's rate_pps is a whole number of packets/s (got {r}): give e.g. 10000"),
        )),
    }
}

/// The spec as the user writes it: every field optional, unknown fields refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    kind: Option<Kind>,
    server: Option<String>,
    protocol: Option<Protocol>,
    duration: Option<f64>,
    warmup: Option<f64>,
    interval: Option<f64>,
    bind: Option<IpAddr>,
    data_port: Option<u16>,
    client_port: Option<u16>,
    socket_buffer: Option<u64>,
    nodelay: Option<bool>,
    direction: Option<Direction>,
    message_size: Option<u64>,
    rcvlowat: Option<u64>,
    parallel: Option<u64>,
    payload: Option<Payload>,
    rate_bps: Option<u64>,
    bytes: Option<u64>,
    request_size: Option<u64>,
    response_size: Option<u64>,
    inflight: Option<u64>,
    udp_timeout: Option<f64>,
    urls: Option<Vec<String>>,
    keepalive: Option<bool>,
    rate: Option<f64>,
    timeout: Option<f64>,
    connections: Option<u64>,
    hold: Option<f64>,
    close_rate: Option<f64>,
    close: Option<Close>,
    frame_size: Option<u64>,
    rate_pps: Option<f64>,
    duplex: Option<Duplex>,
    /// latency: a list of addresses; flood: an IPv4 CIDR.
    sources: Option<Sources>,
    destinations: Option<Vec<IpAddr>>,
    timestamps: Option<Timestamps>,
    probe_every: Option<u64>,
    flood: Option<FloodProto>,
    target: Option<String>,
    count: Option<u64>,
    payload_size: Option<u64>,
    ports: Option<String>,
    sender: Option<FloodSender>,
    cpu_groups: Option<Vec<CpuGroup>>,
}

/// Every field name, in record order.
pub const FIELDS: &[&str] = &[
    "kind",
    "server",
    "protocol",
    "duration",
    "warmup",
    "interval",
    "bind",
    "data_port",
    "client_port",
    "socket_buffer",
    "nodelay",
    "direction",
    "message_size",
    "rcvlowat",
    "parallel",
    "payload",
    "rate_bps",
    "bytes",
    "request_size",
    "response_size",
    "inflight",
    "udp_timeout",
    "urls",
    "keepalive",
    "rate",
    "timeout",
    "connections",
    "hold",
    "close_rate",
    "close",
    "frame_size",
    "rate_pps",
    "duplex",
    "sources",
    "destinations",
    "timestamps",
    "probe_every",
    "flood",
    "target",
    "count",
    "payload_size",
    "ports",
    "sender",
    "cpu_groups",
];

/// The fields a `flood` spec takes (it has no server, protocol or warm-up).
pub const FLOOD_FIELDS: &[&str] = &[
    "kind",
    "duration",
    "interval",
    "flood",
    "target",
    "rate_pps",
    "count",
    "payload_size",
    "sources",
    "ports",
    "sender",
    "cpu_groups",
];

/// Whether `field` means something for this kind and protocol. The single
/// table used both to refuse misplaced fields and to print the resolved spec.
pub fn applies(field: &str, kind: Kind, protocol: Protocol) -> bool {
    use Kind::*;
    if kind == Flood {
        return FLOOD_FIELDS.contains(&field);
    }
    if matches!(
        field,
        "flood" | "target" | "count" | "payload_size" | "ports" | "sender"
    ) {
        return false;
    }
    match field {
        "client_port" => matches!(kind, Stream | Rr),
        // http talks to a web server (no engine server, no data port) and
        // connections measures its own phases (no warm-up, no intervals).
        "data_port" => kind != Http,
        // latency probe sockets get their own large receive buffer.
        "socket_buffer" => !matches!(kind, Http | Latency),
        "warmup" | "interval" => kind != Connections,
        "urls" | "keepalive" => kind == Http,
        "rate" | "timeout" => matches!(kind, Http | Crr | Connections),
        "connections" | "hold" | "close_rate" => kind == Connections,
        "close" => matches!(kind, Crr | Connections),
        "nodelay" => protocol == Protocol::Tcp,
        "rcvlowat" | "bytes" => kind == Stream && protocol == Protocol::Tcp,
        "direction" | "message_size" | "rate_bps" => kind == Stream,
        "parallel" => matches!(kind, Stream | Crr | Http),
        "request_size" | "response_size" => matches!(kind, Rr | Crr),
        "inflight" => kind == Rr,
        "udp_timeout" => kind == Rr && protocol == Protocol::Udp,
        "frame_size" | "rate_pps" | "duplex" | "sources" | "destinations" | "timestamps"
        | "probe_every" => kind == Latency,
        "bind" | "payload" => kind != Latency,
        _ => true,
    }
}

/// The resolved spec: every default filled in. One value of this type is
/// passed to every part of a test.
#[derive(Clone, Debug, Serialize)]
pub struct Spec {
    pub kind: Kind,
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub duration: f64,
    pub warmup: f64,
    pub interval: f64,
    pub bind: Option<IpAddr>,
    pub data_port: Option<u16>,
    pub client_port: Option<u16>,
    pub socket_buffer: Option<u64>,
    pub nodelay: bool,
    pub direction: Direction,
    pub message_size: usize,
    /// TCP stream receivers: SO_RCVLOWAT, the bytes queued before a blocked
    /// read wakes (1 = the kernel's default, wake on any data).
    pub rcvlowat: usize,
    pub parallel: usize,
    pub payload: Payload,
    pub rate_bps: Option<u64>,
    /// TCP stream: a ttcp-style fixed transfer of this many bytes (`duration`
    /// is then its time limit, and there is no warm-up).
    pub bytes: Option<u64>,
    pub request_size: usize,
    pub response_size: usize,
    pub inflight: usize,
    pub udp_timeout: f64,
    /// http: paths fetched round-robin.
    pub urls: Vec<String>,
    pub keepalive: bool,
    /// http: fetches/s; crr: connections/s across the loops; connections: opens/s.
    pub rate: Option<f64>,
    /// Per-operation deadline (connect, each response); a miss is counted, not fatal.
    pub timeout: Option<f64>,
    pub connections: u64,
    pub hold: f64,
    pub close_rate: Option<f64>,
    /// crr and connections: how each connection ends.
    pub close: Close,
    pub frame_size: usize,
    pub rate_pps: f64,
    pub duplex: Duplex,
    pub sources: Vec<IpAddr>,
    pub destinations: Vec<IpAddr>,
    pub timestamps: Timestamps,
    /// Latency under load: the whole stream of `rate_pps` frames leaves on a
    /// packet socket and one in this many is a timestamped probe (None: every
    /// frame is a probe on a UDP socket).
    pub probe_every: Option<u64>,
    /// The flood's own fields (kind flood only).
    #[serde(flatten)]
    pub flood: Option<FloodSpec>,
    /// Testbed hosts whose CPU is read at the measured window's edges.
    pub cpu_groups: Vec<CpuGroup>,
}

fn short(s: &str) -> String {
    // serde's messages carry " at line 1 column 17"; the field already says where.
    match s.find(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

impl Spec {
    /// Parses a spec given as JSON text.
    pub fn parse(text: &str) -> Result<Spec> {
        let value: Value = serde_json::from_str(text).map_err(|e| EngineError::Spec {
            field: None,
            message: format!(
                "the spec is not valid JSON ({}): give one JSON object such as \
                 {{\"kind\":\"stream\",\"server\":\"198.18.2.2:5201\"}}",
                e
            ),
        })?;
        Spec::from_value(value)
    }

    /// Parses and validates a spec given as a JSON value.
    pub fn from_value(value: Value) -> Result<Spec> {
        let obj = value.as_object().ok_or_else(|| EngineError::Spec {
            field: None,
            message: "the spec must be a JSON object such as {\"kind\":\"rr\",\"server\":\"198.18.2.2:5201\"}".into(),
        })?;
        for key in obj.keys() {
            if !FIELDS.contains(&key.as_str()) {
                return Err(EngineError::spec(
                    key,
                    format!(
                        "unknown field `{}`: remove it or use one of: {}",
                        key,
                        FIELDS.join(", ")
                    ),
                ));
            }
        }
        let raw: RawSpec = serde_path_to_error::deserialize(&value).map_err(|e| {
            let field = e.path().to_string();
            let inner = short(&e.inner().to_string());
            EngineError::Spec {
                message: format!("`{}` is malformed: {}; fix its value", field, inner),
                field: Some(field),
            }
        })?;
        let kind = raw.kind.ok_or_else(|| {
            EngineError::spec(
                "kind",
                "`kind` is required: set it to \"stream\", \"rr\", \"crr\", \"latency\", \"http\", \"connections\" or \"flood\"",
            )
        })?;
        let protocol = raw.protocol.unwrap_or(if kind == Kind::Latency {
            Protocol::Udp
        } else {
            Protocol::Tcp
        });
        for (key, v) in obj {
            if !v.is_null() && !applies(key, kind, protocol) {
                return Err(EngineError::spec(
                    key,
                    format!(
                        "`{}` does not apply to kind {} over {}: remove it",
                        key,
                        kind.name(),
                        protocol.name()
                    ),
                ));
            }
        }
        resolve(raw, kind, protocol)
    }

    /// The resolved spec as JSON, with only the fields that apply to its kind.
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut v {
            map.retain(|k, _| applies(k, self.kind, self.protocol));
        }
        v
    }

    /// Refuses a socket buffer above what this host's sysctls allow (the
    /// kernel would silently clamp it).
    pub fn check_local_limits(&self) -> Result<()> {
        self.check_rcvlowat_limit()?;
        let Some(want) = self.socket_buffer else {
            return Ok(());
        };
        for name in ["wmem_max", "rmem_max"] {
            let max =
                sysctl_numbers(&format!("net/core/{}", name)).and_then(|v| v.first().copied());
            if let Some(max) = max {
                if want > max {
                    return Err(EngineError::spec(
                        "socket_buffer",
                        format!(
                            "socket_buffer {} is above net.core.{} = {} on this host: \
                             use at most {} or raise it (sysctl -w net.core.{}={})",
                            want, name, max, max, name, want
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses an `rcvlowat` the kernel would silently cap: above half of
    /// `net.ipv4.tcp_rmem`'s maximum, or above a fixed `socket_buffer`. (The
    /// server gets the resolved spec, so given and default values alike.)
    fn check_rcvlowat_limit(&self) -> Result<()> {
        if self.rcvlowat <= 1 || !applies("rcvlowat", self.kind, self.protocol) {
            return Ok(());
        }
        let want = self.rcvlowat as u64;
        if let Some(buf) = self.socket_buffer {
            if want > buf {
                return Err(EngineError::spec(
                    "rcvlowat",
                    format!(
                        "rcvlowat {} is above socket_buffer {}: the kernel would cap it there; use at most {}",
                        want, buf, buf
                    ),
                ));
            }
            return Ok(());
        }
        if let Some(&[min, default, max]) = sysctl_numbers("net/ipv4/tcp_rmem").as_deref() {
            if want > max / 2 {
                return Err(EngineError::spec(
                    "rcvlowat",
                    format!(
                        "rcvlowat {} (the default is the message size, at most 2 MiB) is above half of net.ipv4.tcp_rmem's maximum ({}) on this host, where the kernel caps it: \
                         give rcvlowat of at most {} or raise the maximum (sysctl -w net.ipv4.tcp_rmem=\"{} {} {}\")",
                        want, max, max / 2, min, default, want * 2
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn total_seconds(&self) -> f64 {
        match self.kind {
            // open (at most `duration`), hold, validate, close and drain.
            Kind::Connections => self.duration + self.hold + 2.0 * self.timeout.unwrap_or(5.0),
            _ => self.warmup + self.duration,
        }
    }
}

/// The numbers of a sysctl under /proc/sys (`net/core/rmem_max`), or None
/// if it cannot be read.
fn sysctl_numbers(name: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/sys/{}", name)).ok()?;
    text.split_whitespace().map(|n| n.parse().ok()).collect()
}

fn size(field: &str, v: Option<u64>, default: usize, protocol: Protocol) -> Result<usize> {
    let v = v.unwrap_or(default as u64);
    if v == 0 {
        return Err(EngineError::spec(
            field,
            format!(
                "{} must be at least 1 byte (got 0): give a size such as {}",
                field, default
            ),
        ));
    }
    let (max, why) = match protocol {
        Protocol::Udp => (UDP_MAX, "the largest UDP payload"),
        Protocol::Tcp => (TCP_MAX, "64 MiB"),
    };
    if v > max as u64 {
        return Err(EngineError::spec(
            field,
            format!(
                "{} {} is above {} ({} bytes): use at most {}",
                field, v, why, max, max
            ),
        ));
    }
    Ok(v as usize)
}

fn seconds(
    field: &str,
    v: f64,
    min_exclusive: bool,
    min: f64,
    max: f64,
    hint: &str,
) -> Result<f64> {
    let low_ok = if min_exclusive { v > min } else { v >= min };
    if !v.is_finite() || !low_ok || v > max {
        let low = if min_exclusive { ">" } else { "≥" };
        return Err(EngineError::spec(
            field,
            format!(
                "{} must be {} {} and ≤ {} seconds (got {}): give e.g. {}",
                field, low, min, max, v, hint
            ),
        ));
    }
    Ok(v)
}

/// The hosts' CPU counters, each checked to be a cgroup counter file.
fn cpu_groups_of(raw: &Option<Vec<CpuGroup>>) -> Result<Vec<CpuGroup>> {
    let groups = raw.clone().unwrap_or_default();
    for g in &groups {
        g.check()?;
    }
    Ok(groups)
}

fn resolve(raw: RawSpec, kind: Kind, protocol: Protocol) -> Result<Spec> {
    if kind == Kind::Flood {
        return resolve_flood(raw);
    }
    let server_text = raw.server.ok_or_else(|| {
        EngineError::spec(
            "server",
            "`server` is required: give the server's control address, e.g. \"198.18.2.2:5201\" or \"[2001:2::2]:5201\"",
        )
    })?;
    let server: SocketAddr = server_text.parse().map_err(|_| {
        EngineError::spec(
            "server",
            format!(
                "server \"{}\" is not ADDR:PORT: give an IP address and port, e.g. \"198.18.2.2:5201\" or \"[2001:2::2]:5201\"",
                server_text
            ),
        )
    })?;
    if server.port() == 0 {
        return Err(EngineError::spec(
            "server",
            "server port 0 is not a port: give the port `serve --listen` uses, e.g. 5201",
        ));
    }
    if matches!(kind, Kind::Http | Kind::Connections) && protocol == Protocol::Udp {
        return Err(EngineError::spec(
            "protocol",
            format!(
                "{} is TCP only: set protocol to \"tcp\" or leave it out",
                kind.name()
            ),
        ));
    }
    if kind == Kind::Crr && protocol == Protocol::Udp {
        return Err(EngineError::spec(
            "protocol",
            "crr (connect-request-response) is TCP only: set protocol to \"tcp\" or use kind \"rr\" for UDP",
        ));
    }
    let duration = duration_of(raw.duration)?;
    let warmup = seconds("warmup", raw.warmup.unwrap_or(1.0), false, 0.0, 600.0, "1")?;
    let interval = interval_of(raw.interval)?;
    let warmup = fixed_transfer(raw.bytes, raw.warmup, raw.direction, raw.parallel, warmup)?;
    if let Some(bind) = raw.bind {
        if bind.is_ipv4() != server.is_ipv4() {
            return Err(EngineError::spec(
                "bind",
                format!(
                    "bind {} and server {} are of different IP families: give a bind address of the server's family",
                    bind, server
                ),
            ));
        }
    }
    if let Some(b) = raw.socket_buffer {
        if b < 1024 {
            return Err(EngineError::spec(
                "socket_buffer",
                format!(
                    "socket_buffer {} is too small: give at least 1024 bytes, e.g. 65536",
                    b
                ),
            ));
        }
    }
    let parallel = raw.parallel.unwrap_or(1);
    // http's parallel is connections in flight (http_load -parallel), not threads of a stream.
    let max_parallel = if kind == Kind::Http { 1024 } else { 128 };
    if !(1..=max_parallel).contains(&parallel) {
        return Err(EngineError::spec(
            "parallel",
            format!(
                "parallel must be 1..={} (got {}): give e.g. 4",
                max_parallel, parallel
            ),
        ));
    }
    let extra = crate::spec_extra::resolve(
        &raw.urls,
        raw.rate,
        raw.timeout,
        raw.connections,
        raw.hold,
        raw.close_rate,
        kind,
    )?;
    let default_msg = match protocol {
        Protocol::Tcp => 131072,
        Protocol::Udp => 1024,
    };
    let message_size = size("message_size", raw.message_size, default_msg, protocol)?;
    let rcvlowat = rcvlowat_of(raw.rcvlowat, raw.rate_bps, raw.socket_buffer, message_size)?;
    let request_size = size("request_size", raw.request_size, 1, protocol)?;
    let response_size = size("response_size", raw.response_size, 1, protocol)?;
    if raw.rate_bps == Some(0) {
        return Err(EngineError::spec(
            "rate_bps",
            "rate_bps 0 sends nothing: give a rate in bits/s such as 100000000, or leave it out for no pacing",
        ));
    }
    let inflight = raw.inflight.unwrap_or(1);
    if !(1..=64).contains(&inflight) {
        return Err(EngineError::spec(
            "inflight",
            format!("inflight must be 1..=64 (got {}): give e.g. 1", inflight),
        ));
    }
    let inflight = inflight as usize;
    if inflight > 1 && inflight * (request_size + response_size) > INFLIGHT_BYTES_MAX {
        return Err(EngineError::spec(
            "inflight",
            format!(
                "inflight {} × (request_size + response_size) = {} bytes is above {}: both ends could block writing; lower inflight or the sizes",
                inflight,
                inflight * (request_size + response_size),
                INFLIGHT_BYTES_MAX
            ),
        ));
    }
    if kind == Kind::Latency && protocol == Protocol::Tcp {
        return Err(EngineError::spec(
            "protocol",
            "latency probes are UDP: set protocol to \"udp\" or leave it out",
        ));
    }
    let frame_size = raw.frame_size.unwrap_or(FRAME_MIN);
    if !(FRAME_MIN..=FRAME_MAX).contains(&frame_size) {
        return Err(EngineError::spec(
            "frame_size",
            format!(
                "frame_size {} is outside {}..={} (an Ethernet frame with its 14 B header and 4 B FCS): give e.g. 64",
                frame_size, FRAME_MIN, FRAME_MAX
            ),
        ));
    }
    let payload = crate::latency::payload_len(frame_size as usize, server.is_ipv6());
    if kind == Kind::Latency && payload < crate::latency::HEADER {
        return Err(EngineError::spec(
            "frame_size",
            format!(
                "frame_size {} leaves {} bytes of UDP payload over IPv{}, fewer than the {} a probe needs: use at least {}",
                frame_size,
                payload,
                if server.is_ipv6() { 6 } else { 4 },
                crate::latency::HEADER,
                18 + if server.is_ipv6() { 40 } else { 20 } + 8 + crate::latency::HEADER
            ),
        ));
    }
    let rate_pps = raw.rate_pps.unwrap_or(1000.0);
    if !rate_pps.is_finite() || rate_pps <= 0.0 || rate_pps > RATE_PPS_MAX {
        return Err(EngineError::spec(
            "rate_pps",
            format!(
                "rate_pps must be > 0 and ≤ {} probes/s per direction (got {}): give e.g. 1000",
                RATE_PPS_MAX, rate_pps
            ),
        ));
    }
    let sources = match raw.sources {
        None => Vec::new(),
        Some(Sources::List(list)) => list,
        Some(Sources::Cidr(_)) => {
            return Err(EngineError::spec(
                "sources",
                "latency sources is a list of addresses such as [\"198.18.1.10\"], not a CIDR",
            ))
        }
    };
    let probe_every = probe_every_of(raw.probe_every, raw.duplex, raw.timestamps, server)?;
    let destinations = raw.destinations.unwrap_or_default();
    for (field, list) in [("sources", &sources), ("destinations", &destinations)] {
        if list.len() > ADDRESSES_MAX {
            return Err(EngineError::spec(
                field,
                format!(
                    "{} lists {} addresses: give at most {}",
                    field,
                    list.len(),
                    ADDRESSES_MAX
                ),
            ));
        }
        if let Some(a) = list.iter().find(|a| a.is_ipv4() != server.is_ipv4()) {
            return Err(EngineError::spec(
                field,
                format!(
                    "{} {} is not of the server's IP family ({}): give addresses of one family",
                    field, a, server
                ),
            ));
        }
    }
    if !sources.is_empty()
        && !destinations.is_empty()
        && sources.len() != destinations.len()
        && sources.len() != 1
        && destinations.len() != 1
    {
        return Err(EngineError::spec(
            "destinations",
            format!(
                "sources ({}) and destinations ({}) are paired i↔i: give lists of the same length, or one of them with a single address",
                sources.len(),
                destinations.len()
            ),
        ));
    }
    let udp_timeout = seconds(
        "udp_timeout",
        raw.udp_timeout.unwrap_or(0.1),
        true,
        0.0,
        60.0,
        "0.1",
    )?;
    Ok(Spec {
        cpu_groups: cpu_groups_of(&raw.cpu_groups)?,
        kind,
        server,
        protocol,
        duration,
        warmup,
        interval,
        bind: raw.bind,
        data_port: raw.data_port,
        client_port: raw.client_port,
        socket_buffer: raw.socket_buffer,
        nodelay: raw.nodelay.unwrap_or(kind != Kind::Stream),
        direction: raw.direction.unwrap_or(Direction::Send),
        message_size,
        rcvlowat,
        parallel: parallel as usize,
        payload: raw.payload.unwrap_or(Payload::Random),
        rate_bps: raw.rate_bps,
        bytes: raw.bytes,
        request_size,
        response_size,
        inflight,
        udp_timeout,
        urls: extra.urls,
        keepalive: raw.keepalive.unwrap_or(false),
        rate: extra.rate,
        timeout: extra.timeout,
        connections: extra.connections,
        hold: extra.hold,
        close_rate: extra.close_rate,
        close: raw.close.unwrap_or_default(),
        frame_size: frame_size as usize,
        rate_pps,
        duplex: raw.duplex.unwrap_or(Duplex::Full),
        sources,
        destinations,
        timestamps: raw.timestamps.unwrap_or(Timestamps::Kernel),
        probe_every,
        flood: None,
    })
}

/// Most frames between two probes of latency under load.
pub const PROBE_EVERY_MAX: u64 = 1_000_000;

/// `probe_every`: latency under load needs IPv4, full duplex and kernel stamps.
fn probe_every_of(
    probe_every: Option<u64>,
    duplex: Option<Duplex>,
    timestamps: Option<Timestamps>,
    server: SocketAddr,
) -> Result<Option<u64>> {
    let Some(n) = probe_every else {
        return Ok(None);
    };
    let refuse = |m: &str| Err(EngineError::spec("probe_every", m.to_string()));
    if !(1..=PROBE_EVERY_MAX).contains(&n) {
        return Err(EngineError::spec(
            "probe_every",
            format!(
                "probe_every {} is outside 1..={}: give e.g. 100 (one frame in 100 is a probe)",
                n, PROBE_EVERY_MAX
            ),
        ));
    }
    if server.is_ipv6() {
        return refuse("latency under load (probe_every) sends IPv4 frames: use an IPv4 server, or leave probe_every out");
    }
    if duplex == Some(Duplex::Half) {
        return refuse("latency under load (probe_every) runs full duplex (both ends send the load): set duplex to \"full\" or leave probe_every out");
    }
    if timestamps == Some(Timestamps::User) {
        return refuse(
            "latency under load (probe_every) takes kernel stamps only: leave timestamps out",
        );
    }
    Ok(Some(n))
}

/// `rcvlowat`: given, 1 ..= TCP_MAX; by default the message size for
/// unpaced streams of large messages (one wake-up per message instead of one
/// per arriving packet), else 1. A paced stream keeps 1 so that its interval
/// figures are not lumped into message-sized steps. The default stays within
/// what the kernel keeps (a fixed `socket_buffer` caps it), so the resolved
/// spec shows the value in force.
fn rcvlowat_of(
    given: Option<u64>,
    rate_bps: Option<u64>,
    socket_buffer: Option<u64>,
    message_size: usize,
) -> Result<usize> {
    match given {
        Some(0) => Err(EngineError::spec(
            "rcvlowat",
            "rcvlowat must be at least 1 byte (got 0): give 1 to wake the receiver on any data, or leave it out",
        )),
        Some(v) if v > TCP_MAX as u64 => Err(EngineError::spec(
            "rcvlowat",
            format!(
                "rcvlowat {} is above 64 MiB ({} bytes): use at most {}, or leave it out",
                v, TCP_MAX, TCP_MAX
            ),
        )),
        Some(v) => Ok(v as usize),
        None if message_size >= RCVLOWAT_FROM && rate_bps.is_none() => {
            let fixed = socket_buffer.map_or(usize::MAX, |b| b as usize);
            Ok(message_size.min(RCVLOWAT_DEFAULT_MAX).min(fixed))
        }
        None => Ok(1),
    }
}

/// `duration`: default 10 s, at most an hour; every kind, floods too.
/// Most bytes one fixed transfer may move (1 TiB).
pub const TRANSFER_MAX: u64 = 1 << 40;

/// A fixed transfer (`bytes`): one connection in one direction, timed from its
/// start to the last byte's arrival, so a warm-up has no meaning (0, and any
/// other value is refused). Returns the warm-up to use.
fn fixed_transfer(
    bytes: Option<u64>,
    raw_warmup: Option<f64>,
    direction: Option<Direction>,
    parallel: Option<u64>,
    warmup: f64,
) -> Result<f64> {
    let Some(n) = bytes else {
        return Ok(warmup);
    };
    if !(1..=TRANSFER_MAX).contains(&n) {
        return Err(EngineError::spec(
            "bytes",
            format!(
                "bytes must be 1..={} (got {}): give e.g. 67108864 (64 MiB)",
                TRANSFER_MAX, n
            ),
        ));
    }
    if raw_warmup.is_some_and(|w| w != 0.0) {
        return Err(EngineError::spec(
            "warmup",
            "a fixed transfer (bytes) is timed from its first byte to its last: remove warmup or give 0",
        ));
    }
    if direction == Some(Direction::Both) {
        return Err(EngineError::spec(
            "direction",
            "a fixed transfer (bytes) goes one way, as ttcp's: give direction \"send\" or \"receive\"",
        ));
    }
    if parallel.is_some_and(|p| p != 1) {
        return Err(EngineError::spec(
            "parallel",
            "a fixed transfer (bytes) is one connection, as ttcp's: remove parallel or give 1",
        ));
    }
    Ok(0.0)
}

fn duration_of(duration: Option<f64>) -> Result<f64> {
    seconds(
        "duration",
        duration.unwrap_or(10.0),
        true,
        0.0,
        3600.0,
        "10",
    )
}

/// `interval`: default 1 s; 0 means no interval records.
fn interval_of(interval: Option<f64>) -> Result<f64> {
    let interval = interval.unwrap_or(1.0);
    if interval != 0.0 {
        seconds(
            "interval",
            interval,
            false,
            0.01,
            3600.0,
            "1 (or 0 for no interval records)",
        )?;
    }
    Ok(interval)
}

/// A flood: its own fields, a duration and an interval; the rest of the
/// spec keeps inert defaults (`server` is the target's first port, unused).
fn resolve_flood(raw: RawSpec) -> Result<Spec> {
    let duration = duration_of(raw.duration)?;
    let interval = interval_of(raw.interval)?;
    let f =
        flood_spec::resolve(
            FloodRaw {
                flood: raw.flood,
                target: raw.target,
                rate_pps: flood_rate(raw.rate_pps)?,
                count: raw.count,
                payload_size: raw.payload_size,
                sources: match raw.sources {
                    None => None,
                    Some(Sources::Cidr(c)) => Some(c),
                    Some(Sources::List(_)) => return Err(EngineError::spec(
                        "sources",
                        "a flood's sources is one IPv4 CIDR such as \"198.18.4.0/24\", not a list",
                    )),
                },
                ports: raw.ports,
                sender: raw.sender,
            },
            duration,
        )?;
    Ok(Spec {
        cpu_groups: cpu_groups_of(&raw.cpu_groups)?,
        kind: Kind::Flood,
        server: SocketAddr::new(IpAddr::V4(f.target), f.port_range.0),
        protocol: Protocol::Udp,
        duration,
        warmup: 0.0,
        interval,
        bind: None,
        data_port: None,
        client_port: None,
        socket_buffer: None,
        nodelay: false,
        direction: Direction::Send,
        message_size: f.packet_size(),
        rcvlowat: 1,
        parallel: 1,
        payload: Payload::Random,
        rate_bps: None,
        bytes: None,
        request_size: 1,
        response_size: 1,
        inflight: 1,
        udp_timeout: 0.1,
        urls: Vec::new(),
        keepalive: false,
        rate: None,
        timeout: None,
        connections: 0,
        hold: 0.0,
        close_rate: None,
        close: Close::Fin,
        frame_size: 64,
        rate_pps: 0.0,
        duplex: Duplex::Full,
        sources: Vec::new(),
        destinations: Vec::new(),
        timestamps: Timestamps::Kernel,
        probe_every: None,
        flood: Some(f),
    })
}
