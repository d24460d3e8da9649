//! The client side of a flows test: one attempt of a flow (a TCP connection
//! or a UDP exchange from its own source), and the loops that make them.
//!
//! `parallel` loops share the weighted schedule (sched::Stride, under one
//! lock that also stamps each attempt's start, so the attempts of the
//! measured window are a run of consecutive picks); with `rate` the k-th
//! attempt is due at k / rate (open loop), else a loop starts its next
//! attempt when the last one ends (closed loop). A flow with its own `rate`
//! (a probe) has a loop of its own on its own schedule. Each attempt has one
//! deadline (`timeout`) from the connect to the close: a failure is counted
//! by its reason, never fatal, but a source address this host does not have
//! fails the test.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use socket2::{Domain, Socket, Type};

use crate::error::{EngineError, Result};
use crate::rt::sys;
use crate::spec::{FlowProto, FlowSpec, FlowsSpec, ID_BYTES};

use super::icmp;
use super::sched::Stride;

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// No answer within the deadline (a drop on the way).
    Timeout,
    /// A reset to the connect, or an ICMP port unreachable (a reject, a closed port).
    Refused,
    /// A reset after the connection was up.
    Reset,
    /// The connection ended, or a datagram came, with other than the response's size.
    Short,
    /// An ICMP host/network unreachable or prohibited (a reject rule's), or no route.
    Unreachable,
    Other,
}

impl Fail {
    pub const ALL: [Fail; 6] = [
        Fail::Timeout,
        Fail::Refused,
        Fail::Reset,
        Fail::Short,
        Fail::Unreachable,
        Fail::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fail::Timeout => "timeout",
            Fail::Refused => "refused",
            Fail::Reset => "reset",
            Fail::Short => "short",
            Fail::Unreachable => "unreachable",
            Fail::Other => "other",
        }
    }

    fn of(e: &io::Error) -> Fail {
        use io::ErrorKind as K;
        match e.kind() {
            K::TimedOut | K::WouldBlock => Fail::Timeout,
            K::ConnectionRefused => Fail::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Fail::Reset,
            K::UnexpectedEof => Fail::Short,
            _ => match e.raw_os_error() {
                Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EACCES | libc::EPERM) => {
                    Fail::Unreachable
                }
                _ => Fail::Other,
            },
        }
    }
}

/// The figures of one flow (or of all), over the measured window or the whole test.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub attempts: u64,
    pub ok: u64,
    pub fails: [u64; 6],
    pub bytes: u64,
    pub late: u64,
    /// Connect times of the successes (µs); None until the first.
    pub connect_us: Option<Histogram<u64>>,
    /// Whole attempts of the successes, connect to close (µs).
    pub total_us: Option<Histogram<u64>>,
}

fn histogram() -> Histogram<u64> {
    // Constant, valid bounds (1 µs .. 120 s, 2 significant figures): cannot fail.
    Histogram::new_with_bounds(1, 120_000_000, 2).expect("valid histogram bounds")
}

impl Tally {
    pub fn failed(&self) -> u64 {
        self.fails.iter().sum()
    }

    fn add(&mut self, o: &Outcome, late: bool, timed: bool) {
        self.attempts += 1;
        self.bytes += o.bytes;
        self.late += u64::from(late);
        match o.fail {
            Some(f) => self.fails[f as usize] += 1,
            None => {
                self.ok += 1;
                if timed {
                    let c = self.connect_us.get_or_insert_with(histogram);
                    let _ = c.record(o.connect_us.max(1));
                    let t = self.total_us.get_or_insert_with(histogram);
                    let _ = t.record(o.total_us.max(1));
                }
            }
        }
    }
}

/// What one attempt did.
pub struct Outcome {
    pub fail: Option<Fail>,
    /// Bytes sent and received.
    pub bytes: u64,
    pub connect_us: u64,
    pub total_us: u64,
}

/// Counters the interval records read while the loops run (every attempt,
/// counted when it ends).
#[derive(Default)]
pub struct Live {
    pub attempts: AtomicU64,
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub bytes: AtomicU64,
}

/// Everything the loops of one test share.
pub struct Plan {
    pub spec: FlowsSpec,
    pub t0: Instant,
    pub warm: Duration,
    pub end: Duration,
    sched: Mutex<(Stride, u64)>,
    /// Per flow: (measured window, whole test).
    pub tallies: Mutex<Vec<(Tally, Tally)>>,
    pub live: Live,
    pub abort: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Plan {
    pub fn new(spec: FlowsSpec) -> Plan {
        let weighted: Vec<(usize, f64)> = spec
            .flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.weight.map(|w| (i, w)))
            .collect();
        let n = spec.flows.len();
        Plan {
            t0: Instant::now(),
            warm: Duration::from_secs_f64(spec.warmup),
            end: Duration::from_secs_f64(spec.warmup + spec.duration),
            sched: Mutex::new((Stride::new(&weighted), 0)),
            tallies: Mutex::new(vec![(Tally::default(), Tally::default()); n]),
            live: Live::default(),
            abort: AtomicBool::new(false),
            spec,
        }
    }

    fn in_window(&self, at: Duration) -> bool {
        at >= self.warm && at < self.end
    }

    fn record(&self, flow: usize, o: &Outcome, at: Duration, late: bool) {
        {
            let mut t = lock(&self.tallies);
            let (m, all) = &mut t[flow];
            if self.in_window(at) {
                m.add(o, late, true);
            }
            all.add(o, late, false);
        }
        self.live.attempts.fetch_add(1, Relaxed);
        self.live.bytes.fetch_add(o.bytes, Relaxed);
        if o.fail.is_some() {
            self.live.failed.fetch_add(1, Relaxed);
        } else {
            self.live.ok.fetch_add(1, Relaxed);
        }
    }

    /// Sleeps until `at` after the start; false if the test was aborted.
    fn sleep_until(&self, at: Duration) -> bool {
        loop {
            if self.abort.load(Relaxed) {
                return false;
            }
            let now = self.t0.elapsed();
            if now >= at {
                return true;
            }
            std::thread::sleep((at - now).min(Duration::from_millis(50)));
        }
    }
}

/// A schedule slot counts as late when it starts this long after it was due.
const LATE: Duration = Duration::from_millis(10);

/// One loop of the weighted schedule.
pub fn weighted_loop(plan: &Plan) -> Result<()> {
    let mut buf = Buffers::default();
    let rate = plan.spec.rate;
    loop {
        if plan.abort.load(Relaxed) {
            return Ok(());
        }
        let (flow, due, at) = {
            let mut s = lock(&plan.sched);
            let k = s.1;
            s.1 += 1;
            let Some(flow) = s.0.next() else {
                return Ok(()); // no weighted flow: the probes' loops do the work
            };
            let due = rate.map(|r| Duration::from_secs_f64(k as f64 / r));
            (flow, due, plan.t0.elapsed())
        };
        let (at, late) = match due {
            Some(d) => {
                if d >= plan.end || !plan.sleep_until(d) {
                    return Ok(());
                }
                (d, plan.t0.elapsed() > d + LATE)
            }
            None if at >= plan.end => return Ok(()),
            None => (at, false),
        };
        let o = attempt(&plan.spec.flows[flow], plan.spec.timeout, &mut buf)?;
        plan.record(flow, &o, at, late);
    }
}

/// The loop of a flow on its own schedule (`rate`): attempt k due at
/// (k + phase) / rate, the phases spreading the probes over a period.
pub fn rated_loop(plan: &Plan, flow: usize, phase: f64) -> Result<()> {
    let f = &plan.spec.flows[flow];
    let Some(rate) = f.rate else {
        return Ok(());
    };
    let mut buf = Buffers::default();
    for k in 0u64.. {
        let due = Duration::from_secs_f64((k as f64 + phase) / rate);
        if due >= plan.end || !plan.sleep_until(due) {
            return Ok(());
        }
        let late = plan.t0.elapsed() > due + LATE;
        let o = attempt(f, plan.spec.timeout, &mut buf)?;
        plan.record(flow, &o, due, late);
    }
    Ok(())
}

#[derive(Default)]
struct Buffers {
    req: Vec<u8>,
    resp: Vec<u8>,
}

impl Buffers {
    /// The request of `f`: its id in the first bytes (when it has room), then zeros.
    fn request(&mut self, f: &FlowSpec) -> &[u8] {
        self.req.clear();
        self.req.resize(f.request, 0);
        if f.request >= ID_BYTES {
            self.req[..ID_BYTES].copy_from_slice(&f.id.to_le_bytes());
        }
        &self.req
    }
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(d)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A socket bound to the flow's source (its port from the kernel): a source
/// this host lacks fails the test, it is not the path's failure.
fn bound(f: &FlowSpec, src: IpAddr, ty: Type) -> Result<Socket> {
    let domain = Domain::for_address(SocketAddr::new(src, 0));
    let proto = (ty == Type::RAW).then_some(if src.is_ipv6() {
        socket2::Protocol::ICMPV6
    } else {
        socket2::Protocol::ICMPV4
    });
    let s = Socket::new(domain, ty, proto).map_err(EngineError::io(
        "cannot create a socket: check the process's file limit (ulimit -n); an icmp flow \
         needs a raw socket (root or CAP_NET_RAW)",
    ))?;
    if ty == Type::STREAM {
        let _ = s.set_tcp_nodelay(true);
        let _ = sys::set_bind_address_no_port(s.as_raw_fd());
    }
    s.bind(&SocketAddr::new(src, 0).into())
        .map_err(EngineError::io(format!(
            "cannot bind flow {}'s source {}: add the address to this host, or fix the flow's src",
            f.name, src
        )))?;
    Ok(s)
}

/// One attempt of flow `f`: its outcome (a failure is an outcome, not an error).
fn attempt(f: &FlowSpec, timeout: f64, buf: &mut Buffers) -> Result<Outcome> {
    let (Some(src), Some(dst)) = (f.src, f.dst) else {
        return Err(EngineError::Internal(format!(
            "flow {} has no src or dst on the client: report this bug",
            f.name
        )));
    };
    let peer = SocketAddr::new(dst, f.dport.unwrap_or(0));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(timeout);
    let mut o = Outcome {
        fail: None,
        bytes: 0,
        connect_us: 0,
        total_us: 0,
    };
    let r = match f.protocol {
        FlowProto::Tcp => {
            let s = bound(f, src, Type::STREAM)?;
            tcp(f, s, peer, t0, deadline, buf, &mut o)
        }
        FlowProto::Udp => {
            let s = bound(f, src, Type::DGRAM)?;
            udp(f, s.into(), peer, deadline, buf, &mut o)
        }
        FlowProto::Icmp => {
            let s: UdpSocket = bound(f, src, Type::RAW)?.into();
            o.bytes += f.request as u64;
            let req = buf.request(f).to_vec();
            icmp::echo(&s, dst, &req, deadline, &mut buf.resp).and_then(|n| {
                o.bytes += n as u64;
                o.connect_us = micros(t0.elapsed());
                if n == f.request {
                    Ok(())
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                }
            })
        }
    };
    if let Err(e) = r {
        o.fail = Some(Fail::of(&e));
    }
    o.total_us = micros(t0.elapsed());
    Ok(o)
}

fn tcp(
    f: &FlowSpec,
    s: Socket,
    peer: SocketAddr,
    t0: Instant,
    deadline: Instant,
    buf: &mut Buffers,
    o: &mut Outcome,
) -> io::Result<()> {
    s.connect_timeout(&peer.into(), left(deadline)?)?;
    o.connect_us = micros(t0.elapsed());
    let mut s: TcpStream = s.into();
    s.set_write_timeout(Some(left(deadline)?))?;
    s.write_all(buf.request(f))?;
    o.bytes += f.request as u64;
    buf.resp.resize(f.response.max(4096), 0);
    let mut got = 0usize;
    // The response, then the server's end of stream (it closes first).
    loop {
        s.set_read_timeout(Some(left(deadline)?))?;
        let want = if got < f.response {
            f.response - got
        } else {
            1
        };
        let cap = want.min(buf.resp.len());
        let n = s.read(&mut buf.resp[..cap])?;
        if n == 0 {
            return if got == f.response {
                Ok(())
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
        o.bytes += n as u64;
        if got > f.response {
            return Err(io::ErrorKind::UnexpectedEof.into()); // more than asked: short of sense
        }
    }
}

fn udp(
    f: &FlowSpec,
    s: UdpSocket,
    peer: SocketAddr,
    deadline: Instant,
    buf: &mut Buffers,
    o: &mut Outcome,
) -> io::Result<()> {
    s.connect(peer)?;
    s.send(buf.request(f))?;
    o.bytes += f.request as u64;
    buf.resp.resize(f.response + 1, 0);
    s.set_read_timeout(Some(left(deadline)?))?;
    let n = s.recv(&mut buf.resp)?;
    o.bytes += n as u64;
    if n != f.response {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
