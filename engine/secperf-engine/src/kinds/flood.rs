//! The `flood` kind: a one-way packet flood of hand-made packets (so sources
//! can be spread over a range), as Ethernet frames on an AF_PACKET socket
//! (packet_tx, frame) or as IP packets on a raw IPv4 socket, sent in sendmmsg
//! batches and paced by a token bucket against an absolute schedule
//! (packet k is due at t0 + k/rate), so the rate does not drift. Always
//! bounded by rate, count and duration; SIGINT ends it early with its result
//! (`stopped_by: "signal"`), so a caller can end a flood when the test it runs
//! beside is done.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{EngineError, Result};
use crate::kinds::base::{no_server, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::rt::cpu::{self, CpuProbe};
use crate::rt::shared::Shared;
use crate::rt::{packet_tx, sys};
use crate::spec::{FloodSender, FloodSpec, KindSpec};
use crate::wire::frame::{self, Framer};
use crate::wire::packet::{Crafter, Fields, Rng};
use crate::wire::record::{
    Clock, FloodInterval, FloodResult, FloodStart, Record, Sink, FORMAT, VERSION,
};

/// Largest sendmmsg batch.
pub const BATCH_MAX: usize = 64;

/// Packets per sendmmsg call for a rate: one at low rates so packets are
/// spread evenly, growing so there are at most ~10 000 calls a second.
pub fn batch_for(rate_pps: u64) -> usize {
    ((rate_pps / 10_000) as usize).clamp(1, BATCH_MAX)
}

/// A raw IPv4 socket that takes whole IP packets (IPPROTO_RAW implies IP_HDRINCL).
fn raw_socket() -> Result<OwnedFd> {
    // Safety: socket() has no memory effects; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(EngineError::Io {
            context: "cannot open a raw socket for the flood (needs root or CAP_NET_RAW; run the flood as root inside the testbed)".into(),
            source: e,
        });
    }
    // Safety: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The local address the route to `target` uses.
fn route_source(target: Ipv4Addr, port: u16) -> Result<Ipv4Addr> {
    let s = UdpSocket::bind("0.0.0.0:0").map_err(EngineError::io("cannot open a UDP socket"))?;
    s.connect(SocketAddr::new(IpAddr::V4(target), port))
        .map_err(EngineError::io(format!(
            "no route to the flood target {} (give `sources`, or fix the testbed's routes)",
            target
        )))?;
    match s
        .local_addr()
        .map_err(EngineError::io("cannot read the local address"))?
    {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(_) => Err(EngineError::Internal(
            "an IPv4 route gave an IPv6 source: report this bug".into(),
        )),
    }
}

/// The destination address every message of a batch carries.
enum Dest {
    Ip(libc::sockaddr_in),
    /// The packet socket's bound interface.
    Link,
}

/// sendmmsg over a fixed set of buffers, its message headers built once.
struct Batch {
    bufs: Vec<Vec<u8>>,
    /// Boxed so the pointers in `msgs` stay valid when the Batch moves.
    _dst: Box<Dest>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(n: usize, len: usize, dst: Dest) -> Batch {
        let mut bufs = vec![vec![0u8; len]; n];
        let mut dst = Box::new(dst);
        let (name, namelen): (*mut libc::c_void, usize) = match dst.as_mut() {
            Dest::Ip(a) => (
                (a as *mut libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>(),
            ),
            // No address: the socket's bound interface (its cached device,
            // no lookup per frame); the kernel reads the protocol from the
            // frame's EtherType.
            Dest::Link => (std::ptr::null_mut(), 0),
        };
        let mut iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        let msgs = iov
            .iter_mut()
            .map(|v| {
                // Safety: msghdr is plain old data, so all-zero is a valid value.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_name = name;
                h.msg_namelen = namelen as libc::socklen_t;
                h.msg_iov = v;
                h.msg_iovlen = 1;
                libc::mmsghdr {
                    msg_hdr: h,
                    msg_len: 0,
                }
            })
            .collect();
        Batch {
            bufs,
            _dst: dst,
            iov,
            msgs,
        }
    }

    /// Sends the first `n` buffers; returns how many went, or the error.
    fn send(&mut self, fd: i32, n: usize) -> io::Result<usize> {
        let n = n.min(self.msgs.len());
        // The buffers were written through `&mut` since the headers were built:
        // point the iovecs at them afresh, so the pointers the kernel reads are
        // derived after the last write (n pointer stores, nothing per byte).
        let parts = self.msgs.iter_mut().zip(self.iov.iter_mut());
        for ((m, v), b) in parts.zip(self.bufs.iter_mut()).take(n) {
            v.iov_base = b.as_mut_ptr().cast();
            m.msg_hdr.msg_iov = v;
        }
        // Safety: every msghdr points at an iovec, and every iovec at a
        // buffer of `len` bytes, in heap allocations this Batch owns and
        // never resizes; the address is boxed likewise.
        let rc = unsafe { libc::sendmmsg(fd, self.msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// How the packets of a batch are written: whole IP packets for the raw
/// socket, or patches of prebuilt frames for the packet socket.
enum Writer {
    Raw(Crafter),
    Frame(Framer),
}

impl Writer {
    fn write(&self, buf: &mut [u8], f: &Fields) {
        match self {
            Writer::Raw(c) => c.write(buf, f),
            Writer::Frame(fr) => fr.patch(buf, f),
        }
    }
}

/// The sender that runs: its socket, buffers, writer, name and why.
struct Tx {
    fd: OwnedFd,
    batch: Batch,
    writer: Writer,
    sender: &'static str,
    note: String,
}

fn raw_tx(f: &FloodSpec, note: String) -> Result<Tx> {
    let crafter = Crafter::new(f.flood, f.target, f.payload_size);
    // Safety: sockaddr_in is plain old data, so all-zero is a valid value.
    let mut dst: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    dst.sin_family = libc::AF_INET as libc::sa_family_t;
    dst.sin_addr.s_addr = u32::from(f.target).to_be();
    Ok(Tx {
        fd: raw_socket()?,
        batch: Batch::new(BATCH_MAX, crafter.len(), Dest::Ip(dst)),
        writer: Writer::Raw(crafter),
        sender: FloodSender::Raw.name(),
        note,
    })
}

fn packet_tx(f: &FloodSpec, local: Ipv4Addr, first: &Fields) -> std::result::Result<Tx, String> {
    let crafter = Crafter::new(f.flood, f.target, f.payload_size);
    let frame_len = crafter.len() + frame::ETH_HEADER;
    let link = packet_tx::find_link(f.target, local, frame_len)?;
    let sock = packet_tx::open(&link).map_err(|e| format!("cannot open a packet socket: {}", e))?;
    let framer = Framer::new(crafter, f.flood, link.dst_mac, link.src_mac);
    let mut batch = Batch::new(BATCH_MAX, framer.len(), Dest::Link);
    for b in batch.bufs.iter_mut() {
        framer.build(b, first);
    }
    let bypass = if sock.qdisc_bypass {
        "qdisc bypassed"
    } else {
        "through the qdisc"
    };
    Ok(Tx {
        fd: sock.fd,
        batch,
        writer: Writer::Frame(framer),
        sender: FloodSender::Packet.name(),
        note: format!("{}, {}", link.describe(), bypass),
    })
}

/// Picks the sender the spec asks for: `auto` falls back to raw and says why.
fn choose_tx(f: &FloodSpec, local: Ipv4Addr, first: &Fields) -> Result<Tx> {
    match f.sender {
        FloodSender::Raw => raw_tx(f, "raw IP socket, as asked".into()),
        FloodSender::Packet => packet_tx(f, local, first).map_err(|why| {
            EngineError::spec(
                "sender",
                format!(
                    "sender \"packet\" cannot run here ({}): use \"auto\" to fall back to the raw IP socket, or \"raw\"",
                    why
                ),
            )
        }),
        FloodSender::Auto => match packet_tx(f, local, first) {
            Ok(tx) => Ok(tx),
            Err(why) => raw_tx(f, format!("raw IP socket: no packet sender because {}", why)),
        },
    }
}

/// Chooses each packet's variable fields.
struct Varier {
    rng: Rng,
    sources: (u32, u32),
    next_src: u32,
    ports: (u16, u16),
    next_port: u16,
    ip_id: u16,
    seq: u32,
}

impl Varier {
    fn next(&mut self) -> Fields {
        let src = Ipv4Addr::from(self.next_src);
        self.next_src = if self.next_src >= self.sources.1 {
            self.sources.0
        } else {
            self.next_src + 1
        };
        let dport = self.next_port;
        self.next_port = if self.next_port >= self.ports.1 {
            self.ports.0
        } else {
            self.next_port + 1
        };
        let r = self.rng.next_u64();
        self.ip_id = self.ip_id.wrapping_add(1);
        self.seq = self.seq.wrapping_add(1);
        Fields {
            src,
            // Random source port in the dynamic range (49152–65535).
            sport: 49152 + (r as u16 % 16384),
            dport,
            ip_id: self.ip_id,
            seq: (r >> 32) as u32,
        }
    }
}

/// Sleeps end within ~1 µs of when asked instead of the default 50 µs slack,
/// so that packets at low rates leave on their slot.
fn tight_timer_slack() {
    // Safety: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
}

fn is_soft(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EPERM) | Some(libc::ECONNREFUSED)
    )
}

/// Runs the flood `f`; `began` is when the command started.
fn run(f: &FloodSpec, began: Instant, sink: &mut dyn Sink) -> Result<FloodResult> {
    f.check_flood_targets()?;
    let local = route_source(f.target, f.port_range.0)?;
    let sources = match f.source_cidr {
        Some(c) => c.hosts(),
        None => (u32::from(local), u32::from(local)),
    };
    let plen = f.packet_size();
    let batch = batch_for(f.rate_pps);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9)
        ^ u64::from(std::process::id());
    let mut var = Varier {
        rng: Rng::new(seed),
        sources,
        next_src: sources.0,
        ports: f.port_range,
        next_port: f.port_range.0,
        ip_id: seed as u16,
        seq: 0,
    };
    let mut tx = choose_tx(f, local, &var.next())?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let sigint = signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone())
        .map_err(EngineError::io("cannot install the SIGINT handler"))?;
    let fd = tx.fd.as_raw_fd();
    tight_timer_slack();

    let rate = f.rate_pps as f64;
    // Bucket depth: 50 ms of packets or two batches, whichever is more: a
    // sender descheduled on a busy machine catches up, one stalled longer forfeits.
    let depth = ((rate * 0.050) as u64).max(2 * batch as u64);
    let duration = Duration::from_secs_f64(f.duration);
    let probe = CpuProbe::new(&f.cpu_groups);
    let cpu0 = sys::process_cpu();
    let cpu_start = probe.read()?;
    let t0 = Instant::now();
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    sink.emit(Record::FloodStart(Box::new(FloodStart {
        t: began.elapsed().as_secs_f64(),
        format: FORMAT,
        engine: "secperf-engine",
        version: VERSION,
        spec: f.to_value(),
        clock: Clock {
            realtime_ns,
            monotonic_ns: sys::monotonic_ns(),
        },
        local: f.sources.clone().unwrap_or_else(|| local.to_string()),
        data: SocketAddr::new(IpAddr::V4(f.target), f.port_range.0).to_string(),
        packet_size: plen,
        batch,
        sender: tx.sender,
        sender_note: tx.note.clone(),
        host: cpu::host(),
    })));

    let mut sent: u64 = 0;
    let mut forfeited: u64 = 0;
    let mut send_errors: u64 = 0;
    let mut per_second: Vec<u64> = Vec::new();
    let mut last_sent_at = 0.0f64;
    let iv = f.interval;
    let mut next_iv = if iv > 0.0 { iv } else { f64::INFINITY };
    let mut iv_start = (0.0f64, 0u64);
    let end_s = duration.as_secs_f64();
    let stopped_by;
    loop {
        let now = t0.elapsed().as_secs_f64();
        while now >= next_iv && next_iv <= end_s + 1e-9 {
            let span = next_iv - iv_start.0;
            let pk = sent - iv_start.1;
            sink.emit(Record::FloodInterval(FloodInterval {
                t: began.elapsed().as_secs_f64(),
                t_start: iv_start.0,
                t_end: next_iv,
                warmup: false,
                packets: pk,
                bytes: pk * plen as u64,
                rate: pk as f64 / span,
                bits_per_second: (pk * plen as u64) as f64 * 8.0 / span,
            }));
            iv_start = (next_iv, sent);
            next_iv += iv;
        }
        if now >= end_s {
            stopped_by = "duration";
            break;
        }
        if sent >= f.count {
            stopped_by = "count";
            break;
        }
        if interrupted.load(Ordering::Relaxed) {
            stopped_by = "signal";
            break;
        }
        // Packets due by now under the schedule (packet k at k/rate).
        let mut due = ((now * rate).floor() as u64 + 1).saturating_sub(forfeited);
        if due > sent + depth {
            forfeited += due - sent - depth;
            due = sent + depth;
        }
        let due = due.min(f.count);
        let ready = due.saturating_sub(sent);
        if ready >= batch as u64 || (ready > 0 && due == f.count) {
            let n = (ready as usize).min(BATCH_MAX);
            for b in tx.batch.bufs[..n].iter_mut() {
                tx.writer.write(b, &var.next());
            }
            match tx.batch.send(fd, n) {
                Ok(k) => {
                    let at = t0.elapsed().as_secs_f64();
                    // A batch that began before the end but finished after it
                    // belongs to the last second.
                    let last_bin = (end_s.ceil() as usize).max(1) - 1;
                    let sec = (at as usize).min(last_bin);
                    if per_second.len() <= sec {
                        per_second.resize(sec + 1, 0);
                    }
                    per_second[sec] += k as u64;
                    sent += k as u64;
                    last_sent_at = at;
                }
                Err(e) if is_soft(&e) => {
                    // The packets are lost, not retried: the schedule moves on.
                    send_errors += n as u64;
                    forfeited += n as u64;
                }
                Err(e) => {
                    return Err(EngineError::Io {
                        context: format!("sending the flood to {}", f.target),
                        source: e,
                    })
                }
            }
            continue;
        }
        // Sleep until the next batch is due, an interval ends, or the end.
        let next_due = (sent + forfeited + batch as u64 - 1) as f64 / rate;
        let wake = next_due.min(next_iv).min(end_s);
        let now = t0.elapsed().as_secs_f64();
        if wake > now {
            std::thread::sleep(Duration::from_secs_f64(wake - now));
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    signal_hook::low_level::unregister(sigint);
    // The last interval ends where the flood did (a count can stop it early).
    if iv > 0.0 && iv_start.0 < end_s - 1e-9 && elapsed > iv_start.0 {
        let t_end = elapsed.min(end_s);
        let span = (t_end - iv_start.0).max(1e-9);
        let pk = sent - iv_start.1;
        sink.emit(Record::FloodInterval(FloodInterval {
            t: began.elapsed().as_secs_f64(),
            t_start: iv_start.0,
            t_end,
            warmup: false,
            packets: pk,
            bytes: pk * plen as u64,
            rate: pk as f64 / span,
            bits_per_second: (pk * plen as u64) as f64 * 8.0 / span,
        }));
    }
    // Stopped by count: the flood lasted up to the end of its last packet's slot;
    // by a signal: until now.
    let duration_s = match stopped_by {
        "count" => (last_sent_at + 1.0 / rate).min(elapsed).max(1e-9),
        "signal" => elapsed.min(end_s).max(1e-9),
        _ => end_s,
    };
    let (machine_cpu, host_cpu) = probe.window(&cpu_start, &probe.read()?);
    let achieved = sent as f64 / duration_s;
    let bytes = sent * plen as u64;
    let res = FloodResult {
        t: began.elapsed().as_secs_f64(),
        kind: "flood",
        flood: f.flood.name(),
        target: f.target.to_string(),
        packets: sent,
        bytes,
        packet_size: plen,
        asked_pps: f.rate_pps,
        rate_pps: achieved,
        rate_error_pct: (achieved - rate) / rate * 100.0,
        bits_per_second: bytes as f64 * 8.0 / duration_s,
        duration_s,
        stopped_by,
        per_second,
        forfeited,
        send_errors,
        batch,
        sender: tx.sender,
        sender_note: tx.note.clone(),
        cpu: sys::process_cpu().minus(cpu0),
        machine_cpu,
        host_cpu,
    };
    sink.emit(Record::FloodResult(Box::new(res.clone())));
    Ok(res)
}

/// Kind `flood`: one-way, sent by `run` alone (no engine server).
pub struct Flood {
    spec: FloodSpec,
}

impl Flood {
    pub fn new(spec: FloodSpec) -> Flood {
        Flood { spec }
    }
}

impl Kind for Flood {
    fn serve(&self, _: &ServerEnv, _: &Arc<Shared>) -> Result<ServerSetup> {
        Err(no_server(
            "kind flood has no server side: run it with `secperf-engine run` (no `serve` needed)",
        ))
    }

    /// Floods ignore --allow-any-target: they never leave the testbed.
    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        run(&self.spec, opts.began, sink).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::batch_for;

    #[test]
    fn batch_grows_with_rate() {
        assert_eq!(batch_for(1_000), 1);
        assert_eq!(batch_for(10_000), 1);
        assert_eq!(batch_for(100_000), 10);
        assert_eq!(batch_for(10_000_000), 64);
    }
}
