//! Kind `flows`: a mix of live flows (a rule-set review's traffic), each a real
//! TCP connection or UDP exchange from its own source to its own destination.
//! One spec shape for both sides, told apart by `role`: the client opens the
//! flows (`src`, `dst`, `dport`), the server listens where they arrive
//! (`listen`, `port`) and answers only the sources in `allow`. No engine
//! control server is involved: each side is one `run` (the server's ends at
//! SIGINT or SIGTERM, or at its time bound).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::spec::common::{
    duration_of, interval_of, parallel_of, per_second_of, timeout_of, warmup_of, CpuGroup,
    KindSpec, Names, Protocol, TCP_MAX, UDP_MAX,
};
use crate::spec::resolved::Resolved;

/// Most flows one spec holds.
pub const MAX_FLOWS: usize = 4096;
/// Most flows on their own schedule (`rate`), each a thread of the client.
pub const MAX_RATED: usize = 256;
/// Bytes of a request that carry its flow's id (little-endian), when it has them.
pub const ID_BYTES: usize = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Client,
    Server,
}

/// Largest ICMP echo payload a flow may ask for.
pub const ICMP_MAX: usize = 65000;

/// A flow's protocol: a TCP connection, a UDP exchange, or an ICMP echo (which
/// the destination host's kernel answers: no server socket, no `dport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowProto {
    Tcp,
    Udp,
    Icmp,
}

impl FlowProto {
    pub fn name(self) -> &'static str {
        match self {
            FlowProto::Tcp => "tcp",
            FlowProto::Udp => "udp",
            FlowProto::Icmp => "icmp",
        }
    }

    /// The transport a server socket of this flow has (None: ICMP has none).
    pub fn transport(self) -> Option<Protocol> {
        match self {
            FlowProto::Tcp => Some(Protocol::Tcp),
            FlowProto::Udp => Some(Protocol::Udp),
            FlowProto::Icmp => None,
        }
    }
}

/// One flow as given; which fields apply depends on the role.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlow {
    id: Option<u16>,
    name: Option<String>,
    protocol: Option<FlowProto>,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    dport: Option<u16>,
    listen: Option<IpAddr>,
    port: Option<u16>,
    request: Option<u64>,
    response: Option<u64>,
    weight: Option<f64>,
    rate: Option<f64>,
}

/// A flows spec as given.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    /// Value: `"client"` | `"server"`, default client
    role: Option<Role>,
    /// The client's window and interval records; a server ends by itself at warmup + duration +
    /// 2 × timeout + 30 s at the latest.
    /// Value: as for every kind
    duration: Option<f64>,
    /// The client's window and interval records; a server ends by itself at warmup + duration +
    /// 2 × timeout + 30 s at the latest.
    /// Value: as for every kind
    warmup: Option<f64>,
    /// The client's window and interval records; a server ends by itself at warmup + duration +
    /// 2 × timeout + 30 s at the latest.
    /// Value: as for every kind
    interval: Option<f64>,
    /// Client: loops of the weighted schedule (attempts under way at once); server: the most
    /// connections served at once (the listeners wait beyond it; the kernel's queue holds the
    /// rest)
    /// Value: 1..=1024, default 1
    parallel: Option<u64>,
    /// Weighted attempts on one absolute schedule (attempt *k* due at *k*/rate: open loop);
    /// absent: each loop starts its next attempt when the last ends.
    /// Value: float/s, optional, client only
    rate: Option<f64>,
    /// Each attempt's deadline, connect to close (UDP: datagram to answer); a server gives a
    /// connection twice this.
    /// Value: seconds, default 1, ≤ 120
    timeout: Option<f64>,
    /// Below.
    /// Value: list, 1..=4096
    flows: Option<Vec<RawFlow>>,
    /// The sources the server answers: every other source's connection is reset at once and its
    /// datagram dropped, never answered (counted in `refused_sources`)
    /// Value: list of addresses, server only, required
    allow: Option<Vec<IpAddr>>,
    /// Client: hosts whose CPU the result reports.
    /// Value: as for every kind
    cpu_groups: Option<Vec<CpuGroup>>,
}

/// One resolved flow. Client: `src` → `dst`:`dport`; server: `listen`:`port`.
#[derive(Clone, Debug, Serialize)]
pub struct FlowSpec {
    /// Carried in the request's first bytes (ID_BYTES) so that a server port
    /// shared by flows of different sizes knows which one arrived.
    pub id: u16,
    pub name: String,
    pub protocol: FlowProto,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub request: usize,
    pub response: usize,
    /// Its share of the weighted schedule (None: it runs on its own `rate`).
    pub weight: Option<f64>,
    /// Attempts/s on its own schedule, outside the weighted one (a probe).
    pub rate: Option<f64>,
}

/// A resolved flows spec.
#[derive(Clone, Debug, Serialize)]
pub struct FlowsSpec {
    pub role: Role,
    pub duration: f64,
    pub warmup: f64,
    pub interval: f64,
    /// Client: attempts under way at once (weighted flows); server: the most
    /// connections it serves at once.
    pub parallel: usize,
    /// Weighted attempts/s on one absolute schedule (None: closed loop).
    pub rate: Option<f64>,
    /// Deadline of each attempt, connect to close (or datagram to answer).
    pub timeout: f64,
    pub flows: Vec<FlowSpec>,
    /// Server: the sources it answers (the flows' `src`, and post-NAT sources).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<IpAddr>,
    pub cpu_groups: Vec<CpuGroup>,
}

/// Where a server answers: the flows that share one (protocol, address, port).
#[derive(Clone, Debug)]
pub struct Listen {
    pub protocol: Protocol,
    pub address: IpAddr,
    pub port: u16,
    /// Indexes into `flows`.
    pub flows: Vec<usize>,
}

fn bad(field: String, message: String) -> EngineError {
    EngineError::Spec {
        field: Some(field),
        message,
    }
}

fn flow_size(field: String, v: Option<u64>, protocol: FlowProto) -> Result<usize> {
    let v = v.unwrap_or(64);
    let max = match protocol {
        FlowProto::Udp => UDP_MAX,
        FlowProto::Tcp => TCP_MAX,
        FlowProto::Icmp => ICMP_MAX,
    };
    if v == 0 || v > max as u64 {
        return Err(bad(
            field.clone(),
            format!(
                "{} must be 1..={} bytes over {} (got {}): give e.g. 64",
                field,
                max,
                protocol.name(),
                v
            ),
        ));
    }
    Ok(v as usize)
}

fn resolve_flow(i: usize, f: RawFlow, role: Role) -> Result<FlowSpec> {
    let at = |k: &str| format!("flows[{}].{}", i, k);
    let protocol = f.protocol.ok_or_else(|| {
        bad(
            at("protocol"),
            format!(
                "{} is required: give \"tcp\", \"udp\" or \"icmp\"",
                at("protocol")
            ),
        )
    })?;
    let need = |v: Option<IpAddr>, k: &str| {
        v.ok_or_else(|| {
            bad(
                at(k),
                format!("{} is required for a {:?} spec", at(k), role),
            )
        })
    };
    let refuse = |given: bool, k: &str| {
        if given {
            Err(bad(
                at(k),
                format!("{} does not apply to a {:?} spec: remove it", at(k), role),
            ))
        } else {
            Ok(())
        }
    };
    let port_of = |v: Option<u16>, k: &str| match v {
        Some(p) if p > 0 => Ok(p),
        _ => Err(bad(
            at(k),
            format!("{} must be a port 1..=65535: give e.g. 80", at(k)),
        )),
    };
    let (src, dst, dport, listen, port) = match role {
        Role::Client => {
            refuse(f.listen.is_some(), "listen")?;
            refuse(f.port.is_some(), "port")?;
            let (src, dst) = (need(f.src, "src")?, need(f.dst, "dst")?);
            if src.is_ipv4() != dst.is_ipv4() {
                return Err(bad(
                    at("src"),
                    format!(
                        "{} {} and its dst {} are of different families: give one family",
                        at("src"),
                        src,
                        dst
                    ),
                ));
            }
            let dport = if protocol == FlowProto::Icmp {
                refuse(f.dport.is_some(), "dport")?;
                None
            } else {
                Some(port_of(f.dport, "dport")?)
            };
            (Some(src), Some(dst), dport, None, None)
        }
        Role::Server if protocol == FlowProto::Icmp => {
            return Err(bad(
                at("protocol"),
                format!(
                    "{} is icmp: the destination's kernel answers echo requests, so leave \
                     icmp flows out of a server spec",
                    at("protocol")
                ),
            ));
        }
        Role::Server => {
            for (given, k) in [
                (f.src.is_some(), "src"),
                (f.dst.is_some(), "dst"),
                (f.dport.is_some(), "dport"),
                (f.weight.is_some(), "weight"),
                (f.rate.is_some(), "rate"),
            ] {
                refuse(given, k)?;
            }
            (
                None,
                None,
                None,
                Some(need(f.listen, "listen")?),
                Some(port_of(f.port, "port")?),
            )
        }
    };
    let request = flow_size(at("request"), f.request, protocol)?;
    // An echo reply is the request's size.
    let response = match protocol {
        FlowProto::Icmp => request,
        _ => flow_size(at("response"), f.response, protocol)?,
    };
    if f.weight.is_some() && f.rate.is_some() {
        return Err(bad(
            at("rate"),
            format!(
                "{} gives both weight and rate: a flow is either in the weighted schedule \
                 (weight) or on its own (rate, a probe); give one",
                at("rate")
            ),
        ));
    }
    let rate = per_second_of(&at("rate"), f.rate)?;
    let weight = match (role, rate) {
        (Role::Server, _) | (_, Some(_)) => None,
        (Role::Client, None) => {
            let w = f.weight.unwrap_or(1.0);
            if !(w.is_finite() && w > 0.0 && w <= 1e9) {
                return Err(bad(
                    at("weight"),
                    format!(
                        "{} must be > 0 (got {}): give a relative weight such as 1",
                        at("weight"),
                        w
                    ),
                ));
            }
            Some(w)
        }
    };
    let id = match f.id {
        Some(id) => id,
        None => u16::try_from(i).map_err(|_| {
            bad(
                at("id"),
                "give every flow an id when there are more than 65536".into(),
            )
        })?,
    };
    Ok(FlowSpec {
        id,
        name: f.name.unwrap_or_else(|| format!("f{}", i + 1)),
        protocol,
        src,
        dst,
        dport,
        listen,
        port,
        request,
        response,
        weight,
        rate,
    })
}

impl KindSpec for FlowsSpec {
    const NAME: &'static str = "flows";
    const PROTOCOL: Option<Protocol> = None;
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        None
    }

    fn resolve(raw: Raw, _: &Names) -> Result<FlowsSpec> {
        let role = raw.role.unwrap_or_default();
        let duration = duration_of(raw.duration)?;
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let parallel = parallel_of(raw.parallel, 1024)?;
        let rate = per_second_of("rate", raw.rate)?;
        let timeout = timeout_of(raw.timeout, Some(1.0))?.unwrap_or(1.0);
        let given = raw.flows.unwrap_or_default();
        if given.is_empty() || given.len() > MAX_FLOWS {
            return Err(bad(
                "flows".into(),
                format!(
                    "flows must list 1..={} flows (got {}): give e.g. \
                     [{{\"name\":\"web\",\"protocol\":\"tcp\",\"src\":\"198.18.1.2\",\
                     \"dst\":\"198.18.2.2\",\"dport\":80}}]",
                    MAX_FLOWS,
                    given.len()
                ),
            ));
        }
        let flows = given
            .into_iter()
            .enumerate()
            .map(|(i, f)| resolve_flow(i, f, role))
            .collect::<Result<Vec<_>>>()?;
        let allow = raw.allow.unwrap_or_default();
        match role {
            Role::Client => {
                if !allow.is_empty() {
                    return Err(bad(
                        "allow".into(),
                        "allow is the server's list of sources: remove it from a client spec"
                            .into(),
                    ));
                }
                if flows.iter().filter(|f| f.rate.is_some()).count() > MAX_RATED {
                    return Err(bad(
                        "flows".into(),
                        format!("at most {} flows may have their own rate", MAX_RATED),
                    ));
                }
            }
            Role::Server => {
                if allow.is_empty() {
                    return Err(bad(
                        "allow".into(),
                        "a flows server answers only the sources it is told: give allow, \
                         the flows' sources (and the DUT's address after a masquerade)"
                            .into(),
                    ));
                }
                if rate.is_some() {
                    return Err(bad(
                        "rate".into(),
                        "rate is the client's: remove it from a server spec".into(),
                    ));
                }
            }
        }
        let spec = FlowsSpec {
            role,
            duration,
            warmup,
            interval,
            parallel,
            rate,
            timeout,
            flows,
            allow,
            cpu_groups: raw.cpu_groups.unwrap_or_default(),
        };
        for g in &spec.cpu_groups {
            g.check()?;
        }
        if role == Role::Server {
            spec.listens()?;
        }
        Ok(spec)
    }
}

impl FlowsSpec {
    /// The server's sockets: the flows grouped by (protocol, address, port).
    /// Flows of different sizes on one socket are told apart by their id,
    /// which their requests carry (so those need ID_BYTES at least, and ids
    /// of their own).
    pub fn listens(&self) -> Result<Vec<Listen>> {
        let mut by: BTreeMap<(u8, IpAddr, u16), Vec<usize>> = BTreeMap::new();
        for (i, f) in self.flows.iter().enumerate() {
            let (Some(a), Some(p), Some(t)) = (f.listen, f.port, f.protocol.transport()) else {
                continue;
            };
            let proto = u8::from(t == Protocol::Udp);
            by.entry((proto, a, p)).or_default().push(i);
        }
        let mut out = Vec::new();
        for ((proto, address, port), flows) in by {
            let first = &self.flows[flows[0]];
            let same = flows.iter().all(|&i| {
                (self.flows[i].request, self.flows[i].response) == (first.request, first.response)
            });
            if !same {
                for (k, &i) in flows.iter().enumerate() {
                    let f = &self.flows[i];
                    if f.request < ID_BYTES {
                        return Err(bad(
                            format!("flows[{}].request", i),
                            format!(
                                "flow {} shares {}:{} with flows of other sizes, so its request \
                                 carries its id: give it at least {} bytes",
                                f.name, address, port, ID_BYTES
                            ),
                        ));
                    }
                    if flows[..k].iter().any(|&j| self.flows[j].id == f.id) {
                        return Err(bad(
                            format!("flows[{}].id", i),
                            format!(
                                "flow {} has the id of another flow on {}:{}: give each its own",
                                f.name, address, port
                            ),
                        ));
                    }
                }
            }
            out.push(Listen {
                protocol: if proto == 1 {
                    Protocol::Udp
                } else {
                    Protocol::Tcp
                },
                address,
                port,
                flows,
            });
        }
        Ok(out)
    }

    /// Every address this spec sends from, to or listens on, and every source
    /// a server answers, each with its field: all go through the target guard.
    fn addresses(&self) -> Vec<(String, IpAddr)> {
        let mut out = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            for (k, a) in [("src", f.src), ("dst", f.dst), ("listen", f.listen)] {
                if let Some(a) = a {
                    out.push((format!("flows[{}].{}", i, k), a));
                }
            }
        }
        for (i, a) in self.allow.iter().enumerate() {
            out.push((format!("allow[{}]", i), *a));
        }
        out
    }
}

impl Resolved for FlowsSpec {
    /// Warm-up, duration, the last attempts' deadline and a margin (a server
    /// ends by then at the latest).
    fn total_seconds(&self) -> f64 {
        self.warmup + self.duration + 2.0 * self.timeout + 30.0
    }

    /// Every address it sends from, to or listens on, and every source a server
    /// answers (flows serves through `run`, role server, with its own `allow`).
    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.addresses()
    }
}
