//! IPv4 flood packets crafted by hand for a raw (IP_HDRINCL) socket: UDP,
//! TCP SYN and ICMP echo, with correct IP and transport checksums.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

pub const IPV4_HEADER: usize = 20;
pub const UDP_HEADER: usize = 8;
pub const TCP_HEADER: usize = 20;
pub const ICMP_HEADER: usize = 8;

/// What a flood sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FloodProto {
    Udp,
    Syn,
    Icmp,
}

impl FloodProto {
    pub fn name(self) -> &'static str {
        match self {
            FloodProto::Udp => "udp",
            FloodProto::Syn => "syn",
            FloodProto::Icmp => "icmp",
        }
    }

    pub fn l4_header(self) -> usize {
        match self {
            FloodProto::Udp => UDP_HEADER,
            FloodProto::Syn => TCP_HEADER,
            FloodProto::Icmp => ICMP_HEADER,
        }
    }

    fn ip_proto(self) -> u8 {
        match self {
            FloodProto::Udp => 17,
            FloodProto::Syn => 6,
            FloodProto::Icmp => 1,
        }
    }
}

/// Adds `data` as big-endian 16-bit words to a ones'-complement sum
/// (an odd last byte is padded with zero, RFC 1071).
pub fn sum16(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits and complements it: the Internet checksum.
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum16(data, 0))
}

/// Per-packet variable parts.
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    pub src: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub ip_id: u16,
    /// TCP sequence number / ICMP echo sequence.
    pub seq: u32,
}

/// Writes packets of one flood: the payload and its checksum share are
/// computed once, the headers per packet.
pub struct Crafter {
    proto: FloodProto,
    dst: Ipv4Addr,
    payload: Vec<u8>,
    payload_sum: u64,
}

impl Crafter {
    pub fn new(proto: FloodProto, dst: Ipv4Addr, payload_size: usize) -> Crafter {
        // A recognisable, non-zero pattern (a zero payload hides checksum bugs).
        let payload: Vec<u8> = (0..payload_size).map(|i| (i % 251) as u8 + 1).collect();
        let payload_sum = sum16(&payload, 0);
        Crafter {
            proto,
            dst,
            payload,
            payload_sum,
        }
    }

    /// Length of every packet (IP header included).
    pub fn len(&self) -> usize {
        IPV4_HEADER + self.proto.l4_header() + self.payload.len()
    }

    /// Writes one packet into `buf` (at least `len()` bytes).
    pub fn write(&self, buf: &mut [u8], f: &Fields) {
        let total = self.len();
        let buf = &mut buf[..total];
        let l4_len = total - IPV4_HEADER;
        let (ip, rest) = buf.split_at_mut(IPV4_HEADER);
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&f.ip_id.to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
        ip[8] = 64;
        ip[9] = self.proto.ip_proto();
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&f.src.octets());
        ip[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());

        let hl = self.proto.l4_header();
        let (hdr, payload) = rest.split_at_mut(hl);
        payload.copy_from_slice(&self.payload);
        // Pseudo-header for UDP and TCP (RFC 768, RFC 793).
        let pseudo = || {
            let mut acc = sum16(&f.src.octets(), 0);
            acc = sum16(&self.dst.octets(), acc);
            acc + u64::from(self.proto.ip_proto()) + l4_len as u64
        };
        match self.proto {
            FloodProto::Udp => {
                hdr[0..2].copy_from_slice(&f.sport.to_be_bytes());
                hdr[2..4].copy_from_slice(&f.dport.to_be_bytes());
                hdr[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                hdr[6..8].copy_from_slice(&[0, 0]);
                let mut c = fold(sum16(hdr, pseudo()) + self.payload_sum);
                if c == 0 {
                    c = 0xffff; // 0 means "no checksum" in UDP
                }
                hdr[6..8].copy_from_slice(&c.to_be_bytes());
            }
            FloodProto::Syn => {
                hdr[0..2].copy_from_slice(&f.sport.to_be_bytes());
                hdr[2..4].copy_from_slice(&f.dport.to_be_bytes());
                hdr[4..8].copy_from_slice(&f.seq.to_be_bytes());
                hdr[8..12].copy_from_slice(&[0; 4]);
                hdr[12] = 0x50; // data offset 5 words, no options
                hdr[13] = 0x02; // SYN
                hdr[14..16].copy_from_slice(&64240u16.to_be_bytes());
                hdr[16..20].copy_from_slice(&[0; 4]);
                let c = fold(sum16(hdr, pseudo()) + self.payload_sum);
                hdr[16..18].copy_from_slice(&c.to_be_bytes());
            }
            FloodProto::Icmp => {
                hdr[0] = 8; // echo request
                hdr[1] = 0;
                hdr[2..4].copy_from_slice(&[0, 0]);
                hdr[4..6].copy_from_slice(&f.sport.to_be_bytes()); // identifier
                hdr[6..8].copy_from_slice(&(f.seq as u16).to_be_bytes());
                let c = fold(sum16(hdr, 0) + self.payload_sum);
                hdr[2..4].copy_from_slice(&c.to_be_bytes());
            }
        }
    }
}

/// xorshift64*: fast, good enough for ports and sequence numbers.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Fields {
        Fields {
            src: Ipv4Addr::new(198, 18, 3, 7),
            sport: 40000,
            dport: 9,
            ip_id: 0x1234,
            seq: 0xdead_beef,
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (checksum 220d).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&d), 0x220d);
        // Odd length pads with a zero byte.
        assert_eq!(checksum(&[0x01]), !0x0100);
    }

    #[test]
    fn known_ipv4_header() {
        // The classic example header (wikipedia "IPv4 header checksum"): b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
    }

    /// A packet whose checksums are right sums to zero (checksum 0) over
    /// the checksummed range, pseudo-header included.
    fn verify(pkt: &[u8], proto: FloodProto) {
        assert_eq!(checksum(&pkt[..20]), 0, "IP header checksum");
        let l4 = &pkt[20..];
        let sum = match proto {
            FloodProto::Icmp => sum16(l4, 0),
            _ => {
                let mut acc = sum16(&pkt[12..20], 0);
                acc += u64::from(pkt[9]) + l4.len() as u64;
                sum16(l4, acc)
            }
        };
        assert_eq!(fold(sum), 0, "{:?} checksum", proto);
    }

    #[test]
    fn checksums_verify_for_every_kind_and_odd_sizes() {
        let dst = Ipv4Addr::new(198, 18, 2, 2);
        for proto in [FloodProto::Udp, FloodProto::Syn, FloodProto::Icmp] {
            for size in [0usize, 1, 18, 31, 1400] {
                let c = Crafter::new(proto, dst, size);
                let mut buf = vec![0u8; c.len()];
                c.write(&mut buf, &fields());
                assert_eq!(buf.len(), 20 + proto.l4_header() + size);
                verify(&buf, proto);
                assert_eq!(u16::from_be_bytes([buf[2], buf[3]]) as usize, buf.len());
                assert_eq!(&buf[16..20], &dst.octets());
            }
        }
    }

    #[test]
    fn syn_header_fields() {
        let c = Crafter::new(FloodProto::Syn, Ipv4Addr::new(198, 18, 2, 2), 0);
        let mut buf = vec![0u8; c.len()];
        c.write(&mut buf, &fields());
        assert_eq!(buf[9], 6);
        assert_eq!(buf[20 + 13], 0x02, "only SYN set");
        assert_eq!(&buf[24..28], &0xdead_beefu32.to_be_bytes());
        assert_eq!(u16::from_be_bytes([buf[22], buf[23]]), 9);
    }

    #[test]
    fn a_corrupted_byte_breaks_the_checksum() {
        let c = Crafter::new(FloodProto::Udp, Ipv4Addr::new(198, 18, 2, 2), 18);
        let mut buf = vec![0u8; c.len()];
        c.write(&mut buf, &fields());
        buf[30] ^= 0x40;
        let mut acc = sum16(&buf[12..20], 0);
        acc += 17 + (buf.len() - 20) as u64;
        assert_ne!(fold(sum16(&buf[20..], acc)), 0);
    }
}
