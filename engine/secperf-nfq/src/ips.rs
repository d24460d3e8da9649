//! Signature matching for the IPS: rules (normalized JSON written by secperf's
//! Python rule parser from a Snort/Suricata-subset rule file) compiled into one
//! Hyperscan block-mode database, scanned over each packet's payload.
//!
//! Every content and pcre of every rule is one Hyperscan pattern. A scan marks
//! the patterns found (a content only where its offset/depth window allows); a
//! rule matches when its header matches the packet and all its patterns were
//! marked. The first matching `drop` rule decides the verdict; `alert` rules
//! are counted and let the packet pass.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use hyperscan::prelude::*;
use hyperscan::CompileFlags;
use serde::Deserialize;
use thiserror::Error;

use crate::packet::{parse_with_l4, payload_offset, FiveTuple, PROTO_TCP, PROTO_UDP};

#[derive(Debug, Error)]
pub enum RulesError {
    #[error("rule file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("rule file {path}: not the normalized JSON secperf writes: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("rule sid {sid}: {what}")]
    Rule { sid: u64, what: String },
    #[error("Hyperscan: {0}")]
    Hyperscan(String),
}

#[derive(Debug, Clone, Deserialize)]
pub struct PatternSpec {
    pub kind: String,
    pub expr: String,
    #[serde(default)]
    pub len: usize,
    #[serde(default)]
    pub nocase: bool,
    #[serde(default)]
    pub dotall: bool,
    #[serde(default)]
    pub multiline: bool,
    pub offset: Option<usize>,
    pub depth: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RuleSpec {
    pub sid: u64,
    #[serde(default)]
    pub rev: u64,
    #[serde(default)]
    pub msg: String,
    pub action: String,
    pub proto: String,
    #[serde(default)]
    pub src: Vec<String>,
    #[serde(default)]
    pub sport: Vec<(u16, u16)>,
    #[serde(default)]
    pub dst: Vec<String>,
    #[serde(default)]
    pub dport: Vec<(u16, u16)>,
    #[serde(default)]
    pub patterns: Vec<PatternSpec>,
}

#[derive(Debug, Deserialize)]
struct RuleFile {
    rules: Vec<RuleSpec>,
}

/// An address prefix.
#[derive(Debug, Clone, Copy)]
struct Net {
    addr: IpAddr,
    len: u8,
}

impl Net {
    fn parse(text: &str) -> Option<Net> {
        let (a, l) = text.split_once('/').unwrap_or((text, ""));
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = if l.is_empty() { max } else { l.parse().ok()? };
        (len <= max).then_some(Net { addr, len })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.len))
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.len))
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alert,
    Drop,
}

struct Rule {
    sid: u64,
    action: Action,
    proto: Option<u8>,
    src: Vec<Net>,
    dst: Vec<Net>,
    sport: Vec<(u16, u16)>,
    dport: Vec<(u16, u16)>,
    /// Indices into the matcher's pattern table.
    patterns: Vec<usize>,
}

fn in_ranges(port: Option<u16>, ranges: &[(u16, u16)]) -> bool {
    ranges.is_empty() || port.is_some_and(|p| ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi))
}

fn in_nets(ip: IpAddr, nets: &[Net]) -> bool {
    nets.is_empty() || nets.iter().any(|n| n.contains(ip))
}

impl Rule {
    fn header_matches(&self, t: &FiveTuple) -> bool {
        self.proto.is_none_or(|p| p == t.proto)
            && in_nets(t.src, &self.src)
            && in_nets(t.dst, &self.dst)
            && in_ranges(t.sport, &self.sport)
            && in_ranges(t.dport, &self.dport)
    }
}

/// What one window constraint allows of a content match ending at `to`.
#[derive(Debug, Clone, Copy)]
struct Window {
    len: usize,
    offset: usize,
    depth: Option<usize>,
}

impl Window {
    fn allows(&self, to: usize) -> bool {
        let from = to.saturating_sub(self.len);
        from >= self.offset && self.depth.is_none_or(|d| to <= self.offset + d)
    }
}

/// The outcome of matching one packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Every rule that matched, by sid.
    pub sids: Vec<u64>,
    /// Whether a matching rule is a drop rule.
    pub drop: bool,
}

pub struct Matcher {
    rules: Vec<Rule>,
    windows: Vec<Option<Window>>,
    /// Which rules use each pattern.
    users: Vec<Vec<usize>>,
    /// Rules without patterns: their header alone decides.
    header_only: Vec<usize>,
    db: Option<BlockDatabase>,
    scratch: Option<Scratch>,
    hit: Vec<bool>,
    touched: Vec<usize>,
}

impl Matcher {
    pub fn load(path: &Path) -> Result<Matcher, RulesError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
            path: p.clone(),
            source,
        })?;
        let file: RuleFile =
            serde_json::from_str(&text).map_err(|source| RulesError::Json { path: p, source })?;
        Matcher::new(&file.rules)
    }

    pub fn new(specs: &[RuleSpec]) -> Result<Matcher, RulesError> {
        let mut rules = Vec::with_capacity(specs.len());
        let mut patterns: Vec<Pattern> = Vec::new();
        let mut windows = Vec::new();
        let mut users: Vec<Vec<usize>> = Vec::new();
        let mut header_only = Vec::new();
        for (ri, s) in specs.iter().enumerate() {
            let bad = |what: String| RulesError::Rule { sid: s.sid, what };
            let action = match s.action.as_str() {
                "alert" => Action::Alert,
                "drop" => Action::Drop,
                a => return Err(bad(format!("action {a:?}: expected alert or drop"))),
            };
            let proto = match s.proto.as_str() {
                "tcp" => Some(PROTO_TCP),
                "udp" => Some(PROTO_UDP),
                "ip" => None,
                p => return Err(bad(format!("protocol {p:?}: expected tcp, udp or ip"))),
            };
            let nets = |list: &[String]| -> Result<Vec<Net>, RulesError> {
                list.iter()
                    .map(|n| Net::parse(n).ok_or_else(|| bad(format!("bad address {n:?}"))))
                    .collect()
            };
            let mut ids = Vec::new();
            for ps in &s.patterns {
                let mut flags = CompileFlags::empty();
                if ps.nocase {
                    flags |= CompileFlags::CASELESS;
                }
                if ps.dotall {
                    flags |= CompileFlags::DOTALL;
                }
                if ps.multiline {
                    flags |= CompileFlags::MULTILINE;
                }
                let id = patterns.len();
                let mut pat = Pattern::with_flags(ps.expr.clone(), flags)
                    .map_err(|e| bad(format!("pattern {:?}: {e}", ps.expr)))?;
                pat.id = Some(id);
                patterns.push(pat);
                windows.push(match (ps.kind.as_str(), ps.offset, ps.depth) {
                    ("content", None, None) | ("pcre", _, _) => None,
                    ("content", o, d) => Some(Window {
                        len: ps.len,
                        offset: o.unwrap_or(0),
                        depth: d,
                    }),
                    (k, _, _) => return Err(bad(format!("pattern kind {k:?}"))),
                });
                users.push(vec![ri]);
                ids.push(id);
            }
            if ids.is_empty() {
                header_only.push(ri);
            }
            rules.push(Rule {
                sid: s.sid,
                action,
                proto,
                src: nets(&s.src)?,
                dst: nets(&s.dst)?,
                sport: s.sport.clone(),
                dport: s.dport.clone(),
                patterns: ids,
            });
        }
        let (db, scratch) = if patterns.is_empty() {
            (None, None)
        } else {
            let set = Patterns(patterns);
            let db: BlockDatabase = match set.build() {
                Ok(db) => db,
                Err(e) => {
                    return Err(culprit(&set.0, &users, &rules)
                        .unwrap_or(RulesError::Hyperscan(e.to_string())))
                }
            };
            let scratch = db
                .alloc_scratch()
                .map_err(|e| RulesError::Hyperscan(e.to_string()))?;
            (Some(db), Some(scratch))
        };
        let n = windows.len();
        Ok(Matcher {
            rules,
            windows,
            users,
            header_only,
            db,
            scratch,
            hit: vec![false; n],
            touched: Vec::new(),
        })
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    pub fn pattern_count(&self) -> usize {
        self.hit.len()
    }

    /// Match one packet that starts with its IP header. Packets without a
    /// parsable header match nothing.
    pub fn check(&mut self, pkt: &[u8]) -> Outcome {
        let mut out = Outcome::default();
        let Ok((tuple, l4)) = parse_with_l4(pkt) else {
            return out;
        };
        let Some(at) = payload_offset(pkt, &tuple, l4) else {
            return out;
        };
        let payload = &pkt[at..];
        let mut candidates: Vec<usize> = self.header_only.clone();
        if let (Some(db), Some(scratch), false) = (&self.db, &self.scratch, payload.is_empty()) {
            let windows = &self.windows;
            let hit = &mut self.hit;
            let touched = &mut self.touched;
            // A scan error (none expected for block mode) leaves the packet unmatched.
            let _ = db.scan(
                payload,
                scratch,
                |id: u32, _from: u64, to: u64, _flags: u32| {
                    let id = id as usize;
                    if !hit[id] && windows[id].is_none_or(|w| w.allows(to as usize)) {
                        hit[id] = true;
                        touched.push(id);
                    }
                    Matching::Continue
                },
            );
            for &id in &self.touched {
                candidates.extend_from_slice(&self.users[id]);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        for ri in candidates {
            let rule = &self.rules[ri];
            if rule.patterns.iter().all(|&p| self.hit[p]) && rule.header_matches(&tuple) {
                out.sids.push(rule.sid);
                out.drop |= rule.action == Action::Drop;
            }
        }
        for id in self.touched.drain(..) {
            self.hit[id] = false;
        }
        out
    }
}

/// On a failed compile, the first pattern that fails alone, named by its rule's sid.
fn culprit(patterns: &[Pattern], users: &[Vec<usize>], rules: &[Rule]) -> Option<RulesError> {
    patterns.iter().enumerate().find_map(|(id, p)| {
        let one: Result<BlockDatabase, _> = Patterns(vec![p.clone()]).build();
        one.err().map(|e| RulesError::Rule {
            sid: rules[users[id][0]].sid,
            what: format!("pattern {:?} does not compile: {e}", p.expression),
        })
    })
}

/// Counters the daemon reports: packets seen, matches (alerts, every rule that
/// matched), drops (packets given a drop verdict), per-sid matches.
#[derive(Debug, Default, Clone)]
pub struct IpsCounters {
    pub packets: u64,
    pub bytes: u64,
    pub matched_packets: u64,
    pub alerts: u64,
    pub drops: u64,
    pub by_sid: BTreeMap<u64, u64>,
}

impl IpsCounters {
    pub fn record(&mut self, len: usize, out: &Outcome) {
        self.packets += 1;
        self.bytes += len as u64;
        if !out.sids.is_empty() {
            self.matched_packets += 1;
            self.alerts += out.sids.len() as u64;
            for sid in &out.sids {
                *self.by_sid.entry(*sid).or_default() += 1;
            }
        }
        if out.drop {
            self.drops += 1;
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let by_sid: serde_json::Map<String, serde_json::Value> = self
            .by_sid
            .iter()
            .map(|(k, v)| (k.to_string(), (*v).into()))
            .collect();
        serde_json::json!({
            "packets": self.packets,
            "bytes": self.bytes,
            "matched_packets": self.matched_packets,
            "alerts": self.alerts,
            "drops": self.drops,
            "by_sid": by_sid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(
        expr: &[u8],
        nocase: bool,
        offset: Option<usize>,
        depth: Option<usize>,
    ) -> PatternSpec {
        PatternSpec {
            kind: "content".into(),
            expr: expr.iter().map(|b| format!("\\x{b:02x}")).collect(),
            len: expr.len(),
            nocase,
            dotall: false,
            multiline: false,
            offset,
            depth,
        }
    }

    fn rule(
        sid: u64,
        action: &str,
        proto: &str,
        dport: Vec<(u16, u16)>,
        p: Vec<PatternSpec>,
    ) -> RuleSpec {
        RuleSpec {
            sid,
            rev: 1,
            msg: String::new(),
            action: action.into(),
            proto: proto.into(),
            src: vec![],
            sport: vec![],
            dst: vec!["198.18.2.0/24".into()],
            dport,
            patterns: p,
        }
    }

    /// An IPv4 UDP packet 198.18.1.2:40000 -> 198.18.2.2:DPORT carrying `payload`.
    fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2,
        ];
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn drop_alert_and_windows() {
        let mut m = Matcher::new(&[
            rule(
                1,
                "drop",
                "udp",
                vec![],
                vec![content(b"ATTACK", false, None, None)],
            ),
            rule(
                2,
                "alert",
                "udp",
                vec![(53, 53)],
                vec![content(b"evil", true, None, None)],
            ),
            rule(
                3,
                "alert",
                "tcp",
                vec![],
                vec![content(b"ATTACK", false, None, None)],
            ),
            rule(
                4,
                "alert",
                "ip",
                vec![],
                vec![content(b"GET ", false, Some(0), Some(4))],
            ),
        ])
        .unwrap();
        assert_eq!(m.pattern_count(), 4);
        let o = m.check(&udp(5300, b"xxATTACKxx"));
        assert_eq!(
            o,
            Outcome {
                sids: vec![1],
                drop: true
            }
        );
        // nocase, and the port decides.
        assert_eq!(m.check(&udp(53, b"an EVIL one")).sids, vec![2]);
        assert!(m.check(&udp(54, b"an EVIL one")).sids.is_empty());
        // depth: only at the start.
        assert_eq!(m.check(&udp(80, b"GET /")).sids, vec![4]);
        assert!(m.check(&udp(80, b" GET /")).sids.is_empty());
        // clean traffic, and a second scan after a hit starts clean.
        assert_eq!(m.check(&udp(5300, b"hello world")), Outcome::default());
        // the destination prefix is part of the header.
        let mut other = udp(5300, b"ATTACK");
        other[18] = 3;
        assert!(m.check(&other).sids.is_empty());
    }

    #[test]
    fn all_patterns_needed_and_pcre() {
        let mut pcre = content(b"x", false, None, None);
        pcre.kind = "pcre".into();
        pcre.expr = r"cmd\.exe\s+/c".into();
        pcre.nocase = true;
        let mut m = Matcher::new(&[rule(
            7,
            "drop",
            "udp",
            vec![],
            vec![content(b"run", false, None, None), pcre],
        )])
        .unwrap();
        assert!(m.check(&udp(1, b"CMD.EXE /c")).sids.is_empty());
        assert_eq!(m.check(&udp(1, b"run CMD.EXE  /c dir")).sids, vec![7]);
    }

    #[test]
    fn bad_pattern_names_the_sid() {
        let mut p = content(b"x", false, None, None);
        p.kind = "pcre".into();
        p.expr = "(unclosed".into();
        let e = Matcher::new(&[rule(42, "drop", "udp", vec![], vec![p])])
            .err()
            .unwrap();
        assert!(e.to_string().contains("42"), "{e}");
    }
}
