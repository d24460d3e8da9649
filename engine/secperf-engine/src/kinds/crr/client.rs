//! crr's client: `parallel` loops (connect, request, response, close, again),
//! each a machine of the event loop, `threads` threads sharing them.
//!
//! Without `rate` and `timeout` a failure of the data path fails the test
//! (netperf's TCP_CRR), and connects may fail `MAX_CONSECUTIVE_FAILURES`
//! times in a row. With `rate` (new connections/s, one absolute schedule
//! shared by every loop, so it does not drift) and/or `timeout` (the deadline
//! of each connection, connect to close), a connection that fails or misses
//! its deadline is counted in `lost` and the loop goes on (RFC 3511 §5.3
//! counts failures at a rate, it does not stop at the first).
//!
//! A connection counts once it has ended as `close` says; its round trip is
//! connect to the response's last byte.

use std::marker::PhantomData;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;

use crate::error::{EngineError, Result};
use crate::rt::evloop::{self, Dial, Flags, Got, Io, Machine, Want};
use crate::rt::net::CONNECT_TIMEOUT;
use crate::rt::payload;
use crate::rt::shared::{Shared, Tally, ThreadStats};
use crate::spec::{CloseOrder, CrrSpec};

/// Consecutive failed connects after which an unpaced test fails.
const MAX_CONSECUTIVE_FAILURES: u32 = 50;

/// The schedule the loops of one paced test share.
pub struct Schedule {
    pub t0: Instant,
    pub next: AtomicU64,
}

impl Schedule {
    pub fn new() -> Arc<Schedule> {
        Arc::new(Schedule {
            t0: Instant::now(),
            next: AtomicU64::new(0),
        })
    }
}

/// What one thread's loops share.
pub struct Cx<'a> {
    spec: &'a CrrSpec,
    dial: Dial,
    sh: &'a Shared,
    st: &'a ThreadStats,
    sched: Option<&'a Schedule>,
    /// Failures are counted, not fatal (a rate or a timeout was given).
    counts_failures: bool,
    req: Vec<u8>,
    scratch: Vec<u8>,
    tally: Tally,
    connections: u64,
    lost: u64,
    consecutive: u32,
    fatal: Option<EngineError>,
}

impl Flags for Cx<'_> {
    fn stopped(&self) -> bool {
        self.sh.stopped()
    }
    fn aborted(&self) -> bool {
        self.sh.aborted() || self.fatal.is_some()
    }
}

impl Cx<'_> {
    fn lose(&mut self) {
        self.lost += 1;
        self.st.lost.store(self.lost, Relaxed);
    }

    fn fail(&mut self, e: EngineError) {
        if self.fatal.is_none() {
            self.fatal = Some(e);
        }
    }
}

fn data_err(what: &str, e: std::io::Error) -> EngineError {
    EngineError::io(format!(
        "crr {} failed (check that the server still runs and nothing in the path resets or blocks the connection)",
        what
    ))(e)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Between connections.
    Idle,
    /// Paced: this connection is due then.
    Due(Instant),
    /// A non-blocking connect just begun: wait for its socket's event.
    Dialing,
    /// That event came: the connect has ended (well or not).
    Connecting,
    Sending(usize),
    Receiving(usize),
    /// Reading the server's end of stream (client-first: after our shutdown).
    Closing,
}

/// One loop.
pub struct Loop<'a> {
    s: Option<TcpStream>,
    st: St,
    t0: Instant,
    rtt: Duration,
    deadline: Option<Instant>,
    _cx: PhantomData<fn(&'a ())>,
}

/// A connection still open when its loop ends (the test aborted, or stopped
/// it mid-way) is abandoned, not closed in order: it is reset, so that it
/// leaves no TIME_WAIT and its server does not wait on it.
impl Drop for Loop<'_> {
    fn drop(&mut self) {
        self.drop_reset();
    }
}

impl Loop<'_> {
    fn new() -> Self {
        Loop {
            s: None,
            st: St::Idle,
            t0: Instant::now(),
            rtt: Duration::ZERO,
            deadline: None,
            _cx: PhantomData,
        }
    }

    /// Drops the connection after a failure: reset, nothing waits on it.
    fn drop_reset(&mut self) {
        if let Some(s) = self.s.take() {
            let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
        }
        self.st = St::Idle;
        self.deadline = None;
    }

    /// A connection failed: counted (paced), or the test's error.
    fn failed(&mut self, cx: &mut Cx<'_>, e: EngineError) {
        self.drop_reset();
        if cx.counts_failures {
            cx.lose();
        } else {
            cx.fail(e);
        }
    }

    fn connect_failed(&mut self, cx: &mut Cx<'_>, e: std::io::Error) {
        self.drop_reset();
        cx.lose();
        if cx.counts_failures {
            return;
        }
        cx.consecutive += 1;
        if cx.consecutive >= MAX_CONSECUTIVE_FAILURES {
            cx.fail(EngineError::Connect {
                what: "server's data port",
                addr: cx.dial.peer,
                source: e,
                fix: "check that nothing between the hosts drops the data port (`data_port` fixes it for ACLs)",
            });
        }
    }

    fn completed(&mut self, cx: &mut Cx<'_>) {
        self.s = None;
        self.st = St::Idle;
        self.deadline = None;
        if cx.counts_failures && Instant::now() > self.t0 + timeout(cx.spec) {
            cx.lose(); // ended, but after its deadline
            return;
        }
        cx.sh.record_rtt(self.rtt);
        cx.tally.sent(cx.req.len());
        cx.tally.received(cx.spec.response);
        cx.tally.transactions += 1;
        cx.tally.publish(cx.st);
    }

    /// Starts the next connection (or says when it is due, or that the loop is done).
    fn start(&mut self, io: &mut Io<'_>, cx: &mut Cx<'_>) -> Option<Want> {
        if cx.sh.stopped() {
            return Some(Want::Done);
        }
        if self.st == St::Idle {
            if let (Some(sched), Some(rate)) = (cx.sched, cx.spec.rate) {
                let k = sched.next.fetch_add(1, Relaxed);
                let due = sched.t0 + Duration::from_secs_f64(k as f64 / rate);
                if Instant::now() < due {
                    self.st = St::Due(due);
                    return Some(Want::Until(due));
                }
            }
        } else if let St::Due(due) = self.st {
            if Instant::now() < due {
                return Some(Want::Until(due));
            }
        }
        self.t0 = Instant::now();
        self.deadline = Some(
            self.t0
                + if cx.counts_failures {
                    timeout(cx.spec)
                } else {
                    CONNECT_TIMEOUT
                },
        );
        match io.connect(&cx.dial) {
            Ok(s) => {
                cx.connections += 1;
                cx.st.connections.store(cx.connections, Relaxed);
                self.s = Some(s);
                self.st = if io.blocking() {
                    self.connected(cx);
                    St::Sending(0)
                } else {
                    St::Dialing
                };
            }
            Err(e) => self.connect_failed(cx, e),
        }
        None
    }

    fn connected(&mut self, cx: &mut Cx<'_>) {
        cx.consecutive = 0;
        if !cx.counts_failures {
            self.deadline = None;
        }
    }
}

fn timeout(spec: &CrrSpec) -> Duration {
    Duration::from_secs_f64(spec.timeout.unwrap_or(2.0))
}

impl<'a> Machine for Loop<'a> {
    type Cx = Cx<'a>;

    fn step(&mut self, io: &mut Io<'_>, cx: &mut Cx<'a>) -> Want {
        loop {
            if cx.fatal.is_some() {
                return Want::Done;
            }
            match self.st {
                St::Idle | St::Due(_) => {
                    if let Some(w) = self.start(io, cx) {
                        return w;
                    }
                }
                St::Dialing => {
                    self.st = St::Connecting;
                    return Want::Write;
                }
                St::Connecting => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    // Stepped here only on an event of its socket: the connect has ended.
                    match evloop::connect_error(s) {
                        Ok(()) => {
                            self.connected(cx);
                            self.st = St::Sending(0);
                        }
                        Err(e) => self.connect_failed(cx, e),
                    }
                }
                St::Sending(off) => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    match evloop::write(s, &cx.req[off..]) {
                        Ok(Some(n)) if off + n == cx.req.len() => self.st = St::Receiving(0),
                        Ok(Some(n)) => self.st = St::Sending(off + n),
                        Ok(None) => return Want::Write,
                        Err(e) => self.failed(cx, data_err("request", e)),
                    }
                }
                St::Receiving(got) => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    let want = (cx.spec.response - got).min(cx.scratch.len());
                    match evloop::read(s, &mut cx.scratch[..want]) {
                        Ok(Got::Data(n)) if got + n == cx.spec.response => {
                            self.rtt = self.t0.elapsed();
                            match cx.spec.close {
                                CloseOrder::Reset => {
                                    if let Some(s) = self.s.take() {
                                        let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
                                    }
                                    self.completed(cx);
                                }
                                CloseOrder::ClientFirst => {
                                    if let Err(e) = s.shutdown(Shutdown::Write) {
                                        self.failed(cx, data_err("close", e));
                                        continue;
                                    }
                                    self.st = St::Closing;
                                }
                                CloseOrder::ServerFirst => self.st = St::Closing,
                            }
                        }
                        Ok(Got::Data(n)) => self.st = St::Receiving(got + n),
                        Ok(Got::Wait) => return Want::Read,
                        Ok(Got::Eof) => self.failed(
                            cx,
                            EngineError::Server {
                                field: None,
                                message: "the server closed a crr connection before answering: check the server's stderr".into(),
                            },
                        ),
                        Err(e) => self.failed(cx, data_err("response", e)),
                    }
                }
                St::Closing => {
                    let Some(s) = self.s.as_ref() else {
                        self.st = St::Idle;
                        continue;
                    };
                    let mut b = [0u8; 64];
                    match evloop::read(s, &mut b) {
                        Ok(Got::Eof) => self.completed(cx),
                        Ok(Got::Wait) => return Want::Read,
                        Ok(Got::Data(_)) => self.failed(
                            cx,
                            EngineError::Server {
                                field: None,
                                message: "the server sent data after its crr response: is the server an engine of the same version?".into(),
                            },
                        ),
                        Err(e) => self.failed(cx, data_err("close", e)),
                    }
                }
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn expire(&mut self, cx: &mut Cx<'a>) {
        if matches!(self.st, St::Dialing | St::Connecting) || !cx.counts_failures {
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
            self.connect_failed(cx, e);
        } else {
            self.drop_reset();
            cx.lose();
        }
    }
}

/// One thread of the client: `loops` of the test's loops, to the stop.
pub fn thread(
    spec: &CrrSpec,
    data: SocketAddr,
    loops: usize,
    sched: Option<&Schedule>,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let mut cx = Cx {
        spec,
        dial: Dial {
            peer: data,
            bind: spec.bind,
            nodelay: spec.nodelay,
            buffer: spec.socket_buffer,
            timeout: CONNECT_TIMEOUT,
        },
        sh,
        st,
        sched,
        counts_failures: spec.rate.is_some() || spec.timeout.is_some(),
        req: payload::make(spec.payload, spec.request, 5),
        scratch: vec![0u8; spec.response.clamp(64, 64 * 1024)],
        tally: Tally::default(),
        connections: 0,
        lost: 0,
        consecutive: 0,
        fatal: None,
    };
    if cx.counts_failures {
        cx.dial.timeout = timeout(spec);
    }
    let mut ms: Vec<Loop<'_>> = (0..loops).map(|_| Loop::new()).collect();
    let busy = Duration::from_micros(spec.busy_poll_us);
    let r = evloop::drive(&mut ms, &mut cx, busy);
    cx.tally.publish(st);
    if let Some(e) = cx.fatal.take() {
        if sh.aborted() {
            return Ok(());
        }
        return Err(e);
    }
    r.map_err(EngineError::io("the crr event loop failed"))
}
