//! The event loop of the kinds that drive many TCP connections from a few
//! threads (http, crr, connections, mix). Each connection (or virtual client)
//! is a state machine, a `Machine`: it moves as far as it can without waiting
//! and then says what it waits for (`Want`). `drive` runs the machines of one
//! thread:
//!
//! - several machines share one epoll set (mio, edge-triggered): a machine is
//!   stepped when one of its sockets reports an event, when its timer is due,
//!   or when its deadline has passed (`expire`);
//! - a thread with one machine has no epoll set: its sockets block, with a
//!   short timeout (`WAKE`) so that the loop can look at the test's flags and
//!   the machine's deadline. One connection needs no readiness: a blocking
//!   read is one system call where epoll needs two (what netperf and a
//!   one-connection wrk pay as well).
//!
//! - with a busy poll (`busy`, the kinds' `busy_poll_us`), a thread that
//!   finds nothing ready asks again without sleeping until that long has
//!   passed, and only then sleeps in epoll_wait. Where the thread would
//!   otherwise sleep for a few microseconds between answers, each sleep costs
//!   a wake-up, on a virtual machine an idle CPU's exit to the hypervisor and
//!   an interrupt to bring it back, paid by whoever delivers the answer (the
//!   server, the DUT). Spinning saves those at the price of the CPU it burns;
//!   it is off by default, because a generator that shares its CPU with the
//!   server or the DUT would take that CPU from them. With a busy poll even
//!   one machine runs on the epoll set.
//!
//! The rule a machine keeps: it returns `Want::Read` or `Want::Write` only
//! after an operation on its socket would block (or in blocking mode timed
//! out), so an edge it may have consumed earlier is never needed again. One
//! exception: right after sending a request, before its answer can have
//! come, it may return `Want::Read` at once: Linux raises the readable edge
//! anew for every segment that arrives, so the answer's arrival wakes it
//! (and a read that could only fail costs a busy client a system call a
//! request).
//! Knows no kind.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, SockRef, Socket, Type};

use crate::rt::sys;

/// How long a blocking socket waits before the loop looks at the flags again.
pub const WAKE: Duration = Duration::from_millis(250);
/// How often the epoll loop looks at the flags and the machines' deadlines.
const TICK: Duration = Duration::from_millis(50);
/// Events taken per epoll_wait.
const EVENTS: usize = 1024;

/// What a machine waits for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// One of its sockets readable (an operation would block).
    Read,
    /// One of its sockets writable (a connect under way, a full send buffer).
    Write,
    /// Nothing until then (a paced start, a think time); a stop wakes it early.
    Until(Instant),
    /// It has finished.
    Done,
}

/// The flags of the test a loop runs for, as its machines' context sees them.
pub trait Flags {
    /// No new work: machines finish what is under way.
    fn stopped(&self) -> bool;
    /// Everything ends now.
    fn aborted(&self) -> bool;
}

/// One connection's (or virtual client's) state machine. `Cx` is what the
/// machines of one thread share (counters, scratch buffers, the flags).
pub trait Machine {
    type Cx: Flags;
    /// Moves as far as it can without waiting; says what it waits for.
    fn step(&mut self, io: &mut Io<'_>, cx: &mut Self::Cx) -> Want;
    /// When the operation under way times out (None: it does not).
    fn deadline(&self) -> Option<Instant>;
    /// The deadline passed while it waited: the operation under way failed
    /// (the machine counts it and drops its sockets; the next step goes on).
    fn expire(&mut self, cx: &mut Self::Cx);
}

/// What a machine's step may ask of its loop: new sockets made ready for it.
pub struct Io<'a> {
    reg: Option<&'a mio::Registry>,
    token: usize,
}

/// How a connection is opened.
#[derive(Clone, Copy, Debug)]
pub struct Dial {
    pub peer: SocketAddr,
    /// Source address (port chosen at connect time, from the whole 4-tuple).
    pub bind: Option<IpAddr>,
    pub nodelay: bool,
    /// SO_SNDBUF and SO_RCVBUF.
    pub buffer: Option<u64>,
    /// Blocking mode: how long connect() (and each write) may block.
    pub timeout: Duration,
}

impl Dial {
    pub fn to(peer: SocketAddr, timeout: Duration) -> Dial {
        Dial {
            peer,
            bind: None,
            nodelay: true,
            buffer: None,
            timeout,
        }
    }
}

/// What a read gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    Data(usize),
    Eof,
    /// Nothing now (non-blocking) or within WAKE (blocking): wait.
    Wait,
}

fn einprogress(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINPROGRESS)
}

impl Io<'_> {
    /// True when this machine's sockets block (it is its thread's only one).
    pub fn blocking(&self) -> bool {
        self.reg.is_none()
    }

    /// Makes a socket this machine's: in blocking mode, reads wake every
    /// WAKE and writes block at most `write_timeout`; else non-blocking and
    /// in the loop's epoll set (readable and writable, edge-triggered).
    pub fn adopt(&mut self, s: SockRef<'_>, write_timeout: Duration) -> io::Result<()> {
        if self.reg.is_some() {
            s.set_nonblocking(true)?;
        }
        self.watch(s, write_timeout)
    }

    /// `adopt` for a socket made non-blocking already (epoll mode).
    fn watch(&mut self, s: SockRef<'_>, write_timeout: Duration) -> io::Result<()> {
        match self.reg {
            None => {
                s.set_read_timeout(Some(WAKE))?;
                s.set_write_timeout(Some(write_timeout.max(Duration::from_millis(1))))
            }
            Some(reg) => reg.register(
                &mut SourceFd(&s.as_raw_fd()),
                Token(self.token),
                Interest::READABLE | Interest::WRITABLE,
            ),
        }
    }

    /// A TCP connection to `d.peer`: connected (blocking mode; connect()
    /// bounded by `d.timeout`) or connecting (wait for `Want::Write`, then
    /// `connected`). The error is the socket's or the connect's.
    pub fn connect(&mut self, d: &Dial) -> io::Result<TcpStream> {
        // Non-blocking from its creation in epoll mode (one system call fewer
        // a connection).
        let ty = if self.blocking() {
            Type::STREAM
        } else {
            Type::STREAM.nonblocking()
        };
        let s = Socket::new(Domain::for_address(d.peer), ty, None)?;
        if let Some(b) = d.buffer {
            s.set_send_buffer_size(b as usize)?;
            s.set_recv_buffer_size(b as usize)?;
        }
        if d.nodelay {
            s.set_tcp_nodelay(true)?;
        }
        if let Some(ip) = d.bind {
            if ip.is_ipv4() {
                sys::set_bind_address_no_port(s.as_raw_fd())?;
            }
            s.bind(&SocketAddr::new(ip, 0).into())?;
        }
        self.watch(SockRef::from(&s), d.timeout)?;
        match s.connect(&d.peer.into()) {
            Ok(()) => {}
            // A blocking connect() that hit SO_SNDTIMEO says EINPROGRESS.
            Err(e) if einprogress(&e) && self.blocking() => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
            }
            Err(e) if einprogress(&e) => {}
            Err(e) => return Err(e),
        }
        Ok(s.into())
    }
}

/// After an event on a socket whose non-blocking connect was under way: the
/// connect's error, if it failed. An event there means the connect has ended
/// (a connecting socket is neither readable nor writable before), so where
/// the loop steps a machine only on its socket's events this is the whole
/// check; a write that comes too early would only say it would block.
pub fn connect_error(s: &TcpStream) -> io::Result<()> {
    match s.take_error()? {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Has a non-blocking connect finished? Ok(false): still under way.
pub fn connected(s: &TcpStream) -> io::Result<bool> {
    if let Some(e) = s.take_error()? {
        return Err(e);
    }
    match s.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(false),
        Err(e) => Err(e),
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One read on a socket of the loop.
pub fn read(s: &TcpStream, buf: &mut [u8]) -> io::Result<Got> {
    loop {
        match (&*s).read(buf) {
            Ok(0) => return Ok(Got::Eof),
            Ok(n) => return Ok(Got::Data(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if would_block(&e) => return Ok(Got::Wait),
            Err(e) => return Err(e),
        }
    }
}

/// One write on a socket of the loop; None: it would block (wait for Write).
pub fn write(s: &TcpStream, buf: &[u8]) -> io::Result<Option<usize>> {
    loop {
        match (&*s).write(buf) {
            Ok(0) if !buf.is_empty() => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket wrote nothing",
                ))
            }
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if would_block(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Runs `ms` (one thread's machines) until every one is done or the flags
/// abort; a single machine runs on blocking sockets, several share an epoll
/// set (so does one machine with a busy poll). `busy`: how long a thread that
/// finds nothing ready keeps asking before it sleeps (zero: it sleeps at once).
pub fn drive<M: Machine>(ms: &mut [M], cx: &mut M::Cx, busy: Duration) -> io::Result<()> {
    match ms {
        [] => Ok(()),
        [one] if busy.is_zero() => {
            drive_one(one, cx);
            Ok(())
        }
        many => drive_many(many, cx, busy),
    }
}

/// The most a kind's `busy_poll_us` may ask (a generator spinning longer
/// between answers gains nothing more).
pub const MAX_BUSY_POLL_US: u64 = 10_000;

/// Sleeps until `t` in TICK slices; returns early when the test stops.
fn nap_until<F: Flags>(t: Instant, cx: &F) {
    loop {
        let now = Instant::now();
        if now >= t || cx.stopped() || cx.aborted() {
            return;
        }
        std::thread::sleep((t - now).min(TICK));
    }
}

fn drive_one<M: Machine>(m: &mut M, cx: &mut M::Cx) {
    let mut io = Io {
        reg: None,
        token: 0,
    };
    loop {
        if cx.aborted() {
            return;
        }
        match m.step(&mut io, cx) {
            Want::Done => return,
            Want::Read | Want::Write => {
                if m.deadline().is_some_and(|d| Instant::now() >= d) {
                    m.expire(cx);
                }
            }
            Want::Until(t) => nap_until(t, cx),
        }
    }
}

/// An epoll set (edge-triggered, through mio) whose members are named by a
/// token: for loops that are not machines (the connections kind's phases).
pub struct Poller {
    poll: Poll,
    events: Events,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        Ok(Poller {
            poll: Poll::new()?,
            events: Events::with_capacity(EVENTS),
        })
    }

    /// Watches `s` (readable and writable, edge-triggered) as `token`.
    pub fn add<S: AsRawFd>(&self, s: &S, token: usize) -> io::Result<()> {
        self.poll.registry().register(
            &mut SourceFd(&s.as_raw_fd()),
            Token(token),
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    /// Stops watching `s`.
    pub fn remove<S: AsRawFd>(&self, s: &S) -> io::Result<()> {
        self.poll
            .registry()
            .deregister(&mut SourceFd(&s.as_raw_fd()))
    }

    /// What a machine (or any socket's owner) named `token` uses to open sockets here.
    pub fn io(&self, token: usize) -> Io<'_> {
        Io {
            reg: Some(self.poll.registry()),
            token,
        }
    }

    /// Waits at most `timeout` for events; `ready` gets their tokens (none
    /// after a signal).
    pub fn wait(&mut self, ready: &mut Vec<usize>, timeout: Option<Duration>) -> io::Result<()> {
        ready.clear();
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        ready.extend(self.events.iter().map(|e| e.token().0));
        Ok(())
    }
}

struct Many<'a, M: Machine> {
    ms: &'a mut [M],
    wants: Vec<Want>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    live: usize,
}

impl<M: Machine> Many<'_, M> {
    fn run(&mut self, i: usize, poll: &Poller, cx: &mut M::Cx) {
        let w = self.ms[i].step(&mut poll.io(i), cx);
        match w {
            Want::Until(t) => self.timers.push(Reverse((t, i))),
            Want::Done => self.live -= 1,
            Want::Read | Want::Write => {}
        }
        self.wants[i] = w;
    }

    fn waits_on_io(&self, i: usize) -> bool {
        matches!(self.wants[i], Want::Read | Want::Write)
    }
}

fn drive_many<M: Machine>(ms: &mut [M], cx: &mut M::Cx, busy: Duration) -> io::Result<()> {
    let mut poll = Poller::new()?;
    let mut ready: Vec<usize> = Vec::with_capacity(EVENTS);
    let n = ms.len();
    let mut st = Many {
        ms,
        wants: vec![Want::Read; n],
        timers: BinaryHeap::new(),
        live: n,
    };
    for i in 0..n {
        st.run(i, &poll, cx);
    }
    let mut stop_seen = false;
    let mut next_scan = Instant::now() + TICK;
    while st.live > 0 {
        if cx.aborted() {
            return Ok(());
        }
        let now = Instant::now();
        let mut wake = next_scan;
        if let Some(Reverse((t, _))) = st.timers.peek() {
            wake = wake.min(*t);
        }
        ready.clear();
        if !busy.is_zero() {
            // Ask without sleeping until something is ready or `busy` has
            // passed (or the next timer or scan is due); sleep only then.
            let until = (now + busy).min(wake);
            poll.wait(&mut ready, Some(Duration::ZERO))?;
            while ready.is_empty() && Instant::now() < until {
                std::hint::spin_loop();
                poll.wait(&mut ready, Some(Duration::ZERO))?;
            }
        }
        if ready.is_empty() {
            let now = Instant::now();
            poll.wait(&mut ready, Some(wake.saturating_duration_since(now)))?;
        }
        for &i in &ready {
            if i < n && st.waits_on_io(i) {
                st.run(i, &poll, cx);
            }
        }
        let now = Instant::now();
        while let Some(Reverse((t, i))) = st.timers.peek().copied() {
            if t > now {
                break;
            }
            st.timers.pop();
            // A stale entry: the machine has moved on since.
            if st.wants[i] == Want::Until(t) {
                st.run(i, &poll, cx);
            }
        }
        if !stop_seen && cx.stopped() {
            stop_seen = true;
            for i in 0..n {
                if matches!(st.wants[i], Want::Until(_)) {
                    st.run(i, &poll, cx);
                }
            }
        }
        if now >= next_scan {
            next_scan = now + TICK;
            for i in 0..n {
                if st.waits_on_io(i) && st.ms[i].deadline().is_some_and(|d| now >= d) {
                    st.ms[i].expire(cx);
                    st.run(i, &poll, cx);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    struct Cx {
        done: u64,
    }
    impl Flags for Cx {
        fn stopped(&self) -> bool {
            false
        }
        fn aborted(&self) -> bool {
            false
        }
    }

    /// Connects, writes one byte, reads the echo, closes; `left` times.
    struct Echo {
        peer: SocketAddr,
        s: Option<TcpStream>,
        phase: u8,
        left: u32,
    }

    impl Machine for Echo {
        type Cx = Cx;
        fn step(&mut self, io: &mut Io<'_>, cx: &mut Cx) -> Want {
            loop {
                match self.phase {
                    0 => {
                        if self.left == 0 {
                            return Want::Done;
                        }
                        let d = Dial::to(self.peer, Duration::from_secs(2));
                        self.s = Some(io.connect(&d).expect("connect"));
                        self.phase = 1;
                    }
                    1 => {
                        let s = self.s.as_ref().unwrap();
                        if !connected(s).expect("connected") {
                            return Want::Write;
                        }
                        match write(s, b"x").expect("write") {
                            Some(_) => self.phase = 2,
                            None => return Want::Write,
                        }
                    }
                    _ => {
                        let mut b = [0u8; 4];
                        match read(self.s.as_ref().unwrap(), &mut b).expect("read") {
                            Got::Data(1) => {
                                cx.done += 1;
                                self.left -= 1;
                                self.s = None;
                                self.phase = 0;
                            }
                            Got::Wait => return Want::Read,
                            other => panic!("unexpected {:?}", other),
                        }
                    }
                }
            }
        }
        fn deadline(&self) -> Option<Instant> {
            None
        }
        fn expire(&mut self, _: &mut Cx) {}
    }

    fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut b = [0u8; 1];
                    while let Ok(1) = s.read(&mut b) {
                        if s.write_all(&b).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// `n` echo machines of 20 round trips each, driven with `busy`: every one counted.
    fn echoes(peer: SocketAddr, n: usize, busy: Duration) {
        let mut ms: Vec<Echo> = (0..n)
            .map(|_| Echo {
                peer,
                s: None,
                phase: 0,
                left: 20,
            })
            .collect();
        let mut cx = Cx { done: 0 };
        drive(&mut ms, &mut cx, busy).unwrap();
        assert_eq!(cx.done, 20 * n as u64, "{} machines, busy {:?}", n, busy);
    }

    #[test]
    fn one_machine_blocks_and_many_share_epoll() {
        let peer = echo_server();
        for n in [1usize, 7] {
            echoes(peer, n, Duration::ZERO);
        }
    }

    #[test]
    fn a_busy_poll_drives_one_machine_and_many_alike() {
        let peer = echo_server();
        for n in [1usize, 5] {
            echoes(peer, n, Duration::from_micros(50));
        }
    }
}
