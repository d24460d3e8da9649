//! secperf-nfq: bind an NFQUEUE, give every packet a verdict, log each new connection.
//!
//! With `--rules FILE.json` every queued packet's payload is matched against IPS
//! signatures: a matching `drop` rule drops it, `alert` rules count it. With
//! `--packet-socket IFACE` there is no queue: the same matcher reads every packet
//! arriving on IFACE (a mirror of the DUT's traffic) and only counts (the IDS).
//!
//! stdout carries JSON event lines: `listening` once the queue (or socket) is
//! bound (callers poll for it instead of sleeping), `stats` on SIGUSR2, `stopped`
//! with counters after SIGTERM or SIGINT, `error` before a non-zero exit. The
//! last `stats`/`stopped` object is also written to `--stats FILE`.

use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use clap::Parser;
use nfq::{Queue, Verdict};
use serde_json::json;

use secperf_nfq::{
    parse_five_tuple, ConnLog, IpsCounters, LogLine, Matcher, NfqError, Reassembly, Result, SeenSet,
};

/// Set by the signal handler; read by the packet loop.
static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Set by SIGUSR2: print (and write) the counters now.
static STATS: AtomicBool = AtomicBool::new(false);

#[derive(Parser, Debug)]
#[command(name = "secperf-nfq", version, about)]
struct Args {
    /// The NFQUEUE number to bind (the rule's --queue-num).
    #[arg(long, default_value_t = 0)]
    queue: u16,
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
    /// Packets the kernel holds for us before it drops new ones (fail-closed when full).
    #[arg(long, default_value_t = 4096)]
    queue_len: u32,
    /// Bounded per-flow TCP reassembly: bytes of each flow direction matched as
    /// one stream (0: off, every packet matched alone). Needs --rules.
    #[arg(long, default_value_t = 0)]
    reassembly_bytes: u64,
    /// Flow directions reassembled at once (a flow beyond it is matched packet by packet).
    #[arg(long, default_value_t = 4096)]
    reassembly_flows: usize,
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
            libc::sigaddset(&mut set, libc::SIGUSR2);
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

/// Counters a run reports beside the matcher's.
#[derive(Default)]
struct Counters {
    packets: u64,
    unparsed: u64,
    /// recv failed with ENOBUFS: the netlink socket overflowed, messages were lost.
    enobufs: u64,
}

fn report(
    what: &str,
    mode: &str,
    args: &Args,
    counters: &Counters,
    ips: Option<(&IpsCounters, &Matcher)>,
    extra: serde_json::Value,
) -> Result<()> {
    let mut v = json!({
        "event": what,
        "mode": mode,
        "signal": STOP_SIGNAL.load(Ordering::SeqCst),
        "packets": counters.packets,
        "unparsed": counters.unparsed,
        "enobufs": counters.enobufs,
    });
    let obj = v.as_object_mut().expect("a json object");
    if let Some((ips, m)) = ips {
        let mut v = ips.to_json();
        if let (Some(c), Some(o)) = (m.reassembly_counters(), v.as_object_mut()) {
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

/// The kernel's own counters for one queue (/proc/net/netfilter/nfnetlink_queue,
/// per network namespace): packets dropped because the queue was full
/// (queue_dropped) and because sending to us failed (user_dropped).
fn queue_overflows(queue: u16) -> serde_json::Value {
    let Ok(text) = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue") else {
        return json!({});
    };
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() >= 7 && f[0] == u64::from(queue) {
            return json!({"queue_total": f[2], "queue_dropped": f[5], "user_dropped": f[6]});
        }
    }
    json!({})
}

fn install_all() -> Result<()> {
    install(libc::SIGTERM, "SIGTERM", on_signal)?;
    install(libc::SIGINT, "SIGINT", on_signal)?;
    install(libc::SIGUSR1, "SIGUSR1", on_kick)?;
    install(libc::SIGUSR2, "SIGUSR2", on_stats)?;
    // Safety: pthread_self has no preconditions.
    start_kicker(unsafe { libc::pthread_self() });
    Ok(())
}

fn reassembly(args: &Args) -> Option<Reassembly> {
    (args.reassembly_bytes > 0).then_some(Reassembly {
        bytes: args.reassembly_bytes,
        flows: args.reassembly_flows,
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

fn run(args: &Args) -> Result<()> {
    install_all()?;
    let mut matcher = load_matcher(args)?;
    if let Some(iface) = &args.packet_socket {
        let Some(m) = matcher.as_mut() else {
            return Err(NfqError::Socket {
                iface: iface.clone(),
                what: "IDS mode needs --rules",
                source: std::io::Error::from(ErrorKind::InvalidInput),
            });
        };
        return run_sensor(args, iface, m);
    }
    let mut log = match &args.log {
        Some(path) => Some(ConnLog::open(path)?),
        None => None,
    };
    let q = args.queue;
    let copy_range = args
        .copy_range
        .unwrap_or(if matcher.is_some() { 65535 } else { 128 });
    let bind_err = |source| NfqError::Bind { queue: q, source };
    let mut queue = Queue::open().map_err(bind_err)?;
    queue.bind(q).map_err(bind_err)?;
    queue.set_copy_range(q, copy_range).map_err(bind_err)?;
    queue
        .set_queue_max_len(q, args.queue_len)
        .map_err(bind_err)?;
    event(json!({
        "event": "listening",
        "mode": "nfq",
        "queue": q,
        "pid": std::process::id(),
        "log": args.log,
        "rules": matcher.as_ref().map(|m| m.rule_count()),
        "patterns": matcher.as_ref().map(|m| m.pattern_count()),
        "reassembly": reassembly(args).map(|b| json!({"bytes": b.bytes, "flows": b.flows})),
    }));

    let mut seen = SeenSet::new(args.remember);
    let mut counters = Counters::default();
    let mut ips = IpsCounters::default();
    let written = |log: &Option<ConnLog>| log.as_ref().map(|l| l.written);
    while !STOP.load(Ordering::SeqCst) {
        if STATS.swap(false, Ordering::SeqCst) {
            let extra =
                json!({"queue": q, "connections": written(&log), "kernel": queue_overflows(q)});
            report(
                "stats",
                "nfq",
                args,
                &counters,
                matcher.as_ref().map(|m| (&ips, m)),
                extra,
            )?;
        }
        let mut msg = match queue.recv() {
            Ok(msg) => msg,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                counters.enobufs += 1;
                continue;
            }
            Err(source) => {
                return Err(NfqError::Queue {
                    queue: q,
                    what: "receiving a packet",
                    source,
                })
            }
        };
        counters.packets += 1;
        let pkt = msg.get_payload();
        if let Some(log) = log.as_mut() {
            match parse_five_tuple(pkt) {
                Ok(tuple) => {
                    if seen.first_time(&tuple) {
                        log.write(&LogLine::new(SystemTime::now(), &tuple, q))?;
                    }
                }
                Err(_) => counters.unparsed += 1,
            }
        }
        let verdict = match matcher.as_mut() {
            Some(m) => {
                let out = m.check(pkt);
                ips.record(pkt.len(), &out);
                if out.drop {
                    Verdict::Drop
                } else {
                    Verdict::Accept
                }
            }
            None => Verdict::Accept,
        };
        msg.set_verdict(verdict);
        queue.verdict(msg).map_err(|source| NfqError::Queue {
            queue: q,
            what: "sending a verdict",
            source,
        })?;
    }
    // Best effort: closing the socket unbinds the queue anyway.
    let kernel = queue_overflows(q);
    let _ = queue.unbind(q);
    let extra = json!({"queue": q, "connections": written(&log), "kernel": kernel});
    report(
        "stopped",
        "nfq",
        args,
        &counters,
        matcher.as_ref().map(|m| (&ips, m)),
        extra,
    )
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

    /// Receive one packet; Ok(None) when interrupted or for our own outgoing packets.
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
            if e.kind() == ErrorKind::Interrupted {
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
    let mut counters = Counters::default();
    let mut ips = IpsCounters::default();
    // GRO-merged packets on a mirror can be far larger than the MTU.
    let mut buf = vec![0u8; 256 * 1024];
    while !STOP.load(Ordering::SeqCst) {
        if STATS.swap(false, Ordering::SeqCst) {
            sock.update_stats();
            let extra =
                json!({"interface": iface, "sensor_seen": sock.seen, "sensor_drops": sock.drops});
            report(
                "stats",
                "ids",
                args,
                &counters,
                Some((&ips, matcher)),
                extra,
            )?;
        }
        let Some(pkt) = sock.recv(&mut buf)? else {
            continue;
        };
        counters.packets += 1;
        let mut out = matcher.check(pkt);
        // The sensor never drops traffic: a drop rule is an alert here.
        out.drop = false;
        ips.record(pkt.len(), &out);
    }
    sock.update_stats();
    let extra = json!({"interface": iface, "sensor_seen": sock.seen, "sensor_drops": sock.drops});
    report(
        "stopped",
        "ids",
        args,
        &counters,
        Some((&ips, matcher)),
        extra,
    )
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        event(json!({"event": "error", "message": e.to_string()}));
        eprintln!("secperf-nfq: error: {e}");
        std::process::exit(1);
    }
}
