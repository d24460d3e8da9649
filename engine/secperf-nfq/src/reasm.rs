//! Bounded per-flow TCP reassembly for the IPS matcher: what it keeps per flow
//! direction, its bounds and its counters. The matching itself (Hyperscan's
//! stream mode, one stream per flow direction) lives in `ips.rs`.
//!
//! Data is scanned in sequence order: a segment that starts where the flow's
//! stream ends is scanned into the stream, so a pattern split across segments
//! matches. A segment that arrives early (after a gap: an earlier segment was
//! reordered or lost on the way) is held, a copy of its data, up to `pending`
//! bytes of each flow direction, and scanned when the gap fills; the packet
//! itself is let through (matched alone for its verdict), as a receiving TCP
//! keeps it too but cannot deliver it before the gap's data, and the segment
//! that fills the gap is the one dropped if the joined stream matches. Data
//! already scanned is not scanned again: a retransmission is matched alone,
//! and the new part of a segment that overlaps the stream's end is scanned
//! (the first copy of a byte wins). Past the `pending` bound, a gap restarts
//! the flow's stream at the new segment, as it did before any buffer.
//!
//! Three bounds keep the memory fixed: `bytes` of each flow direction are
//! reassembled (later data is matched packet by packet), `pending` bytes of it
//! held out of order, and at most `flows` flow directions tracked at once (a
//! flow beyond that is matched packet by packet). Every cut is counted.

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
    /// Bytes of each flow direction held out of order until their gap fills.
    pub pending: u64,
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
    /// Segments that arrived ahead of `next_seq`: (their sequence number, their data).
    pub pending: Vec<(u32, Vec<u8>)>,
    /// Bytes held in `pending`.
    pub pending_bytes: u64,
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
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Hold a segment that arrived ahead of the stream; false when the bound is
    /// reached (nothing is held then).
    pub fn hold(&mut self, seq: u32, data: &[u8], bound: u64) -> bool {
        if self.pending_bytes + data.len() as u64 > bound {
            return false;
        }
        self.pending_bytes += data.len() as u64;
        self.pending.push((seq, data.to_vec()));
        true
    }

    /// Take the next held segment that now joins the stream (starts at or before
    /// `next_seq`), trimmed of what was scanned already; held segments wholly
    /// behind the stream are dropped on the way (counted in `overlapped`).
    pub fn next_joining(&mut self, overlapped: &mut u64) -> Option<Vec<u8>> {
        loop {
            let i = self
                .pending
                .iter()
                .position(|(seq, _)| (seq.wrapping_sub(self.next_seq) as i32) <= 0)?;
            let (seq, data) = self.pending.swap_remove(i);
            self.pending_bytes -= data.len() as u64;
            let behind = self.next_seq.wrapping_sub(seq) as usize;
            if behind >= data.len() {
                *overlapped += 1;
                continue;
            }
            if behind > 0 {
                *overlapped += 1;
            }
            return Some(data[behind..].to_vec());
        }
    }

    /// Forget what is held (the stream restarted past it).
    pub fn drop_pending(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
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
    /// Segments whose start overlapped data already scanned or held: only their
    /// new bytes were scanned.
    pub overlapped: u64,
    /// Segments that arrived ahead of the stream and were held until the gap filled.
    pub out_of_order: u64,
    /// Held segments scanned into the stream once their gap filled.
    pub joined: u64,
    /// Bytes held out of order now (at most `pending` of each flow direction).
    pub pending_bytes: u64,
    /// Segments after a gap the `pending` bound could not hold: the flow's stream
    /// restarted there.
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
        self.overlapped += o.overlapped;
        self.out_of_order += o.out_of_order;
        self.joined += o.joined;
        self.pending_bytes += o.pending_bytes;
        self.gaps += o.gaps;
        self.blocked_flow_drops += o.blocked_flow_drops;
    }

    pub fn to_json(&self, bound: Option<Reassembly>) -> serde_json::Value {
        json!({
            "bytes_bound": bound.map(|b| b.bytes),
            "flows_bound": bound.map(|b| b.flows),
            "pending_bound": bound.map(|b| b.pending),
            "flows_tracked": self.flows_tracked,
            "flows_opened": self.flows_opened,
            "flows_refused": self.flows_refused,
            "flows_cut": self.flows_cut,
            "bytes_reassembled": self.bytes_reassembled,
            "bytes_past_bound": self.bytes_past_bound,
            "retransmitted": self.retransmitted,
            "overlapped": self.overlapped,
            "out_of_order": self.out_of_order,
            "joined": self.joined,
            "pending_bytes": self.pending_bytes,
            "gaps": self.gaps,
            "blocked_flow_drops": self.blocked_flow_drops,
        })
    }
}
