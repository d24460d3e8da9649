//! The AF_PACKET flood sender's setup: which interface the route to the
//! target leaves by, its next hop's MAC (the kernel's neighbour table, or one
//! ARP request of our own), and a PF_PACKET socket bound to that interface
//! with the qdisc bypassed. Frames sent on it skip the attacker's IP stack
//! (routing, netfilter, neighbour lookup per packet) as trafgen's do.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::wire::frame::{arp_reply_mac, arp_request, format_mac, parse_mac};

/// ARPHRD_ETHER in /sys/class/net/IF/type.
const ARPHRD_ETHER: u32 = 1;
/// PACKET_QDISC_BYPASS (linux/if_packet.h).
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const ETH_P_ARP: u16 = 0x0806;

/// Where the route to the target goes, as `ip route get` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub dev: String,
    /// The gateway, or the target itself when it is on-link.
    pub next_hop: Ipv4Addr,
    /// "unicast", "local", ...
    pub kind: String,
}

/// Parses one line of `ip -o -4 route get ADDR`, e.g.
/// "198.18.2.2 via 198.18.4.1 dev a0 src 198.18.4.2 uid 0 \    cache".
pub fn parse_route_get(out: &str, target: Ipv4Addr) -> Option<Route> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let kind = match words.first() {
        Some(w) if w.parse::<Ipv4Addr>().is_ok() => "unicast".to_string(),
        Some(w) => (*w).to_string(),
        None => return None,
    };
    let after = |key: &str| {
        words
            .windows(2)
            .find(|p| p[0] == key)
            .map(|p| p[1].to_string())
    };
    let dev = after("dev")?;
    let next_hop = match after("via") {
        Some(v) => v.parse().ok()?,
        None => target,
    };
    Some(Route {
        dev,
        next_hop,
        kind,
    })
}

/// The MAC of `ip` on `dev` from /proc/net/arp, if the entry is complete.
pub fn parse_proc_arp(text: &str, ip: Ipv4Addr, dev: &str) -> Option<[u8; 6]> {
    for line in text.lines().skip(1) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 6 || w[5] != dev || w[0].parse::<Ipv4Addr>().ok() != Some(ip) {
            continue;
        }
        let flags = u32::from_str_radix(w[2].trim_start_matches("0x"), 16).ok()?;
        // ATF_COM: resolved; an all-zero address is an incomplete entry.
        let mac = parse_mac(w[3])?;
        if flags & 0x2 != 0 && mac != [0; 6] {
            return Some(mac);
        }
    }
    None
}

fn sys_read(dev: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{}/{}", dev, what))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Everything the packet sender needs, or why it cannot run.
#[derive(Clone, Debug)]
pub struct Link {
    pub dev: String,
    pub ifindex: i32,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub next_hop: Ipv4Addr,
    /// How the destination MAC was found ("neighbour table" or "arp").
    pub how: &'static str,
}

impl Link {
    pub fn describe(&self) -> String {
        format!(
            "AF_PACKET on {} to {} ({}, next hop {}, MAC from the {})",
            self.dev,
            format_mac(&self.dst_mac),
            format_mac(&self.src_mac),
            self.next_hop,
            self.how
        )
    }
}

/// Finds the egress link towards `target` for frames of `frame_len` bytes
/// (Ethernet header included) sent from `src_ip`; Err says why not.
pub fn find_link(target: Ipv4Addr, src_ip: Ipv4Addr, frame_len: usize) -> Result<Link, String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "route", "get", &target.to_string()])
        .output()
        .map_err(|e| format!("cannot run `ip route get` ({})", e))?;
    if !out.status.success() {
        return Err(format!(
            "`ip route get {}` failed: {}",
            target,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let route = parse_route_get(&text, target)
        .ok_or_else(|| format!("cannot parse `ip route get`: {}", text.trim()))?;
    if route.kind != "unicast" {
        return Err(format!(
            "the route to {} is {} (dev {}), not out of an Ethernet interface",
            target, route.kind, route.dev
        ));
    }
    let dev = route.dev;
    let kind: Option<u32> = sys_read(&dev, "type").and_then(|s| s.parse().ok());
    if kind != Some(ARPHRD_ETHER) {
        return Err(format!(
            "{} is not an Ethernet interface (type {})",
            dev,
            kind.map_or("unknown".into(), |k| k.to_string())
        ));
    }
    let mtu: usize = sys_read(&dev, "mtu")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("cannot read {}'s MTU from /sys/class/net", dev))?;
    if frame_len > mtu + crate::wire::frame::ETH_HEADER {
        return Err(format!(
            "{}-byte frames do not fit {}'s MTU {}",
            frame_len, dev, mtu
        ));
    }
    let ifindex: i32 = sys_read(&dev, "ifindex")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("cannot read {}'s ifindex", dev))?;
    let src_mac = sys_read(&dev, "address")
        .as_deref()
        .and_then(parse_mac)
        .ok_or_else(|| format!("cannot read {}'s MAC address", dev))?;
    let arp = std::fs::read_to_string("/proc/net/arp").unwrap_or_default();
    let (dst_mac, how) = match parse_proc_arp(&arp, route.next_hop, &dev) {
        Some(m) => (m, "neighbour table"),
        None => (
            arp_resolve(ifindex, src_mac, src_ip, route.next_hop)
                .map_err(|e| format!("next hop {} on {}: {}", route.next_hop, dev, e))?,
            "arp",
        ),
    };
    Ok(Link {
        dev,
        ifindex,
        src_mac,
        dst_mac,
        next_hop: route.next_hop,
        how,
    })
}

fn sockaddr_ll(ifindex: i32, protocol: u16, mac: [u8; 6]) -> libc::sockaddr_ll {
    // Safety: sockaddr_ll is plain old data, so all-zero is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = protocol.to_be();
    a.sll_ifindex = ifindex;
    a.sll_halen = 6;
    a.sll_addr[..6].copy_from_slice(&mac);
    a
}

/// A PF_PACKET raw socket bound to `ifindex` for `protocol` (0: send only).
fn packet_socket(ifindex: i32, protocol: u16) -> io::Result<OwnedFd> {
    // Safety: socket() has no memory effects; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let addr = sockaddr_ll(ifindex, protocol, [0; 6]);
    // Safety: addr is a valid sockaddr_ll and the length is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Asks `next_hop` for its MAC with our own ARP requests (up to 1 s; the
/// kernel's table had no complete entry). Sends nothing to the flood target.
fn arp_resolve(
    ifindex: i32,
    src_mac: [u8; 6],
    src_ip: Ipv4Addr,
    next_hop: Ipv4Addr,
) -> io::Result<[u8; 6]> {
    let fd = packet_socket(ifindex, ETH_P_ARP)?;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // Safety: tv is a valid timeval and the length is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // Without the timeout recv() could block past the deadline.
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let req = arp_request(src_mac, src_ip, next_hop);
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        // Safety: req is a live buffer of req.len() bytes; the socket is bound.
        let rc = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let resend = Instant::now() + Duration::from_millis(200);
        while Instant::now() < resend.min(deadline) {
            // Safety: buf is a live, writable buffer of buf.len() bytes.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if crate::rt::net::would_block(&e) {
                    continue;
                }
                return Err(e);
            }
            if let Some(mac) = arp_reply_mac(&buf[..n as usize], next_hop) {
                return Ok(mac);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "no ARP reply within 1 s",
    ))
}

/// A send-only PF_PACKET socket bound to the link (frames need no address),
/// past the qdisc when the kernel allows it.
pub struct PacketSocket {
    pub fd: OwnedFd,
    pub qdisc_bypass: bool,
}

pub fn open(link: &Link) -> io::Result<PacketSocket> {
    let fd = packet_socket(link.ifindex, 0)?;
    let one: libc::c_int = 1;
    // Safety: `one` is a valid c_int and the length is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_QDISC_BYPASS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    Ok(PacketSocket {
        fd,
        qdisc_bypass: rc == 0,
    })
}

// ------------------------------------------------------------ the sender's ceiling

/// IEEE 802 Local Experimental EtherType 1: no protocol handler takes it, so
/// a frame with it dies on arrival.
pub const ETHERTYPE_BLACKHOLE: u16 = 0x88b5;
/// How long the calibration sends.
pub const CEILING_WINDOW: Duration = Duration::from_millis(100);

/// What the sender alone can do: frames/s written and handed to the kernel
/// unpaced for `CEILING_WINDOW`, in sendmmsg batches of 64 as the load goes,
/// on the namespace's loopback device with an EtherType nothing handles (a
/// blackhole: no forwarding, no receiver). The load's own path adds the
/// DUT's and the receiver's work to each frame's send (it runs in the
/// sender's softirq), so a load short of its ask with a ceiling above it was
/// held back by the path, not by the sender.
#[derive(Clone, Debug, Default)]
pub struct Ceiling {
    pub pps: f64,
    pub note: String,
}

/// Frames per sendmmsg call in the calibration (the load's largest batch).
const CEILING_BATCH: usize = 64;

/// Measures the ceiling: `build(buf, n)` writes frame n (`frame_len` bytes)
/// as the load would; its EtherType is then replaced by the blackhole's.
pub fn ceiling(frame_len: usize, mut build: impl FnMut(&mut [u8], u64)) -> io::Result<Ceiling> {
    let name = std::ffi::CString::new("lo").expect("no NUL in a literal");
    // Safety: name is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    let lo = Link {
        dev: "lo".into(),
        ifindex,
        src_mac: [0; 6],
        dst_mac: [0; 6],
        next_hop: Ipv4Addr::LOCALHOST,
        how: "loopback",
    };
    let sock = open(&lo)?;
    let mut bufs = vec![vec![0u8; frame_len]; CEILING_BATCH];
    let t0 = Instant::now();
    let mut n: u64 = 0;
    while t0.elapsed() < CEILING_WINDOW {
        for b in bufs.iter_mut() {
            build(b, n);
            b[12..14].copy_from_slice(&ETHERTYPE_BLACKHOLE.to_be_bytes());
            n += 1;
        }
        let mut iov: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // Safety: mmsghdr is plain old data, so all-zero is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // Safety: every header points at an iovec over a live buffer of its
        // length; none is resized or moved during the call.
        let rc = unsafe {
            libc::sendmmsg(
                sock.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                0,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EAGAIN)) {
                return Err(e);
            }
            n -= CEILING_BATCH as u64;
        } else {
            n -= (CEILING_BATCH - rc as usize) as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(Ceiling {
        pps: n as f64 / secs,
        note: format!(
            "{} frames in {:.0} ms unpaced in sendmmsg batches of {} on lo (EtherType {:#06x}: nothing takes them), before the load",
            n,
            secs * 1e3,
            CEILING_BATCH,
            ETHERTYPE_BLACKHOLE
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_get_lines() {
        let t = Ipv4Addr::new(198, 18, 2, 2);
        let r = parse_route_get(
            "198.18.2.2 via 198.18.4.1 dev sp1a-att src 198.18.4.2 uid 0 \\    cache ",
            t,
        )
        .unwrap();
        assert_eq!(r.dev, "sp1a-att");
        assert_eq!(r.next_hop, Ipv4Addr::new(198, 18, 4, 1));
        assert_eq!(r.kind, "unicast");
        let on_link = parse_route_get("198.18.2.2 dev veth0 src 198.18.2.1 uid 0", t).unwrap();
        assert_eq!(on_link.next_hop, t);
        let lo = Ipv4Addr::LOCALHOST;
        let local = parse_route_get("local 127.0.0.1 dev lo src 127.0.0.1 uid 0", lo).unwrap();
        assert_eq!(local.kind, "local");
        assert!(parse_route_get("", t).is_none());
    }

    #[test]
    fn proc_arp_lines() {
        let text =
            "IP address       HW type     Flags       HW address            Mask     Device\n\
                    198.18.4.1       0x1         0x2         02:aa:bb:cc:dd:01     *        att0\n\
                    198.18.4.9       0x1         0x0         00:00:00:00:00:00     *        att0\n";
        let hop = Ipv4Addr::new(198, 18, 4, 1);
        assert_eq!(
            parse_proc_arp(text, hop, "att0"),
            Some([2, 0xaa, 0xbb, 0xcc, 0xdd, 1])
        );
        assert_eq!(parse_proc_arp(text, hop, "other0"), None);
        assert_eq!(
            parse_proc_arp(text, Ipv4Addr::new(198, 18, 4, 9), "att0"),
            None,
            "incomplete"
        );
    }
}
