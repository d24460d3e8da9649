//! The server side of a connections test: one epoll loop per process holds
//! its connections (at most `cap`), answers each validation, counts FINs and
//! answers them as `close` says. When the test asks for more connections than
//! one process may hold, helper processes share the data listener (each
//! accepts until it holds its `cap`) and report their state as JSON lines.

use std::io::{self, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::SockRef;

use crate::error::{EngineError, Result};
use crate::rt::evloop::{self, Got, Poller};
use crate::rt::guard::{Peers, Prefix};
use crate::rt::sys;
use crate::spec::Close;

const TICK: Duration = Duration::from_millis(50);
const VALIDATE: u8 = b'V';
const ANSWER: u8 = b'v';

/// What the server reports (snapshot/finish `extra`), summed over its processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerState {
    pub accepted: u64,
    pub held: u64,
    pub held_max: u64,
    pub validated: u64,
    pub fins: u64,
    pub resets: u64,
    /// CLOCK_MONOTONIC ns of the first and the last FIN (one clock for all processes).
    pub first_fin_ns: u64,
    pub last_fin_ns: u64,
    /// The descriptor limit of each process.
    pub nofile: u64,
    /// Accepts refused for want of descriptors.
    #[serde(default)]
    pub accept_emfile: u64,
    /// Resident memory of the processes when the state was read.
    #[serde(default)]
    pub rss_bytes: u64,
    /// Processes that hold the connections (1: no helper).
    #[serde(default)]
    pub processes: u64,
    /// Connections from sources other than the test's peers, closed at once.
    #[serde(default)]
    pub refused: u64,
}

impl ServerState {
    /// The state of several processes as one.
    pub fn sum(states: &[ServerState]) -> ServerState {
        let mut t = ServerState::default();
        for s in states {
            t.accepted += s.accepted;
            t.held += s.held;
            t.held_max += s.held_max;
            t.validated += s.validated;
            t.fins += s.fins;
            t.resets += s.resets;
            if s.fins > 0 {
                t.first_fin_ns = if t.first_fin_ns == 0 {
                    s.first_fin_ns
                } else {
                    t.first_fin_ns.min(s.first_fin_ns)
                };
                t.last_fin_ns = t.last_fin_ns.max(s.last_fin_ns);
            }
            if s.nofile > 0 {
                t.nofile = if t.nofile == 0 {
                    s.nofile
                } else {
                    t.nofile.min(s.nofile)
                };
            }
            t.accept_emfile += s.accept_emfile;
            t.rss_bytes += s.rss_bytes;
            t.processes += s.processes.max(1);
            t.refused += s.refused;
        }
        t
    }
}

/// The held connections of one process: a slab (token = index + 1; the listener is 0).
struct Held {
    conns: Vec<Option<std::net::TcpStream>>,
    free: Vec<usize>,
    n: usize,
}

impl Held {
    fn insert(&mut self, s: std::net::TcpStream) -> usize {
        self.n += 1;
        match self.free.pop() {
            Some(i) => {
                self.conns[i] = Some(s);
                i
            }
            None => {
                self.conns.push(Some(s));
                self.conns.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<std::net::TcpStream> {
        let s = self.conns.get_mut(i)?.take()?;
        self.free.push(i);
        self.n -= 1;
        Some(s)
    }
}

fn emfile(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Holds connections from `listener` until `stop()`: accepts while it holds
/// fewer than `cap` (a connection from a source not among `peers` is closed
/// at once), answers validations, counts FINs; `report` gets the state after
/// each round of events.
#[allow(clippy::too_many_arguments)]
pub fn hold_loop(
    listener: &TcpListener,
    stop: &dyn Fn() -> bool,
    peers: &Peers,
    cap: usize,
    close: Close,
    mut st: ServerState,
    report: &mut dyn FnMut(&ServerState),
) -> Result<()> {
    let fail = |what: &'static str| EngineError::io(what);
    let mut poll = Poller::new().map_err(fail("cannot create the server's epoll set"))?;
    poll.add(listener, 0)
        .map_err(fail("cannot watch the connections listener"))?;
    let mut accepting = true;
    let mut held = Held {
        conns: Vec::new(),
        free: Vec::new(),
        n: 0,
    };
    let mut buf = [0u8; 256];
    // Out of descriptors: the queue is retried each tick (no new edge comes).
    let mut retry_accept = false;
    let mut ready: Vec<usize> = Vec::new();
    while !stop() {
        poll.wait(&mut ready, Some(TICK))
            .map_err(fail("epoll failed on held connections"))?;
        if accepting && (retry_accept || ready.contains(&0)) {
            retry_accept = false;
            while held.n < cap {
                match listener.accept() {
                    Ok((s, _)) => {
                        if !peers.admit(&s) {
                            st.refused += 1;
                            continue;
                        }
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        let i = held.insert(s);
                        let Some(Some(s)) = held.conns.get(i) else {
                            continue;
                        };
                        if poll.add(s, i + 1).is_err() {
                            held.remove(i);
                            continue;
                        }
                        st.accepted += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if emfile(&e) => {
                        // The limit is reached; keep serving what is held.
                        st.accept_emfile += 1;
                        retry_accept = true;
                        break;
                    }
                    Err(e) => {
                        return Err(EngineError::io("accept failed on the connections listener")(e))
                    }
                }
            }
        }
        for &t in ready.iter().filter(|&&t| t > 0) {
            let i = t - 1;
            // Read until it would block (edge-triggered).
            while let Some(Some(s)) = held.conns.get(i) {
                match evloop::read(s, &mut buf) {
                    Ok(Got::Eof) => {
                        let now = sys::monotonic_ns();
                        if st.fins == 0 {
                            st.first_fin_ns = now;
                        }
                        st.fins += 1;
                        st.last_fin_ns = now;
                        if let Some(s) = held.remove(i) {
                            if close == Close::Reset {
                                // RST in answer: no TIME_WAIT on either side.
                                let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
                            }
                            // Else the drop answers with our FIN.
                        }
                        break;
                    }
                    Ok(Got::Data(n)) => {
                        let asks = buf[..n].iter().filter(|&&b| b == VALIDATE).count();
                        let answer = vec![ANSWER; asks];
                        if matches!(evloop::write(s, &answer), Ok(Some(k)) if k == asks) {
                            st.validated += asks as u64;
                        }
                    }
                    Ok(Got::Wait) => break,
                    Err(_) => {
                        st.resets += 1;
                        held.remove(i);
                        break;
                    }
                }
            }
        }
        // At its cap a process leaves the listener to the others.
        if accepting && held.n >= cap {
            accepting = false;
            poll.remove(listener)
                .map_err(fail("cannot leave the connections listener"))?;
        } else if !accepting && held.n < cap {
            accepting = true;
            retry_accept = true;
            poll.add(listener, 0)
                .map_err(fail("cannot watch the connections listener"))?;
        }
        st.held = held.n as u64;
        st.held_max = st.held_max.max(st.held);
        report(&st);
    }
    Ok(())
}

/// What a server helper is told (its listener comes as descriptor 3).
#[derive(Debug, Serialize, Deserialize)]
pub struct HoldJob {
    pub cap: u64,
    /// The addresses it serves: the control connection's peer first, then
    /// those the spec declared.
    pub peers: Vec<Prefix>,
    pub close: Close,
    pub nofile_want: u64,
}

/// A server helper: holds up to `cap` connections from the handed listener,
/// reports its state (a JSON line each tick it changed, and at once, with
/// `"seq": N`, when its stdin says `report N`) until its stdin closes.
pub fn hold_worker(job: HoldJob) -> Result<()> {
    let nofile = sys::raise_nofile_to(job.nofile_want);
    let listener = sys::handed_listener().map_err(EngineError::io(
        "a connections helper needs the listener its parent hands it",
    ))?;
    listener.set_nonblocking(true).map_err(EngineError::io(
        "cannot make the handed listener non-blocking",
    ))?;
    let done = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(AtomicU64::new(0));
    watch_stdin(done.clone(), asked.clone());
    let st = ServerState {
        nofile,
        processes: 1,
        ..ServerState::default()
    };
    let mut last = ServerState::default();
    let mut next = Instant::now();
    let mut answered = 0u64;
    let mut report = |s: &ServerState| {
        let now = Instant::now();
        // A snapshot of the parent waits for the state as it is now.
        let seq = asked.load(Relaxed);
        if (*s != last && now >= next) || seq > answered {
            let mut shown = *s;
            shown.rss_bytes = sys::rss_bytes().unwrap_or(0);
            if let Ok(mut v) = serde_json::to_value(shown) {
                v["seq"] = seq.into();
                // A parent that is gone reads nothing: stdin's end stops the loop.
                let _ = writeln!(io::stdout(), "{}", v);
            }
            last = *s;
            next = now + TICK;
            answered = seq;
        }
    };
    let stop = || done.load(Relaxed);
    let cap = usize::try_from(job.cap).unwrap_or(usize::MAX);
    let Some((peer, declared)) = job.peers.split_first() else {
        return Err(EngineError::Internal(
            "a connections helper was given no peer to serve: report this bug".into(),
        ));
    };
    let peers = Peers::new(peer.ends().0, declared.iter().copied());
    hold_loop(&listener, &stop, &peers, cap, job.close, st, &mut report)
}

/// Sets `done` once stdin ends (the parent closed it, or died); a line
/// `report N` sets `asked` to N.
pub fn watch_stdin(done: Arc<AtomicBool>, asked: Arc<AtomicU64>) {
    let _ = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut line = String::new();
            let stdin = io::stdin();
            loop {
                line.clear();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if let Some(n) = line.trim().strip_prefix("report ") {
                            if let Ok(n) = n.parse::<u64>() {
                                asked.fetch_max(n, Relaxed);
                            }
                        }
                    }
                }
            }
            done.store(true, Relaxed);
        });
}
