//! The latency probe's payload and the load frame's payload word (kind
//! latency, docs/engine-protocol.md). A probe cannot carry its own TX stamp
//! (the kernel takes it as the packet leaves), so each carries the stamp of an
//! earlier probe of the same sender, `back` probes before it (two-step, as
//! PTP's follow-up).
//!
//! Probe payload (18 bytes, the most a 64-byte IPv4 frame holds):
//! `[0..8]` seq (bit 63: follow-up only, bit 62: in the measured window),
//! `[8..16]` TX stamp ns (CLOCK_REALTIME), `[16..18]` back (bit 15: the TX
//! stamp is a user-space one: unstamped). A load frame's first word has bit 61
//! set (and bit 62 in the measured window); probes' sequence numbers stay below it.

pub const HEADER: usize = 18;
const FOLLOWUP: u64 = 1 << 63;
const MEASURED: u64 = 1 << 62;
/// Payload word bit: a load frame, not a probe (counted, never stamped).
pub const LOAD: u64 = 1 << 61;
/// Sequence numbers stay below the load bit.
const SEQ_MASK: u64 = LOAD - 1;
const FALLBACK: u16 = 0x8000;
/// Stamps further back than this cannot be carried (the `back` field).
pub const BACK_MAX: u64 = 0x7fff;

/// UDP payload of a probe for an on-wire frame of `frame` bytes (14 B
/// Ethernet header and 4 B FCS included).
pub fn payload_len(frame: usize, v6: bool) -> usize {
    frame.saturating_sub(18 + if v6 { 40 } else { 20 } + 8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub seq: u64,
    pub tx_ns: u64,
    pub fallback: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// None for a follow-up-only datagram.
    pub seq: Option<u64>,
    pub measured: bool,
    pub stamp: Option<Stamp>,
}

pub fn encode(buf: &mut [u8], p: &Probe) {
    let (word, back) = match (p.seq, p.stamp) {
        (Some(seq), st) => {
            let back = st.map(|s| seq.saturating_sub(s.seq)).unwrap_or(0);
            (seq & SEQ_MASK, back as u16)
        }
        (None, Some(s)) => (FOLLOWUP | (s.seq & SEQ_MASK), 0),
        (None, None) => (FOLLOWUP, 0),
    };
    let word = word | if p.measured { MEASURED } else { 0 };
    let fb = if p.stamp.is_some_and(|s| s.fallback) {
        FALLBACK
    } else {
        0
    };
    buf[0..8].copy_from_slice(&word.to_le_bytes());
    buf[8..16].copy_from_slice(&p.stamp.map(|s| s.tx_ns).unwrap_or(0).to_le_bytes());
    buf[16..18].copy_from_slice(&(back | fb).to_le_bytes());
}

pub fn decode(buf: &[u8]) -> Option<Probe> {
    if buf.len() < HEADER {
        return None;
    }
    let word = u64::from_le_bytes(buf[0..8].try_into().ok()?);
    let tx_ns = u64::from_le_bytes(buf[8..16].try_into().ok()?);
    let b = u16::from_le_bytes(buf[16..18].try_into().ok()?);
    let seq = word & SEQ_MASK;
    let fallback = b & FALLBACK != 0;
    let back = (b & !FALLBACK) as u64;
    let measured = word & MEASURED != 0;
    if word & FOLLOWUP != 0 {
        return Some(Probe {
            seq: None,
            measured,
            stamp: Some(Stamp {
                seq,
                tx_ns,
                fallback,
            }),
        });
    }
    let stamp = (back > 0 && back <= seq).then_some(Stamp {
        seq: seq - back,
        tx_ns,
        fallback,
    });
    Some(Probe {
        seq: Some(seq),
        measured,
        stamp,
    })
}

/// A load frame's payload word: `Some(measured)`; None if it is not one.
pub fn load_word(payload: &[u8]) -> Option<bool> {
    let w = u64::from_le_bytes(payload.get(0..8)?.try_into().ok()?);
    (w & LOAD != 0 && w & FOLLOWUP == 0).then_some(w & MEASURED != 0)
}

/// Writes load frame number `n`'s payload (its word, then zeros).
pub fn write_load(payload: &mut [u8], n: u64, measured: bool) {
    let w = LOAD | (n & (LOAD - 1)) | if measured { MEASURED } else { 0 };
    payload[0..8].copy_from_slice(&w.to_le_bytes());
    for b in payload[8..].iter_mut() {
        *b = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, stamp: Option<(u64, u64)>) -> Probe {
        Probe {
            seq: Some(seq),
            measured: true,
            stamp: stamp.map(|(s, t)| Stamp {
                seq: s,
                tx_ns: t,
                fallback: false,
            }),
        }
    }

    #[test]
    fn wire_round_trip() {
        let mut b = [0u8; HEADER];
        for p in [
            probe(5, Some((4, 123))),
            probe(0, None),
            Probe {
                seq: None,
                measured: false,
                stamp: Some(Stamp {
                    seq: 9,
                    tx_ns: 77,
                    fallback: true,
                }),
            },
        ] {
            encode(&mut b, &p);
            assert_eq!(decode(&b), Some(p));
        }
        assert_eq!(decode(&b[..17]), None);
    }

    #[test]
    fn probes_are_not_load_frames() {
        let mut b = [0u8; HEADER];
        encode(
            &mut b,
            &Probe {
                seq: Some(5),
                measured: true,
                stamp: None,
            },
        );
        assert_eq!(load_word(&b), None);
        write_load(&mut b, 5, false);
        assert_eq!(load_word(&b), Some(false));
    }

    #[test]
    fn payload_fits_a_64_byte_frame() {
        assert_eq!(payload_len(64, false), HEADER);
        assert!(payload_len(64, true) < HEADER);
    }
}
