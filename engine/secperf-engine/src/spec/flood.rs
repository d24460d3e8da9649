//! Kind `flood`: a one-way packet flood (no server side), always bounded by
//! rate, count and duration.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::rt::target;
use crate::spec::common::{
    cpu_groups_of, duration_of, interval_of, CpuGroup, KindSpec, Names, Protocol, Sources,
};
use crate::spec::resolved::Resolved;
use crate::wire::packet::{FloodProto, IPV4_HEADER};

/// 100: RFC 2544's frame-loss test offers 10 % of line rate, 813 frames/s of
/// 1518-byte frames on 100 Mbit/s.
pub const RATE_MIN: u64 = 100;
pub const RATE_MAX: u64 = 10_000_000;
/// Packets stay within a 1500-byte MTU: no fragments.
pub const PACKET_MAX: usize = 1500;
pub const DEFAULT_PORT: u16 = 9;

/// A flood spec as given: every field optional, unknown fields refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    /// How long the flood runs (with `count`: it stops at whichever comes first).
    /// Value: float, default 10, 0 < d ≤ 3600
    duration: Option<f64>,
    /// Interval record period; 0 = no interval records.
    /// Value: float, default 1; 0 = none; else ≥ 0.01
    interval: Option<f64>,
    /// UDP datagrams; TCP SYNs (random source port and sequence); ICMP echo requests.
    /// Value: `"udp"` | `"syn"` | `"icmp"` (required)
    flood: Option<FloodProto>,
    /// Where the flood goes.
    /// Value: IPv4 address, no port (required)
    target: Option<String>,
    /// Packets/s.
    /// Value: int 100..=10 000 000 (required)
    rate_pps: Option<f64>,
    /// Packet bound; the flood stops at `count` or `duration`, whichever comes first.
    /// Value: int ≥ 1, default ceil(rate × duration)
    count: Option<u64>,
    /// Bytes after the UDP/TCP/ICMP header; 18 makes 46-byte IP packets, 64-byte Ethernet
    /// frames.
    /// Value: bytes, default 18 (udp, icmp) / 0 (syn); packets ≤ 1500 bytes
    payload_size: Option<u64>,
    /// One IPv4 CIDR.
    /// Value: IPv4 CIDR, default null = the address the route to `target` uses
    sources: Option<Sources>,
    /// Destination port(s), round-robin.
    /// Value: `"9"` or `"5000-5099"`, default `"9"`; not for icmp
    ports: Option<String>,
    /// How packets leave (above); `auto` = packet when possible, else raw.
    /// Value: `"auto"` | `"packet"` | `"raw"`, default `"auto"`
    sender: Option<FloodSender>,
    /// Testbed hosts whose CPU the result reports (`host_cpu`), read at the measured window's
    /// edges. `path` is the host's cgroup counter, `/sys/fs/cgroup/…/cpuacct.usage` (v1, ns) or
    /// `…/cpu.stat` (v2, `usage_usec`); anything else is a spec error. `fd` (optional) is that
    /// file opened by the caller and inherited: `ip netns exec` remounts /sys for the
    /// namespace, so the engine reads `/proc/self/fd/N` instead of the path. secperf fills it
    /// in for every test it starts.
    /// Value: list of `{"host": NAME, "path": FILE, "fd": N}`, default `[]`
    cpu_groups: Option<Vec<CpuGroup>>,
}

/// How flood packets leave: `packet` writes whole Ethernet frames on the
/// egress interface (AF_PACKET, past the attacker's IP stack); `raw` hands IP
/// packets to the IP stack (IP_HDRINCL); `auto` is packet when the route's
/// interface is Ethernet and the next hop's MAC resolves, else raw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FloodSender {
    #[default]
    Auto,
    Packet,
    Raw,
}

impl FloodSender {
    pub fn name(self) -> &'static str {
        match self {
            FloodSender::Auto => "auto",
            FloodSender::Packet => "packet",
            FloodSender::Raw => "raw",
        }
    }
}

/// An IPv4 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub net: Ipv4Addr,
    pub len: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = a.trim().parse().ok()?;
        let len: u8 = l.trim().parse().ok()?;
        if len > 32 {
            return None;
        }
        let mask = Self::mask(len);
        Some(Cidr {
            net: Ipv4Addr::from(u32::from(addr) & mask),
            len,
        })
    }

    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len))
        }
    }

    /// First and last usable host address (no network/broadcast below /31).
    pub fn hosts(&self) -> (u32, u32) {
        let first = u32::from(self.net);
        let last = first | !Self::mask(self.len);
        if self.len >= 31 {
            (first, last)
        } else {
            (first + 1, last - 1)
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// The packets' fields, as given (the rate already a whole number).
struct Packets {
    flood: Option<FloodProto>,
    target: Option<String>,
    rate_pps: Option<u64>,
    count: Option<u64>,
    payload_size: Option<u64>,
    sources: Option<String>,
    ports: Option<String>,
    sender: Option<FloodSender>,
}

/// A resolved flood spec.
#[derive(Clone, Debug, Serialize)]
pub struct FloodSpec {
    /// At most this long (seconds).
    pub duration: f64,
    pub interval: f64,
    pub flood: FloodProto,
    pub target: Ipv4Addr,
    pub rate_pps: u64,
    pub count: u64,
    pub payload_size: usize,
    /// null: the local address the route to the target uses.
    pub sources: Option<String>,
    pub ports: String,
    /// As asked; the record's `sender` says which one ran.
    pub sender: FloodSender,
    #[serde(skip)]
    pub(crate) source_cidr: Option<Cidr>,
    #[serde(skip)]
    pub(crate) port_range: (u16, u16),
    /// Testbed hosts whose CPU is read over the flood.
    pub cpu_groups: Vec<CpuGroup>,
}

impl FloodSpec {
    /// Bytes of every packet (IP header included).
    pub fn packet_size(&self) -> usize {
        IPV4_HEADER + self.flood.l4_header() + self.payload_size
    }

    /// Refuses a target or source range outside the testbed (198.18.0.0/15
    /// and loopback): floods have no override flag.
    pub fn check_flood_targets(&self) -> Result<()> {
        let refuse = |field: &str, what: String| EngineError::Target {
            field: field.to_string(),
            message: format!(
                "{} {} is outside the testbed ranges 198.18.0.0/15 and loopback: \
                 a flood never leaves the testbed (there is no override); use a testbed address",
                field, what
            ),
        };
        if !target::allowed(IpAddr::V4(self.target)) {
            return Err(refuse("target", self.target.to_string()));
        }
        if let Some(c) = self.source_cidr {
            // The allowed ranges are aligned blocks: both ends in them means all of it is.
            let (first, last) = (u32::from(c.net), u32::from(c.net) | !Cidr::mask(c.len));
            for a in [first, last] {
                if !target::allowed(IpAddr::V4(Ipv4Addr::from(a))) {
                    return Err(refuse("sources", c.to_string()));
                }
            }
        }
        Ok(())
    }
}

fn parse_ports(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let lo: u16 = a.trim().parse().ok()?;
    let hi: u16 = b.trim().parse().ok()?;
    (lo >= 1 && lo <= hi).then_some((lo, hi))
}

impl KindSpec for FloodSpec {
    const NAME: &'static str = "flood";
    const PROTOCOL: Option<Protocol> = None;
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        None
    }

    fn resolve(raw: Raw, _: &Names) -> Result<FloodSpec> {
        let duration = duration_of(raw.duration)?;
        let interval = interval_of(raw.interval)?;
        let sources = match raw.sources {
            None => None,
            Some(Sources::Cidr(c)) => Some(c),
            Some(Sources::List(_)) => {
                return Err(EngineError::spec(
                    "sources",
                    "a flood's sources is one IPv4 CIDR such as \"198.18.4.0/24\", not a list",
                ))
            }
        };
        let packets = Packets {
            flood: raw.flood,
            target: raw.target,
            rate_pps: flood_rate(raw.rate_pps)?,
            count: raw.count,
            payload_size: raw.payload_size,
            sources,
            ports: raw.ports,
            sender: raw.sender,
        };
        Ok(FloodSpec {
            interval,
            cpu_groups: cpu_groups_of(raw.cpu_groups)?,
            ..resolve(packets, duration)?
        })
    }
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

/// Resolves the flood fields given the flood's duration (seconds).
fn resolve(raw: Packets, duration: f64) -> Result<FloodSpec> {
    let flood = raw.flood.ok_or_else(|| {
        EngineError::spec(
            "flood",
            "`flood` is required for kind flood: set it to \"udp\", \"syn\" or \"icmp\"",
        )
    })?;
    let text = raw.target.ok_or_else(|| {
        EngineError::spec(
            "target",
            "`target` is required for kind flood: give the IPv4 address to flood, e.g. \"198.18.2.2\"",
        )
    })?;
    let ip: IpAddr = text.parse().map_err(|_| {
        EngineError::spec(
            "target",
            format!(
                "target \"{}\" is not an IP address: give an address without a port, e.g. \"198.18.2.2\" (ports go in `ports`)",
                text
            ),
        )
    })?;
    let target = match ip.to_canonical() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => {
            return Err(EngineError::spec(
                "target",
                "IPv6 floods are not supported yet: give an IPv4 target in 198.18.0.0/15",
            ))
        }
    };
    let rate_pps = raw.rate_pps.ok_or_else(|| {
        EngineError::spec(
            "rate_pps",
            "`rate_pps` is required for kind flood: give packets/s such as 10000 (floods are always paced)",
        )
    })?;
    if !(RATE_MIN..=RATE_MAX).contains(&rate_pps) {
        return Err(EngineError::spec(
            "rate_pps",
            format!(
                "rate_pps must be {}..={} (got {}): give e.g. 10000; an unpaced flood is not offered",
                RATE_MIN, RATE_MAX, rate_pps
            ),
        ));
    }
    let by_time = (rate_pps as f64 * duration).ceil() as u64;
    let count = raw.count.unwrap_or(by_time);
    if count == 0 {
        return Err(EngineError::spec(
            "count",
            format!(
                "count 0 sends nothing: give a packet bound such as {} (rate × duration)",
                by_time
            ),
        ));
    }
    let default_payload = match flood {
        // 64-byte Ethernet frames (RFC 2544's smallest) with FCS.
        FloodProto::Udp | FloodProto::Icmp => 18,
        FloodProto::Syn => 0,
    };
    let payload_size = raw.payload_size.unwrap_or(default_payload) as usize;
    let max_payload = PACKET_MAX - IPV4_HEADER - flood.l4_header();
    if payload_size > max_payload {
        return Err(EngineError::spec(
            "payload_size",
            format!(
                "payload_size {} makes packets above {} bytes: use at most {} for a {} flood",
                payload_size,
                PACKET_MAX,
                max_payload,
                flood.name()
            ),
        ));
    }
    let source_cidr = match &raw.sources {
        None => None,
        Some(s) => Some(Cidr::parse(s).ok_or_else(|| {
            EngineError::spec(
                "sources",
                format!(
                    "sources \"{}\" is not an IPv4 CIDR: give e.g. \"198.18.3.0/24\"",
                    s
                ),
            )
        })?),
    };
    if flood == FloodProto::Icmp && raw.ports.is_some() {
        return Err(EngineError::spec(
            "ports",
            "`ports` does not apply to an icmp flood: remove it",
        ));
    }
    let ports_text = raw.ports.unwrap_or_else(|| DEFAULT_PORT.to_string());
    let port_range = parse_ports(&ports_text).ok_or_else(|| {
        EngineError::spec(
            "ports",
            format!(
                "ports \"{}\" is not a port or range: give e.g. \"9\" or \"5000-5099\"",
                ports_text
            ),
        )
    })?;
    let ports = if port_range.0 == port_range.1 {
        port_range.0.to_string()
    } else {
        format!("{}-{}", port_range.0, port_range.1)
    };
    Ok(FloodSpec {
        duration,
        interval: 0.0,
        flood,
        target,
        rate_pps,
        count,
        payload_size,
        sources: source_cidr.map(|c| c.to_string()),
        ports,
        sender: raw.sender.unwrap_or_default(),
        source_cidr,
        port_range,
        cpu_groups: Vec::new(),
    })
}

impl Resolved for FloodSpec {
    fn total_seconds(&self) -> f64 {
        self.duration
    }

    fn targets(&self) -> Vec<(String, IpAddr)> {
        vec![("target".to_string(), IpAddr::V4(self.target))]
    }

    /// No override: a flood never leaves the testbed, whatever `allow_any`.
    fn check_targets(&self, _allow_any: bool) -> Result<()> {
        self.check_flood_targets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_hosts() {
        let c = Cidr::parse("198.18.3.77/24").unwrap();
        assert_eq!(c.to_string(), "198.18.3.0/24");
        let (a, b) = c.hosts();
        assert_eq!(Ipv4Addr::from(a), Ipv4Addr::new(198, 18, 3, 1));
        assert_eq!(Ipv4Addr::from(b), Ipv4Addr::new(198, 18, 3, 254));
        let one = Cidr::parse("198.18.3.5").unwrap();
        assert_eq!(one.hosts(), (u32::from(one.net), u32::from(one.net)));
        assert!(Cidr::parse("198.18.3.0/33").is_none());
    }

    #[test]
    fn ports_parse() {
        assert_eq!(parse_ports("9"), Some((9, 9)));
        assert_eq!(parse_ports("5000-5099"), Some((5000, 5099)));
        assert_eq!(parse_ports("0"), None);
        assert_eq!(parse_ports("10-5"), None);
    }
}
