//! Kind `latency`: timestamped UDP probes at a fixed rate, one-way delay per
//! probe from kernel software timestamps (all namespaces share one clock).
//!
//! Two-step, like PTP's follow-up: a probe cannot carry its own TX stamp (the
//! kernel takes it as the packet leaves), so each probe carries the stamp of
//! an earlier probe of the same sender (`back` probes before it, usually 1);
//! the receiver keeps a ring of (seq → RX stamp) to match them. When the
//! sender stops it sends follow-up-only datagrams for the stamps still owed.
//! A probe whose kernel TX stamp has not come after 100 ms, or that arrived
//! without a kernel RX stamp, is **unstamped**: its delay would mix a
//! user-space clock read with a kernel stamp, so it is counted (`unstamped`)
//! and left out of the histogram, and a test with more than 1 % of its
//! probes unstamped in a direction fails (`check`). With `timestamps = "user"`
//! every delay is user-space by request and nothing is unstamped.
//!
//! Probe payload (18 bytes, the most a 64-byte IPv4 frame holds):
//! `[0..8]` seq (bit 63: follow-up only, bit 62: in the measured window),
//! `[8..16]` TX stamp ns (CLOCK_REALTIME), `[16..18]` back (bit 15: the TX stamp is a user-space one: unstamped).
//! The measured bit travels with the probe, so both ends count the same
//! window exactly and `sent = received + lost` holds.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::kinds::{ClientStart, ServerEnv, ServerSetup};
use crate::latency_load::{self, LoadTx, Pair};
use crate::net;
use crate::record::LatencySummary;
use crate::shared::{summarize, Role, Shared, ThreadStats};
use crate::spec::{Duplex, Spec, Timestamps};
use crate::tstamp;

pub const HEADER: usize = 18;
const FOLLOWUP: u64 = 1 << 63;
const MEASURED: u64 = 1 << 62;
/// Bit 61 marks a load frame (latency_load); sequence numbers stay below it.
const SEQ_MASK: u64 = crate::latency_load::LOAD - 1;
const FALLBACK: u16 = 0x8000;
const BACK_MAX: u64 = 0x7fff;
const RING: usize = 1 << 16;
/// A kernel TX stamp not read after this is given up: the probe goes
/// unstamped. Long enough for a probe queued behind a shaped link's qdisc
/// (the stamp is taken as the driver sends it) and for a stalled sender to
/// catch up; a backlog this long stays within BACK_MAX and the receiver's
/// ring up to ~300 kpps.
const UNSTAMPED_AFTER_NS: u64 = 100_000_000;
/// The largest share of a direction's matched probes that may be unstamped
/// before the test fails: beyond it, the probes left out of the histogram
/// could bias it.
pub const MAX_UNSTAMPED_SHARE: f64 = 0.01;
/// A sender further behind its schedule than this skips ahead (a shortfall,
/// reported in `achieved_pps`) instead of bursting to catch up.
const MAX_BEHIND: Duration = Duration::from_millis(1);
/// Receive buffer of a probe socket (see tstamp::big_rcvbuf).
const RCVBUF: i32 = 16 << 20;
/// How early a probe may leave instead of sleeping for it.
const EARLY: Duration = Duration::from_micros(20);
const QUIET: Duration = Duration::from_millis(200);
const READ_WAKE: Duration = Duration::from_millis(50);

/// UDP payload of a probe for an on-wire frame of `frame` bytes (14 B
/// Ethernet header and 4 B FCS included).
pub fn payload_len(frame: usize, v6: bool) -> usize {
    frame.saturating_sub(18 + if v6 { 40 } else { 20 } + 8)
}

// ------------------------------------------------------------ wire format

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub seq: u64,
    pub tx_ns: u64,
    pub fallback: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// None for a follow-up-only datagram.
    pub seq: Option<u64>,
    pub measured: bool,
    pub stamp: Option<Stamp>,
}

pub fn encode(buf: &mut [u8], p: &Probe) {
    let (word, back) = match (p.seq, p.stamp) {
        (Some(seq), st) => {
            let back = st.map(|s| seq.saturating_sub(s.seq)).unwrap_or(0);
            (seq & SEQ_MASK, back as u16)
        }
        (None, Some(s)) => (FOLLOWUP | (s.seq & SEQ_MASK), 0),
        (None, None) => (FOLLOWUP, 0),
    };
    let word = word | if p.measured { MEASURED } else { 0 };
    let fb = if p.stamp.is_some_and(|s| s.fallback) {
        FALLBACK
    } else {
        0
    };
    buf[0..8].copy_from_slice(&word.to_le_bytes());
    buf[8..16].copy_from_slice(&p.stamp.map(|s| s.tx_ns).unwrap_or(0).to_le_bytes());
    buf[16..18].copy_from_slice(&(back | fb).to_le_bytes());
}

pub fn decode(buf: &[u8]) -> Option<Probe> {
    if buf.len() < HEADER {
        return None;
    }
    let word = u64::from_le_bytes(buf[0..8].try_into().ok()?);
    let tx_ns = u64::from_le_bytes(buf[8..16].try_into().ok()?);
    let b = u16::from_le_bytes(buf[16..18].try_into().ok()?);
    let seq = word & SEQ_MASK;
    let fallback = b & FALLBACK != 0;
    let back = (b & !FALLBACK) as u64;
    let measured = word & MEASURED != 0;
    if word & FOLLOWUP != 0 {
        return Some(Probe {
            seq: None,
            measured,
            stamp: Some(Stamp {
                seq,
                tx_ns,
                fallback,
            }),
        });
    }
    let stamp = (back > 0 && back <= seq).then_some(Stamp {
        seq: seq - back,
        tx_ns,
        fallback,
    });
    Some(Probe {
        seq: Some(seq),
        measured,
        stamp,
    })
}

// ------------------------------------------------------------ receiver

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

    fn report(&self) -> RxReport {
        RxReport {
            received: self.received,
            reordered: self.reordered,
            unmatched: self.unmatched,
            unstamped: self.unstamped,
            load_received: self.load_received,
            hist: self
                .hist
                .iter_recorded()
                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                .collect(),
        }
    }
}

// ------------------------------------------------------------ sender

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
    buf: Vec<u8>,
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

    fn report(&self, rate_pps: f64) -> TxReport {
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

// ------------------------------------------------------------ per-side state

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TxReport {
    pub sent: u64,
    pub send_failed: u64,
    pub dropped_stamps: u64,
    pub window_ns: u64,
    /// Latency under load: the whole stream's sender (None: socket probes).
    #[serde(default)]
    pub load: Option<LoadTx>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RxReport {
    pub received: u64,
    pub reordered: u64,
    pub unmatched: u64,
    pub unstamped: u64,
    #[serde(default)]
    pub load_received: u64,
    /// (value ns, count) of every non-empty bucket of the delay histogram.
    pub hist: Vec<[u64; 2]>,
}

/// What one side measured: the direction it sent and the one it received.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SideReport {
    pub tx: TxReport,
    pub rx: RxReport,
}

/// One side's test state, kept in `Shared` for the end of the test.
#[derive(Default)]
pub struct State {
    pub report: Mutex<SideReport>,
    /// Server: (local address, client address) pairs heard from, for s2c.
    peers: Mutex<Vec<(IpAddr, SocketAddr)>>,
}

fn state(sh: &Shared) -> Option<Arc<State>> {
    sh.ext().and_then(|a| Arc::downcast::<State>(a).ok())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn wildcard(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::from([0u16; 8])
    } else {
        IpAddr::from([0u8; 4])
    }
}

fn prepare(sock: &UdpSocket, spec: &Spec) -> Result<()> {
    tstamp::enable(
        sock.as_raw_fd(),
        spec.server.is_ipv6(),
        spec.timestamps == Timestamps::Kernel,
    )
    .map_err(EngineError::io(
        "cannot enable SO_TIMESTAMPING / IP_PKTINFO on the probe socket",
    ))?;
    tstamp::big_rcvbuf(sock.as_raw_fd(), RCVBUF);
    sock.set_read_timeout(Some(READ_WAKE))
        .map_err(EngineError::io("cannot set the probe socket's timeout"))
}

fn clone(sock: &UdpSocket) -> Result<UdpSocket> {
    sock.try_clone()
        .map_err(EngineError::io("cannot duplicate the probe socket"))
}

// ------------------------------------------------------------ loops

/// Paced sending: probe k is due at start + k / rate (absolute, no drift).
/// `pick(k)` gives the (source, destination) of probe k, or None to wait.
fn paced_send(
    sock: &UdpSocket,
    spec: &Spec,
    sh: &Shared,
    st: &ThreadStats,
    mut pick: impl FnMut(u64) -> Option<(Option<IpAddr>, SocketAddr)>,
) -> Result<()> {
    tstamp::fine_timer_slack();
    let fd = sock.as_raw_fd();
    let kernel = spec.timestamps == Timestamps::Kernel;
    let mut tx = Sender::new(payload_len(spec.frame_size, spec.server.is_ipv6()), kernel);
    let period = 1.0 / spec.rate_pps;
    let mut start: Option<Instant> = None;
    let mut k: u64 = 0;
    let mut last_pair = None;
    while !sh.stopped() {
        let Some(pair) = pick(k) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let t0 = *start.get_or_insert_with(Instant::now);
        let due = t0 + Duration::from_secs_f64(period * k as f64);
        let now = Instant::now();
        // A probe due within EARLY goes now: a sleep costs about as much as
        // the gap at high rates (the long-run rate stays exact).
        if due > now + EARLY {
            std::thread::sleep((due - now).min(Duration::from_millis(100)));
            if Instant::now() < due {
                continue;
            }
        } else if now - due > MAX_BEHIND {
            k = ((now - t0 - MAX_BEHIND).as_secs_f64() / period) as u64;
        }
        let measured = sh.measuring.load(Relaxed);
        if tx.send_probe(fd, pair.1, pair.0, measured)? {
            st.messages_sent.store(tx.sent_total, Relaxed);
            st.bytes_sent
                .store(tx.sent_total * tx.buf.len() as u64, Relaxed);
        }
        last_pair = Some(pair);
        k += 1;
    }
    if let Some((from, to)) = last_pair {
        if !sh.aborted() {
            tx.flush(fd, to, from)?;
        }
    }
    if let Some(s) = state(sh) {
        lock(&s.report).tx = tx.report(spec.rate_pps);
    }
    Ok(())
}

/// Receiving: matches stamps, counts; the server learns its peers and, in
/// half duplex, answers each probe with one of its own.
fn receive(
    sock: &UdpSocket,
    spec: &Spec,
    sh: &Shared,
    st: &ThreadStats,
    server: bool,
) -> Result<()> {
    let fd = sock.as_raw_fd();
    let kernel = spec.timestamps == Timestamps::Kernel;
    let mut rx = Receiver::default();
    let mut buf = vec![0u8; 2048];
    // Under load every frame is read: in batches. Probes alone: one at a time,
    // so that a user-space RX stamp is read right after its datagram.
    let mut batch = tstamp::RecvBatch::new(if spec.probe_every.is_some() {
        tstamp::BATCH_MAX
    } else {
        1
    });
    let mut last = 0u64;
    let mut count = 0u64;
    let mut seen: HashSet<(IpAddr, SocketAddr)> = HashSet::new();
    let half = server && spec.duplex == Duplex::Half;
    let mut answer =
        half.then(|| Sender::new(payload_len(spec.frame_size, spec.server.is_ipv6()), kernel));
    let mut last_peer = None;
    let st_ref = state(sh);
    loop {
        match batch.recv(fd, &mut buf) {
            Ok(r) => {
                let user_rx = tstamp::realtime_ns();
                // A datagram without a kernel RX stamp: its probe goes unstamped.
                let rx_ns = if kernel { r.rx_ns } else { Some(user_rx) };
                last = sh.now_ns();
                st.last_recv_ns.store(last, Relaxed);
                if let Some(measured) = latency_load::load_word(&buf[..r.len]) {
                    count += 1;
                    if measured {
                        rx.load_received += 1;
                    }
                    if count.is_multiple_of(1024) {
                        st.messages_received.store(count, Relaxed);
                    }
                    if server && seen.len() < 4096 {
                        if let (Some(local), Some(from)) = (r.local, r.from) {
                            if seen.insert((local, from)) {
                                if let Some(s) = &st_ref {
                                    lock(&s.peers).push((local, from));
                                }
                            }
                        }
                    }
                    continue;
                }
                let Some(p) = decode(&buf[..r.len]) else {
                    continue;
                };
                count += 1;
                st.messages_received.store(count, Relaxed);
                st.bytes_received.fetch_add(r.len as u64, Relaxed);
                if let Some(d) = rx.on_datagram(&p, rx_ns) {
                    if !server {
                        sh.record_rtt(Duration::from_nanos(d));
                    }
                }
                if server && p.seq.is_some() {
                    if let (Some(local), Some(from)) = (r.local, r.from) {
                        let peer = (local, from);
                        if seen.len() < 4096 && seen.insert(peer) {
                            if let Some(s) = &st_ref {
                                lock(&s.peers).push(peer);
                            }
                        }
                        if let Some(tx) = answer.as_mut() {
                            if !sh.aborted() {
                                tx.send_probe(fd, from, Some(local), p.measured)?;
                                st.messages_sent.store(tx.sent_total, Relaxed);
                            }
                            last_peer = Some(peer);
                        }
                    }
                }
            }
            Err(e) if net::would_block(&e) || e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                if sh.quiet_end(last, QUIET) {
                    break;
                }
            }
            Err(e) => {
                return Err(EngineError::io("cannot receive latency probes")(e));
            }
        }
    }
    if let (Some(tx), Some((local, from))) = (answer.as_mut(), last_peer) {
        if !sh.aborted() {
            tx.flush(fd, from, Some(local))?;
        }
    }
    if let Some(s) = &st_ref {
        let mut g = lock(&s.report);
        g.rx = rx.report();
        if let Some(tx) = &answer {
            g.tx = tx.report(spec.rate_pps);
        }
    }
    Ok(())
}

// ------------------------------------------------------------ kinds entry points

pub fn serve(spec: &Spec, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
    // Wildcard: probes may come to any of `destinations`; replies leave from
    // the address each probe came to (IP_PKTINFO).
    let (sock, socket) = net::udp_bind(spec, wildcard(env.ip.is_ipv6()), env.ports)?;
    prepare(&sock, spec)?;
    let data_port = sock
        .local_addr()
        .map_err(EngineError::io("cannot read the probe socket's address"))?
        .port();
    let state = Arc::new(State::default());
    sh.set_ext(state.clone());
    let rsock = clone(&sock)?;
    let spec2 = spec.clone();
    sh.spawn("lat-rx", Role::Passive, move |sh, st| {
        receive(&rsock, &spec2, sh, st, true)
    })?;
    if let (Some(every), Duplex::Full) = (spec.probe_every, spec.duplex) {
        let spec2 = spec.clone();
        sh.spawn("lat-load", Role::Active, move |sh, st| {
            let mut peers: Vec<Pair> = Vec::new();
            let tx = latency_load::paced_send(&spec2, every, sh, st, |k| {
                if peers.is_empty() || k % 256 == 0 {
                    peers = lock(&state.peers)
                        .iter()
                        .filter_map(|(local, remote)| match (local, remote.ip()) {
                            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(Pair {
                                src: *src,
                                dst,
                                sport: data_port,
                                dport: remote.port(),
                            }),
                            _ => None,
                        })
                        .collect();
                }
                if peers.is_empty() {
                    return None;
                }
                Some(peers[(k % peers.len() as u64) as usize])
            })?;
            lock(&state.report).tx = load_report(tx);
            Ok(())
        })?;
    } else if spec.duplex == Duplex::Full {
        let spec2 = spec.clone();
        sh.spawn("lat-tx", Role::Active, move |sh, st| {
            let mut peers: Vec<(IpAddr, SocketAddr)> = Vec::new();
            paced_send(&sock, &spec2, sh, st, |k| {
                if peers.is_empty() || k % 256 == 0 {
                    peers = lock(&state.peers).clone();
                }
                if peers.is_empty() {
                    return None;
                }
                let (local, remote) = peers[(k % peers.len() as u64) as usize];
                Some((Some(local), remote))
            })
        })?;
    }
    Ok(ServerSetup { data_port, socket })
}

pub fn start(spec: &Spec, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
    let v6 = data.is_ipv6();
    let sock = UdpSocket::bind(SocketAddr::new(wildcard(v6), 0))
        .map_err(EngineError::io("cannot bind the client's probe socket"))?;
    prepare(&sock, spec)?;
    let local = sock.local_addr().ok();
    sh.set_ext(Arc::new(State::default()));
    let dests: Vec<IpAddr> = if spec.destinations.is_empty() {
        vec![data.ip()]
    } else {
        spec.destinations.clone()
    };
    let sources: Vec<Option<IpAddr>> = if spec.sources.is_empty() {
        vec![None]
    } else {
        spec.sources.iter().copied().map(Some).collect()
    };
    let n = dests.len().max(sources.len());
    let pairs: Vec<(Option<IpAddr>, SocketAddr)> = (0..n)
        .map(|i| {
            (
                sources[i % sources.len()],
                SocketAddr::new(dests[i % dests.len()], data.port()),
            )
        })
        .collect();
    let rsock = clone(&sock)?;
    let spec2 = spec.clone();
    sh.spawn("lat-rx", Role::Passive, move |sh, st| {
        receive(&rsock, &spec2, sh, st, false)
    })?;
    if let Some(every) = spec.probe_every {
        let pairs = load_pairs(&pairs, local)?;
        let spec2 = spec.clone();
        sh.spawn("lat-load", Role::Active, move |sh, st| {
            let tx = latency_load::paced_send(&spec2, every, sh, st, |k| {
                Some(pairs[(k % pairs.len() as u64) as usize])
            })?;
            if let Some(s) = state(sh) {
                lock(&s.report).tx = load_report(tx);
            }
            Ok(())
        })?;
        return Ok(ClientStart { local });
    }
    let spec2 = spec.clone();
    sh.spawn("lat-tx", Role::Active, move |sh, st| {
        paced_send(&sock, &spec2, sh, st, |k| {
            Some(pairs[(k % pairs.len() as u64) as usize])
        })
    })?;
    Ok(ClientStart { local })
}

/// The probes' view of a load sender's report (the load rides along).
fn load_report(tx: LoadTx) -> TxReport {
    TxReport {
        sent: tx.probes_sent,
        send_failed: 0,
        dropped_stamps: tx.tx_stamps_missing,
        window_ns: tx.window_ns,
        load: Some(tx),
    }
}

/// The client's (source, destination) pairs as frame addresses: a pair
/// without a source takes the address the route to its destination uses.
fn load_pairs(
    pairs: &[(Option<IpAddr>, SocketAddr)],
    local: Option<SocketAddr>,
) -> Result<Vec<Pair>> {
    let sport = local.map(|a| a.port()).ok_or_else(|| {
        EngineError::Internal("the probe socket has no local port: report this bug".into())
    })?;
    pairs
        .iter()
        .map(|(src, dst)| {
            let src = match src {
                Some(a) => *a,
                None => {
                    let s = UdpSocket::bind("0.0.0.0:0")
                        .map_err(EngineError::io("cannot open a UDP socket"))?;
                    s.connect(dst).map_err(EngineError::io(format!(
                        "no route to {} for the load",
                        dst
                    )))?;
                    s.local_addr()
                        .map_err(EngineError::io("cannot read the local address"))?
                        .ip()
                }
            };
            match (src, dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => Ok(Pair {
                    src: s,
                    dst: d,
                    sport,
                    dport: dst.port(),
                }),
                _ => Err(EngineError::spec(
                    "probe_every",
                    "latency under load (probe_every) sends IPv4 frames: use an IPv4 server and addresses",
                )),
            }
        })
        .collect()
}

/// Server side, at `finish`: what it measured, for the client.
pub fn server_report(sh: &Shared) -> Option<SideReport> {
    state(sh).map(|s| lock(&s.report).clone())
}

// ------------------------------------------------------------ results

#[derive(Clone, Debug, Default, Serialize)]
pub struct LinearHistogram {
    pub unit: &'static str,
    pub bucket_us: f64,
    pub first_us: f64,
    pub counts: Vec<u64>,
    /// Delays beyond the last bucket (above about p99.9).
    pub overflow: u64,
}

/// A linear histogram of `h` (ns) from its min to its p99.9 in 100–250
/// buckets of a 1-2-5 width of at least 10 ns.
pub fn linear(h: &Histogram<u64>) -> LinearHistogram {
    let mut out = LinearHistogram {
        unit: "us",
        ..Default::default()
    };
    if h.is_empty() {
        return out;
    }
    let lo = h.lowest_equivalent(h.min());
    let hi = h.median_equivalent(h.value_at_quantile(0.999));
    let raw = ((hi.saturating_sub(lo)) as f64 / 250.0).max(10.0);
    let mag = 10f64.powf(raw.log10().floor());
    let width = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|w| *w >= raw)
        .unwrap_or(10.0 * mag) as u64;
    let first = lo / width * width;
    let n = ((hi - first) / width + 1) as usize;
    out.counts = vec![0; n];
    for v in h.iter_recorded() {
        let val = h.median_equivalent(v.value_iterated_to());
        let idx = (val.saturating_sub(first) / width) as usize;
        if idx < n {
            out.counts[idx] += v.count_at_value();
        } else {
            out.overflow += v.count_at_value();
        }
    }
    out.bucket_us = width as f64 / 1000.0;
    out.first_us = first as f64 / 1000.0;
    out
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct DirectionResult {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    /// lost / sent; null when nothing was sent.
    pub loss_ratio: Option<f64>,
    pub reordered: u64,
    /// Stamps that found no probe (their probe was lost) or were never sent.
    pub unmatched_stamps: u64,
    /// Measured probes without a kernel TX or RX stamp: counted, not in the delays.
    pub unstamped: u64,
    /// Probes the sending kernel refused (ENOBUFS and alike): not sent.
    pub send_failed: u64,
    pub rate_pps: f64,
    pub achieved_pps: f64,
    pub delay_us: LatencySummary,
    pub histogram: LinearHistogram,
    /// Latency under load: the whole stream of frames, probes included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadResult>,
}

/// The achieved load of one direction (or both): frames sent and received
/// in the measured window, beside the delays of the probes among them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadResult {
    pub sender: &'static str,
    /// Frames/s asked (load and probes together).
    pub asked_pps: f64,
    /// One frame in this many is a timestamped probe.
    pub probe_every: u64,
    pub frame_size: usize,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: Option<f64>,
    /// Frames sent / the sender's measured window.
    pub achieved_pps: f64,
    /// Frames received / the same window.
    pub received_pps: f64,
    /// achieved against asked, in %.
    pub rate_error_pct: f64,
    pub forfeited: u64,
    pub send_errors: u64,
    pub tx_stamps_missing: u64,
    pub probes_sent: u64,
    pub batch: usize,
    pub note: String,
}

fn load_result(spec: &Spec, tx: &TxReport, rx: &RxReport) -> Option<LoadResult> {
    let l = tx.load.as_ref()?;
    let secs = l.window_ns as f64 / 1e9;
    let received = rx.load_received + rx.received;
    let lost = l.sent.saturating_sub(received);
    let achieved = if secs > 0.0 {
        l.sent as f64 / secs
    } else {
        0.0
    };
    Some(LoadResult {
        sender: "packet",
        asked_pps: spec.rate_pps,
        probe_every: spec.probe_every.unwrap_or(0),
        frame_size: spec.frame_size,
        sent: l.sent,
        received,
        lost,
        loss_ratio: (l.sent > 0).then(|| lost as f64 / l.sent as f64),
        achieved_pps: achieved,
        received_pps: if secs > 0.0 {
            received as f64 / secs
        } else {
            0.0
        },
        rate_error_pct: (achieved - spec.rate_pps) / spec.rate_pps * 100.0,
        forfeited: l.forfeited,
        send_errors: l.send_errors,
        tx_stamps_missing: l.tx_stamps_missing,
        probes_sent: l.probes_sent,
        batch: l.batch,
        note: l.note.clone(),
    })
}

fn sum_load(a: &Option<LoadResult>, b: &Option<LoadResult>) -> Option<LoadResult> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let sent = a.sent + b.sent;
    let lost = a.lost + b.lost;
    let asked = a.asked_pps + b.asked_pps;
    let achieved = a.achieved_pps + b.achieved_pps;
    Some(LoadResult {
        sender: a.sender,
        asked_pps: asked,
        probe_every: a.probe_every,
        frame_size: a.frame_size,
        sent,
        received: a.received + b.received,
        lost,
        loss_ratio: (sent > 0).then(|| lost as f64 / sent as f64),
        achieved_pps: achieved,
        received_pps: a.received_pps + b.received_pps,
        rate_error_pct: (achieved - asked) / asked * 100.0,
        forfeited: a.forfeited + b.forfeited,
        send_errors: a.send_errors + b.send_errors,
        tx_stamps_missing: a.tx_stamps_missing + b.tx_stamps_missing,
        probes_sent: a.probes_sent + b.probes_sent,
        batch: a.batch.max(b.batch),
        note: a.note.clone(),
    })
}

fn direction(tx: &TxReport, rx: &RxReport, rate_pps: f64) -> (DirectionResult, Histogram<u64>) {
    let mut h = new_delay_histogram();
    for [v, c] in &rx.hist {
        h.saturating_record_n(*v, *c);
    }
    let lost = tx.sent.saturating_sub(rx.received);
    let d = DirectionResult {
        sent: tx.sent,
        received: rx.received,
        lost,
        loss_ratio: (tx.sent > 0).then(|| lost as f64 / tx.sent as f64),
        reordered: rx.reordered,
        unmatched_stamps: rx.unmatched + tx.dropped_stamps,
        unstamped: rx.unstamped,
        send_failed: tx.send_failed,
        rate_pps,
        achieved_pps: if tx.window_ns > 0 {
            tx.sent as f64 / (tx.window_ns as f64 / 1e9)
        } else {
            0.0
        },
        delay_us: summarize(&h),
        histogram: linear(&h),
        load: None,
    };
    (d, h)
}

/// The three views of a finished test.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Directions {
    pub c2s: DirectionResult,
    pub s2c: DirectionResult,
    pub combined: DirectionResult,
}

/// Client side, after `finish`: both directions and their sum.
pub fn directions(spec: &Spec, sh: &Shared, server: &SideReport) -> Directions {
    let local = server_report(sh).unwrap_or_default();
    let probe_pps = spec.rate_pps / spec.probe_every.unwrap_or(1) as f64;
    let (mut c2s, mut h) = direction(&local.tx, &server.rx, probe_pps);
    let (mut s2c, h2) = direction(&server.tx, &local.rx, probe_pps);
    c2s.load = load_result(spec, &local.tx, &server.rx);
    s2c.load = load_result(spec, &server.tx, &local.rx);
    let _ = h.add(&h2);
    let sent = c2s.sent + s2c.sent;
    let lost = c2s.lost + s2c.lost;
    let combined = DirectionResult {
        sent,
        received: c2s.received + s2c.received,
        lost,
        loss_ratio: (sent > 0).then(|| lost as f64 / sent as f64),
        reordered: c2s.reordered + s2c.reordered,
        unmatched_stamps: c2s.unmatched_stamps + s2c.unmatched_stamps,
        unstamped: c2s.unstamped + s2c.unstamped,
        send_failed: c2s.send_failed + s2c.send_failed,
        rate_pps: 2.0 * probe_pps,
        achieved_pps: c2s.achieved_pps + s2c.achieved_pps,
        delay_us: summarize(&h),
        histogram: linear(&h),
        load: sum_load(&c2s.load, &s2c.load),
    };
    Directions { c2s, s2c, combined }
}

/// A finished test's figures stand only if probes moved in the measured
/// window and (nearly) every matched probe had kernel stamps at both ends.
pub fn check(d: &Directions) -> Result<()> {
    if d.combined.sent == 0 {
        return Err(EngineError::Measurement(
            "the latency test moved no traffic: no probe was sent in the measured window (check `rate_pps` and that the warm-up ends before the duration)".into(),
        ));
    }
    for (name, dir) in [("c2s", &d.c2s), ("s2c", &d.s2c)] {
        if let Some(l) = &dir.load {
            // A server that heard from no client sends nothing (sent 0), as with
            // socket probes; a stream that ran without a probe has no delays.
            if l.sent > 0 && l.probes_sent == 0 {
                return Err(EngineError::Measurement(format!(
                    "the {} load sent no probe in the measured window: its delays do not exist (check probe_every and the rate)",
                    name
                )));
            }
            if l.tx_stamps_missing as f64 > MAX_UNSTAMPED_SHARE * l.probes_sent as f64 {
                return Err(EngineError::Measurement(format!(
                    "{} of {} {} probes inside the load got no kernel TX stamp back: their delays are left out, and that many could bias the rest; lower `rate_pps`, or run on a less loaded machine",
                    l.tx_stamps_missing, l.probes_sent, name
                )));
            }
        }
        let matched = dir.delay_us.count + dir.unstamped;
        if dir.unstamped > 0 && dir.unstamped as f64 > MAX_UNSTAMPED_SHARE * matched as f64 {
            return Err(EngineError::Measurement(format!(
                "{} of {} {} probes ({:.1} %) had no kernel timestamp at one end (TX stamp later than {} ms, or none on receipt): their delays are left out, and that many could bias the rest; lower `rate_pps`, or run on a less loaded machine",
                dir.unstamped,
                matched,
                name,
                100.0 * dir.unstamped as f64 / matched as f64,
                UNSTAMPED_AFTER_NS / 1_000_000,
            )));
        }
    }
    Ok(())
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
    fn wire_round_trip() {
        let mut b = [0u8; HEADER];
        for p in [
            probe(5, Some((4, 123))),
            probe(0, None),
            Probe {
                seq: None,
                measured: false,
                stamp: Some(Stamp {
                    seq: 9,
                    tx_ns: 77,
                    fallback: true,
                }),
            },
        ] {
            encode(&mut b, &p);
            assert_eq!(decode(&b), Some(p));
        }
        assert_eq!(decode(&b[..17]), None);
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

    fn dir(sent: u64, delays: u64, unstamped: u64) -> DirectionResult {
        let mut d = DirectionResult {
            sent,
            received: sent,
            unstamped,
            loss_ratio: (sent > 0).then_some(0.0),
            ..Default::default()
        };
        d.delay_us.count = delays;
        d
    }

    #[test]
    fn check_fails_on_no_traffic_and_on_too_many_unstamped() {
        let ok = Directions {
            c2s: dir(1000, 995, 5),
            s2c: dir(1000, 1000, 0),
            combined: dir(2000, 1995, 5),
        };
        assert!(check(&ok).is_ok());
        let many = Directions {
            s2c: dir(1000, 980, 20),
            ..ok.clone()
        };
        let e = check(&many).unwrap_err();
        assert_eq!(e.kind(), "measurement");
        assert!(e.to_string().contains("20 of 1000 s2c probes"), "{}", e);
        let none = Directions {
            c2s: dir(0, 0, 0),
            s2c: dir(0, 0, 0),
            combined: dir(0, 0, 0),
        };
        assert!(check(&none)
            .unwrap_err()
            .to_string()
            .contains("moved no traffic"));
    }

    #[test]
    fn nothing_sent_has_no_loss_ratio() {
        let (d, _) = direction(&TxReport::default(), &RxReport::default(), 1000.0);
        assert_eq!(d.loss_ratio, None);
        let v = serde_json::to_value(&d).unwrap();
        assert!(v["loss_ratio"].is_null());
        let tx = TxReport {
            sent: 4,
            ..Default::default()
        };
        let rx = RxReport {
            received: 3,
            ..Default::default()
        };
        assert_eq!(direction(&tx, &rx, 1000.0).0.loss_ratio, Some(0.25));
    }

    #[test]
    fn linear_histogram_sums_to_count() {
        let mut h = new_delay_histogram();
        for i in 0..10_000u64 {
            h.record(20_000 + (i * 37) % 5_000).unwrap();
        }
        h.record(900_000).unwrap();
        let l = linear(&h);
        assert!((100..=260).contains(&l.counts.len()), "{}", l.counts.len());
        assert_eq!(l.counts.iter().sum::<u64>() + l.overflow, h.len());
        assert!(l.first_us <= 20.0 && l.bucket_us >= 0.01);
        assert!(l.overflow >= 1);
    }

    #[test]
    fn payload_fits_a_64_byte_frame() {
        assert_eq!(payload_len(64, false), HEADER);
        assert!(payload_len(64, true) < HEADER);
    }
}
