//! A SOCKS5 CONNECT (RFC 1928, no authentication): the circuit-level proxy's
//! way in. The mix workload's HTTP connections, FTP control and passive data
//! connections go through it when its spec names a `socks` proxy; its
//! machine writes the greeting (`GREETING`), expects `METHOD_OK`, writes
//! `request`, and reads the reply (`reply_rest`, `reply_fail`).

use std::net::SocketAddr;

use crate::wire::http::Fail;

/// The client's greeting: version 5, one method, "no authentication".
pub const GREETING: [u8; 3] = [5, 1, 0];
/// The proxy's answer to it that lets the client go on.
pub const METHOD_OK: [u8; 2] = [5, 0];

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
