//! State one test shares between its threads on one side: flags, per-thread
//! counters (one cache line each, written by one thread, read by the control
//! thread), CPU slots, the latency histograms and the first error. It knows
//! no kind: a kind keeps its own state in its own value (kinds::base::Kind).

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::{EngineError, Result};
use crate::rt::cpu::{self, CpuSlot};
use crate::rt::sys;
use crate::wire::control::Counters;
use crate::wire::record::LatencySummary;

/// Counters of one data thread. Aligned so two threads never share a line.
#[repr(align(128))]
#[derive(Default)]
pub struct ThreadStats {
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub messages_sent: AtomicU64,
    pub messages_received: AtomicU64,
    pub transactions: AtomicU64,
    pub connections: AtomicU64,
    pub lost: AtomicU64,
    pub last_recv_ns: AtomicU64,
}

/// Running totals of one data thread, kept in plain integers on its stack and
/// published to its `ThreadStats` after each transaction (rr, crr).
#[derive(Default)]
pub struct Tally {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub transactions: u64,
}

impl Tally {
    pub fn sent(&mut self, n: usize) {
        self.bytes_sent += n as u64;
        self.messages_sent += 1;
    }
    pub fn received(&mut self, n: usize) {
        self.bytes_received += n as u64;
        self.messages_received += 1;
    }
    pub fn publish(&self, st: &ThreadStats) {
        st.bytes_sent.store(self.bytes_sent, Relaxed);
        st.bytes_received.store(self.bytes_received, Relaxed);
        st.messages_sent.store(self.messages_sent, Relaxed);
        st.messages_received.store(self.messages_received, Relaxed);
        st.transactions.store(self.transactions, Relaxed);
    }
}

/// What a data thread does, for waiting on one group at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sends until `stop` (stream senders, rr/crr loops, acceptors).
    Active,
    /// Receives until EOF or quiet after `drain`.
    Passive,
}

/// Per-transaction round trips: this interval's and the measured window's.
pub struct LatPair {
    pub interval: Histogram<u64>,
    pub measured: Histogram<u64>,
}

/// Histograms in nanoseconds, 3 significant figures, up to 60 s.
pub fn new_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail whatever the input.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

pub fn summarize(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    LatencySummary {
        count: h.len(),
        min: us(h.min()),
        mean: h.mean() / 1000.0,
        stddev: h.stdev() / 1000.0,
        p50: us(h.value_at_quantile(0.50)),
        p90: us(h.value_at_quantile(0.90)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
    }
}

pub struct Shared {
    /// Active threads stop starting new work.
    pub stop: AtomicBool,
    /// Passive threads may end once quiet.
    pub drain: AtomicBool,
    /// Everything ends now (control connection lost, deadline).
    pub abort: AtomicBool,
    /// Latency goes into the measured histogram.
    pub measuring: AtomicBool,
    pub epoch: Instant,
    drain_at_ns: AtomicU64,
    stats: Mutex<Vec<Arc<ThreadStats>>>,
    cpu: Mutex<Vec<Arc<CpuSlot>>>,
    senders: Mutex<Vec<TcpStream>>,
    lat: Mutex<LatPair>,
    error: Mutex<Option<EngineError>>,
    live: Mutex<[usize; 2]>,
    live_cv: Condvar,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking data thread must not take the whole test down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            drain: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            epoch: Instant::now(),
            drain_at_ns: AtomicU64::new(0),
            stats: Mutex::new(Vec::new()),
            cpu: Mutex::new(Vec::new()),
            senders: Mutex::new(Vec::new()),
            lat: Mutex::new(LatPair {
                interval: new_histogram(),
                measured: new_histogram(),
            }),
            error: Mutex::new(None),
            live: Mutex::new([0, 0]),
            live_cv: Condvar::new(),
            handles: Mutex::new(Vec::new()),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Relaxed) || self.abort.load(Relaxed)
    }

    pub fn aborted(&self) -> bool {
        self.abort.load(Relaxed)
    }

    pub fn set_drain(&self) {
        self.drain_at_ns.store(self.now_ns(), Relaxed);
        self.drain.store(true, Relaxed);
    }

    /// For a receiver woken by its read timeout: end now? True on abort, or
    /// once draining and nothing arrived for `quiet` (since the last byte or
    /// since the drain began, whichever is later).
    pub fn quiet_end(&self, last_recv_ns: u64, quiet: Duration) -> bool {
        if self.aborted() {
            return true;
        }
        if !self.drain.load(Relaxed) {
            return false;
        }
        let since = last_recv_ns.max(self.drain_at_ns.load(Relaxed));
        self.now_ns().saturating_sub(since) >= quiet.as_nanos() as u64
    }

    pub fn fail(&self, e: EngineError) {
        let mut g = lock(&self.error);
        if g.is_none() {
            *g = Some(e);
        }
    }

    pub fn take_error(&self) -> Option<EngineError> {
        lock(&self.error).take()
    }

    /// Registers a TCP socket that sends data, for its retransmit count.
    pub fn add_sender_socket(&self, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            lock(&self.senders).push(c);
        }
    }

    pub fn record_rtt(&self, rtt: Duration) {
        let ns = (rtt.as_nanos() as u64).max(1);
        let measuring = self.measuring.load(Relaxed);
        let mut g = lock(&self.lat);
        g.interval.saturating_record(ns);
        if measuring {
            g.measured.saturating_record(ns);
        }
    }

    /// This interval's histogram, and a fresh one for the next.
    pub fn take_interval_latency(&self) -> LatencySummary {
        let mut g = lock(&self.lat);
        let s = summarize(&g.interval);
        g.interval.reset();
        s
    }

    pub fn measured_latency(&self) -> LatencySummary {
        summarize(&lock(&self.lat).measured)
    }

    /// Starts a data thread: it gets its own counters and CPU slot; an error
    /// it returns becomes the test's error.
    pub fn spawn<F>(self: &Arc<Self>, name: &str, role: Role, f: F) -> Result<()>
    where
        F: FnOnce(&Arc<Shared>, &ThreadStats) -> Result<()> + Send + 'static,
    {
        let stats = Arc::new(ThreadStats::default());
        lock(&self.stats).push(stats.clone());
        let idx = role as usize;
        lock(&self.live)[idx] += 1;
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let slot = Arc::new(CpuSlot::for_current_thread());
                lock(&me.cpu).push(slot.clone());
                let r = f(&me, &stats);
                slot.finish();
                if let Err(e) = r {
                    me.fail(e);
                }
                lock(&me.live)[idx] -= 1;
                me.live_cv.notify_all();
            });
        match spawned {
            Ok(h) => {
                lock(&self.handles).push(h);
                Ok(())
            }
            Err(e) => {
                lock(&self.live)[idx] -= 1;
                Err(EngineError::io(format!(
                    "cannot start thread {}: lower parallel or raise the thread limit (ulimit -u)",
                    name
                ))(e))
            }
        }
    }

    /// Waits until no thread of `role` is running or the deadline passes.
    pub fn wait_role(&self, role: Role, deadline: Instant) -> bool {
        let idx = role as usize;
        let mut g = lock(&self.live);
        loop {
            if g[idx] == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = match self.live_cv.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Waits for every data thread; past the deadline, aborts them and
    /// gives them two more seconds (their blocking calls time out in one).
    pub fn wait_all(&self, deadline: Instant) {
        let ok = self.wait_role(Role::Active, deadline) && self.wait_role(Role::Passive, deadline);
        if !ok {
            self.abort.store(true, Relaxed);
            let later = Instant::now() + Duration::from_secs(2);
            self.wait_role(Role::Active, later);
            self.wait_role(Role::Passive, later);
        }
        let done: Vec<JoinHandle<()>> = lock(&self.handles).drain(..).collect::<Vec<_>>();
        for h in done {
            if h.is_finished() && h.join().is_err() {
                self.fail(EngineError::Internal(
                    "a data thread panicked: report this bug with the spec".into(),
                ));
            }
            // An unfinished thread is left detached; abort ends it within a second.
        }
    }

    pub fn counters(&self) -> Counters {
        let mut c = Counters {
            t_ns: self.now_ns(),
            ..Counters::default()
        };
        for s in lock(&self.stats).iter() {
            c.bytes_sent += s.bytes_sent.load(Relaxed);
            c.bytes_received += s.bytes_received.load(Relaxed);
            c.messages_sent += s.messages_sent.load(Relaxed);
            c.messages_received += s.messages_received.load(Relaxed);
            c.transactions += s.transactions.load(Relaxed);
            c.connections += s.connections.load(Relaxed);
            c.lost += s.lost.load(Relaxed);
            c.t_last_byte_ns = c.t_last_byte_ns.max(s.last_recv_ns.load(Relaxed));
        }
        c.bytes = c.bytes_sent + c.bytes_received;
        c.messages = c.messages_sent + c.messages_received;
        c.retransmits = lock(&self.senders)
            .iter()
            .filter_map(|s| sys::tcp_total_retrans(s.as_raw_fd()))
            .sum();
        let slots: Vec<Arc<CpuSlot>> = lock(&self.cpu).clone();
        let t = cpu::sum(&slots);
        c.cpu_user_s = t.user_s;
        c.cpu_system_s = t.system_s;
        c
    }
}
