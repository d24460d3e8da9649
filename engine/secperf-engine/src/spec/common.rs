//! What the kinds' specs share: the vocabulary (protocol, direction, …), the
//! common part of every kind that runs against a server, the checks of sizes
//! and times, and the two things the parser needs from a kind's raw struct: its
//! field names (read from its serde derive, so no list is kept by hand) and the
//! old names of renamed fields.

use std::net::{IpAddr, SocketAddr};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};
pub use crate::rt::cpu::CpuGroup;
pub use crate::rt::guard::Prefix;
pub use crate::rt::net::Protocol;
pub use crate::rt::payload::Payload;

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

/// How the connections kind's server answers each client FIN: `fin`, its own
/// FIN (an orderly close, the client keeps the TIME_WAIT), or `reset`,
/// SO_LINGER 0 (an RST, no TIME_WAIT on either side).
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

/// How crr ends each connection. `server-first` (the default): the server
/// closes right after its response, the client reads the response, then the
/// end of stream, then closes (netperf's TCP_CRR, an HTTP/1.0 or
/// `Connection: close` server; the server keeps the TIME_WAIT).
/// `client-first` (`fin`, its old name): the client shuts down its write side
/// after the response, the server reads that end of stream and closes, the
/// client reads the server's and closes: half a round trip more, the client
/// keeps the TIME_WAIT. Both are orderly (a FIN each way through the path).
/// `reset`: the client closes with SO_LINGER 0 (one RST, no FIN, no TIME_WAIT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CloseOrder {
    #[default]
    #[serde(rename = "server-first")]
    ServerFirst,
    #[serde(rename = "client-first", alias = "fin")]
    ClientFirst,
    #[serde(rename = "reset")]
    Reset,
}

impl CloseOrder {
    pub fn name(self) -> &'static str {
        match self {
            CloseOrder::ServerFirst => "server-first",
            CloseOrder::ClientFirst => "client-first",
            CloseOrder::Reset => "reset",
        }
    }
}

/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const UDP_MAX: usize = 65507;
/// Sanity bound for TCP message/request/response sizes.
pub const TCP_MAX: usize = 64 << 20;

/// The part of the spec every kind that runs against a server shares (all
/// but `flood` and `mix`).
#[derive(Clone, Debug, Serialize)]
pub struct Common {
    /// The server's control address (http: the web server's).
    pub server: SocketAddr,
    pub protocol: Protocol,
    /// Measured time, after the warm-up.
    pub duration: f64,
    /// Testbed hosts whose CPU is read at the measured window's edges.
    pub cpu_groups: Vec<CpuGroup>,
}

impl Common {
    /// The server (control and data) as the target guard sees it.
    pub fn server_target(&self) -> Vec<(String, IpAddr)> {
        vec![("server".to_string(), self.server.ip())]
    }

    /// The common fields as given; `protocol` is already resolved (the parser
    /// needs it before the raw struct, to refuse fields by protocol).
    pub(crate) fn resolve(
        server: Option<String>,
        protocol: Protocol,
        duration: Option<f64>,
        cpu_groups: Option<Vec<CpuGroup>>,
    ) -> Result<Common> {
        let server_text = server.ok_or_else(|| {
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
        Ok(Common {
            server,
            protocol,
            duration: duration_of(duration)?,
            cpu_groups: cpu_groups_of(cpu_groups)?,
        })
    }
}

/// The raw struct of a kind that runs against a server: the common fields
/// (`server`, `protocol`, `duration`, `cpu_groups`), then the kind's own.
/// Every field is optional and unknown fields are refused.
macro_rules! server_kind_raw {
    ($(#[$m:meta])* struct $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            /// The server's control address; `[v6]:port` for IPv6; an IP literal, not a name.
            /// Value: `"ADDR:PORT"` (required)
            pub server: Option<String>,
            /// `crr` is TCP only.
            /// Value: `"tcp"` | `"udp"`, default `"tcp"`
            pub protocol: Option<$crate::spec::common::Protocol>,
            /// Measured time, after warm-up.
            /// Value: float, default 10, 0 < d ≤ 3600
            pub duration: Option<f64>,
            /// Testbed hosts whose CPU the result reports (`host_cpu`), read at the measured
            /// window's edges. `path` is the host's cgroup counter,
            /// `/sys/fs/cgroup/…/cpuacct.usage` (v1, ns) or `…/cpu.stat` (v2, `usage_usec`);
            /// anything else is a spec error. `fd` (optional) is that file opened by the caller
            /// and inherited: `ip netns exec` remounts /sys for the namespace, so the engine
            /// reads `/proc/self/fd/N` instead of the path. secperf fills it in for every test
            /// it starts.
            /// Value: list of `{"host": NAME, "path": FILE, "fd": N}`, default `[]`
            pub cpu_groups: Option<Vec<$crate::spec::common::CpuGroup>>,
            $($(#[$fm])* pub $field: $ty,)*
        }
    };
}
pub(crate) use server_kind_raw;

/// How a kind's spec is read: its raw struct (as given, every field
/// optional), which fields apply over one protocol only, and how the raw
/// struct resolves (defaults filled in, every value checked).
pub(crate) trait KindSpec: Sized + Serialize {
    const NAME: &'static str;
    /// The protocol when none is given; None: the kind has no `protocol`.
    const PROTOCOL: Option<Protocol>;
    /// Fields that apply over this protocol only.
    const PROTOCOL_ONLY: &'static [(&'static str, Protocol)] = &[];
    type Raw: DeserializeOwned;
    fn resolve(raw: Self::Raw, names: &Names) -> Result<Self>;

    /// The protocol of a resolved spec (None: the kind has none).
    fn protocol(&self) -> Option<Protocol>;

    /// The resolved spec as JSON: `kind`, then the fields that apply over
    /// its protocol (the records and the server get this).
    fn to_value(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("kind".into(), Value::from(Self::NAME));
            if let Some(p) = self.protocol() {
                m.retain(|k, _| Self::PROTOCOL_ONLY.iter().all(|(f, q)| k != f || *q == p));
            }
        }
        v
    }
}

/// Renamed fields: (old name, name), the old one still accepted.
pub const OLD_NAMES: &[(&str, &str)] = &[
    ("message_size", "message"),
    ("request_size", "request"),
    ("response_size", "response"),
];

/// Which names the spec used for renamed fields, so that an error names the
/// field as the user wrote it.
#[derive(Debug, Default)]
pub struct Names {
    old: Vec<&'static str>,
}

impl Names {
    pub(crate) fn new(given: impl Fn(&str) -> bool) -> Names {
        Names {
            old: OLD_NAMES
                .iter()
                .filter(|(old, _)| given(old))
                .map(|(old, _)| *old)
                .collect(),
        }
    }

    /// The name the spec gave `field` (its old name if that was used).
    pub fn of(&self, field: &'static str) -> &'static str {
        OLD_NAMES
            .iter()
            .find(|(old, new)| *new == field && self.old.contains(old))
            .map_or(field, |(old, _)| old)
    }
}

/// The field names (aliases included) a `Deserialize` struct accepts, as its
/// derive declares them: asked of the type, so no list is kept by hand.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The type asks for a struct with its fields; the answer is always an error.
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A Deserializer that only records the fields a struct asks for.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> std::result::Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("fields read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// `sources` means a list of addresses (latency) or one CIDR (flood).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Sources {
    List(Vec<IpAddr>),
    Cidr(String),
}

/// The numbers of a sysctl under /proc/sys (`net/core/rmem_max`), or None
/// if it cannot be read.
pub fn sysctl_numbers(name: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/sys/{}", name)).ok()?;
    text.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// Refuses a socket buffer above what this host's sysctls allow (the kernel
/// would silently clamp it).
pub fn check_socket_buffer(socket_buffer: Option<u64>) -> Result<()> {
    let Some(want) = socket_buffer else {
        return Ok(());
    };
    for name in ["wmem_max", "rmem_max"] {
        let max = sysctl_numbers(&format!("net/core/{}", name)).and_then(|v| v.first().copied());
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

/// A message, request or response size: at least 1 byte, at most what the
/// protocol carries. `field` is the name the spec used.
pub fn size(field: &str, v: Option<u64>, default: usize, protocol: Protocol) -> Result<usize> {
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

pub fn seconds(
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

/// `duration`: default 10 s, at most an hour; every kind, floods too.
pub fn duration_of(duration: Option<f64>) -> Result<f64> {
    seconds(
        "duration",
        duration.unwrap_or(10.0),
        true,
        0.0,
        3600.0,
        "10",
    )
}

/// `warmup`: default 1 s, at most 10 minutes.
pub fn warmup_of(warmup: Option<f64>) -> Result<f64> {
    seconds("warmup", warmup.unwrap_or(1.0), false, 0.0, 600.0, "1")
}

/// `interval`: default 1 s; 0 means no interval records.
pub fn interval_of(interval: Option<f64>) -> Result<f64> {
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

/// `bind`: an address of the server's family.
pub fn bind_of(bind: Option<IpAddr>, server: SocketAddr) -> Result<Option<IpAddr>> {
    if let Some(bind) = bind {
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
    Ok(bind)
}

/// `socket_buffer`: at least 1 KiB.
pub fn socket_buffer_of(b: Option<u64>) -> Result<Option<u64>> {
    if let Some(b) = b {
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
    Ok(b)
}

/// `parallel`: 1 ..= max.
pub fn parallel_of(parallel: Option<u64>, max: u64) -> Result<usize> {
    let parallel = parallel.unwrap_or(1);
    if !(1..=max).contains(&parallel) {
        return Err(EngineError::spec(
            "parallel",
            format!(
                "parallel must be 1..={} (got {}): give e.g. 4",
                max, parallel
            ),
        ));
    }
    Ok(parallel as usize)
}

/// Most event-loop threads a kind may ask for.
pub const MAX_THREADS: u64 = 64;

/// `threads`: the event-loop threads that share a kind's connections (or
/// virtual clients); default one per CPU this process may use, never more
/// than there are connections.
pub fn threads_of(threads: Option<u64>, connections: usize) -> Result<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match threads {
        None => cpus.min(MAX_THREADS as usize),
        Some(t) if (1..=MAX_THREADS).contains(&t) => t as usize,
        Some(t) => {
            return Err(EngineError::spec(
                "threads",
                format!(
                    "threads must be 1..={} (got {}): give e.g. 1, or leave it out for one per CPU",
                    MAX_THREADS, t
                ),
            ))
        }
    };
    Ok(threads.min(connections.max(1)))
}

/// `busy_poll_us`: how long an event-loop thread that finds nothing ready
/// keeps asking before it sleeps (rt::evloop); 0 (the default) sleeps at once.
pub fn busy_poll_of(us: Option<u64>) -> Result<u64> {
    let max = crate::rt::evloop::MAX_BUSY_POLL_US;
    match us {
        None => Ok(0),
        Some(v) if v <= max => Ok(v),
        Some(v) => Err(EngineError::spec(
            "busy_poll_us",
            format!(
                "busy_poll_us must be 0..={} microseconds (got {}): give e.g. 50, or 0 to sleep at once",
                max, v
            ),
        )),
    }
}

/// A rate of things per second (`rate`, `close_rate`): > 0 and ≤ 1e7, or absent.
pub fn per_second_of(field: &str, v: Option<f64>) -> Result<Option<f64>> {
    match v {
        Some(r) if !(r.is_finite() && r > 0.0 && r <= 10_000_000.0) => Err(EngineError::spec(
            field,
            format!(
                "{} must be > 0 and ≤ 1e7 per second (got {}): give e.g. 1000, or leave it out for as fast as possible",
                field, r
            ),
        )),
        v => Ok(v),
    }
}

/// `timeout`: a per-operation deadline, > 0 and ≤ 120 s, else `default`.
pub fn timeout_of(timeout: Option<f64>, default: Option<f64>) -> Result<Option<f64>> {
    match timeout {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 120.0) => Err(EngineError::spec(
            "timeout",
            format!(
                "timeout must be > 0 and ≤ 120 seconds (got {}): give e.g. 5",
                t
            ),
        )),
        Some(t) => Ok(Some(t)),
        None => Ok(default),
    }
}

/// The hosts' CPU counters, each checked to be a cgroup counter file.
pub fn cpu_groups_of(raw: Option<Vec<CpuGroup>>) -> Result<Vec<CpuGroup>> {
    let groups = raw.unwrap_or_default();
    for g in &groups {
        g.check()?;
    }
    Ok(groups)
}

/// A kind that is TCP only refuses `protocol` "udp".
pub fn tcp_only(protocol: Protocol, message: &str) -> Result<()> {
    if protocol == Protocol::Udp {
        return Err(EngineError::spec("protocol", message.to_string()));
    }
    Ok(())
}

/// Most source addresses one test spreads its connections over.
pub const MAX_SOURCES: usize = 4096;

/// Connections one source address holds to the server's one port: the
/// testbed's client ports are 1024-65000, less a margin for other sockets.
pub const PER_SOURCE: u64 = 60_000;

/// `sources`: addresses of the server's family, at most MAX_SOURCES, none twice.
pub fn sources_of(
    sources: Option<Vec<IpAddr>>,
    bind: Option<IpAddr>,
    common: &Common,
) -> Result<Vec<IpAddr>> {
    let list = match (sources, bind) {
        (Some(s), _) => s,
        (None, Some(b)) => vec![b],
        (None, None) => return Ok(Vec::new()),
    };
    if list.len() > MAX_SOURCES {
        return Err(EngineError::spec(
            "sources",
            format!(
                "sources lists {} addresses: give at most {} (each serves ~64 k connections)",
                list.len(),
                MAX_SOURCES
            ),
        ));
    }
    let v6 = common.server.is_ipv6();
    for (i, ip) in list.iter().enumerate() {
        if ip.is_ipv6() != v6 {
            return Err(EngineError::spec(
                "sources",
                format!(
                    "sources[{}] {} is not of the server's address family: give {} addresses of this host",
                    i,
                    ip,
                    if v6 { "IPv6" } else { "IPv4" }
                ),
            ));
        }
        if list[..i].contains(ip) {
            return Err(EngineError::spec(
                "sources",
                format!(
                    "sources[{}] {} is listed twice: give each address once",
                    i, ip
                ),
            ));
        }
    }
    Ok(list)
}

/// `peers`: addresses or prefixes of the server's family, at most
/// MAX_SOURCES: what the server may also see the test's data come from (a NAT
/// between the hosts translates the client's `sources`).
pub fn peers_of(peers: Option<Vec<Prefix>>, common: &Common) -> Result<Vec<Prefix>> {
    let list = peers.unwrap_or_default();
    if list.len() > MAX_SOURCES {
        return Err(EngineError::spec(
            "peers",
            format!(
                "peers lists {} entries: give at most {} (a prefix such as \"198.18.5.0/24\" covers many)",
                list.len(),
                MAX_SOURCES
            ),
        ));
    }
    let v6 = common.server.is_ipv6();
    if let Some((i, p)) = list.iter().enumerate().find(|(_, p)| p.is_ipv6() != v6) {
        return Err(EngineError::spec(
            "peers",
            format!(
                "peers[{}] {} is not of the server's address family: give {} addresses",
                i,
                p,
                if v6 { "IPv6" } else { "IPv4" }
            ),
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Two {
        a: Option<u8>,
        #[serde(alias = "b_old")]
        b: Option<u8>,
    }

    #[test]
    fn field_names_come_from_the_type() {
        assert_eq!(fields_of::<Two>(), &["a", "b", "b_old"]);
    }

    #[test]
    fn names_follow_what_was_given() {
        let n = Names::new(|k| k == "request_size");
        assert_eq!(n.of("request"), "request_size");
        assert_eq!(n.of("response"), "response");
        assert_eq!(n.of("message"), "message");
    }
}
