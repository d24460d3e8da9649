//! The client side of a connections test, one share of it per process: open
//! (paced, at most WINDOW connects under way, the sources taken round-robin),
//! validate (a byte each way on every connection), close (a FIN each, paced).
//! A helper process runs its share on commands from its parent, reporting
//! each phase as a JSON line.

use std::collections::VecDeque;
use std::io::{self, BufRead, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::rt::evloop::{self, Dial, Got, Poller};
use crate::rt::sys;
use crate::wire::http::Fail;

/// After this many failed opens a share stops trying (the limit is found).
pub const MAX_OPEN_FAILURES: u64 = 100;
/// Connects under way at once, per process.
const WINDOW: usize = 512;
const TICK: Duration = Duration::from_millis(50);
const VALIDATE: u8 = b'V';
const ANSWER: u8 = b'v';

/// Why the opening phase ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stop {
    /// Every asked connection was tried.
    Target,
    /// `duration` ran out.
    Duration,
    /// The kernel had no memory or buffers for another socket.
    Memory,
    /// Every source address's ports to the server are in use.
    Ports,
    /// This process's descriptors ran out (RLIMIT_NOFILE, fs.file-max).
    Nofile,
    /// Connects kept failing: the limit of the path (DUT, server) is found.
    Failures,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::Target => "target",
            Stop::Failures => "failures",
            Stop::Duration => "duration",
            Stop::Nofile => "nofile",
            Stop::Ports => "ports",
            Stop::Memory => "memory",
        }
    }

    /// A connect error that ends the phase for want of the client's own resources.
    fn of(e: &io::Error) -> Option<Stop> {
        match e.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => Some(Stop::Nofile),
            Some(libc::EADDRNOTAVAIL) | Some(libc::EADDRINUSE) => Some(Stop::Ports),
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) => Some(Stop::Memory),
            _ => None,
        }
    }
}

/// One share's work: where, how many, how fast.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpenJob {
    pub data: SocketAddr,
    pub target: u64,
    /// Source addresses, taken round-robin from `offset` (empty: the kernel's choice).
    pub sources: Vec<IpAddr>,
    pub offset: usize,
    /// Opens/s of this share (None: as fast as its window goes).
    pub rate: Option<f64>,
    pub timeout: f64,
    /// Bound on the opening phase, seconds.
    pub duration: f64,
    pub nodelay: bool,
    pub buffer: Option<u64>,
    pub nofile_want: u64,
}

/// What one share's opening phase did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Opened {
    pub established: u64,
    pub failed: u64,
    /// Connects still under way when the phase stopped: dropped, in no count.
    pub abandoned: u64,
    pub errors: Vec<u64>,
    /// Connections this share had open at its first failure.
    pub first_failure_at: Option<u64>,
    pub stop: Stop,
    pub seconds: f64,
    /// This process's resident memory before opening and with every connection held.
    pub rss_before: Option<u64>,
    pub rss_held: Option<u64>,
    pub nofile: u64,
}

/// What one share's validation did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validated {
    pub validated: u64,
    pub errors: Vec<u64>,
    pub seconds: f64,
}

/// What one share's close did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Closed {
    pub closed: u64,
    pub seconds: f64,
}

const PENDING: u8 = 0;
const OPEN: u8 = 1;
const DEAD: u8 = 2;
const VALID: u8 = 3;

/// One attempted connection: 8 bytes (the descriptor and a state).
struct Slot {
    s: Option<TcpStream>,
    st: u8,
}

/// A share's connections, held between its phases.
pub struct Share {
    poll: Poller,
    slots: Vec<Slot>,
    timeout: Duration,
}

struct Paced {
    t0: Instant,
    rate: Option<f64>,
}

impl Paced {
    /// When item `k` is due (no drift: due = k / rate from the phase's start).
    fn due(&self, k: u64) -> Instant {
        match self.rate {
            Some(r) => self.t0 + Duration::from_secs_f64(k as f64 / r),
            None => self.t0,
        }
    }
}

fn fail_count(o: &mut Opened, f: Fail) {
    o.failed += 1;
    o.errors[f.index()] += 1;
    o.first_failure_at.get_or_insert(o.established);
}

/// Opens a share's connections, paced, at most WINDOW under way.
pub fn open(job: &OpenJob) -> Result<(Share, Opened)> {
    let nofile = sys::raise_nofile_to(job.nofile_want);
    let timeout = Duration::from_secs_f64(job.timeout);
    let target = usize::try_from(job.target).unwrap_or(usize::MAX);
    let poll = Poller::new().map_err(EngineError::io("cannot create an epoll set"))?;
    let mut sh = Share {
        poll,
        slots: Vec::with_capacity(target.min(1 << 20)),
        timeout,
    };
    let mut o = Opened {
        established: 0,
        failed: 0,
        abandoned: 0,
        errors: vec![0; Fail::ALL.len()],
        first_failure_at: None,
        stop: Stop::Target,
        seconds: 0.0,
        rss_before: sys::rss_bytes(),
        rss_held: None,
        nofile,
    };
    let pace = Paced {
        t0: Instant::now(),
        rate: job.rate,
    };
    let open_until = pace.t0 + Duration::from_secs_f64(job.duration);
    let mut dial = Dial::to(job.data, timeout);
    dial.nodelay = job.nodelay;
    dial.buffer = job.buffer;
    let mut pending = 0usize;
    let mut deadlines: VecDeque<(usize, Instant)> = VecDeque::new();
    let mut ready: Vec<usize> = Vec::new();
    loop {
        let now = Instant::now();
        if sh.slots.len() == target && pending == 0 {
            o.stop = Stop::Target;
            break;
        }
        if o.failed >= MAX_OPEN_FAILURES {
            o.stop = Stop::Failures;
            break;
        }
        if now >= open_until {
            o.stop = Stop::Duration;
            break;
        }
        // Start what is due.
        let mut stop = None;
        while pending < WINDOW && sh.slots.len() < target {
            let k = sh.slots.len();
            if pace.due(k as u64) > now {
                break;
            }
            if !job.sources.is_empty() {
                dial.bind = Some(job.sources[(job.offset + k) % job.sources.len()]);
            }
            match sh.poll.io(k).connect(&dial) {
                Ok(s) => {
                    sh.slots.push(Slot {
                        s: Some(s),
                        st: PENDING,
                    });
                    pending += 1;
                    deadlines.push_back((k, now + timeout));
                }
                Err(e) => match Stop::of(&e) {
                    Some(why) => {
                        stop = Some(why);
                        break;
                    }
                    None => {
                        sh.slots.push(Slot { s: None, st: DEAD });
                        fail_count(&mut o, Fail::from_connect(&e));
                    }
                },
            }
        }
        if let Some(why) = stop {
            o.stop = why;
            break;
        }
        // Wait for connects to finish, the next start, or the first deadline.
        let mut wake = now + TICK;
        if sh.slots.len() < target && pending < WINDOW {
            wake = wake.min(pace.due(sh.slots.len() as u64));
        }
        if let Some((_, d)) = deadlines.front() {
            wake = wake.min(*d);
        }
        sh.poll
            .wait(&mut ready, Some(wake.saturating_duration_since(now)))
            .map_err(EngineError::io("epoll failed while opening connections"))?;
        for &k in &ready {
            let Some(slot) = sh.slots.get_mut(k) else {
                continue;
            };
            if slot.st != PENDING {
                continue;
            }
            let Some(s) = slot.s.as_ref() else {
                continue;
            };
            match evloop::connected(s) {
                Ok(true) => {
                    slot.st = OPEN;
                    pending -= 1;
                    o.established += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    slot.s = None;
                    slot.st = DEAD;
                    pending -= 1;
                    if let Some(why) = Stop::of(&e) {
                        stop = Some(why);
                    }
                    fail_count(&mut o, Fail::from_connect(&e));
                }
            }
        }
        let now = Instant::now();
        while let Some(&(k, d)) = deadlines.front() {
            if d > now {
                break;
            }
            deadlines.pop_front();
            let slot = &mut sh.slots[k];
            if slot.st == PENDING {
                slot.s = None;
                slot.st = DEAD;
                pending -= 1;
                fail_count(&mut o, Fail::ConnectTimeout);
            }
        }
        if let Some(why) = stop {
            o.stop = why;
            break;
        }
    }
    for slot in sh.slots.iter_mut().filter(|s| s.st == PENDING) {
        slot.s = None;
        slot.st = DEAD;
        o.abandoned += 1;
    }
    o.seconds = pace.t0.elapsed().as_secs_f64();
    o.rss_held = sys::rss_bytes();
    Ok((sh, o))
}

impl Share {
    /// Asks on every open connection, then reads every answer (one epoll loop).
    pub fn validate(&mut self) -> Result<Validated> {
        let t0 = Instant::now();
        let mut errors = vec![0u64; Fail::ALL.len()];
        let mut waiting = 0u64;
        for slot in self.slots.iter_mut().filter(|s| s.st == OPEN) {
            let Some(s) = slot.s.as_ref() else { continue };
            match evloop::write(s, &[VALIDATE]) {
                Ok(Some(1)) => waiting += 1,
                Ok(_) => {
                    slot.st = DEAD;
                    errors[Fail::Timeout.index()] += 1;
                }
                Err(e) => {
                    slot.st = DEAD;
                    errors[Fail::from_io(&e).index()] += 1;
                }
            }
        }
        let deadline = Instant::now() + self.timeout;
        let mut valid = 0u64;
        let mut ready: Vec<usize> = Vec::new();
        // The answers' edges come after the questions: the waits report them.
        while waiting > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            self.poll
                .wait(&mut ready, Some((deadline - now).min(TICK)))
                .map_err(EngineError::io("epoll failed while validating connections"))?;
            for &k in &ready {
                let Some(slot) = self.slots.get_mut(k) else {
                    continue;
                };
                if slot.st != OPEN {
                    continue;
                }
                let Some(s) = slot.s.as_ref() else { continue };
                let mut b = [0u8; 1];
                let bad = match evloop::read(s, &mut b) {
                    Ok(Got::Wait) => continue,
                    Ok(Got::Data(_)) if b[0] == ANSWER => None,
                    Ok(Got::Data(_)) => Some(Fail::BadResponse),
                    Ok(Got::Eof) => Some(Fail::Reset),
                    Err(e) => Some(Fail::from_io(&e)),
                };
                waiting -= 1;
                match bad {
                    None => {
                        slot.st = VALID;
                        valid += 1;
                    }
                    Some(f) => {
                        slot.st = DEAD;
                        errors[f.index()] += 1;
                    }
                }
            }
        }
        for slot in self.slots.iter_mut() {
            match slot.st {
                OPEN => {
                    slot.st = DEAD;
                    errors[Fail::Timeout.index()] += 1;
                }
                VALID => slot.st = OPEN,
                _ => {}
            }
        }
        Ok(Validated {
            validated: valid,
            errors,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// A FIN on every connection still up, `rate` a second (None: at once).
    pub fn close(&mut self, rate: Option<f64>) -> Closed {
        let pace = Paced {
            t0: Instant::now(),
            rate,
        };
        let mut closed = 0u64;
        for slot in self.slots.iter().filter(|s| s.st == OPEN) {
            let due = pace.due(closed);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if let Some(s) = slot.s.as_ref() {
                if s.shutdown(Shutdown::Write).is_ok() {
                    closed += 1;
                }
            }
        }
        Closed {
            closed,
            seconds: pace.t0.elapsed().as_secs_f64(),
        }
    }
}

/// What a client helper is told to do next, one JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "lowercase")]
pub enum Command {
    Validate,
    Close { rate: Option<f64> },
}

fn say<T: Serialize>(what: &str, v: &T) {
    if let Ok(v) = serde_json::to_value(v) {
        // A parent that is gone reads nothing: stdin's end ends this helper.
        let _ = writeln!(io::stdout(), "{}", serde_json::json!({ what: v }));
    }
}

/// A client helper: opens its share, then validates and closes it when told;
/// ends (dropping its connections) when its stdin closes.
pub fn open_worker(job: OpenJob) -> Result<()> {
    let (mut share, opened) = open(&job)?;
    say("opened", &opened);
    let stdin = io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
        let cmd: Command = serde_json::from_str(line.trim()).map_err(|e| EngineError::Server {
            field: None,
            message: format!(
                "a connections helper got a bad command ({}): report this bug",
                e
            ),
        })?;
        match cmd {
            Command::Validate => say("validated", &share.validate()?),
            Command::Close { rate } => say("closed", &share.close(rate)),
        }
    }
}
