//! Message contents, made once per thread before the hot loop: random
//! (incompressible), zeros, or English-like text (compressible).

use serde::{Deserialize, Serialize};

/// What the bytes of a message are (the spec's `payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Payload {
    Random,
    Zeros,
    Text,
}

/// xorshift64*: fast, no dependency, good enough for payload bytes.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "network", "packet",
    "firewall", "traffic", "server", "client", "measure", "security", "rule", "time", "people",
    "between", "through", "system", "number", "could", "about", "other", "into", "after", "first",
    "some", "what", "only", "over", "new", "also", "because", "any", "these", "two", "may", "each",
    "then", "where", "most", "such", "many", "those", "very", "through",
];

fn fill_text(buf: &mut [u8], rng: &mut Rng) {
    let mut i = 0;
    let mut words_in_sentence = 0;
    while i < buf.len() {
        let w = WORDS[(rng.next_u64() % WORDS.len() as u64) as usize].as_bytes();
        let mut piece: Vec<u8> = Vec::with_capacity(w.len() + 2);
        if words_in_sentence == 0 {
            piece.push(w[0].to_ascii_uppercase());
            piece.extend_from_slice(&w[1..]);
        } else {
            piece.extend_from_slice(w);
        }
        words_in_sentence += 1;
        if words_in_sentence > 6 && rng.next_u64().is_multiple_of(5) {
            piece.extend_from_slice(if rng.next_u64().is_multiple_of(8) {
                b".\n"
            } else {
                b". "
            });
            words_in_sentence = 0;
        } else {
            piece.push(b' ');
        }
        let n = piece.len().min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&piece[..n]);
        i += n;
    }
}

/// A buffer of `len` bytes of the given payload; `seed` varies it per thread.
pub fn make(kind: Payload, len: usize, seed: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut rng = Rng::new(seed.wrapping_add(0x5EC9_E8F0));
    match kind {
        Payload::Zeros => {}
        Payload::Random => {
            for chunk in buf.chunks_mut(8) {
                let v = rng.next_u64().to_le_bytes();
                chunk.copy_from_slice(&v[..chunk.len()]);
            }
        }
        Payload::Text => fill_text(&mut buf, &mut rng),
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_kinds() {
        assert!(make(Payload::Zeros, 100, 1).iter().all(|&b| b == 0));
        let r = make(Payload::Random, 4096, 1);
        let distinct = r.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 200, "random payload too uniform: {}", distinct);
        let t = make(Payload::Text, 4096, 1);
        assert!(t.iter().all(|b| b.is_ascii()));
        let spaces = t.iter().filter(|&&b| b == b' ').count();
        assert!(spaces > 400, "text should be words: {} spaces", spaces);
        assert_eq!(make(Payload::Text, 7, 3).len(), 7);
    }
}
