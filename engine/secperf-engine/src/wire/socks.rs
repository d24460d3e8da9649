//! A SOCKS5 CONNECT (RFC 1928, no authentication) on a socket from
//! `http_wire::connect_bounded`: the circuit-level proxy's way in. The mix
//! workload's HTTP connections, FTP control and passive data connections go
//! through it when its spec names a `socks` proxy.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::wire::http::{self as http_wire, Fail};

/// The CONNECT request for `to`.
pub fn request(to: SocketAddr) -> Vec<u8> {
    let mut req = vec![5, 1, 0];
    match to {
        SocketAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
        }
    }
    req.extend_from_slice(&to.port().to_be_bytes());
    req
}

/// How many bytes of bound address and port follow a reply's 4-byte head
/// (`None`: not a SOCKS5 reply).
pub fn reply_rest(head: &[u8; 4], name_len: Option<u8>) -> Option<usize> {
    if head[0] != 5 {
        return None;
    }
    match head[3] {
        1 => Some(4 + 2),
        4 => Some(16 + 2),
        3 => name_len.map(|n| 1 + n as usize + 2),
        _ => None,
    }
}

/// Why a proxy's reply code failed the connection: 2 (not allowed by the
/// rule set) is the proxy refusing; the rest are connection failures.
pub fn reply_fail(code: u8) -> Fail {
    match code {
        2 => Fail::BadStatus,
        5 => Fail::ConnectRefused,
        3 | 4 => Fail::Unreachable,
        6 => Fail::ConnectTimeout,
        _ => Fail::BadResponse,
    }
}

fn read_exact(s: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), Fail> {
    let mut off = 0;
    while off < buf.len() {
        let n = http_wire::read_some_bounded(s, &mut buf[off..], deadline)?;
        if n == 0 {
            return Err(Fail::Reset);
        }
        off += n;
    }
    Ok(())
}

/// A connection to `to` through the SOCKS5 proxy at `proxy`.
pub fn connect(proxy: SocketAddr, to: SocketAddr, timeout: Duration) -> Result<TcpStream, Fail> {
    let s = http_wire::connect_bounded(proxy, timeout)?;
    let deadline = Instant::now() + timeout;
    http_wire::write_all_bounded(&s, &[5, 1, 0], deadline)?;
    let mut method = [0u8; 2];
    read_exact(&s, &mut method, deadline)?;
    if method != [5, 0] {
        return Err(Fail::BadStatus); // the proxy wants authentication we do not offer
    }
    http_wire::write_all_bounded(&s, &request(to), deadline)?;
    let mut head = [0u8; 4];
    read_exact(&s, &mut head, deadline)?;
    if head[0] != 5 {
        return Err(Fail::BadResponse);
    }
    if head[1] != 0 {
        return Err(reply_fail(head[1]));
    }
    let name_len = if head[3] == 3 {
        let mut n = [0u8; 1];
        read_exact(&s, &mut n, deadline)?;
        Some(n[0])
    } else {
        None
    };
    let rest = reply_rest(&head, name_len).ok_or(Fail::BadResponse)?;
    let skip = if name_len.is_some() { rest - 1 } else { rest };
    let mut tail = vec![0u8; skip];
    read_exact(&s, &mut tail, deadline)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        assert_eq!(
            request("198.18.2.2:5380".parse().unwrap()),
            vec![5, 1, 0, 1, 198, 18, 2, 2, 0x15, 0x04]
        );
        assert_eq!(request("[2001:2::1]:21".parse().unwrap()).len(), 4 + 16 + 2);
        assert_eq!(reply_rest(&[5, 0, 0, 1], None), Some(6));
        assert_eq!(reply_rest(&[5, 0, 0, 3], Some(9)), Some(12));
        assert_eq!(reply_rest(&[4, 0, 0, 1], None), None);
        assert_eq!(reply_fail(2), Fail::BadStatus);
        assert_eq!(reply_fail(5), Fail::ConnectRefused);
    }
}
