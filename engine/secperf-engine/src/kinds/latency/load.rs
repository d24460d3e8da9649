//! Latency under load (`probe_every`): each direction's whole stream of
//! `rate_pps` frames leaves as hand-made Ethernet/IPv4/UDP frames on an
//! AF_PACKET socket (packet_tx, qdisc bypassed), sendmmsg batches paced
//! against an absolute schedule, spread over the (source, destination) pairs
//! of the emulated hosts; one frame in `probe_every` is a timestamped probe,
//! interleaved in the same paced stream as MoonGen interleaves its
//! timestamped packets, with software stamps instead of a NIC's.
//!
//! A probe asks for a kernel TX stamp with a per-message SO_TIMESTAMPING
//! control message (only probes are stamped); the stamp comes back on the
//! packet socket's error queue with a copy of the frame, whose payload names
//! the probe. As in `latency`, a later probe carries it (two-step); the
//! receiver is the same probe socket, which also counts the load frames
//! (marked `LOAD`) of the measured window, so `sent = received + lost` holds
//! for the load as for the probes.

use std::collections::VecDeque;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::rt::packet_tx::{self, Link};
use crate::rt::shared::{Shared, ThreadStats};
use crate::rt::tstamp;
use crate::spec::LatencySpec;
use crate::wire::control::LoadTx;
use crate::wire::frame::{ETHERTYPE_IPV4, ETH_HEADER};
use crate::wire::packet::{fold, sum16, IPV4_HEADER, UDP_HEADER};
use crate::wire::probe::{decode, encode, payload_len, write_load, Probe, Stamp, BACK_MAX, HEADER};

/// Largest sendmmsg batch.
const BATCH_MAX: usize = 64;
/// A TX stamp not back after this is given up (counted as missing).
const STAMP_WAIT_NS: u64 = 100_000_000;
/// PACKET_TX_TIMESTAMP (linux/if_packet.h): the error-queue cmsg type.
const PACKET_TX_TIMESTAMP: libc::c_int = 16;
/// The packet socket's receive buffer (it holds the error queue's stamps).
const ERRQ_RCVBUF: i32 = 4 << 20;

/// The addresses of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pair {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

/// Frames per sendmmsg call: one at low rates, so frames are spread
/// evenly, growing so there are at most ~10 000 calls a second.
pub fn batch_for(rate_pps: f64) -> usize {
    ((rate_pps / 10_000.0) as usize).clamp(1, BATCH_MAX)
}

/// Offset of the UDP payload in a frame.
pub const PAYLOAD_AT: usize = ETH_HEADER + IPV4_HEADER + UDP_HEADER;

/// Writes a whole frame for `p` around the payload already at PAYLOAD_AT
/// (IPv4 and UDP checksums computed in full: 60 bytes at 64-byte frames).
pub fn write_frame(buf: &mut [u8], dst_mac: &[u8; 6], src_mac: &[u8; 6], p: &Pair, ip_id: u16) {
    let len = buf.len();
    buf[0..6].copy_from_slice(dst_mac);
    buf[6..12].copy_from_slice(src_mac);
    buf[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip_len = (len - ETH_HEADER) as u16;
    let udp_len = ip_len - IPV4_HEADER as u16;
    {
        let ip = &mut buf[ETH_HEADER..ETH_HEADER + IPV4_HEADER];
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
        ip[8] = 64;
        ip[9] = libc::IPPROTO_UDP as u8;
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&p.src.octets());
        ip[16..20].copy_from_slice(&p.dst.octets());
        let c = fold(sum16(ip, 0));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let u = ETH_HEADER + IPV4_HEADER;
    buf[u..u + 2].copy_from_slice(&p.sport.to_be_bytes());
    buf[u + 2..u + 4].copy_from_slice(&p.dport.to_be_bytes());
    buf[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
    buf[u + 6..u + 8].copy_from_slice(&[0, 0]);
    // Pseudo-header: source, destination, protocol, UDP length.
    let mut acc = sum16(&p.src.octets(), 0);
    acc = sum16(&p.dst.octets(), acc);
    acc += u64::from(libc::IPPROTO_UDP as u16) + u64::from(udp_len);
    let mut c = fold(sum16(&buf[u..], acc));
    if c == 0 {
        c = 0xffff;
    }
    buf[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
}

/// The packet socket and the link it sends on.
pub struct Out {
    pub link: Link,
    pub fd: std::os::fd::OwnedFd,
    pub qdisc_bypass: bool,
}

/// Opens the stamped packet socket towards `first.dst` from `first.src`.
pub fn open(first: &Pair, frame_bytes: usize) -> Result<Out> {
    let link = packet_tx::find_link(first.dst, first.src, frame_bytes).map_err(|why| {
        EngineError::spec(
            "probe_every",
            format!(
                "latency under load sends frames on a packet socket, which cannot run here ({}): leave probe_every out for socket probes",
                why
            ),
        )
    })?;
    let sock = packet_tx::open(&link).map_err(EngineError::io(
        "cannot open a packet socket for the load (needs root or CAP_NET_RAW)",
    ))?;
    let fd = sock.fd.as_raw_fd();
    // Reporting flags only: a probe asks for its TX stamp in its own cmsg.
    let flags = (libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    // Safety: `flags` lives across the call and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            (&flags as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(EngineError::io(
            "cannot enable SO_TIMESTAMPING on the load's packet socket",
        )(io::Error::last_os_error()));
    }
    tstamp::big_rcvbuf(fd, ERRQ_RCVBUF);
    Ok(Out {
        link,
        fd: sock.fd,
        qdisc_bypass: sock.qdisc_bypass,
    })
}

/// Control buffer for one message's SO_TIMESTAMPING cmsg, aligned for cmsghdr.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Cbuf([u8; 32]);

/// Reads one TX stamp of a probe from the packet socket's error queue:
/// Ok(Some((probe seq, ns))), Ok(None) when the queue is empty.
fn read_stamp(fd: RawFd, payload_len: usize) -> io::Result<Option<(u64, u64)>> {
    loop {
        let mut cbuf = [0u64; 32];
        let mut data = [0u8; 2048];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // Safety: an all-zero msghdr is valid; the pointers outlive recvmsg.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<[u64; 32]>() as _;
        // Safety: as above.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        let n = n as usize;
        let mut stamp = None;
        let mut ours = false;
        // Safety: walking the control data the kernel wrote; each read matches its cmsg type.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let (lvl, ty) = ((*c).cmsg_level, (*c).cmsg_type);
                if lvl == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPING {
                    let ts =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const [libc::timespec; 3]);
                    let t = ts[0];
                    if t.tv_sec != 0 || t.tv_nsec != 0 {
                        stamp = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                    }
                } else if lvl == libc::SOL_PACKET && ty == PACKET_TX_TIMESTAMP {
                    let ee = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c) as *const libc::sock_extended_err
                    );
                    ours = ee.ee_errno == libc::ENOMSG as u32
                        && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        // The copy of the frame ends with the probe's payload.
        if let (true, Some(ns), true) = (ours, stamp, n >= payload_len) {
            if let Some(Probe { seq: Some(seq), .. }) = decode(&data[n - payload_len..n]) {
                return Ok(Some((seq, ns)));
            }
        }
    }
}

/// One direction's probes inside the load: numbering and the stamps owed.
struct Probes {
    next_seq: u64,
    /// Probes sent whose stamp has not come back: (seq, sent at realtime ns).
    waiting: VecDeque<(u64, u64)>,
    /// Stamps back, not yet carried by a probe.
    ready: VecDeque<Stamp>,
    missing: u64,
    payload_len: usize,
}

impl Probes {
    fn collect(&mut self, fd: RawFd) -> Result<()> {
        while let Some((seq, ns)) = read_stamp(fd, self.payload_len).map_err(EngineError::io(
            "cannot read TX timestamps from the packet socket's error queue",
        ))? {
            // Stamps come in send order; anything older than this one is lost.
            while let Some(&(s, _)) = self.waiting.front() {
                if s > seq {
                    break;
                }
                self.waiting.pop_front();
                if s == seq {
                    self.ready.push_back(Stamp {
                        seq,
                        tx_ns: ns,
                        fallback: false,
                    });
                } else {
                    self.missing += 1;
                }
            }
        }
        let now = tstamp::realtime_ns();
        while let Some(&(_, at)) = self.waiting.front() {
            if now.saturating_sub(at) <= STAMP_WAIT_NS {
                break;
            }
            self.waiting.pop_front();
            self.missing += 1;
        }
        Ok(())
    }

    /// The stamp the next probe carries (seq `next`), if one is ready.
    fn take(&mut self, next: u64) -> Option<Stamp> {
        while let Some(s) = self.ready.pop_front() {
            if next - s.seq <= BACK_MAX {
                return Some(s);
            }
            self.missing += 1;
        }
        None
    }
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EPERM)
    )
}

/// The frames of one sendmmsg call, their headers built once.
struct Batch {
    bufs: Vec<Vec<u8>>,
    ctl: Vec<Cbuf>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(len: usize) -> Batch {
        let bufs = vec![vec![0u8; len]; BATCH_MAX];
        // Safety: mmsghdr is plain old data, so all-zero is a valid value.
        let msgs = (0..BATCH_MAX).map(|_| unsafe { zeroed() }).collect();
        Batch {
            bufs,
            ctl: vec![Cbuf([0; 32]); BATCH_MAX],
            iov: (0..BATCH_MAX)
                .map(|_| libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: len,
                })
                .collect(),
            msgs,
        }
    }

    /// Sends the first `n` frames; `stamped[i]` asks for frame i's TX stamp.
    fn send(&mut self, fd: RawFd, n: usize, stamped: &[bool]) -> io::Result<usize> {
        let n = n.min(BATCH_MAX).min(stamped.len());
        #[allow(clippy::needless_range_loop)] // five parallel arrays, one index
        for i in 0..n {
            self.iov[i].iov_base = self.bufs[i].as_mut_ptr().cast();
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            if stamped[i] {
                let c = &mut self.ctl[i];
                h.msg_control = c.0.as_mut_ptr().cast();
                // Safety: CMSG_SPACE is a pure size computation.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u32>() as u32) } as _;
                // Safety: the control buffer (32 bytes) holds one cmsg of a u32
                // (CMSG_SPACE(4) = 24); CMSG_FIRSTHDR points into it.
                unsafe {
                    let cm = libc::CMSG_FIRSTHDR(h);
                    (*cm).cmsg_level = libc::SOL_SOCKET;
                    (*cm).cmsg_type = libc::SO_TIMESTAMPING;
                    (*cm).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as _;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(cm) as *mut u32,
                        libc::SOF_TIMESTAMPING_TX_SOFTWARE,
                    );
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
        }
        // Safety: each of the first n headers points at an iovec and (for
        // probes) a control buffer this Batch owns; each iovec at a live
        // buffer of its length. Nothing is resized while the call runs.
        let rc = unsafe { libc::sendmmsg(fd, self.msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// What writing a batch's frames needs: slot numbers from `k`, whether the
/// window is measured, the probes' numbering, and the addresses.
struct Frames<'a, P: FnMut(u64) -> Option<Pair>> {
    k: u64,
    measured: bool,
    probes: &'a mut Probes,
    pick: &'a mut P,
    first: Pair,
    macs: ([u8; 6], [u8; 6]),
    ip_id: &'a mut u16,
}

impl<P: FnMut(u64) -> Option<Pair>> Frames<'_, P> {
    /// Writes the batch's frame `i` into `buf`: a probe (returns its seq) or a
    /// load frame.
    fn write(&mut self, buf: &mut [u8], i: usize, probe: bool) -> Option<u64> {
        let slot = self.k + i as u64;
        let (pair, seq) = if probe {
            let seq = self.probes.next_seq;
            self.probes.next_seq += 1;
            let stamp = self.probes.take(seq);
            encode(
                &mut buf[PAYLOAD_AT..PAYLOAD_AT + HEADER],
                &Probe {
                    seq: Some(seq),
                    measured: self.measured,
                    stamp,
                },
            );
            for x in buf[PAYLOAD_AT + HEADER..].iter_mut() {
                *x = 0;
            }
            ((self.pick)(seq), Some(seq))
        } else {
            write_load(&mut buf[PAYLOAD_AT..], slot, self.measured);
            ((self.pick)(slot), None)
        };
        *self.ip_id = self.ip_id.wrapping_add(1);
        let (dst, src) = self.macs;
        write_frame(buf, &dst, &src, &pair.unwrap_or(self.first), *self.ip_id);
        seq
    }
}

/// Paced sending of the whole stream: frame k is due at start + k / rate.
/// `pick(k)` gives pair k (the stream spreads over the pairs), or None to
/// wait (a server that has heard from no client yet). Returns what it did.
pub fn paced_send(
    spec: &LatencySpec,
    probe_every: u64,
    sh: &Shared,
    st: &ThreadStats,
    mut pick: impl FnMut(u64) -> Option<Pair>,
) -> Result<LoadTx> {
    tstamp::fine_timer_slack();
    let payload_len = payload_len(spec.frame_size, false).max(HEADER);
    let flen = PAYLOAD_AT + payload_len;
    let first = loop {
        if sh.stopped() {
            return Ok(LoadTx::default());
        }
        match pick(0) {
            Some(p) => break p,
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let out = open(&first, flen)?;
    let fd = out.fd.as_raw_fd();
    let (dst_mac, src_mac) = (out.link.dst_mac, out.link.src_mac);
    let rate = spec.rate_pps;
    let batch = batch_for(rate);
    // The sender's own ceiling, before the load (rt::packet_tx::ceiling).
    let mut cal_id: u16 = 0;
    let ceiling = packet_tx::ceiling(flen, |buf, n| {
        let pair = pick(n).unwrap_or(first);
        write_load(&mut buf[PAYLOAD_AT..], n, false);
        cal_id = cal_id.wrapping_add(1);
        write_frame(buf, &dst_mac, &src_mac, &pair, cal_id);
    });
    // Bucket: 20 ms of frames or two batches, as the flood's: a sender
    // descheduled on a shared machine catches up (each frame's path runs to
    // the receiver within its own send, so a catch-up burst does not queue
    // behind itself); one stalled longer forfeits slots, which are reported.
    let depth = ((rate * 0.020) as u64).max(2 * batch as u64);
    let mut tx = LoadTx {
        batch,
        note: format!(
            "{}, {}",
            out.link.describe(),
            if out.qdisc_bypass {
                "qdisc bypassed"
            } else {
                "through the qdisc"
            }
        ),
        ..Default::default()
    };
    match ceiling {
        Ok(c) => {
            tx.ceiling_pps = Some(c.pps);
            tx.ceiling_note = c.note;
        }
        Err(e) => tx.ceiling_note = format!("not measured: {}", e),
    }
    let mut probes = Probes {
        next_seq: 0,
        waiting: VecDeque::new(),
        ready: VecDeque::new(),
        missing: 0,
        payload_len,
    };
    let mut b = Batch::new(flen);
    let mut stamped = [false; BATCH_MAX];
    let mut probe_seq = [0u64; BATCH_MAX];
    let mut first_measured: Option<Instant> = None;
    let mut last_measured: Option<Instant> = None;
    let mut total_sent: u64 = 0;
    let mut ip_id: u16 = 0;
    let mut k: u64 = 0; // slots used (sent, failed or forfeited)
    let t0 = Instant::now();
    while !sh.stopped() {
        let now = t0.elapsed().as_secs_f64();
        let due = (now * rate).floor() as u64 + 1;
        let measured = sh.measuring.load(Relaxed);
        if due > k + depth {
            if measured {
                tx.forfeited += due - k - depth;
            }
            k = due - depth;
        }
        let ready = due.saturating_sub(k);
        if ready < batch as u64 {
            let next = (k + batch as u64) as f64 / rate;
            let now = t0.elapsed().as_secs_f64();
            if next > now {
                std::thread::sleep(Duration::from_secs_f64(next - now));
            }
            continue;
        }
        let n = (ready as usize).min(BATCH_MAX);
        probes.collect(fd)?;
        let mut frames = Frames {
            k,
            measured,
            probes: &mut probes,
            pick: &mut pick,
            first,
            macs: (dst_mac, src_mac),
            ip_id: &mut ip_id,
        };
        for (i, (buf, (probe, seq))) in b
            .bufs
            .iter_mut()
            .zip(stamped.iter_mut().zip(probe_seq.iter_mut()))
            .take(n)
            .enumerate()
        {
            *probe = (k + i as u64).is_multiple_of(probe_every);
            if let Some(s) = frames.write(buf, i, *probe) {
                *seq = s;
            }
        }
        let res = b.send(fd, n, &stamped[..n]);
        let at = Instant::now();
        let went = match res {
            Ok(m) => m,
            Err(e) if transient(&e) => 0,
            Err(e) => {
                return Err(EngineError::io(format!(
                    "cannot send the load on {}",
                    out.link.dev
                ))(e))
            }
        };
        // sendmmsg sends in order: the first `went` went
        for s in stamped[went..n].iter_mut() {
            *s = false;
        }
        let now_ns = tstamp::realtime_ns();
        for i in 0..n {
            if stamped[i] {
                probes.waiting.push_back((probe_seq[i], now_ns));
                if measured {
                    tx.probes_sent += 1;
                }
            }
        }
        if measured {
            tx.sent += went as u64;
            tx.send_errors += (n - went) as u64;
            first_measured.get_or_insert(at);
            last_measured = Some(at);
        }
        total_sent += went as u64;
        st.messages_sent.store(total_sent, Relaxed);
        st.bytes_sent.store(total_sent * flen as u64, Relaxed);
        k += n as u64;
    }
    // Follow-ups for the stamps still owed (up to 20 ms), in frames of
    // their own, so the last probes are measured too.
    if !sh.aborted() {
        let deadline = Instant::now() + Duration::from_millis(20);
        loop {
            probes.collect(fd)?;
            while let Some(s) = probes.take(probes.next_seq) {
                let buf = &mut b.bufs[0];
                encode(
                    &mut buf[PAYLOAD_AT..PAYLOAD_AT + HEADER],
                    &Probe {
                        seq: None,
                        measured: false,
                        stamp: Some(s),
                    },
                );
                ip_id = ip_id.wrapping_add(1);
                let pair = pick(s.seq).unwrap_or(first);
                write_frame(buf, &dst_mac, &src_mac, &pair, ip_id);
                match b.send(fd, 1, &[false]) {
                    Ok(_) => {}
                    Err(e) if transient(&e) => probes.missing += 1,
                    Err(e) => return Err(EngineError::io("cannot send a follow-up stamp")(e)),
                }
            }
            if probes.waiting.is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    tx.tx_stamps_missing = probes.missing + probes.waiting.len() as u64;
    tx.window_ns = match (first_measured, last_measured) {
        (Some(a), Some(b)) => (b - a).as_nanos() as u64 + (batch as f64 / rate * 1e9) as u64,
        _ => 0,
    };
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Spec;
    use crate::wire::packet::checksum;
    use crate::wire::probe::load_word;

    #[test]
    fn frame_checksums_verify() {
        // A 64-byte frame as written (no FCS).
        let mut f = vec![0u8; 64 - 4];
        assert_eq!(f.len(), 60);
        write_load(&mut f[PAYLOAD_AT..], 7, true);
        let p = Pair {
            src: Ipv4Addr::new(198, 18, 1, 10),
            dst: Ipv4Addr::new(198, 18, 2, 10),
            sport: 40000,
            dport: 5000,
        };
        write_frame(&mut f, &[2; 6], &[4; 6], &p, 9);
        assert_eq!(checksum(&f[ETH_HEADER..ETH_HEADER + IPV4_HEADER]), 0);
        let u = ETH_HEADER + IPV4_HEADER;
        let mut acc = sum16(&p.src.octets(), 0);
        acc = sum16(&p.dst.octets(), acc);
        acc += 17 + (f.len() - u) as u64;
        assert_eq!(fold(sum16(&f[u..], acc)), 0, "UDP checksum verifies");
        assert_eq!(load_word(&f[PAYLOAD_AT..]), Some(true));
    }

    #[test]
    fn probe_every_needs_ipv4_full_duplex_and_kernel_stamps() {
        let parse = |extra: &str| {
            Spec::parse(&format!(
                r#"{{"kind":"latency","server":"198.18.2.2:5201","probe_every":10{}}}"#,
                extra
            ))
        };
        let Ok(Spec::Latency(s)) = parse("") else {
            panic!("a latency spec")
        };
        assert_eq!(s.probe_every, Some(10));
        for (extra, says) in [
            (r#","duplex":"half""#, "full duplex"),
            (r#","timestamps":"user""#, "kernel stamps"),
            (r#","probe_every":0"#, "outside 1..="),
        ] {
            let e = parse(extra).unwrap_err().to_string();
            assert!(e.contains(says), "{}: {}", extra, e);
        }
        let v6 = Spec::parse(
            r#"{"kind":"latency","server":"[2001:2::2]:5201","probe_every":10,"frame_size":90}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(v6.contains("IPv4"), "{}", v6);
        let flood = Spec::parse(r#"{"kind":"flood","target":"198.18.2.2","probe_every":10}"#);
        assert!(flood.is_err(), "probe_every is the latency kind's");
    }

    #[test]
    fn batch_grows_with_rate() {
        assert_eq!(batch_for(1_000.0), 1);
        assert_eq!(batch_for(148_810.0), 14);
        assert_eq!(batch_for(1e7), 64);
    }
}
