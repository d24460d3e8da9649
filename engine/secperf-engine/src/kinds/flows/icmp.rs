//! One ICMP echo of a flow: a request from the flow's source on a raw socket
//! (bound to that source), and its reply from the destination, matched by
//! identifier and sequence (every raw ICMP socket of the host sees every
//! echo reply to its address, so each request carries a sequence of its own).
//! An ICMP destination unreachable that quotes the request (a reject rule's
//! `icmp admin-prohibited`, a host unreachable) ends it as unreachable.
//!
//! The raw socket is read and written through std's UdpSocket, which only
//! issues sendto/recvfrom on the descriptor: a raw socket takes both.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::time::Instant;

use crate::wire::packet::checksum;

/// The sequence numbers of this process's echo requests.
static SEQ: AtomicU16 = AtomicU16::new(0);

const ECHO_REQUEST: [u8; 2] = [8, 128]; // ICMPv4, ICMPv6
const ECHO_REPLY: [u8; 2] = [0, 129];
const UNREACHABLE: [u8; 2] = [3, 1];

/// The ICMP part of a received datagram (IPv4 raw sockets deliver the IP header too).
fn icmp_of(b: &[u8], v6: bool) -> Option<&[u8]> {
    if v6 {
        return Some(b);
    }
    let ihl = usize::from(b.first()? & 0x0f) * 4;
    b.get(ihl..)
}

/// Sends one echo request of `payload` to `dst` and waits until `deadline`
/// for its reply: the reply's payload length, or the failure.
pub fn echo(
    s: &UdpSocket,
    dst: IpAddr,
    payload: &[u8],
    deadline: Instant,
    scratch: &mut Vec<u8>,
) -> io::Result<usize> {
    let v6 = dst.is_ipv6();
    let fam = usize::from(v6);
    let id = (std::process::id() as u16).to_be_bytes();
    let seq = SEQ.fetch_add(1, Relaxed).to_be_bytes();
    let mut pkt = Vec::with_capacity(8 + payload.len());
    pkt.extend_from_slice(&[ECHO_REQUEST[fam], 0, 0, 0]);
    pkt.extend_from_slice(&id);
    pkt.extend_from_slice(&seq);
    pkt.extend_from_slice(payload);
    if !v6 {
        // ICMPv6's checksum covers a pseudo-header: the kernel fills it in.
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
    }
    s.send_to(&pkt, SocketAddr::new(dst, 0))?;
    scratch.resize(payload.len() + 1024, 0);
    let ours = |h: &[u8]| h.len() >= 8 && h[4..6] == id && h[6..8] == seq;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        let (n, from) = s.recv_from(scratch)?;
        let Some(icmp) = icmp_of(&scratch[..n], v6) else {
            continue;
        };
        if icmp.len() < 8 {
            continue;
        }
        if icmp[0] == ECHO_REPLY[fam] && from.ip() == dst && ours(icmp) {
            return Ok(icmp.len() - 8);
        }
        if icmp[0] == UNREACHABLE[fam] {
            // The quoted datagram: its IP header, then our request's first 8 bytes.
            let inner = &icmp[8..];
            let quoted = if v6 {
                inner.get(40..)
            } else {
                icmp_of(inner, false)
            };
            if quoted.is_some_and(|q| q.first() == Some(&ECHO_REQUEST[fam]) && ours(q)) {
                return Err(io::Error::from_raw_os_error(libc::EHOSTUNREACH));
            }
        }
    }
}
