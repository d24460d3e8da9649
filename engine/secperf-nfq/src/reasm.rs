//! Bounded per-flow TCP reassembly for the IPS matcher: what it keeps per flow
//! direction, its bounds and its counters. The matching itself (Hyperscan's
//! stream mode, one stream per flow direction) lives in `ips.rs`.
//!
//! Only in-order data is reassembled: a segment that starts where the flow's
//! stream ends is scanned into the stream, so a pattern split across segments
//! matches. A retransmission (data before that point) is matched alone; a gap
//! (data after it: a segment lost before the IPS) restarts the flow's stream at
//! the new segment. Two bounds keep the memory fixed: `bytes` of each flow
//! direction are reassembled (later data is matched packet by packet) and at
//! most `flows` flow directions are tracked at once (a flow beyond that is
//! matched packet by packet). Every cut is counted.

use std::net::IpAddr;

use hyperscan::prelude::Stream;
use serde_json::json;

use crate::packet::FiveTuple;

/// The bounds of reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reassembly {
    /// Bytes of each flow direction scanned as one stream.
    pub bytes: u64,
    /// Flow directions tracked at once.
    pub flows: usize,
}

/// One direction of a TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

impl FlowKey {
    pub fn of(t: &FiveTuple) -> Option<FlowKey> {
        Some(FlowKey {
            src: t.src,
            dst: t.dst,
            sport: t.sport?,
            dport: t.dport?,
        })
    }
}

/// What is kept per flow direction.
pub struct Flow {
    pub stream: Option<Stream>,
    /// The sequence number the next in-order segment starts with.
    pub next_seq: u32,
    /// Bytes scanned into the stream so far (the `bytes` bound counts these).
    pub scanned: u64,
    /// Pattern ids found in the flow so far.
    pub hits: Vec<usize>,
    /// Rules (by sid) already reported for this flow: each alerts once per flow.
    pub fired: Vec<u64>,
    /// A drop rule matched: every later packet of the flow is dropped.
    pub blocked: bool,
    /// The `bytes` bound was reached.
    pub cut: bool,
}

impl Flow {
    pub fn new(stream: Stream, next_seq: u32) -> Flow {
        Flow {
            stream: Some(stream),
            next_seq,
            scanned: 0,
            hits: Vec::new(),
            fired: Vec::new(),
            blocked: false,
            cut: false,
        }
    }
}

/// What reassembly did, and what its bounds cut.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReassemblyCounters {
    /// Flow directions tracked now.
    pub flows_tracked: u64,
    /// Flow directions ever tracked.
    pub flows_opened: u64,
    /// Flow directions not tracked because `flows` were tracked already.
    pub flows_refused: u64,
    /// Flow directions whose data went past the `bytes` bound.
    pub flows_cut: u64,
    /// Bytes scanned as part of a flow's stream.
    pub bytes_reassembled: u64,
    /// Bytes past a flow's `bytes` bound (matched packet by packet).
    pub bytes_past_bound: u64,
    /// Segments with data already scanned (retransmissions), matched alone.
    pub retransmitted: u64,
    /// Segments after a gap: the flow's stream restarted there.
    pub gaps: u64,
    /// Packets dropped because their flow was blocked before.
    pub blocked_flow_drops: u64,
}

impl ReassemblyCounters {
    /// Add another thread's counters.
    pub fn merge(&mut self, o: &ReassemblyCounters) {
        self.flows_tracked += o.flows_tracked;
        self.flows_opened += o.flows_opened;
        self.flows_refused += o.flows_refused;
        self.flows_cut += o.flows_cut;
        self.bytes_reassembled += o.bytes_reassembled;
        self.bytes_past_bound += o.bytes_past_bound;
        self.retransmitted += o.retransmitted;
        self.gaps += o.gaps;
        self.blocked_flow_drops += o.blocked_flow_drops;
    }

    pub fn to_json(&self, bound: Option<Reassembly>) -> serde_json::Value {
        json!({
            "bytes_bound": bound.map(|b| b.bytes),
            "flows_bound": bound.map(|b| b.flows),
            "flows_tracked": self.flows_tracked,
            "flows_opened": self.flows_opened,
            "flows_refused": self.flows_refused,
            "flows_cut": self.flows_cut,
            "bytes_reassembled": self.bytes_reassembled,
            "bytes_past_bound": self.bytes_past_bound,
            "retransmitted": self.retransmitted,
            "gaps": self.gaps,
            "blocked_flow_drops": self.blocked_flow_drops,
        })
    }
}
