//! The virtual clients' draws: splitmix64 seeded by the spec's `seed` and the
//! client's id, so a run's fetches can be drawn again.

/// splitmix64: a small, seedable generator (each virtual client its own).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: &str, client: u64) -> Rng {
        // FNV-1a over the seed text, mixed with the client's id.
        let mut h: u64 = 0xcbf29ce484222325;
        for b in seed.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        Rng(h ^ client.wrapping_mul(0x9e3779b97f4a7c15))
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn pick<'a, T>(&mut self, list: &'a [T]) -> &'a T {
        &list[(self.next() % list.len() as u64) as usize]
    }
}
