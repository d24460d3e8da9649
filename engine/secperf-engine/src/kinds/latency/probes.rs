//! The two ends of one direction of latency probes. Two-step, like PTP's
//! follow-up: a probe cannot carry its own TX stamp (the kernel takes it as
//! the packet leaves), so each probe carries the stamp of an earlier probe of
//! the same sender (`back` probes before it, usually 1, wire::probe); the
//! receiver keeps a ring of (seq → RX stamp) to match them. When the sender
//! stops it sends follow-up-only datagrams for the stamps still owed. A probe
//! whose kernel TX stamp has not come after 100 ms, or that arrived without a
//! kernel RX stamp, is **unstamped**: its delay would mix a user-space clock
//! read with a kernel stamp, so it is counted (`unstamped`) and left out of
//! the histogram.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::{EngineError, Result};
use crate::rt::tstamp;
use crate::wire::control::{RxReport, TxReport};
use crate::wire::probe::{encode, Probe, Stamp, BACK_MAX, HEADER};

const RING: usize = 1 << 16;
/// A kernel TX stamp not read after this is given up: the probe goes
/// unstamped. Long enough for a probe queued behind a shaped link's qdisc
/// (the stamp is taken as the driver sends it) and for a stalled sender to
/// catch up; a backlog this long stays within BACK_MAX and the receiver's
/// ring up to ~300 kpps.
pub const UNSTAMPED_AFTER_NS: u64 = 100_000_000;

/// Delays in ns, 4 significant figures (0.1 µs or finer below 1 ms), up to 10 s.
pub fn new_delay_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail.
    Histogram::new_with_bounds(1, 10_000_000_000, 4).expect("valid histogram bounds")
}

#[derive(Clone, Copy, Default)]
struct Slot {
    tag: u64, // seq + 1; 0 = empty
    /// The RX stamp; None when the datagram came without a kernel one.
    rx_ns: Option<u64>,
    measured: bool,
}

/// One direction's receiving end: counts, reordering, and matching
/// follow-up stamps to the RX stamps of earlier probes.
pub struct Receiver {
    ring: Vec<Slot>,
    highest: Option<u64>,
    pub received: u64,
    pub reordered: u64,
    pub unmatched: u64,
    /// Measured probes whose TX or RX stamp was not the kernel's: not in `hist`.
    pub unstamped: u64,
    /// Load frames (not probes) of the measured window (latency under load).
    pub load_received: u64,
    /// Where the load frames were counted (the kernel's socket filter, or here).
    pub load_counter: String,
    pub hist: Histogram<u64>,
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver {
            ring: vec![Slot::default(); RING],
            highest: None,
            received: 0,
            reordered: 0,
            unmatched: 0,
            unstamped: 0,
            load_received: 0,
            load_counter: String::new(),
            hist: new_delay_histogram(),
        }
    }
}

impl Receiver {
    /// Takes one datagram with its RX stamp (None: the kernel gave none);
    /// returns the delay (ns) it completed, if any, measured and stamped.
    pub fn on_datagram(&mut self, p: &Probe, rx_ns: Option<u64>) -> Option<u64> {
        if let Some(seq) = p.seq {
            if p.measured {
                self.received += 1;
                if self.highest.is_some_and(|h| seq < h) {
                    self.reordered += 1;
                }
            }
            if self.highest.is_none_or(|h| seq > h) {
                self.highest = Some(seq);
            }
            self.ring[seq as usize % RING] = Slot {
                tag: seq + 1,
                rx_ns,
                measured: p.measured,
            };
        }
        let st = p.stamp?;
        let slot = &mut self.ring[st.seq as usize % RING];
        if slot.tag != st.seq + 1 {
            // Its probe was lost, or is too far back for the ring.
            self.unmatched += 1;
            return None;
        }
        slot.tag = 0;
        if !slot.measured {
            return None;
        }
        let rx_ns = match slot.rx_ns {
            Some(ns) if !st.fallback => ns,
            _ => {
                self.unstamped += 1;
                return None;
            }
        };
        let d = rx_ns.saturating_sub(st.tx_ns).max(1);
        self.hist.saturating_record(d);
        Some(d)
    }

    pub(super) fn report(&self) -> RxReport {
        RxReport {
            received: self.received,
            reordered: self.reordered,
            unmatched: self.unmatched,
            unstamped: self.unstamped,
            load_received: self.load_received,
            load_counter: self.load_counter.clone(),
            hist: self
                .hist
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        }
    }
}

struct Pending {
    seq: u64,
    key: u32,
    user_ns: u64,
    kernel_ns: Option<u64>,
}

/// One direction's sending end: numbering, the TX stamps owed, counts.
pub struct Sender {
    pending: VecDeque<Pending>,
    next_seq: u64,
    kernel: bool,
    use_key: bool,
    counter: u32,
    pub(super) buf: Vec<u8>,
    pub sent: u64,
    pub sent_total: u64,
    pub send_failed: u64,
    pub dropped_stamps: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::ECONNREFUSED) | Some(libc::EPERM)
    )
}

impl Sender {
    pub fn new(payload: usize, kernel: bool) -> Sender {
        Sender {
            pending: VecDeque::new(),
            next_seq: 0,
            kernel,
            use_key: true,
            counter: 0,
            buf: vec![0u8; payload.max(HEADER)],
            sent: 0,
            sent_total: 0,
            send_failed: 0,
            dropped_stamps: 0,
            first: None,
            last: None,
        }
    }

    fn drain_errqueue(&mut self, fd: i32) -> Result<()> {
        while let Some((key, ns)) = tstamp::read_tx_stamp(fd).map_err(EngineError::io(
            "cannot read TX timestamps from the error queue",
        ))? {
            // Keys rise with the queue (wrapping u32): search by offset from the front.
            let Some(first) = self.pending.front().map(|p| p.key) else {
                continue;
            };
            let off = key.wrapping_sub(first);
            let i = self
                .pending
                .partition_point(|p| p.key.wrapping_sub(first) < off);
            if let Some(p) = self.pending.get_mut(i).filter(|p| p.key == key) {
                p.kernel_ns = Some(ns);
            }
        }
        Ok(())
    }

    /// The stamp the next datagram carries, if one is due.
    fn next_stamp(&mut self, fd: i32, drained: &mut bool) -> Result<Option<Stamp>> {
        loop {
            let Some(front) = self.pending.front() else {
                return Ok(None);
            };
            if self.next_seq - front.seq > BACK_MAX {
                self.pending.pop_front();
                self.dropped_stamps += 1;
                continue;
            }
            if !self.kernel {
                let p = self.pending.pop_front().expect("front exists");
                return Ok(Some(Stamp {
                    seq: p.seq,
                    tx_ns: p.user_ns,
                    fallback: false,
                }));
            }
            if front.kernel_ns.is_none() && !*drained {
                self.drain_errqueue(fd)?;
                *drained = true;
            }
            let front = self.pending.front().expect("front exists");
            if let Some(ns) = front.kernel_ns {
                let seq = front.seq;
                self.pending.pop_front();
                return Ok(Some(Stamp {
                    seq,
                    tx_ns: ns,
                    fallback: false,
                }));
            }
            if tstamp::realtime_ns().saturating_sub(front.user_ns) > UNSTAMPED_AFTER_NS {
                let p = self.pending.pop_front().expect("front exists");
                return Ok(Some(Stamp {
                    seq: p.seq,
                    tx_ns: p.user_ns,
                    fallback: true,
                }));
            }
            return Ok(None);
        }
    }

    fn send_raw(
        &mut self,
        fd: i32,
        to: SocketAddr,
        from: Option<IpAddr>,
        key: Option<u32>,
    ) -> std::io::Result<usize> {
        let r = tstamp::send(fd, &self.buf, to, from, key);
        match r {
            Err(e)
                if key.is_some()
                    && e.raw_os_error() == Some(libc::EINVAL)
                    && self.sent_total == 0 =>
            {
                // A kernel before 6.13 has no SCM_TS_OPT_ID: count keys instead.
                self.use_key = false;
                tstamp::send(fd, &self.buf, to, from, None)
            }
            r => r,
        }
    }

    /// Sends one probe; Ok(false) if the kernel dropped it locally.
    pub fn send_probe(
        &mut self,
        fd: i32,
        to: SocketAddr,
        from: Option<IpAddr>,
        measured: bool,
    ) -> Result<bool> {
        let mut drained = false;
        let stamp = self.next_stamp(fd, &mut drained)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        encode(
            &mut self.buf,
            &Probe {
                seq: Some(seq),
                measured,
                stamp,
            },
        );
        let user_ns = tstamp::realtime_ns();
        let key = (self.use_key && self.kernel).then_some(seq as u32);
        match self.send_raw(fd, to, from, key) {
            Ok(_) => {
                let key = if self.use_key {
                    seq as u32
                } else {
                    let k = self.counter;
                    self.counter = self.counter.wrapping_add(1);
                    k
                };
                self.pending.push_back(Pending {
                    seq,
                    key,
                    user_ns,
                    kernel_ns: None,
                });
                self.sent_total += 1;
                if measured {
                    let now = Instant::now();
                    self.first.get_or_insert(now);
                    self.last = Some(now);
                    self.sent += 1;
                }
                Ok(true)
            }
            Err(e) if transient(&e) => {
                if measured {
                    self.send_failed += 1;
                }
                if stamp.is_some() {
                    self.dropped_stamps += 1;
                }
                Ok(false)
            }
            Err(e) => Err(EngineError::io(format!(
                "cannot send a latency probe to {} (check the route and that `sources` are addresses of this host)",
                to
            ))(e)),
        }
    }

    /// Sends follow-up-only datagrams for every stamp still owed.
    pub fn flush(&mut self, fd: i32, to: SocketAddr, from: Option<IpAddr>) -> Result<()> {
        let deadline = Instant::now() + Duration::from_millis(20);
        while !self.pending.is_empty() {
            let mut drained = false;
            match self.next_stamp(fd, &mut drained)? {
                Some(st) => {
                    encode(
                        &mut self.buf,
                        &Probe {
                            seq: None,
                            measured: false,
                            stamp: Some(st),
                        },
                    );
                    match tstamp::send(fd, &self.buf, to, from, None) {
                        Ok(_) => {
                            if !self.use_key {
                                self.counter = self.counter.wrapping_add(1);
                            }
                        }
                        Err(e) if transient(&e) => self.dropped_stamps += 1,
                        Err(e) => return Err(EngineError::io("cannot send a follow-up stamp")(e)),
                    }
                }
                None if Instant::now() > deadline => {
                    self.dropped_stamps += self.pending.len() as u64;
                    self.pending.clear();
                }
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        Ok(())
    }

    pub(super) fn report(&self, rate_pps: f64) -> TxReport {
        let window_ns = match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_nanos() as u64 + (1e9 / rate_pps) as u64,
            _ => 0,
        };
        TxReport {
            sent: self.sent,
            send_failed: self.send_failed,
            dropped_stamps: self.dropped_stamps,
            window_ns,
            load: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, stamp: Option<(u64, u64)>) -> Probe {
        Probe {
            seq: Some(seq),
            measured: true,
            stamp: stamp.map(|(s, t)| Stamp {
                seq: s,
                tx_ns: t,
                fallback: false,
            }),
        }
    }

    #[test]
    fn receiver_counts_reordering_and_matches_stamps() {
        let mut r = Receiver::default();
        assert_eq!(r.on_datagram(&probe(0, None), Some(1000)), None);
        assert_eq!(r.on_datagram(&probe(2, None), Some(3000)), None);
        // 1 arrives after 2: reordered; it carries 0's stamp (tx 900 → delay 100).
        assert_eq!(
            r.on_datagram(&probe(1, Some((0, 900))), Some(2000)),
            Some(100)
        );
        assert_eq!(
            r.on_datagram(&probe(3, Some((2, 2950))), Some(4000)),
            Some(50)
        );
        // A stamp for a probe never received does not match.
        assert_eq!(r.on_datagram(&probe(5, Some((4, 1))), Some(5000)), None);
        assert_eq!((r.received, r.reordered, r.unmatched), (5, 1, 1));
        assert_eq!(r.hist.len(), 2);
    }

    #[test]
    fn probes_without_kernel_stamps_are_counted_not_histogrammed() {
        let mut r = Receiver::default();
        // 0 arrives without a kernel RX stamp; 1 carries 0's TX stamp.
        assert_eq!(r.on_datagram(&probe(0, None), None), None);
        assert_eq!(r.on_datagram(&probe(1, Some((0, 900))), Some(2000)), None);
        // 2 carries 1's TX stamp, a user-space one (the kernel's came too late).
        let late = Probe {
            seq: Some(2),
            measured: true,
            stamp: Some(Stamp {
                seq: 1,
                tx_ns: 1500,
                fallback: true,
            }),
        };
        assert_eq!(r.on_datagram(&late, Some(3000)), None);
        // 3 carries 2's kernel stamp: measured.
        assert_eq!(
            r.on_datagram(&probe(3, Some((2, 2900))), Some(4000)),
            Some(100)
        );
        assert_eq!(r.unstamped, 2);
        assert_eq!(
            r.hist.len(),
            1,
            "only the kernel-stamped delay is in the histogram"
        );
        assert_eq!(r.report().unstamped, 2);
    }
}
