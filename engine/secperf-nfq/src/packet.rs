//! The 5-tuple of an IPv4 or IPv6 packet as NFQUEUE hands it over (from the
//! IP header on: the forward hook sees defragmented packets, but a later
//! fragment can still arrive alone, and then it has no ports).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// IP protocol numbers this module names.
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_SCTP: u8 = 132;
pub const PROTO_ICMPV6: u8 = 58;

/// Why a packet has no 5-tuple.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("empty packet")]
    Empty,
    #[error("IP version {0} is neither 4 nor 6")]
    Version(u8),
    #[error("truncated {what}: {len} bytes, need {need}")]
    Truncated {
        what: &'static str,
        len: usize,
        need: usize,
    },
    #[error("bad IPv4 header length {0}")]
    HeaderLength(usize),
}

/// Who talks to whom: addresses, protocol and (for port protocols) ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    /// None for protocols without ports and for non-first fragments.
    pub sport: Option<u16>,
    pub dport: Option<u16>,
}

impl FiveTuple {
    /// The protocol's usual name ("tcp", "udp", …) or its number.
    pub fn proto_name(&self) -> String {
        match self.proto {
            PROTO_TCP => "tcp".into(),
            PROTO_UDP => "udp".into(),
            PROTO_ICMP => "icmp".into(),
            PROTO_ICMPV6 => "icmpv6".into(),
            PROTO_SCTP => "sctp".into(),
            n => n.to_string(),
        }
    }

    pub fn family(&self) -> u8 {
        if self.src.is_ipv4() {
            4
        } else {
            6
        }
    }
}

impl fmt::Display for FiveTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ep = |a: IpAddr, p: Option<u16>| match (a, p) {
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
            (a, Some(p)) => format!("{a}:{p}"),
            (a, None) => a.to_string(),
        };
        write!(
            f,
            "{} {} -> {}",
            self.proto_name(),
            ep(self.src, self.sport),
            ep(self.dst, self.dport)
        )
    }
}

fn need(pkt: &[u8], n: usize, what: &'static str) -> Result<(), ParseError> {
    if pkt.len() < n {
        Err(ParseError::Truncated {
            what,
            len: pkt.len(),
            need: n,
        })
    } else {
        Ok(())
    }
}

fn has_ports(proto: u8) -> bool {
    matches!(
        proto,
        PROTO_TCP | PROTO_UDP | PROTO_SCTP | 136 /* UDP-Lite */
    )
}

/// Ports from the first four bytes of the transport header, when it has ports.
fn ports(proto: u8, l4: &[u8]) -> Result<(Option<u16>, Option<u16>), ParseError> {
    if !has_ports(proto) {
        return Ok((None, None));
    }
    need(l4, 4, "transport header")?;
    Ok((
        Some(u16::from_be_bytes([l4[0], l4[1]])),
        Some(u16::from_be_bytes([l4[2], l4[3]])),
    ))
}

/// The 5-tuple of a packet that starts with its IP header.
pub fn parse_five_tuple(pkt: &[u8]) -> Result<FiveTuple, ParseError> {
    parse_with_l4(pkt).map(|(t, _)| t)
}

/// The 5-tuple and where the transport header starts (for a later fragment:
/// where its data starts).
pub fn parse_with_l4(pkt: &[u8]) -> Result<(FiveTuple, usize), ParseError> {
    let first = *pkt.first().ok_or(ParseError::Empty)?;
    match first >> 4 {
        4 => parse_v4(pkt),
        6 => parse_v6(pkt),
        v => Err(ParseError::Version(v)),
    }
}

/// Where the application payload starts: after the TCP header (its data
/// offset), the UDP header, or at the transport header for other protocols
/// and later fragments. None when the transport header is truncated.
pub fn payload_offset(pkt: &[u8], tuple: &FiveTuple, l4: usize) -> Option<usize> {
    if tuple.sport.is_none() {
        return Some(l4);
    }
    match tuple.proto {
        PROTO_TCP => {
            let off = usize::from(*pkt.get(l4 + 12)? >> 4) * 4;
            (off >= 20 && l4 + off <= pkt.len()).then_some(l4 + off)
        }
        PROTO_UDP => (l4 + 8 <= pkt.len()).then_some(l4 + 8),
        _ => Some(l4),
    }
}

fn parse_v4(pkt: &[u8]) -> Result<(FiveTuple, usize), ParseError> {
    need(pkt, 20, "IPv4 header")?;
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if ihl < 20 {
        return Err(ParseError::HeaderLength(ihl));
    }
    need(pkt, ihl, "IPv4 options")?;
    let proto = pkt[9];
    let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
    let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
    let frag_offset = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
    let (sport, dport) = if frag_offset != 0 {
        (None, None) // a later fragment carries no transport header
    } else {
        ports(proto, &pkt[ihl..])?
    };
    Ok((
        FiveTuple {
            src: src.into(),
            dst: dst.into(),
            proto,
            sport,
            dport,
        },
        ihl,
    ))
}

fn parse_v6(pkt: &[u8]) -> Result<(FiveTuple, usize), ParseError> {
    need(pkt, 40, "IPv6 header")?;
    let addr = |at: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&pkt[at..at + 16]);
        Ipv6Addr::from(b)
    };
    let (src, dst) = (addr(8), addr(24));
    let mut next = pkt[6];
    let mut at = 40;
    let mut later_fragment = false;
    // Walk the extension headers to the transport header (bounded: each step advances).
    loop {
        match next {
            0 | 43 | 60 => {
                need(pkt, at + 2, "IPv6 extension header")?;
                let len = (usize::from(pkt[at + 1]) + 1) * 8;
                need(pkt, at + len, "IPv6 extension header")?;
                next = pkt[at];
                at += len;
            }
            44 => {
                need(pkt, at + 8, "IPv6 fragment header")?;
                let offset = u16::from_be_bytes([pkt[at + 2], pkt[at + 3]]) >> 3;
                later_fragment = offset != 0;
                next = pkt[at];
                at += 8;
                if later_fragment {
                    break;
                }
            }
            _ => break,
        }
    }
    let (sport, dport) = if later_fragment {
        (None, None)
    } else {
        ports(next, &pkt[at..])?
    };
    Ok((
        FiveTuple {
            src: src.into(),
            dst: dst.into(),
            proto: next,
            sport,
            dport,
        },
        at,
    ))
}
