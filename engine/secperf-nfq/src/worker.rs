//! One queue's thread: read a batch of queued packets, give each its verdict
//! (the matcher's, or accept), log new connections, send the batch's
//! verdicts in one call, and publish the counters once per batch.
//!
//! A daemon with several queues (`--queues N`: the rule's `--queue-balance`,
//! which spreads flows over the queues by a hash of their addresses, so a
//! flow stays on one queue) runs one worker per queue, each with its own
//! socket, matcher scratch space and flows; the compiled rules are shared.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::connlog::{ConnLog, LogLine, SeenSet};
use crate::error::{NfqError, Result};
use crate::ips::{IpsCounters, Matcher};
use crate::nfqueue::{messages, Message, Pending, QueueSocket, RecvBatch, Verdicts};
use crate::packet::parse_five_tuple;
use crate::reasm::ReassemblyCounters;

/// What one worker counted (published after every batch).
#[derive(Debug, Default, Clone)]
pub struct WorkerStats {
    /// Packets given a verdict.
    pub packets: u64,
    /// Packets whose headers could not be parsed (for the log).
    pub unparsed: u64,
    /// Receives that failed with ENOBUFS: the socket overflowed, the kernel
    /// dropped what it could not deliver (its `user_dropped`).
    pub enobufs: u64,
    /// Receives that returned packets: packets / batches is the mean batch.
    pub batches: u64,
    /// GSO packets (several wire packets in one, NFQA_CFG_F_GSO).
    pub gso: u64,
    /// Packets longer than the copy range (matched on what was copied).
    pub truncated: u64,
    /// Errors the kernel sent back for our verdicts.
    pub verdict_errors: u64,
    pub ips: IpsCounters,
    pub reassembly: Option<ReassemblyCounters>,
}

impl WorkerStats {
    pub fn merge(&mut self, o: &WorkerStats) {
        self.packets += o.packets;
        self.unparsed += o.unparsed;
        self.enobufs += o.enobufs;
        self.batches += o.batches;
        self.gso += o.gso;
        self.truncated += o.truncated;
        self.verdict_errors += o.verdict_errors;
        self.ips.merge(&o.ips);
        if let Some(r) = &o.reassembly {
            self.reassembly
                .get_or_insert_with(ReassemblyCounters::default)
                .merge(r);
        }
    }
}

/// Everything one queue's thread owns.
pub struct Worker {
    pub sock: QueueSocket,
    /// Datagrams read while the queue was being configured.
    pub pending: Pending,
    pub matcher: Option<Matcher>,
    /// The connection log (shared by the workers) and this worker's memory of
    /// connections already logged.
    pub log: Option<Arc<Mutex<ConnLog>>>,
    pub seen: SeenSet,
    pub batch: usize,
    pub buf_size: usize,
    pub stats: Arc<Mutex<WorkerStats>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Worker {
    /// Verdicts for every packet in `data` (one datagram).
    fn handle(&mut self, data: &[u8], v: &mut Verdicts, st: &mut WorkerStats) -> Result<()> {
        let q = self.sock.queue;
        for m in messages(data) {
            let p = match m {
                Message::Packet(p) => p,
                Message::Ack { error, .. } if error != 0 => {
                    st.verdict_errors += 1;
                    continue;
                }
                _ => continue,
            };
            st.packets += 1;
            st.gso += u64::from(p.gso);
            st.truncated += u64::from(p.cap_len.is_some());
            if let Some(log) = &self.log {
                match parse_five_tuple(p.payload) {
                    Ok(tuple) => {
                        if self.seen.first_time(&tuple) {
                            lock(log).write(&LogLine::new(SystemTime::now(), &tuple, q))?;
                        }
                    }
                    Err(_) => st.unparsed += 1,
                }
            }
            let drop = match self.matcher.as_mut() {
                Some(m) => {
                    let out = m.check(p.payload);
                    st.ips.record(p.payload.len(), &out);
                    out.drop
                }
                None => false,
            };
            if drop {
                v.drop_packet(p.id);
            } else {
                v.accept(p.id);
            }
        }
        Ok(())
    }

    fn send(&self, v: &mut Verdicts) -> Result<()> {
        if v.is_empty() {
            return Ok(());
        }
        let q = self.sock.queue;
        self.sock.send(v.take()).map_err(|source| NfqError::Queue {
            queue: q,
            what: "sending verdicts",
            source,
        })
    }

    /// Publishes this batch's counts into the shared stats.
    fn publish(&self, st: &mut WorkerStats) {
        let mut g = lock(&self.stats);
        g.merge(st);
        if let Some(m) = &self.matcher {
            // reassembly counters are the matcher's own totals: replace, not add
            g.reassembly = m.reassembly_counters();
        }
        *st = WorkerStats::default();
    }

    /// Runs until `stop` is set (a receive wakes at least every 100 ms); hands
    /// the socket back, so the queue stays bound until its counters are read.
    pub fn run(mut self, stop: &AtomicBool) -> Result<QueueSocket> {
        let q = self.sock.queue;
        let mut v = Verdicts::new(q);
        let mut st = WorkerStats::default();
        for data in std::mem::take(&mut self.pending) {
            self.handle(&data, &mut v, &mut st)?;
        }
        self.send(&mut v)?;
        self.publish(&mut st);
        let mut b = RecvBatch::new(self.batch, self.buf_size);
        while !stop.load(Ordering::Relaxed) {
            let n = match self.sock.recv(&mut b) {
                Ok(n) => n,
                Err(e)
                    if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::WouldBlock =>
                {
                    continue
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    st.enobufs += 1;
                    self.publish(&mut st);
                    continue;
                }
                Err(source) => {
                    return Err(NfqError::Queue {
                        queue: q,
                        what: "receiving packets",
                        source,
                    })
                }
            };
            st.batches += u64::from(n > 0);
            for i in 0..n {
                // Split borrows: the batch's buffer and the worker's matcher.
                let data = b.get(i);
                self.handle(data, &mut v, &mut st)?;
            }
            self.send(&mut v)?;
            self.publish(&mut st);
        }
        Ok(self.sock)
    }
}
