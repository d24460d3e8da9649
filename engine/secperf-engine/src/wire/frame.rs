//! Whole Ethernet frames for the AF_PACKET flood sender: one frame is built
//! in full, then every next packet only patches its variable fields (source
//! address, ports, IP id, sequence) and updates the IP and transport
//! checksums incrementally (RFC 1624), so no packet is checksummed in full.

use std::net::Ipv4Addr;

use crate::wire::packet::{fold, Crafter, Fields, FloodProto, IPV4_HEADER};

pub const ETH_HEADER: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// RFC 1624 eqn. 3: the checksum `hc` after the 16-bit words `(old, new)`
/// of the summed data changed: HC' = ~(~HC + ~m + m').
pub fn csum_update(hc: u16, changes: &[(u16, u16)]) -> u16 {
    let mut acc = u64::from(!hc);
    for &(old, new) in changes {
        acc += u64::from(!old) + u64::from(new);
    }
    fold(acc)
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Builds and patches the frames of one flood.
pub struct Framer {
    proto: FloodProto,
    crafter: Crafter,
    header: [u8; ETH_HEADER],
}

impl Framer {
    pub fn new(crafter: Crafter, proto: FloodProto, dst_mac: [u8; 6], src_mac: [u8; 6]) -> Framer {
        let mut header = [0u8; ETH_HEADER];
        header[0..6].copy_from_slice(&dst_mac);
        header[6..12].copy_from_slice(&src_mac);
        header[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        Framer {
            proto,
            crafter,
            header,
        }
    }

    /// Bytes of every frame (Ethernet header, no FCS).
    pub fn len(&self) -> usize {
        ETH_HEADER + self.crafter.len()
    }

    /// Writes a whole frame with checksums computed in full.
    pub fn build(&self, frame: &mut [u8], f: &Fields) {
        frame[..ETH_HEADER].copy_from_slice(&self.header);
        self.crafter.write(&mut frame[ETH_HEADER..], f);
    }

    /// Turns a frame built by `build` (or patched before) into the frame for
    /// `f`, touching only the fields that vary and both checksums.
    pub fn patch(&self, frame: &mut [u8], f: &Fields) {
        let ip = &mut frame[ETH_HEADER..];
        let l4 = IPV4_HEADER;
        let src = u32::from(f.src);
        let (src_hi, src_lo) = ((src >> 16) as u16, src as u16);
        let old_src = (get16(ip, 12), get16(ip, 14));
        let old_id = get16(ip, 4);
        // IP header: the id and the source address.
        let ip_changes = [(old_id, f.ip_id), (old_src.0, src_hi), (old_src.1, src_lo)];
        let c = csum_update(get16(ip, 10), &ip_changes);
        put16(ip, 4, f.ip_id);
        put16(ip, 12, src_hi);
        put16(ip, 14, src_lo);
        put16(ip, 10, c);
        match self.proto {
            FloodProto::Udp | FloodProto::Syn => {
                // The pseudo-header's source address and both ports; a SYN's
                // sequence number too. The checksum sits at 6 (UDP) or 16 (TCP).
                let syn = self.proto == FloodProto::Syn;
                let ch = [
                    (old_src.0, src_hi),
                    (old_src.1, src_lo),
                    (get16(ip, l4), f.sport),
                    (get16(ip, l4 + 2), f.dport),
                    (get16(ip, l4 + 4), (f.seq >> 16) as u16),
                    (get16(ip, l4 + 6), f.seq as u16),
                ];
                let (at, changed) = if syn { (l4 + 16, 6) } else { (l4 + 6, 4) };
                let mut c = csum_update(get16(ip, at), &ch[..changed]);
                if !syn && c == 0 {
                    c = 0xffff; // 0 means "no checksum" in UDP
                }
                put16(ip, l4, f.sport);
                put16(ip, l4 + 2, f.dport);
                if syn {
                    ip[l4 + 4..l4 + 8].copy_from_slice(&f.seq.to_be_bytes());
                }
                put16(ip, at, c);
            }
            FloodProto::Icmp => {
                // No pseudo-header: identifier and sequence only.
                let ch = [
                    (get16(ip, l4 + 4), f.sport),
                    (get16(ip, l4 + 6), f.seq as u16),
                ];
                let c = csum_update(get16(ip, l4 + 2), &ch);
                put16(ip, l4 + 4, f.sport);
                put16(ip, l4 + 6, f.seq as u16);
                put16(ip, l4 + 2, c);
            }
        }
    }
}

/// A MAC address as "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{:02x}", b))
        .collect::<Vec<_>>()
        .join(":")
}

/// An ARP request (RFC 826) for `target` from `src_mac`/`src_ip`, broadcast.
pub fn arp_request(src_mac: [u8; 6], src_ip: Ipv4Addr, target: Ipv4Addr) -> [u8; 42] {
    let mut f = [0u8; 42];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
    f[16..18].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    f[18] = 6;
    f[19] = 4;
    f[20..22].copy_from_slice(&1u16.to_be_bytes()); // request
    f[22..28].copy_from_slice(&src_mac);
    f[28..32].copy_from_slice(&src_ip.octets());
    // Target hardware address stays zero.
    f[38..42].copy_from_slice(&target.octets());
    f
}

/// The sender MAC of an ARP reply frame from `from`, if `frame` is one.
pub fn arp_reply_mac(frame: &[u8], from: Ipv4Addr) -> Option<[u8; 6]> {
    if frame.len() < 42 || get16(frame, 12) != 0x0806 || get16(frame, 20) != 2 {
        return None;
    }
    if frame[28..32] != from.octets() {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&frame[22..28]);
    Some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::packet::{checksum, Rng};

    const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    fn random_fields(r: &mut Rng) -> Fields {
        let a = r.next_u64();
        let b = r.next_u64();
        Fields {
            src: Ipv4Addr::from(a as u32),
            sport: (a >> 32) as u16,
            dport: (a >> 48) as u16,
            ip_id: b as u16,
            seq: (b >> 16) as u32,
        }
    }

    #[test]
    fn rfc1624_update_equals_full_recompute_on_random_words() {
        let mut r = Rng::new(7);
        for _ in 0..20_000 {
            let mut data: Vec<u8> = (0..20).map(|_| r.next_u64() as u8).collect();
            let hc = checksum(&data);
            let at = (r.next_u64() % 10) as usize * 2;
            let old = get16(&data, at);
            let new = r.next_u64() as u16;
            put16(&mut data, at, new);
            assert_eq!(csum_update(hc, &[(old, new)]), checksum(&data));
        }
    }

    /// Patching any frame into any other gives exactly the frame built in full.
    #[test]
    fn patched_frames_equal_frames_built_in_full() {
        let mut r = Rng::new(0x5eed);
        for proto in [FloodProto::Udp, FloodProto::Syn, FloodProto::Icmp] {
            for size in [0usize, 1, 18, 1400] {
                let framer = Framer::new(
                    Crafter::new(proto, Ipv4Addr::new(198, 18, 2, 2), size),
                    proto,
                    DST,
                    SRC,
                );
                let mut patched = vec![0u8; framer.len()];
                let mut full = vec![0u8; framer.len()];
                framer.build(&mut patched, &random_fields(&mut r));
                for _ in 0..5_000 {
                    let f = random_fields(&mut r);
                    framer.patch(&mut patched, &f);
                    framer.build(&mut full, &f);
                    assert_eq!(patched, full, "{:?} size {} fields {:?}", proto, size, f);
                }
            }
        }
    }

    #[test]
    fn frame_layout() {
        let framer = Framer::new(
            Crafter::new(FloodProto::Udp, Ipv4Addr::new(198, 18, 2, 2), 18),
            FloodProto::Udp,
            DST,
            SRC,
        );
        let mut f = vec![0u8; framer.len()];
        let fields = Fields {
            src: Ipv4Addr::new(198, 18, 4, 2),
            sport: 40000,
            dport: 9,
            ip_id: 1,
            seq: 0,
        };
        framer.build(&mut f, &fields);
        assert_eq!(f.len(), 14 + 46);
        assert_eq!(&f[0..6], &DST);
        assert_eq!(&f[6..12], &SRC);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14], 0x45);
        assert_eq!(&f[14 + 12..14 + 16], &[198, 18, 4, 2]);
        assert_eq!(checksum(&f[14..34]), 0);
    }

    #[test]
    fn macs_and_arp() {
        let m = parse_mac("02:0a:FF:00:01:9c").unwrap();
        assert_eq!(m, [2, 0x0a, 0xff, 0, 1, 0x9c]);
        assert_eq!(format_mac(&m), "02:0a:ff:00:01:9c");
        assert!(parse_mac("02:0a:ff:00:01").is_none());
        assert!(parse_mac("02:0a:ff:00:01:9c:00").is_none());
        let (me, them) = (Ipv4Addr::new(198, 18, 4, 2), Ipv4Addr::new(198, 18, 4, 1));
        let req = arp_request(SRC, me, them);
        assert_eq!(&req[0..6], &[0xff; 6]);
        assert_eq!(&req[38..42], &them.octets());
        // The reply swaps roles: op 2, sender = them.
        let mut rep = req;
        rep[20..22].copy_from_slice(&2u16.to_be_bytes());
        rep[22..28].copy_from_slice(&DST);
        rep[28..32].copy_from_slice(&them.octets());
        assert_eq!(arp_reply_mac(&rep, them), Some(DST));
        assert_eq!(arp_reply_mac(&rep, me), None);
        assert_eq!(arp_reply_mac(&req, them), None, "a request is not a reply");
    }
}
