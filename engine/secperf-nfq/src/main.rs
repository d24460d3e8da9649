//! secperf-nfq: bind an NFQUEUE, accept every packet, log each new connection.
//!
//! stdout carries JSON event lines: `listening` once the queue is bound (callers
//! poll for it instead of sleeping), `stopped` with counters after SIGTERM or
//! SIGINT, `error` before a non-zero exit.

use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use clap::Parser;
use nfq::{Queue, Verdict};
use serde_json::json;

use secperf_nfq::{parse_five_tuple, ConnLog, LogLine, NfqError, Result, SeenSet};

/// Set by the signal handler; read by the packet loop.
static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

#[derive(Parser, Debug)]
#[command(name = "secperf-nfq", version, about)]
struct Args {
    /// The NFQUEUE number to bind (the rule's --queue-num).
    #[arg(long, default_value_t = 0)]
    queue: u16,
    /// Append one JSON line per new connection to this file.
    #[arg(long)]
    log: PathBuf,
    /// Bytes of each packet copied to user space (headers are enough for the 5-tuple).
    #[arg(long, default_value_t = 128)]
    copy_range: u16,
    /// Packets the kernel holds for us before it drops new ones (fail-closed when full).
    #[arg(long, default_value_t = 4096)]
    queue_len: u32,
    /// Connections remembered to log each one once.
    #[arg(long, default_value_t = 65536)]
    remember: usize,
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_kick(_sig: libc::c_int) {
    // Exists only so that a blocking recv returns EINTR.
}

/// Install `handler` for `sig` WITHOUT SA_RESTART, so a blocking recv returns EINTR.
fn install(
    sig: libc::c_int,
    name: &'static str,
    handler: extern "C" fn(libc::c_int),
) -> Result<()> {
    // Safety: `sa` is fully initialised (zeroed, then the handler, an empty mask
    // and flags 0) before sigaction reads it; the handlers only touch atomics.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(NfqError::Signal {
            signal: name,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// A signal can land between the loop's STOP check and the recv that then
/// blocks until the next packet. This thread closes that window: once STOP is
/// set it pokes the packet thread with SIGUSR1 until the process exits.
fn start_kicker(target: libc::pthread_t) {
    thread::spawn(move || {
        // Safety: blocking signals in this thread only changes which thread the
        // kernel delivers process signals to; `set` is initialised by sigemptyset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        loop {
            thread::sleep(Duration::from_millis(50));
            if STOP.load(Ordering::SeqCst) {
                // Safety: `target` is the main thread, which outlives this
                // thread (the process exits when main returns).
                unsafe {
                    libc::pthread_kill(target, libc::SIGUSR1);
                }
            }
        }
    });
}

fn event(value: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    // stdout closed: nobody is listening for events, the packet work goes on.
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

struct Counters {
    packets: u64,
    unparsed: u64,
}

fn run(args: &Args) -> Result<Counters> {
    install(libc::SIGTERM, "SIGTERM", on_signal)?;
    install(libc::SIGINT, "SIGINT", on_signal)?;
    install(libc::SIGUSR1, "SIGUSR1", on_kick)?;
    // Safety: pthread_self has no preconditions.
    start_kicker(unsafe { libc::pthread_self() });

    let mut log = ConnLog::open(&args.log)?;
    let q = args.queue;
    let bind_err = |source| NfqError::Bind { queue: q, source };
    let mut queue = Queue::open().map_err(bind_err)?;
    queue.bind(q).map_err(bind_err)?;
    queue.set_copy_range(q, args.copy_range).map_err(bind_err)?;
    queue
        .set_queue_max_len(q, args.queue_len)
        .map_err(bind_err)?;
    event(json!({
        "event": "listening",
        "queue": q,
        "pid": std::process::id(),
        "log": args.log,
    }));

    let mut seen = SeenSet::new(args.remember);
    let mut counters = Counters {
        packets: 0,
        unparsed: 0,
    };
    while !STOP.load(Ordering::SeqCst) {
        let mut msg = match queue.recv() {
            Ok(msg) => msg,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(NfqError::Queue {
                    queue: q,
                    what: "receiving a packet",
                    source,
                })
            }
        };
        counters.packets += 1;
        match parse_five_tuple(msg.get_payload()) {
            Ok(tuple) => {
                if seen.first_time(&tuple) {
                    log.write(&LogLine::new(SystemTime::now(), &tuple, q))?;
                }
            }
            Err(_) => counters.unparsed += 1,
        }
        // Accept everything for now: the verdict is where the IPS will decide.
        msg.set_verdict(Verdict::Accept);
        queue.verdict(msg).map_err(|source| NfqError::Queue {
            queue: q,
            what: "sending a verdict",
            source,
        })?;
    }
    // Best effort: closing the socket unbinds the queue anyway.
    let _ = queue.unbind(q);
    event(json!({
        "event": "stopped",
        "queue": q,
        "signal": STOP_SIGNAL.load(Ordering::SeqCst),
        "packets": counters.packets,
        "connections": log.written,
        "unparsed": counters.unparsed,
    }));
    Ok(counters)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        event(json!({"event": "error", "message": e.to_string()}));
        eprintln!("secperf-nfq: error: {e}");
        std::process::exit(1);
    }
}
