//! secperf-nfq: bind NFQUEUEs, give every packet a verdict, log each new connection.
//!
//! With `--rules FILE.json` every queued packet's payload is matched against IPS
//! signatures: a matching `drop` rule drops it, `alert` rules count it. With
//! `--packet-socket IFACE` there is no queue: the same matcher reads every packet
//! arriving on IFACE (a mirror of the DUT's traffic) and only counts (the IDS).
//!
//! `--queues N` binds queues `--queue` .. `--queue`+N-1 (the rule's
//! `--queue-balance`), one thread each; packets are read in batches and their
//! verdicts sent in one call per batch (nfqueue.rs).
//!
//! stdout carries JSON event lines: `listening` once every queue (or the socket)
//! is bound (callers poll for it instead of sleeping), `stats` on SIGUSR2,
//! `stopped` with counters after SIGTERM or SIGINT, `error` before a non-zero
//! exit. The last `stats`/`stopped` object is also written to `--stats FILE`.

use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use secperf_nfq::nfqueue::{QueueConfig, QueueSocket, F_FAIL_OPEN, F_GSO};
use secperf_nfq::worker::{Worker, WorkerStats};
use secperf_nfq::{ConnLog, IpsCounters, Matcher, NfqError, Reassembly, Result, SeenSet};

/// Set by the signal handler; read by the loops.
static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Set by SIGUSR2: print (and write) the counters now.
static STATS: AtomicBool = AtomicBool::new(false);

/// How often the main thread looks at the flags.
const TICK: Duration = Duration::from_millis(10);

#[derive(Parser, Debug)]
#[command(name = "secperf-nfq", version, about)]
struct Args {
    /// The first NFQUEUE number to bind (the rule's --queue-num, or the first of
    /// its --queue-balance range).
    #[arg(long, default_value_t = 0)]
    queue: u16,
    /// Queues to bind, from --queue on, one thread each (the rule's
    /// --queue-balance QUEUE:QUEUE+N-1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    queues: u16,
    /// Append one JSON line per new connection to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// IPS signatures: the normalized JSON secperf writes from a rule file.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// IDS mode: read packets from a packet socket on this interface (no queue,
    /// no verdicts; needs --rules).
    #[arg(long)]
    packet_socket: Option<String>,
    /// Write the counters (the `stats`/`stopped` event) to this file.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Bytes of each packet copied to user space (default: 128, the headers, or
    /// 65535, the whole packet, with --rules).
    #[arg(long)]
    copy_range: Option<u16>,
    /// Packets each queue holds for us before the kernel drops new ones
    /// (fail-closed when full; with --fail-open it accepts them uninspected).
    #[arg(long, default_value_t = 4096)]
    queue_len: u32,
    /// Packets read (and verdicts sent) per system call, at most.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    batch: u32,
    /// Each queue socket's receive buffer in bytes (what the kernel may hold
    /// for us before it drops: `user_dropped`).
    #[arg(long, default_value_t = 16 << 20)]
    rcvbuf: usize,
    /// Do not ask for GSO packets whole (NFQA_CFG_F_GSO): the kernel then cuts
    /// them into wire-size packets before queueing them.
    #[arg(long)]
    no_gso: bool,
    /// A full queue accepts new packets uninspected instead of dropping them
    /// (NFQA_CFG_F_FAIL_OPEN). The rule's --queue-bypass is the other half:
    /// no daemon at all.
    #[arg(long)]
    fail_open: bool,
    /// Bounded per-flow TCP reassembly: bytes of each flow direction matched as
    /// one stream (0: off, every packet matched alone). Needs --rules.
    #[arg(long, default_value_t = 0)]
    reassembly_bytes: u64,
    /// Flow directions reassembled at once, per queue (a flow beyond it is
    /// matched packet by packet).
    #[arg(long, default_value_t = 4096)]
    reassembly_flows: usize,
    /// Bytes of each flow direction held out of order until the gap before them
    /// fills (0: none held, a gap restarts the flow's stream).
    #[arg(long, default_value_t = 65536)]
    reassembly_pending: u64,
    /// Connections remembered to log each one once.
    #[arg(long, default_value_t = 65536)]
    remember: usize,
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work here: two atomic stores.
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_stats(_sig: libc::c_int) {
    STATS.store(true, Ordering::SeqCst);
}

/// Install `handler` for `sig` WITHOUT SA_RESTART, so a blocking call returns EINTR.
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

fn install_all() -> Result<()> {
    install(libc::SIGTERM, "SIGTERM", on_signal)?;
    install(libc::SIGINT, "SIGINT", on_signal)?;
    install(libc::SIGUSR2, "SIGUSR2", on_stats)?;
    Ok(())
}

/// Blocks (`how` = SIG_BLOCK) or unblocks the daemon's signals in this thread:
/// the queue threads are started with them blocked, so only the main thread
/// is ever interrupted.
fn mask_signals(how: libc::c_int) {
    // Safety: `set` is initialised by sigemptyset before use; pthread_sigmask
    // only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGUSR2] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

fn event(value: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    // stdout closed: nobody is listening for events, the packet work goes on.
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn report(
    what: &str,
    mode: &str,
    args: &Args,
    st: &WorkerStats,
    ips: Option<&IpsCounters>,
    extra: serde_json::Value,
) -> Result<()> {
    let mut v = json!({
        "event": what,
        "mode": mode,
        "signal": STOP_SIGNAL.load(Ordering::SeqCst),
        "packets": st.packets,
        "unparsed": st.unparsed,
        "enobufs": st.enobufs,
    });
    let obj = v.as_object_mut().expect("a json object");
    if let Some(ips) = ips {
        let mut v = ips.to_json();
        if let (Some(c), Some(o)) = (&st.reassembly, v.as_object_mut()) {
            o.insert("reassembly".into(), c.to_json(reassembly(args)));
        }
        obj.insert("ips".into(), v);
    }
    if let Some(extra) = extra.as_object() {
        for (k, val) in extra {
            obj.insert(k.clone(), val.clone());
        }
    }
    event(v.clone());
    if let Some(path) = &args.stats {
        std::fs::write(path, format!("{v}\n")).map_err(|source| NfqError::Log {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The kernel's own counters for queues first..first+n-1
/// (/proc/net/netfilter/nfnetlink_queue, per network namespace), summed, and
/// each queue's: packets waiting in it now (queue_total), ever queued to it
/// (queued: its id sequence), dropped because it was full (queue_dropped) and
/// because sending to us failed (user_dropped).
fn queue_overflows(first: u16, n: u16) -> serde_json::Value {
    let Ok(text) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue") else {
        return json!({});
    };
    let last = u64::from(first) + u64::from(n) - 1;
    let (mut total, mut queued, mut dropped, mut user) = (0u64, 0u64, 0u64, 0u64);
    let mut each = Vec::new();
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() >= 8 && (u64::from(first)..=last).contains(&f[0]) {
            total += f[2];
            dropped += f[5];
            user += f[6];
            queued += f[7];
            each.push(json!({"queue": f[0], "queue_total": f[2], "queued": f[7],
                             "queue_dropped": f[5], "user_dropped": f[6]}));
        }
    }
    if each.is_empty() {
        return json!({});
    }
    json!({"queue_total": total, "queued": queued, "queue_dropped": dropped,
           "user_dropped": user, "queues": each})
}

fn reassembly(args: &Args) -> Option<Reassembly> {
    (args.reassembly_bytes > 0).then_some(Reassembly {
        bytes: args.reassembly_bytes,
        flows: args.reassembly_flows,
        pending: args.reassembly_pending,
    })
}

fn load_matcher(args: &Args) -> Result<Option<Matcher>> {
    match &args.rules {
        Some(path) => {
            let mut m = Matcher::load(path)?;
            if let Some(bound) = reassembly(args) {
                m.enable_reassembly(bound)?;
            }
            Ok(Some(m))
        }
        None => Ok(None),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn total(stats: &[Arc<Mutex<WorkerStats>>]) -> WorkerStats {
    let mut t = WorkerStats::default();
    for s in stats {
        t.merge(&lock(s));
    }
    t
}

fn run(args: &Args) -> Result<()> {
    install_all()?;
    let matcher = load_matcher(args)?;
    if let Some(iface) = &args.packet_socket {
        let Some(mut m) = matcher else {
            return Err(NfqError::Socket {
                iface: iface.clone(),
                what: "IDS mode needs --rules",
                source: std::io::Error::from(ErrorKind::InvalidInput),
            });
        };
        return run_sensor(args, iface, &mut m);
    }
    let log = match &args.log {
        Some(path) => Some(Arc::new(Mutex::new(ConnLog::open(path)?))),
        None => None,
    };
    let copy_range = args
        .copy_range
        .unwrap_or(if matcher.is_some() { 65535 } else { 128 });
    let flags = if args.no_gso { 0 } else { F_GSO } | if args.fail_open { F_FAIL_OPEN } else { 0 };
    // Room for the netlink and queue headers around the copied bytes.
    let buf_size = usize::from(copy_range) + 1024;
    let mut workers = Vec::new();
    let mut rcvbuf = 0;
    for i in 0..args.queues {
        let q = args.queue.checked_add(i).ok_or_else(|| NfqError::Bind {
            queue: args.queue,
            source: std::io::Error::new(ErrorKind::InvalidInput, "queue numbers past 65535"),
        })?;
        let cfg = QueueConfig {
            queue: q,
            copy_range: u32::from(copy_range),
            max_len: args.queue_len,
            flags,
            mask: F_GSO | F_FAIL_OPEN,
        };
        let (sock, pending) = QueueSocket::open(&cfg, args.rcvbuf)
            .map_err(|source| NfqError::Bind { queue: q, source })?;
        rcvbuf = sock.rcvbuf();
        // Each queue's thread: its own scratch space and flows, the rules shared.
        let m = match &matcher {
            Some(m) => Some(m.fork()?),
            None => None,
        };
        workers.push((sock, pending, m));
    }
    event(json!({
        "event": "listening",
        "mode": "nfq",
        "queue": args.queue,
        "queues": args.queues,
        "pid": std::process::id(),
        "log": args.log,
        "rules": matcher.as_ref().map(|m| m.rule_count()),
        "patterns": matcher.as_ref().map(|m| m.pattern_count()),
        "reassembly": reassembly(args)
            .map(|b| json!({"bytes": b.bytes, "flows": b.flows, "pending": b.pending})),
        "batch": args.batch,
        "gso": !args.no_gso,
        "fail_open": args.fail_open,
        "copy_range": copy_range,
        "rcvbuf": rcvbuf,
    }));

    let stop = Arc::new(AtomicBool::new(false));
    let mut stats = Vec::new();
    let mut handles = Vec::new();
    mask_signals(libc::SIG_BLOCK);
    for (sock, pending, m) in workers {
        let shared = Arc::new(Mutex::new(WorkerStats::default()));
        stats.push(shared.clone());
        let w = Worker {
            sock,
            pending,
            matcher: m,
            log: log.clone(),
            seen: SeenSet::new(args.remember),
            batch: args.batch as usize,
            buf_size,
            stats: shared,
        };
        let stop = stop.clone();
        let name = format!("nfq-q{}", w.sock.queue);
        let h = thread::Builder::new()
            .name(name)
            .spawn(move || w.run(&stop))
            .map_err(|source| NfqError::Queue {
                queue: args.queue,
                what: "starting a queue thread",
                source,
            })?;
        handles.push(h);
    }
    mask_signals(libc::SIG_UNBLOCK);
    let written = |log: &Option<Arc<Mutex<ConnLog>>>| log.as_ref().map(|l| lock(l).written);
    let extra = |log: &Option<Arc<Mutex<ConnLog>>>| {
        let per_queue: Vec<u64> = stats.iter().map(|s| lock(s).packets).collect();
        json!({"queue": args.queue, "queues": args.queues, "connections": written(log),
               "per_queue_packets": per_queue,
               "kernel": queue_overflows(args.queue, args.queues)})
    };
    let ips_of = |t: &WorkerStats| matcher.as_ref().map(|_| t.ips.clone());
    let mut failed: Option<NfqError> = None;
    while !STOP.load(Ordering::SeqCst) {
        if STATS.swap(false, Ordering::SeqCst) {
            let t = total(&stats);
            report("stats", "nfq", args, &t, ips_of(&t).as_ref(), extra(&log))?;
        }
        if handles.iter().any(|h| h.is_finished()) {
            // A queue thread ended on an error: stop the others and say why.
            break;
        }
        thread::sleep(TICK);
    }
    stop.store(true, Ordering::SeqCst);
    let mut socks = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(sock)) => socks.push(sock),
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            Err(_) => {
                failed.get_or_insert(NfqError::Queue {
                    queue: args.queue,
                    what: "a queue thread panicked",
                    source: std::io::Error::other("panic"),
                });
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    // The kernel's counters while the queues are still bound; closing the
    // sockets then unbinds them.
    let kernel_extra = extra(&log);
    drop(socks);
    let t = total(&stats);
    let mut x = kernel_extra;
    if let Some(o) = x.as_object_mut() {
        o.insert("batches".into(), t.batches.into());
        o.insert("gso_packets".into(), t.gso.into());
        o.insert("truncated".into(), t.truncated.into());
        o.insert("verdict_errors".into(), t.verdict_errors.into());
    }
    report("stopped", "nfq", args, &t, ips_of(&t).as_ref(), x)
}

/// A packet socket bound to one interface (SOCK_DGRAM: packets from the IP header on).
struct PacketSocket {
    fd: libc::c_int,
    iface: String,
    /// Sensor drops read so far (PACKET_STATISTICS resets on every read).
    drops: u64,
    seen: u64,
}

impl PacketSocket {
    fn open(iface: &str) -> Result<PacketSocket> {
        let err = |what: &'static str| NfqError::Socket {
            iface: iface.to_string(),
            what,
            source: std::io::Error::last_os_error(),
        };
        let name = std::ffi::CString::new(iface).map_err(|_| NfqError::Socket {
            iface: iface.to_string(),
            what: "interface name",
            source: std::io::Error::from(ErrorKind::InvalidInput),
        })?;
        // Safety: name is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(err("no such interface"));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // Safety: plain socket(2) call; the fd is owned by PacketSocket and closed in Drop.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto)) };
        if fd < 0 {
            return Err(err("socket(AF_PACKET)"));
        }
        let sock = PacketSocket {
            fd,
            iface: iface.to_string(),
            drops: 0,
            seen: 0,
        };
        // Safety: sll is zeroed then filled; bind reads exactly size_of::<sockaddr_ll>() bytes.
        let rc = unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(err("bind"));
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // Safety: tv is a valid timeval and the length is its size. A receive
        // then wakes every 100 ms, so the loop sees its stop flag.
        if unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        } != 0
        {
            return Err(err("SO_RCVTIMEO"));
        }
        let size: libc::c_int = 8 << 20;
        // Safety: size is a live c_int for the duration of the call. Best effort:
        // a smaller buffer only means more sensor drops, which are counted.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(sock)
    }

    /// Receive one packet; Ok(None) when interrupted, after 100 ms without one, or
    /// for our own outgoing packets.
    fn recv<'a>(&self, buf: &'a mut [u8]) -> Result<Option<&'a [u8]>> {
        // Safety: buf and sll outlive the call; lengths passed match their sizes.
        let (n, sll) = unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            let n = libc::recvfrom(
                self.fd,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_TRUNC,
                &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                &mut len,
            );
            (n, sll)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(NfqError::Socket {
                iface: self.iface.clone(),
                what: "recv",
                source: e,
            });
        }
        if sll.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(None);
        }
        let n = (n as usize).min(buf.len());
        Ok(Some(&buf[..n]))
    }

    /// Add what the kernel counted since the last read (it resets on read).
    fn update_stats(&mut self) {
        // Safety: st is a plain struct of two u32 the kernel fills; len matches it.
        unsafe {
            let mut st: libc::tpacket_stats = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
            if libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            ) == 0
            {
                self.seen += u64::from(st.tp_packets);
                self.drops += u64::from(st.tp_drops);
            }
        }
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // Safety: fd was opened by us and is closed once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn run_sensor(args: &Args, iface: &str, matcher: &mut Matcher) -> Result<()> {
    let mut sock = PacketSocket::open(iface)?;
    event(json!({
        "event": "listening",
        "mode": "ids",
        "interface": iface,
        "pid": std::process::id(),
        "rules": matcher.rule_count(),
        "patterns": matcher.pattern_count(),
    }));
    let mut st = WorkerStats::default();
    // GRO-merged packets on a mirror can be far larger than the MTU.
    let mut buf = vec![0u8; 256 * 1024];
    while !STOP.load(Ordering::SeqCst) {
        if STATS.swap(false, Ordering::SeqCst) {
            sock.update_stats();
            st.reassembly = matcher.reassembly_counters();
            let extra =
                json!({"interface": iface, "sensor_seen": sock.seen, "sensor_drops": sock.drops});
            report("stats", "ids", args, &st, Some(&st.ips), extra)?;
        }
        let Some(pkt) = sock.recv(&mut buf)? else {
            continue;
        };
        st.packets += 1;
        let mut out = matcher.check(pkt);
        // The sensor never drops traffic: a drop rule is an alert here.
        out.drop = false;
        st.ips.record(pkt.len(), &out);
    }
    sock.update_stats();
    st.reassembly = matcher.reassembly_counters();
    let extra = json!({"interface": iface, "sensor_seen": sock.seen, "sensor_drops": sock.drops});
    report("stopped", "ids", args, &st, Some(&st.ips), extra)
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        event(json!({"event": "error", "message": e.to_string()}));
        eprintln!("secperf-nfq: error: {e}");
        std::process::exit(1);
    }
}
