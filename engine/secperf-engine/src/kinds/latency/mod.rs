//! Kind `latency`: timestamped UDP probes at a fixed rate, one-way delay per
//! probe from kernel software timestamps (all namespaces share one clock).
//! Each side sends one direction and receives the other (`probes`); with
//! `probe_every` the probes ride inside a whole stream of frames (`load`).
//! A test with more than 1 % of its probes unstamped in a direction fails
//! (`report::check`). With `timestamps = "user"` every delay is user-space by
//! request and nothing is unstamped. The measured bit travels with the probe
//! (wire::probe), so both ends count the same window exactly and
//! `sent = received + lost` holds.

mod load;
mod probes;
mod report;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::kinds::base::{ClientStart, Extras, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::latency::load::Pair;
use crate::kinds::latency::probes::{Receiver, Sender};
use crate::kinds::timed::{self, Plan, Snap, Timed, Window};
use crate::rt::loadcount::LoadCounter;
use crate::rt::net::{self, SockOpts};
use crate::rt::shared::{Role, Shared, ThreadStats};
use crate::rt::tstamp;
use crate::spec::{Duplex, KindSpec, LatencySpec, Timestamps};
use crate::wire::control::{LoadTx, SideReport, TxReport};
use crate::wire::probe::{decode, load_word, payload_len};
use crate::wire::record::{Flow, Interval, IntervalLatency, Loss, ResultRecord, Sink};

/// A sender further behind its schedule than this skips ahead (a shortfall,
/// reported in `achieved_pps`) instead of bursting to catch up.
const MAX_BEHIND: Duration = Duration::from_millis(1);
/// Receive buffer of a probe socket (see tstamp::big_rcvbuf).
const RCVBUF: i32 = 16 << 20;
/// How early a probe may leave instead of sleeping for it.
const EARLY: Duration = Duration::from_micros(20);
const QUIET: Duration = Duration::from_millis(200);
const READ_WAKE: Duration = Duration::from_millis(50);

/// One side's test state: what its threads measured, for the end of the test.
#[derive(Default)]
struct State {
    report: Mutex<SideReport>,
    /// Server: (local address, client address) pairs heard from, for s2c.
    peers: Mutex<Vec<(IpAddr, SocketAddr)>>,
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

fn prepare(sock: &UdpSocket, spec: &LatencySpec) -> Result<()> {
    tstamp::enable(
        sock.as_raw_fd(),
        spec.common.server.is_ipv6(),
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
    spec: &LatencySpec,
    state: &State,
    sh: &Shared,
    st: &ThreadStats,
    mut pick: impl FnMut(u64) -> Option<(Option<IpAddr>, SocketAddr)>,
) -> Result<()> {
    tstamp::fine_timer_slack();
    let fd = sock.as_raw_fd();
    let kernel = spec.timestamps == Timestamps::Kernel;
    let mut tx = Sender::new(
        payload_len(spec.frame_size, spec.common.server.is_ipv6()),
        kernel,
    );
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
    lock(&state.report).tx = tx.report(spec.rate_pps);
    Ok(())
}

/// Receiving: matches stamps, counts; the server (`env`) learns its peers
/// and, in half duplex, answers each probe with one of its own. A server
/// ignores datagrams from sources it may not send to (ServerEnv::answers).
fn receive(
    sock: &UdpSocket,
    spec: &LatencySpec,
    state: &State,
    sh: &Shared,
    st: &ThreadStats,
    env: Option<ServerEnv>,
) -> Result<()> {
    let server = env.is_some();
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
    let v6 = spec.common.server.is_ipv6();
    let mut answer = half.then(|| Sender::new(payload_len(spec.frame_size, v6), kernel));
    let mut last_peer = None;
    // Under load the load frames are counted, and dropped, by a socket filter in the
    // kernel where it can be loaded (rt::loadcount); else here, one by one.
    let counter = match spec.probe_every {
        Some(_) => match LoadCounter::attach(fd) {
            Ok(c) => {
                rx.load_counter = "kernel (socket filter)".into();
                Some(c)
            }
            Err(e) => {
                rx.load_counter = format!("user space (no socket filter: {})", e);
                None
            }
        },
        None => None,
    };
    let filtered = |c: &Option<LoadCounter>| {
        c.as_ref().map_or(0, |c| {
            let (outside, inside) = c.counts();
            outside + inside
        })
    };
    loop {
        match batch.recv(fd, &mut buf) {
            Ok(r)
                if env
                    .as_ref()
                    .is_some_and(|e| r.from.is_none_or(|f| !e.answers(f))) => {}
            Ok(r) => {
                let user_rx = tstamp::realtime_ns();
                // A datagram without a kernel RX stamp: its probe goes unstamped.
                let rx_ns = if kernel { r.rx_ns } else { Some(user_rx) };
                last = sh.now_ns();
                st.last_recv_ns.store(last, Relaxed);
                if let Some(measured) = load_word(&buf[..r.len]) {
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
                                lock(&state.peers).push((local, from));
                            }
                        }
                    }
                    continue;
                }
                let Some(p) = decode(&buf[..r.len]) else {
                    continue;
                };
                count += 1;
                st.messages_received
                    .store(count + filtered(&counter), Relaxed);
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
                            lock(&state.peers).push(peer);
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
                if counter.is_some() {
                    st.messages_received
                        .store(count + filtered(&counter), Relaxed);
                }
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
    if let Some(c) = &counter {
        rx.load_received += c.counts().1;
    }
    let mut g = lock(&state.report);
    g.rx = rx.report();
    if let Some(tx) = &answer {
        g.tx = tx.report(spec.rate_pps);
    }
    Ok(())
}

// ------------------------------------------------------------ serve and start

fn serve(
    spec: &LatencySpec,
    state: &Arc<State>,
    env: &ServerEnv,
    sh: &Arc<Shared>,
) -> Result<ServerSetup> {
    // Wildcard: probes may come to any of `destinations`; replies leave from
    // the address each probe came to (IP_PKTINFO).
    let ports = env.ports(spec.data_port);
    let (sock, socket) = net::udp_bind(&SockOpts::default(), wildcard(env.ip.is_ipv6()), ports)?;
    prepare(&sock, spec)?;
    let data_port = sock
        .local_addr()
        .map_err(EngineError::io("cannot read the probe socket's address"))?
        .port();
    let rsock = clone(&sock)?;
    let (spec2, state2, env) = (spec.clone(), state.clone(), env.clone());
    sh.spawn("lat-rx", Role::Passive, move |sh, st| {
        receive(&rsock, &spec2, &state2, sh, st, Some(env))
    })?;
    if let (Some(every), Duplex::Full) = (spec.probe_every, spec.duplex) {
        let (spec2, state) = (spec.clone(), state.clone());
        sh.spawn("lat-load", Role::Active, move |sh, st| {
            let mut peers: Vec<Pair> = Vec::new();
            let tx = load::paced_send(&spec2, every, sh, st, |k| {
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
        let (spec2, state) = (spec.clone(), state.clone());
        sh.spawn("lat-tx", Role::Active, move |sh, st| {
            let mut peers: Vec<(IpAddr, SocketAddr)> = Vec::new();
            paced_send(&sock, &spec2, &state, sh, st, |k| {
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

fn start(
    spec: &LatencySpec,
    state: &Arc<State>,
    data: SocketAddr,
    sh: &Arc<Shared>,
) -> Result<ClientStart> {
    let v6 = data.is_ipv6();
    let sock = UdpSocket::bind(SocketAddr::new(wildcard(v6), 0))
        .map_err(EngineError::io("cannot bind the client's probe socket"))?;
    prepare(&sock, spec)?;
    let local = sock.local_addr().ok();
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
    let (spec2, state2) = (spec.clone(), state.clone());
    sh.spawn("lat-rx", Role::Passive, move |sh, st| {
        receive(&rsock, &spec2, &state2, sh, st, None)
    })?;
    if let Some(every) = spec.probe_every {
        let pairs = load_pairs(&pairs, local)?;
        let (spec2, state) = (spec.clone(), state.clone());
        sh.spawn("lat-load", Role::Active, move |sh, st| {
            let tx = load::paced_send(&spec2, every, sh, st, |k| {
                Some(pairs[(k % pairs.len() as u64) as usize])
            })?;
            lock(&state.report).tx = load_report(tx);
            Ok(())
        })?;
        return Ok(ClientStart { local });
    }
    let (spec2, state) = (spec.clone(), state.clone());
    sh.spawn("lat-tx", Role::Active, move |sh, st| {
        paced_send(&sock, &spec2, &state, sh, st, |k| {
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

// ------------------------------------------------------------ the kind

/// Kind `latency`, one test on one side; it keeps what its threads measured.
pub struct Latency {
    spec: LatencySpec,
    state: Arc<State>,
}

impl Latency {
    pub fn new(spec: LatencySpec) -> Latency {
        Latency {
            spec,
            state: Arc::new(State::default()),
        }
    }

    /// What this side measured so far.
    fn report(&self) -> SideReport {
        lock(&self.state.report).clone()
    }
}

impl Kind for Latency {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        serve(&self.spec, &self.state, env, sh)
    }

    /// The client's first snapshot marks the end of its warm-up.
    fn snapshot(&self, sh: &Shared) -> Extras {
        sh.measuring.store(true, Relaxed);
        Extras::default()
    }

    /// The server's own measurements, for the client.
    fn finish(&self, _: &Shared) -> Extras {
        Extras {
            extra: None,
            latency: Some(self.report()),
        }
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        timed::run(self, opts, sink)
    }
}

impl Timed for Latency {
    fn plan(&self) -> Plan<'_> {
        let s = &self.spec;
        Plan {
            kind: LatencySpec::NAME,
            spec: s.to_value(),
            common: &s.common,
            warmup: s.warmup,
            interval: s.interval,
            sock: SockOpts::default(),
            transfer: None,
            server_intervals: false,
        }
    }

    fn start(&self, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
        start(&self.spec, &self.state, data, sh)
    }

    /// The probes this side received (s2c) and their delays.
    fn interval(&self, a: &Snap, b: &Snap, sh: &Shared, rec: &mut Interval) {
        let span = (b.at - a.at).max(1e-9);
        rec.messages = b
            .local
            .messages_received
            .saturating_sub(a.local.messages_received);
        rec.rate = rec.messages as f64 / span;
        rec.bytes = b
            .local
            .bytes_received
            .saturating_sub(a.local.bytes_received);
        let l = sh.take_interval_latency();
        rec.latency_us = Some(IntervalLatency {
            mean: l.mean,
            p50: l.p50,
            p99: l.p99,
        });
    }

    fn result(&self, w: &Window, _: &Shared, res: &mut ResultRecord) -> Result<()> {
        let spec = &self.spec;
        let window = w.seconds();
        let server = w.fin.latency.as_ref().ok_or_else(|| {
            EngineError::Measurement(
                "the server's finish reply has no latency report, so neither the c2s delays nor the s2c counts exist: run the same engine version on both sides".into(),
            )
        })?;
        let d = report::directions(spec, &self.report(), server);
        report::check(&d)?;
        let c = &d.combined;
        let payload = payload_len(spec.frame_size, spec.common.server.is_ipv6()) as u64;
        res.duration_s = window;
        res.messages = c.received;
        res.bytes = c.received * payload;
        res.bits_per_second = res.bytes as f64 * 8.0 / window;
        res.sender = Flow {
            bytes: c.sent * payload,
            messages: c.sent,
        };
        res.receiver = Flow {
            bytes: res.bytes,
            messages: c.received,
        };
        res.loss = Some(Loss {
            lost: c.lost,
            ratio: c.loss_ratio,
        });
        res.latency_us = c.delay_us.clone();
        res.directions = Some(d);
        Ok(())
    }
}
