//! Kernel software timestamps on a UDP socket (SO_TIMESTAMPING): enabling
//! them, sending a datagram from a chosen local address (IP_PKTINFO) with a
//! chosen timestamp key (SCM_TS_OPT_ID), receiving with the RX stamp and the
//! local destination address, and reading TX stamps from MSG_ERRQUEUE.
//! All stamps are CLOCK_REALTIME nanoseconds, one clock for every namespace.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Sets the timestamp key of one send (Linux ≥ 6.13); not in the libc crate yet.
const SCM_TS_OPT_ID: libc::c_int = 81;

pub const FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // Safety: `v` lives across the call and its size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns on software TX/RX stamps and destination-address reporting.
/// `stamps = false` leaves timestamping off (to measure what it costs).
pub fn enable(fd: RawFd, v6: bool, stamps: bool) -> io::Result<()> {
    if stamps {
        setsockopt_int(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            FLAGS as libc::c_int,
        )?;
    }
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
    }
}

/// A large receive buffer: it holds both arriving probes and the TX stamps
/// queued on the error queue, and a short stall must not drop either.
/// SO_RCVBUFFORCE (root) passes net.core.rmem_max; otherwise best effort.
pub fn big_rcvbuf(fd: RawFd, bytes: i32) {
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
    }
}

/// Lets sleeps end within about a microsecond of their deadline (this thread only).
pub fn fine_timer_slack() {
    // Safety: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

/// CLOCK_REALTIME now, in ns (the kernel's software stamps use this clock).
pub fn realtime_ns() -> u64 {
    // Safety: `ts` is a valid out-pointer for clock_gettime.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn to_sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // Safety: an all-zero sockaddr_storage is valid; we fill the family's struct in it.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // Safety: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // Safety: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // Safety: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // Safety: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Control-message buffer, aligned for cmsghdr.
#[repr(C, align(8))]
struct Cbuf([u8; 256]);

/// Sends `buf` to `to`, from `from` if given, with timestamp key `key`
/// (when `with_key`). Returns bytes sent.
pub fn send(
    fd: RawFd,
    buf: &[u8],
    to: SocketAddr,
    from: Option<IpAddr>,
    key: Option<u32>,
) -> io::Result<usize> {
    let (mut dst, dst_len) = to_sockaddr(to);
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = Cbuf([0; 256]);
    // Safety: an all-zero msghdr is valid; every pointer set below outlives sendmsg.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = &mut dst as *mut _ as *mut libc::c_void;
    msg.msg_namelen = dst_len;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let pkt_space = match from {
        Some(IpAddr::V4(_)) => size_of::<libc::in_pktinfo>(),
        Some(IpAddr::V6(_)) => size_of::<libc::in6_pktinfo>(),
        None => 0,
    };
    // Safety: CMSG_SPACE is a pure size computation.
    let total = unsafe {
        (if from.is_some() {
            libc::CMSG_SPACE(pkt_space as u32)
        } else {
            0
        }) + (if key.is_some() {
            libc::CMSG_SPACE(size_of::<u32>() as u32)
        } else {
            0
        })
    } as usize;
    // Safety: CMSG_* walk `cbuf` (256 bytes, more than `total`); msg_controllen
    // covers exactly the cmsgs written, and each data write fits its CMSG_LEN.
    unsafe {
        if total > 0 {
            msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = total as _;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            if let Some(ip) = from {
                (*c).cmsg_len = libc::CMSG_LEN(pkt_space as u32) as _;
                match ip {
                    IpAddr::V4(a) => {
                        (*c).cmsg_level = libc::IPPROTO_IP;
                        (*c).cmsg_type = libc::IP_PKTINFO;
                        let pi = libc::in_pktinfo {
                            ipi_ifindex: 0,
                            ipi_spec_dst: libc::in_addr {
                                s_addr: u32::from_ne_bytes(a.octets()),
                            },
                            ipi_addr: libc::in_addr { s_addr: 0 },
                        };
                        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::in_pktinfo, pi);
                    }
                    IpAddr::V6(a) => {
                        (*c).cmsg_level = libc::IPPROTO_IPV6;
                        (*c).cmsg_type = libc::IPV6_PKTINFO;
                        let pi = libc::in6_pktinfo {
                            ipi6_addr: libc::in6_addr {
                                s6_addr: a.octets(),
                            },
                            ipi6_ifindex: 0,
                        };
                        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::in6_pktinfo, pi);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            if let (Some(k), false) = (key, c.is_null()) {
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = SCM_TS_OPT_ID;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u32, k);
            }
        }
        let n = libc::sendmsg(fd, &msg, 0);
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// One received datagram.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub len: usize,
    pub from: Option<SocketAddr>,
    /// The local address it was sent to (IP_PKTINFO).
    pub local: Option<IpAddr>,
    /// Kernel software RX stamp (CLOCK_REALTIME ns).
    pub rx_ns: Option<u64>,
}

fn stamp_of(c: *const libc::cmsghdr) -> Option<u64> {
    // Safety: the caller checked the cmsg is SCM_TIMESTAMPING, which holds three timespecs.
    let ts = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const [libc::timespec; 3]) };
    let t = ts[0];
    (t.tv_sec != 0 || t.tv_nsec != 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}

/// The RX stamp and the local destination address from a received message's
/// control data.
fn read_cmsgs(msg: &libc::msghdr, out: &mut Received) {
    // Safety: CMSG_FIRSTHDR/NXTHDR walk the control data the kernel wrote
    // (msg_controllen is what it wrote, within the buffer).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let (lvl, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if lvl == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPING {
                out.rx_ns = stamp_of(c);
            } else if lvl == libc::IPPROTO_IP && ty == libc::IP_PKTINFO {
                let pi = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in_pktinfo);
                out.local = Some(IpAddr::V4(Ipv4Addr::from(pi.ipi_addr.s_addr.to_ne_bytes())));
            } else if lvl == libc::IPPROTO_IPV6 && ty == libc::IPV6_PKTINFO {
                let pi = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::in6_pktinfo);
                out.local = Some(IpAddr::V6(Ipv6Addr::from(pi.ipi6_addr.s6_addr)));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// Most datagrams per recvmmsg call.
pub const BATCH_MAX: usize = 32;

/// Receives datagrams in recvmmsg batches and hands them out one at a time,
/// each with its own RX stamp and local address: one system call for up to
/// 32 datagrams (latency under load reads every frame of the load). A batch
/// of one behaves as recvmsg: a user-space RX stamp is then read right after
/// its datagram's call, not after a batch's.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    ctl: Vec<Cbuf>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    n: usize,
    next: usize,
}

impl RecvBatch {
    pub fn new(size: usize) -> Self {
        let size = size.clamp(1, BATCH_MAX);
        RecvBatch {
            bufs: vec![vec![0u8; 2048]; size],
            // Safety: all-zero sockaddr_storage and mmsghdr are valid values.
            names: vec![unsafe { zeroed() }; size],
            ctl: (0..size).map(|_| Cbuf([0; 256])).collect(),
            iov: (0..size)
                .map(|_| libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                })
                .collect(),
            msgs: (0..size).map(|_| unsafe { zeroed() }).collect(),
            n: 0,
            next: 0,
        }
    }

    /// The next datagram, copied into `buf` (blocking up to the socket's
    /// read timeout when none is left from the last batch).
    pub fn recv(&mut self, fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
        if self.next >= self.n {
            self.fill(fd)?;
        }
        let i = self.next;
        self.next += 1;
        let h = &self.msgs[i].msg_hdr;
        let len = (self.msgs[i].msg_len as usize).min(buf.len());
        buf[..len].copy_from_slice(&self.bufs[i][..len]);
        let mut out = Received {
            len,
            from: from_sockaddr(&self.names[i]),
            local: None,
            rx_ns: None,
        };
        read_cmsgs(h, &mut out);
        Ok(out)
    }

    fn fill(&mut self, fd: RawFd) -> io::Result<()> {
        self.n = 0;
        self.next = 0;
        let size = self.msgs.len();
        for i in 0..size {
            self.iov[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: self.bufs[i].len(),
            };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctl[i].0.as_mut_ptr().cast();
            h.msg_controllen = self.ctl[i].0.len() as _;
            h.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        // Safety: every header points at its own name, iovec (at a live
        // buffer of its length) and control buffer, all owned by self and
        // not moved during the call; MSG_WAITFORONE blocks for the first
        // datagram only (up to SO_RCVTIMEO).
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                size as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.n = rc as usize;
        Ok(())
    }
}

/// Reads one TX stamp from the error queue without blocking:
/// Ok(Some((key, ns))), Ok(None) when the queue is empty.
pub fn read_tx_stamp(fd: RawFd) -> io::Result<Option<(u32, u64)>> {
    loop {
        let mut cbuf = Cbuf([0; 256]);
        let mut data = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // Safety: an all-zero msghdr is valid; the pointers outlive recvmsg.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = cbuf.0.len() as _;
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
        let mut stamp = None;
        let mut key = None;
        // Safety: walking the control data the kernel wrote; each read matches its cmsg type.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let (lvl, ty) = ((*c).cmsg_level, (*c).cmsg_type);
                if lvl == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPING {
                    stamp = stamp_of(c);
                } else if (lvl == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                    || (lvl == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR)
                {
                    let ee = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c) as *const libc::sock_extended_err
                    );
                    if ee.ee_errno == libc::ENOMSG as u32
                        && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    {
                        key = Some(ee.ee_data);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let (Some(k), Some(s)) = (key, stamp) {
            return Ok(Some((k, s)));
        }
        // Not a TX stamp (e.g. an ICMP error): skip it.
    }
}
