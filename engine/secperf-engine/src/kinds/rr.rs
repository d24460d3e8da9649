//! Kind `rr`: request/response on one connection (TCP) or socket (UDP),
//! with `inflight` transactions pipelined; one blocking thread per side.
//! UDP requests carry a sequence number in their first bytes (up to 8, as
//! many as the sizes allow) that the server echoes, so late responses are
//! told apart; a request unanswered after `udp_timeout` counts as lost.
//!
//! With `rate` the client runs open loop: a sender thread puts requests on an
//! absolute schedule (request i is due at i / rate; a sender that wakes late
//! sends what is due at once, so the long-run rate is exact) whatever the
//! replies, up to `inflight` outstanding, and a receiver thread takes the
//! responses. Each transaction's latency counts from its request's scheduled
//! time, so a path that falls behind shows its queueing in the latency instead
//! of quietly slowing the schedule (no coordinated omission).

use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::kinds::base::{ClientStart, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::timed::{self, Plan, Snap, Timed, Window};
use crate::rt::net::{self, would_block, SockOpts};
use crate::rt::payload;
use crate::rt::shared::{Role, Shared, Tally, ThreadStats};
use crate::spec::{KindSpec, Protocol, Resolved, RrSpec};
use crate::wire::record::{Interval, ResultRecord, Sink};

const UDP_QUIET: Duration = Duration::from_millis(200);

fn data_err(what: &str) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| {
        EngineError::io(format!(
            "rr {} failed (check that the server still runs and nothing in the path resets or blocks the connection)",
            what
        ))(e)
    }
}

// ---------------------------------------------------------------- server

/// The data sockets' options.
fn sock(spec: &RrSpec) -> SockOpts {
    SockOpts {
        buffer: spec.socket_buffer,
        nodelay: spec.nodelay,
        bind: spec.bind,
    }
}

fn serve(spec: &RrSpec, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
    let ports = env.ports(spec.data_port);
    match spec.common.protocol {
        Protocol::Tcp => {
            let (listener, data_port, socket) = net::tcp_listen(&sock(spec), env.ip, ports)?;
            let spec = spec.clone();
            let admit = env.admit.clone();
            // One response for the test, whatever connects: the accept guard
            // lets in the one connection an rr test opens.
            let resp: Arc<[u8]> = payload::make(spec.payload, spec.response, 77).into();
            sh.spawn("rr-accept", Role::Active, move |sh, st| {
                net::accept_loop(&listener, sh, &admit, |s| {
                    st.connections.fetch_add(1, Relaxed);
                    let (spec, resp) = (spec.clone(), resp.clone());
                    sh.spawn("rr-conn", Role::Passive, move |sh, st| {
                        serve_tcp_conn(&s, &spec, &resp, sh, st)
                    })
                })
            })?;
            Ok(ServerSetup { data_port, socket })
        }
        Protocol::Udp => {
            let (sock, socket) = net::udp_bind(&sock(spec), env.ip, ports)?;
            let data_port = sock
                .local_addr()
                .map_err(EngineError::io("cannot read the data socket's address"))?
                .port();
            let spec = spec.clone();
            let env = env.clone();
            sh.spawn("rr-udp", Role::Passive, move |sh, st| {
                serve_udp(&sock, &spec, &env, sh, st)
            })?;
            Ok(ServerSetup { data_port, socket })
        }
    }
}

fn serve_tcp_conn(
    s: &TcpStream,
    spec: &RrSpec,
    resp: &[u8],
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    net::set_wake_timeouts(s).map_err(data_err("socket setup"))?;
    // The request is counted, not kept: a bounded scratch reads it.
    let mut scratch = vec![0u8; spec.request.min(net::SCRATCH)];
    let mut t = Tally::default();
    let mut r = s;
    loop {
        match net::read_discard(&mut r, spec.request, &mut scratch, sh) {
            Ok(true) => {}
            Ok(false) => break,
            // The client resetting its connection at the very end is not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && sh.stopped() => break,
            Err(e) => return Err(data_err("server read")(e)),
        }
        t.received(spec.request);
        if !net::write_full(&mut r, resp, sh).map_err(data_err("server write"))? {
            break;
        }
        t.sent(resp.len());
        t.transactions += 1;
        t.publish(st);
    }
    t.publish(st);
    Ok(())
}

fn serve_udp(
    sock: &UdpSocket,
    spec: &RrSpec,
    env: &ServerEnv,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(data_err("socket setup"))?;
    let mut buf = vec![0u8; 65536];
    let mut resp = payload::make(spec.payload, spec.response, 77);
    let mut t = Tally::default();
    let mut last = 0u64;
    loop {
        match sock.recv_from(&mut buf) {
            Ok((_, from)) if !env.answers(from) => {} // spoofed: never reflected
            Ok((n, from)) => {
                t.received(n);
                last = sh.now_ns();
                let k = n.min(resp.len()).min(8);
                resp[..k].copy_from_slice(&buf[..k]);
                match sock.send_to(&resp, from) {
                    Ok(m) => {
                        t.sent(m);
                        t.transactions += 1;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) || would_block(&e) => {}
                    Err(e) => return Err(data_err("UDP server send")(e)),
                }
                t.publish(st);
                st.last_recv_ns.store(last, Relaxed);
            }
            Err(e) if would_block(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => {
                if sh.quiet_end(last, UDP_QUIET) {
                    return Ok(());
                }
            }
            Err(e) => return Err(data_err("UDP server receive")(e)),
        }
    }
}

// ---------------------------------------------------------------- client

fn start(spec: &RrSpec, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
    let spec2 = spec.clone();
    match (spec.common.protocol, spec.rate) {
        (Protocol::Tcp, rate) => {
            let s = net::tcp_connect(&sock(spec), data, spec.client_port)?;
            net::set_wake_timeouts(&s).map_err(data_err("socket setup"))?;
            sh.add_sender_socket(&s);
            let local = s.local_addr().ok();
            match rate {
                None => sh.spawn("rr-tcp", Role::Active, move |sh, st| {
                    client_tcp(&s, &spec2, sh, st)
                })?,
                Some(rate) => start_paced_tcp(s, spec2, rate, sh)?,
            }
            Ok(ClientStart { local })
        }
        (Protocol::Udp, None) => {
            let s = net::udp_connect(&sock(spec), data, spec.client_port)?;
            let local = s.local_addr().ok();
            sh.spawn("rr-udp", Role::Active, move |sh, st| {
                client_udp(&s, &spec2, sh, st)
            })?;
            Ok(ClientStart { local })
        }
        (Protocol::Udp, Some(rate)) => {
            let s = net::udp_connect(&sock(spec), data, spec.client_port)?;
            let local = s.local_addr().ok();
            start_paced_udp(s, spec2, rate, sh)?;
            Ok(ClientStart { local })
        }
    }
}

fn client_tcp(s: &TcpStream, spec: &RrSpec, sh: &Shared, st: &ThreadStats) -> Result<()> {
    let req = payload::make(spec.payload, spec.request, 7);
    let mut resp = vec![0u8; spec.response];
    let mut outstanding: VecDeque<Instant> = VecDeque::with_capacity(spec.inflight);
    let mut t = Tally::default();
    let mut io = s;
    for _ in 0..spec.inflight {
        if !net::write_full(&mut io, &req, sh).map_err(data_err("request"))? {
            return Ok(());
        }
        t.sent(req.len());
        outstanding.push_back(Instant::now());
    }
    while let Some(sent_at) = outstanding.pop_front() {
        if !net::read_full(&mut io, &mut resp, sh).map_err(data_err("response"))? {
            if sh.aborted() {
                return Ok(());
            }
            return Err(EngineError::Server {
                field: None,
                message: "the server closed the rr connection before answering: check the server's stderr".into(),
            });
        }
        // One clock read per transaction: the response's arrival is the next request's start.
        let now = Instant::now();
        sh.record_rtt(now - sent_at);
        t.received(resp.len());
        t.transactions += 1;
        if !sh.stopped() {
            if !net::write_full(&mut io, &req, sh).map_err(data_err("request"))? {
                break;
            }
            t.sent(req.len());
            outstanding.push_back(now);
        }
        t.publish(st);
    }
    t.publish(st);
    let _ = s.shutdown(Shutdown::Write);
    Ok(())
}

struct Slot {
    seq: u64,
    sent_at: Instant,
    active: bool,
}

fn client_udp(s: &UdpSocket, spec: &RrSpec, sh: &Shared, st: &ThreadStats) -> Result<()> {
    let timeout = Duration::from_secs_f64(spec.udp_timeout);
    // Wake at least every 50 ms so a stop is seen even with long timeouts.
    s.set_read_timeout(Some(timeout.min(Duration::from_millis(50))))
        .map_err(data_err("socket setup"))?;
    let mut req = payload::make(spec.payload, spec.request, 7);
    let mut buf = vec![0u8; 65536];
    let k = spec.request.min(spec.response).min(8);
    let mask = if k == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    };
    let mut next_seq = 0u64;
    let mut t = Tally::default();
    let mut lost = 0u64;
    let now = Instant::now();
    let mut slots: Vec<Slot> = (0..spec.inflight)
        .map(|_| Slot {
            seq: 0,
            sent_at: now,
            active: false,
        })
        .collect();

    let mut send = |slot: &mut Slot, t: &mut Tally| -> Result<()> {
        let seq = next_seq;
        next_seq += 1;
        req[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
        slot.seq = seq & mask;
        slot.sent_at = Instant::now();
        slot.active = true;
        match s.send(&req) {
            Ok(n) => t.sent(n),
            // Counted lost when its timeout passes.
            Err(e)
                if would_block(&e)
                    || e.kind() == std::io::ErrorKind::ConnectionRefused
                    || e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(data_err("UDP request")(e)),
        }
        Ok(())
    };
    for slot in slots.iter_mut() {
        send(slot, &mut t)?;
    }
    loop {
        let got = match s.recv(&mut buf) {
            Ok(n) if n >= k => {
                let mut b = [0u8; 8];
                b[..k].copy_from_slice(&buf[..k]);
                Some((n, u64::from_le_bytes(b)))
            }
            Ok(_) => None,
            Err(e) if would_block(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => None,
            Err(e) => return Err(data_err("UDP response")(e)),
        };
        let now = Instant::now();
        if let Some((n, seq)) = got {
            if let Some(slot) = slots.iter_mut().find(|x| x.active && x.seq == seq) {
                sh.record_rtt(now - slot.sent_at);
                t.received(n);
                t.transactions += 1;
                slot.active = false;
                if !sh.stopped() {
                    send(slot, &mut t)?;
                }
            }
        }
        if got.is_none() || spec.inflight > 1 {
            for slot in slots.iter_mut() {
                if slot.active && now - slot.sent_at >= timeout {
                    lost += 1;
                    st.lost.store(lost, Relaxed);
                    slot.active = false;
                    if !sh.stopped() {
                        send(slot, &mut t)?;
                    }
                }
            }
        }
        t.publish(st);
        if sh.aborted() || (sh.stopped() && slots.iter().all(|x| !x.active)) {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------- open loop

/// The schedule of an open-loop client: request `i` is due at `start + i / rate`.
struct Schedule {
    start: Instant,
    interval: f64,
    next: u64,
}

impl Schedule {
    fn new(rate: f64) -> Schedule {
        Schedule {
            start: Instant::now(),
            interval: 1.0 / rate,
            next: 0,
        }
    }

    fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_secs_f64(self.interval * i as f64)
    }

    /// Waits for the next request's time (in slices, so a stop is seen) and
    /// returns it; None once the test stops. A sender that wakes late gets the
    /// overdue requests back to back.
    fn wait_next(&mut self, sh: &Shared) -> Option<Instant> {
        let due = self.due(self.next);
        loop {
            if sh.stopped() {
                return None;
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(50)));
        }
        self.next += 1;
        Some(due)
    }
}

/// Outstanding requests in the order they were scheduled, and by key.
struct Pending<K> {
    order: VecDeque<(K, Instant)>,
    by_key: HashMap<K, Instant>,
}

/// The requests an open-loop client has outstanding, by key (TCP: their order;
/// UDP: their sequence number), with each one's scheduled time.
struct Outstanding<K> {
    due: Mutex<Pending<K>>,
    freed: Condvar,
    cap: usize,
}

impl<K: Copy + Eq + std::hash::Hash> Outstanding<K> {
    fn new(cap: usize) -> Outstanding<K> {
        Outstanding {
            due: Mutex::new(Pending {
                order: VecDeque::new(),
                by_key: HashMap::new(),
            }),
            freed: Condvar::new(),
            cap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending<K>> {
        self.due.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a request due at `due`, first waiting while `cap` are outstanding
    /// (or `key` still is); false once the test stops.
    fn add(&self, key: K, due: Instant, sh: &Shared) -> bool {
        let mut g = self.lock();
        while g.by_key.len() >= self.cap || g.by_key.contains_key(&key) {
            if sh.stopped() {
                return false;
            }
            g = match self.freed.wait_timeout(g, Duration::from_millis(50)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        g.order.push_back((key, due));
        g.by_key.insert(key, due);
        true
    }

    /// The oldest request (TCP answers in order).
    fn take_oldest(&self) -> Option<Instant> {
        let mut g = self.lock();
        let (key, due) = g.order.pop_front()?;
        g.by_key.remove(&key);
        drop(g);
        self.freed.notify_one();
        Some(due)
    }

    /// The request `key` (UDP answers by sequence number).
    fn take(&self, key: K) -> Option<Instant> {
        let mut g = self.lock();
        let due = g.by_key.remove(&key)?;
        g.order.retain(|(k, _)| *k != key);
        drop(g);
        self.freed.notify_one();
        Some(due)
    }

    /// Removes every request scheduled more than `timeout` ago: how many.
    fn expire(&self, now: Instant, timeout: Duration) -> u64 {
        let mut g = self.lock();
        let mut n = 0;
        while let Some(&(key, due)) = g.order.front() {
            if now.saturating_duration_since(due) < timeout {
                break;
            }
            g.order.pop_front();
            g.by_key.remove(&key);
            n += 1;
        }
        drop(g);
        if n > 0 {
            self.freed.notify_all();
        }
        n
    }

    fn is_empty(&self) -> bool {
        self.lock().by_key.is_empty()
    }
}

fn start_paced_tcp(s: TcpStream, spec: RrSpec, rate: f64, sh: &Arc<Shared>) -> Result<()> {
    let rx = s.try_clone().map_err(data_err("socket setup"))?;
    let out = Arc::new(Outstanding::<u64>::new(spec.inflight));
    let (out2, spec2) = (out.clone(), spec.clone());
    // The receiver ends when the server, having answered everything, closes.
    sh.spawn("rr-tcp-rx", Role::Passive, move |sh, st| {
        paced_tcp_receiver(&rx, &spec2, &out2, sh, st)
    })?;
    sh.spawn("rr-tcp-tx", Role::Active, move |sh, st| {
        paced_tcp_sender(&s, &spec, rate, &out, sh, st)
    })
}

fn paced_tcp_sender(
    s: &TcpStream,
    spec: &RrSpec,
    rate: f64,
    out: &Outstanding<u64>,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let req = payload::make(spec.payload, spec.request, 7);
    let mut t = Tally::default();
    let mut io = s;
    let mut schedule = Schedule::new(rate);
    while let Some(due) = schedule.wait_next(sh) {
        if !out.add(schedule.next, due, sh) {
            break;
        }
        if !net::write_full(&mut io, &req, sh).map_err(data_err("request"))? {
            break;
        }
        t.sent(req.len());
        t.publish(st);
    }
    t.publish(st);
    // The server answers what it has, sees the end of the stream and closes.
    let _ = s.shutdown(Shutdown::Write);
    Ok(())
}

fn paced_tcp_receiver(
    s: &TcpStream,
    spec: &RrSpec,
    out: &Outstanding<u64>,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let mut resp = vec![0u8; spec.response];
    let mut t = Tally::default();
    let mut io = s;
    loop {
        match net::read_full(&mut io, &mut resp, sh) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && sh.stopped() => break,
            Err(e) => return Err(data_err("response")(e)),
        }
        let now = Instant::now();
        if let Some(due) = out.take_oldest() {
            sh.record_rtt(now.saturating_duration_since(due));
        }
        t.received(resp.len());
        t.transactions += 1;
        t.publish(st);
    }
    t.publish(st);
    Ok(())
}

fn start_paced_udp(s: UdpSocket, spec: RrSpec, rate: f64, sh: &Arc<Shared>) -> Result<()> {
    // Wake at least every 50 ms so a stop and the timeouts are seen.
    let timeout = Duration::from_secs_f64(spec.udp_timeout);
    s.set_read_timeout(Some(timeout.min(Duration::from_millis(50))))
        .map_err(data_err("socket setup"))?;
    let rx = s.try_clone().map_err(data_err("socket setup"))?;
    let out = Arc::new(Outstanding::<u64>::new(spec.inflight));
    let (out2, spec2) = (out.clone(), spec.clone());
    sh.spawn("rr-udp-rx", Role::Passive, move |sh, st| {
        paced_udp_receiver(&rx, &spec2, &out2, sh, st)
    })?;
    sh.spawn("rr-udp-tx", Role::Active, move |sh, st| {
        paced_udp_sender(&s, &spec, rate, &out, sh, st)
    })
}

/// The sequence number's bytes in a request of this spec, and its mask.
fn seq_field(spec: &RrSpec) -> (usize, u64) {
    let k = spec.request.min(spec.response).min(8);
    let mask = if k == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    };
    (k, mask)
}

fn paced_udp_sender(
    s: &UdpSocket,
    spec: &RrSpec,
    rate: f64,
    out: &Outstanding<u64>,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let mut req = payload::make(spec.payload, spec.request, 7);
    let (k, mask) = seq_field(spec);
    let mut t = Tally::default();
    let mut schedule = Schedule::new(rate);
    let mut seq = 0u64;
    while let Some(due) = schedule.wait_next(sh) {
        if !out.add(seq & mask, due, sh) {
            break;
        }
        req[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
        seq += 1;
        match s.send(&req) {
            Ok(n) => t.sent(n),
            // Counted lost when its timeout passes.
            Err(e)
                if would_block(&e)
                    || e.kind() == std::io::ErrorKind::ConnectionRefused
                    || e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(data_err("UDP request")(e)),
        }
        t.publish(st);
    }
    t.publish(st);
    Ok(())
}

fn paced_udp_receiver(
    s: &UdpSocket,
    spec: &RrSpec,
    out: &Outstanding<u64>,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let timeout = Duration::from_secs_f64(spec.udp_timeout);
    let (k, _) = seq_field(spec);
    let mut buf = vec![0u8; 65536];
    let mut t = Tally::default();
    let mut lost = 0u64;
    loop {
        let got = match s.recv(&mut buf) {
            Ok(n) if n >= k => {
                let mut b = [0u8; 8];
                b[..k].copy_from_slice(&buf[..k]);
                Some((n, u64::from_le_bytes(b)))
            }
            Ok(_) => None,
            Err(e) if would_block(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => None,
            Err(e) => return Err(data_err("UDP response")(e)),
        };
        let now = Instant::now();
        if let Some((n, seq)) = got {
            if let Some(due) = out.take(seq) {
                sh.record_rtt(now.saturating_duration_since(due));
                t.received(n);
                t.transactions += 1;
            }
        }
        let expired = out.expire(now, timeout);
        if expired > 0 {
            lost += expired;
            st.lost.store(lost, Relaxed);
        }
        t.publish(st);
        // Done once the sender has stopped and nothing is outstanding any more.
        if sh.aborted() || (sh.stopped() && out.is_empty()) {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------- the kind

/// Kind `rr`, one test on one side.
pub struct Rr {
    spec: RrSpec,
}

impl Rr {
    pub fn new(spec: RrSpec) -> Rr {
        Rr { spec }
    }
}

impl Kind for Rr {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        serve(&self.spec, env, sh)
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        self.spec.check_local_limits()?;
        timed::run(self, opts, sink)
    }
}

impl Timed for Rr {
    fn plan(&self) -> Plan<'_> {
        let s = &self.spec;
        Plan {
            kind: RrSpec::NAME,
            spec: s.to_value(),
            common: &s.common,
            warmup: s.warmup,
            interval: s.interval,
            sock: sock(s),
            transfer: None,
            server_intervals: false,
        }
    }

    fn start(&self, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
        start(&self.spec, data, sh)
    }

    fn interval(&self, a: &Snap, b: &Snap, sh: &Shared, rec: &mut Interval) {
        timed::transactions_interval(a, b, sh, rec);
    }

    fn result(&self, w: &Window, _: &Shared, res: &mut ResultRecord) -> Result<()> {
        let udp = self.spec.common.protocol == Protocol::Udp;
        if !udp {
            res.retransmits = Some(w.retransmits());
        }
        // UDP requests that timed out are lost.
        timed::transactions_result(w, res, udp);
        Ok(())
    }
}
