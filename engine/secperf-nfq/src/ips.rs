//! Signature matching for the IPS: rules (normalized JSON written by secperf's
//! Python rule parser from a Snort/Suricata-subset rule file) compiled into one
//! Hyperscan block-mode database, scanned over each packet's payload.
//!
//! Every content and pcre of every rule is one Hyperscan pattern. A scan marks
//! the patterns found (a content only where its offset/depth window allows); a
//! rule matches when its header matches the packet and all its patterns were
//! marked. The first matching `drop` rule decides the verdict; `alert` rules
//! are counted and let the packet pass.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use hyperscan::prelude::*;
use hyperscan::CompileFlags;
use serde::Deserialize;
use thiserror::Error;

use crate::packet::{parse_with_l4, payload_offset, FiveTuple, PROTO_TCP, PROTO_UDP};
use crate::reasm::{Flow, FlowKey, Reassembly, ReassemblyCounters};

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

/// What a rule file compiles to: read-only, shared by every matcher of one
/// daemon (one per queue thread, `Matcher::fork`).
struct Compiled {
    rules: Vec<Rule>,
    windows: Vec<Option<Window>>,
    /// Which rules use each pattern.
    users: Vec<Vec<usize>>,
    /// Rules without patterns: their header alone decides.
    header_only: Vec<usize>,
    db: Option<BlockDatabase>,
    /// Every pattern, kept to compile the streaming database on demand.
    all_patterns: Vec<Pattern>,
}

/// A matcher: the shared compiled rules and this thread's scratch space and flows.
pub struct Matcher {
    c: Arc<Compiled>,
    scratch: Option<Scratch>,
    hit: Vec<bool>,
    touched: Vec<usize>,
    /// Bounded per-flow TCP reassembly (None: every packet is matched alone).
    reasm: Option<Reasm>,
}

/// The streaming side of the matcher: the same patterns compiled for Hyperscan's
/// stream mode, and one stream per tracked TCP flow direction.
struct Reasm {
    bound: Reassembly,
    db: Arc<StreamingDatabase>,
    scratch: Scratch,
    flows: HashMap<FlowKey, Flow>,
    counters: ReassemblyCounters,
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
        let kept = patterns.clone();
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
            c: Arc::new(Compiled {
                rules,
                windows,
                users,
                header_only,
                db,
                all_patterns: kept,
            }),
            scratch,
            hit: vec![false; n],
            touched: Vec::new(),
            reasm: None,
        })
    }

    /// Another matcher over the same compiled rules, with its own scratch space
    /// and flows (for another thread): no second compile.
    pub fn fork(&self) -> Result<Matcher, RulesError> {
        let hs = |e: hyperscan::Error| RulesError::Hyperscan(e.to_string());
        let scratch = match &self.c.db {
            Some(db) => Some(db.alloc_scratch().map_err(hs)?),
            None => None,
        };
        let reasm = match &self.reasm {
            Some(r) => Some(Reasm {
                bound: r.bound,
                db: r.db.clone(),
                scratch: r.db.alloc_scratch().map_err(hs)?,
                flows: HashMap::new(),
                counters: ReassemblyCounters::default(),
            }),
            None => None,
        };
        Ok(Matcher {
            c: self.c.clone(),
            scratch,
            hit: vec![false; self.hit.len()],
            touched: Vec::new(),
            reasm,
        })
    }

    /// Turn on bounded per-flow reassembly of TCP payloads: a pattern split across
    /// segments of one flow direction matches. Bounded by `bound.bytes` of each flow
    /// direction (later bytes are matched packet by packet) and `bound.flows` flows
    /// tracked at once (a flow beyond it is matched packet by packet); both cuts are
    /// counted.
    pub fn enable_reassembly(&mut self, bound: Reassembly) -> Result<(), RulesError> {
        if self.c.all_patterns.is_empty() {
            return Ok(());
        }
        let db: StreamingDatabase = Patterns(self.c.all_patterns.clone())
            .build()
            .map_err(|e| RulesError::Hyperscan(e.to_string()))?;
        let scratch = db
            .alloc_scratch()
            .map_err(|e| RulesError::Hyperscan(e.to_string()))?;
        self.reasm = Some(Reasm {
            bound,
            db: Arc::new(db),
            scratch,
            flows: HashMap::new(),
            counters: ReassemblyCounters::default(),
        });
        Ok(())
    }

    /// The reassembly counters, when reassembly is on.
    pub fn reassembly_counters(&self) -> Option<ReassemblyCounters> {
        self.reasm.as_ref().map(|r| {
            let mut c = r.counters.clone();
            c.flows_tracked = r.flows.len() as u64;
            c
        })
    }

    pub fn rule_count(&self) -> usize {
        self.c.rules.len()
    }

    pub fn pattern_count(&self) -> usize {
        self.hit.len()
    }

    /// Match one packet that starts with its IP header. Packets without a
    /// parsable header match nothing.
    pub fn check(&mut self, pkt: &[u8]) -> Outcome {
        let out = Outcome::default();
        let Ok((tuple, l4)) = parse_with_l4(pkt) else {
            return out;
        };
        let Some(at) = payload_offset(pkt, &tuple, l4) else {
            return out;
        };
        let payload = &pkt[at..];
        if tuple.proto == PROTO_TCP && self.reasm.is_some() && tuple.sport.is_some() {
            if let Some(out) = self.check_stream(pkt, &tuple, l4, payload) {
                return out;
            }
        }
        self.check_block(&tuple, payload)
    }

    /// Match one payload alone (block mode).
    fn check_block(&mut self, tuple: &FiveTuple, payload: &[u8]) -> Outcome {
        let mut out = Outcome::default();
        let c = &*self.c;
        let mut candidates: Vec<usize> = c.header_only.clone();
        if let (Some(db), Some(scratch), false) = (&c.db, &self.scratch, payload.is_empty()) {
            let windows = &c.windows;
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
                candidates.extend_from_slice(&c.users[id]);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        for ri in candidates {
            let rule = &c.rules[ri];
            if rule.patterns.iter().all(|&p| self.hit[p]) && rule.header_matches(tuple) {
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

impl Matcher {
    /// Match one TCP segment as part of its flow's stream. None: match it alone
    /// (no payload, a flow beyond the bound on flows, a retransmission).
    fn check_stream(
        &mut self,
        pkt: &[u8],
        tuple: &FiveTuple,
        l4: usize,
        payload: &[u8],
    ) -> Option<Outcome> {
        let seq = u32::from_be_bytes(pkt.get(l4 + 4..l4 + 8)?.try_into().ok()?);
        let flags = *pkt.get(l4 + 13)?;
        let (syn, fin_rst) = (flags & 0x02 != 0, flags & 0x05 != 0);
        let key = FlowKey::of(tuple)?;
        let r = self.reasm.as_mut()?;
        if r.flows.get(&key).is_some_and(|f| f.blocked) {
            r.counters.blocked_flow_drops += 1;
            if fin_rst {
                r.close(&key);
            }
            return Some(Outcome {
                sids: Vec::new(),
                drop: true,
            });
        }
        if !r.flows.contains_key(&key) {
            if payload.is_empty() && !syn {
                return None;
            }
            if r.flows.len() >= r.bound.flows {
                r.counters.flows_refused += 1;
                return None;
            }
            let stream = r.db.open_stream().ok()?;
            // A SYN's data (if any) starts one past its sequence number.
            let start = if syn { seq.wrapping_add(1) } else { seq };
            r.flows.insert(key, Flow::new(stream, start));
            r.counters.flows_opened += 1;
        }
        if payload.is_empty() {
            if fin_rst {
                r.close(&key);
            }
            return None;
        }
        let data_seq = if syn { seq.wrapping_add(1) } else { seq };
        let flow = r.flows.get_mut(&key)?;
        let ahead = data_seq.wrapping_sub(flow.next_seq) as i32;
        let mut data = payload;
        if ahead < 0 {
            let behind = ahead.unsigned_abs() as usize;
            if behind >= payload.len() {
                r.counters.retransmitted += 1;
                return None;
            }
            // Its start was scanned already: only the new bytes join the stream.
            r.counters.overlapped += 1;
            data = &payload[behind..];
        } else if ahead > 0 {
            if flow.hold(data_seq, payload, r.bound.pending) {
                // Early: held until the gap fills, let through on its own match.
                r.counters.out_of_order += 1;
                r.counters.pending_bytes += payload.len() as u64;
                return Some(self.check_held(&key, tuple, payload));
            }
            // Past the bound on held bytes: restart the stream here.
            r.counters.gaps += 1;
            r.counters.pending_bytes -= flow.pending_bytes;
            flow.drop_pending();
            if let Some(old) = flow.stream.take() {
                let _ = old.close(&r.scratch, |_, _, _, _| Matching::Continue);
            }
            flow.stream = r.db.open_stream().ok();
            flow.next_seq = data_seq;
        }
        // Scan the segment, then every held segment its data now joins.
        let windows = &self.c.windows;
        let mut alone: Vec<Vec<u8>> = Vec::new();
        let mut next = Some(data.to_vec());
        while let Some(bytes) = next {
            flow.next_seq = flow.next_seq.wrapping_add(bytes.len() as u32);
            let past = scan_into(flow, &r.scratch, r.bound.bytes, windows, &bytes);
            r.counters.bytes_reassembled += (bytes.len() - past) as u64;
            if past > 0 {
                r.counters.bytes_past_bound += past as u64;
                if !flow.cut {
                    flow.cut = true;
                    r.counters.flows_cut += 1;
                }
                alone.push(bytes[bytes.len() - past..].to_vec());
            }
            let held_before = flow.pending_bytes;
            next = flow.next_joining(&mut r.counters.overlapped);
            r.counters.pending_bytes -= held_before - flow.pending_bytes;
            if next.is_some() {
                r.counters.joined += 1;
            }
        }
        let c = &*self.c;
        let mut out = Outcome::default();
        let mut candidates: Vec<usize> = c.header_only.clone();
        for &id in &flow.hits {
            candidates.extend_from_slice(&c.users[id]);
        }
        candidates.sort_unstable();
        candidates.dedup();
        for ri in candidates {
            let rule = &c.rules[ri];
            if !flow.fired.contains(&rule.sid)
                && rule.patterns.iter().all(|p| flow.hits.contains(p))
                && rule.header_matches(tuple)
            {
                flow.fired.push(rule.sid);
                out.sids.push(rule.sid);
                out.drop |= rule.action == Action::Drop;
            }
        }
        flow.blocked |= out.drop;
        for bytes in alone {
            // Past the bound: matched alone.
            let a = self.check_block(tuple, &bytes);
            out.drop |= a.drop;
            out.sids.extend(a.sids);
        }
        if fin_rst && !out.drop {
            if let Some(r) = self.reasm.as_mut() {
                r.close(&key);
            }
        }
        Some(out)
    }

    /// The verdict on a held (early) segment: its own data matched alone; what it
    /// fires counts for its flow (a rule alerts once per flow), and a drop blocks it.
    fn check_held(&mut self, key: &FlowKey, tuple: &FiveTuple, payload: &[u8]) -> Outcome {
        let mut out = self.check_block(tuple, payload);
        if let Some(flow) = self.reasm.as_mut().and_then(|r| r.flows.get_mut(key)) {
            out.sids.retain(|sid| !flow.fired.contains(sid));
            flow.fired.extend_from_slice(&out.sids);
            flow.blocked |= out.drop;
        }
        out
    }
}

/// Scan `data` into the flow's stream up to its `bytes` bound, noting the patterns
/// found; returns how many bytes were past the bound (not scanned).
fn scan_into(
    flow: &mut Flow,
    scratch: &Scratch,
    bound: u64,
    windows: &[Option<Window>],
    data: &[u8],
) -> usize {
    let room = bound.saturating_sub(flow.scanned);
    let take = (data.len() as u64).min(room) as usize;
    if let (Some(stream), true) = (&flow.stream, take > 0) {
        let hits = &mut flow.hits;
        let _ = stream.scan(
            &data[..take],
            scratch,
            |id: u32, _from: u64, to: u64, _flags: u32| {
                let id = id as usize;
                if !hits.contains(&id) && windows[id].is_none_or(|w| w.allows(to as usize)) {
                    hits.push(id);
                }
                Matching::Continue
            },
        );
    }
    flow.scanned += take as u64;
    data.len() - take
}

impl Reasm {
    /// Forget one flow direction (its stream state and held segments freed).
    fn close(&mut self, key: &FlowKey) {
        if let Some(mut flow) = self.flows.remove(key) {
            self.counters.pending_bytes -= flow.pending_bytes;
            if let Some(stream) = flow.stream.take() {
                let _ = stream.close(&self.scratch, |_, _, _, _| Matching::Continue);
            }
        }
    }
}

impl Drop for Reasm {
    fn drop(&mut self) {
        let keys: Vec<FlowKey> = self.flows.keys().copied().collect();
        for k in keys {
            self.close(&k);
        }
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

    /// Add another thread's counters.
    pub fn merge(&mut self, o: &IpsCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.matched_packets += o.matched_packets;
        self.alerts += o.alerts;
        self.drops += o.drops;
        for (sid, n) in &o.by_sid {
            *self.by_sid.entry(*sid).or_default() += n;
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

    /// An IPv4 TCP segment 198.18.1.2:SPORT -> 198.18.2.2:80 with `seq`, `flags`, `payload`.
    fn tcp(sport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2,
        ];
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&80u16.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn split_rules() -> Vec<RuleSpec> {
        vec![
            rule(
                1,
                "drop",
                "tcp",
                vec![],
                vec![content(b"SECPERF-ATTACK", false, None, None)],
            ),
            rule(
                2,
                "alert",
                "tcp",
                vec![],
                vec![
                    content(b"() {", false, None, None),
                    content(b";", false, None, None),
                ],
            ),
        ]
    }

    #[test]
    fn split_across_segments_needs_reassembly() {
        const ACK: u8 = 0x10;
        let mut alone = Matcher::new(&split_rules()).unwrap();
        assert!(alone
            .check(&tcp(1000, 100, ACK, b"xx SECPERF-AT"))
            .sids
            .is_empty());
        assert!(alone
            .check(&tcp(1000, 113, ACK, b"TACK yy"))
            .sids
            .is_empty());
        assert!(alone.reassembly_counters().is_none());

        let mut m = Matcher::new(&split_rules()).unwrap();
        m.enable_reassembly(Reassembly {
            bytes: 1 << 20,
            flows: 16,
            pending: 1 << 16,
        })
        .unwrap();
        assert_eq!(m.check(&tcp(1000, 99, 0x02, b"")), Outcome::default()); // SYN
        assert!(m
            .check(&tcp(1000, 100, ACK, b"xx SECPERF-AT"))
            .sids
            .is_empty());
        let o = m.check(&tcp(1000, 113, ACK, b"TACK yy"));
        assert_eq!(
            o,
            Outcome {
                sids: vec![1],
                drop: true
            }
        );
        // The flow is blocked: its next segment (and the retransmission) are dropped.
        assert!(m.check(&tcp(1000, 113, ACK, b"TACK yy")).drop);
        // Two contents of one rule in two segments; the rule alerts once per flow.
        assert!(m.check(&tcp(2000, 1, ACK, b"() {")).sids.is_empty());
        assert_eq!(m.check(&tcp(2000, 5, ACK, b" :; }")).sids, vec![2]);
        assert!(m.check(&tcp(2000, 10, ACK, b"() { ;")).sids.is_empty());
        // A retransmission is matched alone; an early segment is held (a gap never
        // filled here: nothing matches).
        assert!(m.check(&tcp(2000, 1, ACK, b"() {")).sids.is_empty());
        assert!(m.check(&tcp(3000, 1, ACK, b"SECPERF-")).sids.is_empty());
        assert!(m.check(&tcp(3000, 50, ACK, b"ATTACK")).sids.is_empty());
        let c = m.reassembly_counters().unwrap();
        assert_eq!((c.flows_opened, c.retransmitted, c.out_of_order), (3, 1, 1));
        assert_eq!((c.gaps, c.pending_bytes), (0, 6));
        assert_eq!(c.blocked_flow_drops, 1);
        // FIN closes the flow.
        m.check(&tcp(3000, 56, ACK | 0x01, b""));
        assert_eq!(m.reassembly_counters().unwrap().flows_tracked, 2);
    }

    fn reordering() -> Matcher {
        let mut m = Matcher::new(&split_rules()).unwrap();
        m.enable_reassembly(Reassembly {
            bytes: 1 << 20,
            flows: 16,
            pending: 64,
        })
        .unwrap();
        m
    }

    #[test]
    fn reordered_segments_join_when_the_gap_fills() {
        const ACK: u8 = 0x10;
        // The attack's second half arrives first: held and let through; the first
        // half fills the gap, the joined stream matches, and that segment is dropped.
        const SYN: u8 = 0x02;
        let mut m = reordering();
        m.check(&tcp(1000, 99, SYN, b""));
        assert_eq!(
            m.check(&tcp(1000, 113, ACK, b"TACK yy")),
            Outcome::default()
        );
        assert_eq!(m.reassembly_counters().unwrap().pending_bytes, 7);
        let o = m.check(&tcp(1000, 100, ACK, b"xx SECPERF-AT"));
        assert_eq!(
            o,
            Outcome {
                sids: vec![1],
                drop: true
            }
        );
        // Its retransmission is dropped too: the flow is blocked.
        assert!(m.check(&tcp(1000, 100, ACK, b"xx SECPERF-AT")).drop);
        let c = m.reassembly_counters().unwrap();
        assert_eq!(
            (c.out_of_order, c.joined, c.pending_bytes, c.gaps),
            (1, 1, 0, 0)
        );

        // Three pieces in reverse order, the middle one overlapping both neighbours.
        m.check(&tcp(2000, 0, SYN, b""));
        assert!(m.check(&tcp(2000, 12, ACK, b"ACK")).sids.is_empty());
        assert!(m.check(&tcp(2000, 6, ACK, b"RF-ATTA")).sids.is_empty());
        assert_eq!(m.check(&tcp(2000, 1, ACK, b"SECPERF")).sids, vec![1]);
        let c = m.reassembly_counters().unwrap();
        assert_eq!((c.out_of_order, c.joined, c.overlapped), (3, 3, 2));

        // A segment overlapping the stream's end: only its new bytes are scanned.
        assert!(m.check(&tcp(3000, 1, ACK, b"SECPERF-AT")).sids.is_empty());
        assert_eq!(m.check(&tcp(3000, 5, ACK, b"ERF-ATTACK")).sids, vec![1]);
    }

    #[test]
    fn held_bytes_are_bounded() {
        const ACK: u8 = 0x10;
        const SYN: u8 = 0x02;
        let mut m = reordering();
        m.check(&tcp(1000, 0, SYN, b""));
        // 40 bytes held; 30 more would pass the bound (64): that gap restarts the
        // stream at the new segment and what was held is forgotten.
        assert!(m.check(&tcp(1000, 100, ACK, &[b'a'; 40])).sids.is_empty());
        assert!(m.check(&tcp(1000, 200, ACK, &[b'b'; 30])).sids.is_empty());
        let c = m.reassembly_counters().unwrap();
        assert_eq!((c.out_of_order, c.gaps, c.pending_bytes), (1, 1, 0));
        // The stream goes on from the restart: a split attack after it still matches.
        assert!(m.check(&tcp(1000, 230, ACK, b"SECPERF-")).sids.is_empty());
        assert_eq!(m.check(&tcp(1000, 238, ACK, b"ATTACK")).sids, vec![1]);
        // An early segment that matches alone is dropped at once and blocks its flow.
        m.check(&tcp(4000, 0, SYN, b""));
        let o = m.check(&tcp(4000, 50, ACK, b"SECPERF-ATTACK"));
        assert!(o.drop && o.sids == vec![1]);
        assert!(m.check(&tcp(4000, 1, ACK, b"x")).drop);
    }

    #[test]
    fn reassembly_bounds_are_counted() {
        const ACK: u8 = 0x10;
        let mut m = Matcher::new(&split_rules()).unwrap();
        m.enable_reassembly(Reassembly {
            bytes: 16,
            flows: 1,
            pending: 1 << 16,
        })
        .unwrap();
        // 12 bytes, then 10 more: the bound (16) cuts the second segment at 4.
        assert!(m.check(&tcp(1000, 1, ACK, b"0123456SECPE")).sids.is_empty());
        assert!(m.check(&tcp(1000, 13, ACK, b"RF-ATTACKz")).sids.is_empty());
        // A second flow is beyond the bound on flows: matched alone (still caught whole).
        assert_eq!(m.check(&tcp(2000, 1, ACK, b"SECPERF-ATTACK")).sids, vec![1]);
        let c = m.reassembly_counters().unwrap();
        assert_eq!(
            (c.flows_cut, c.bytes_reassembled, c.bytes_past_bound),
            (1, 16, 6)
        );
        assert_eq!((c.flows_refused, c.flows_tracked), (1, 1));
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
