//! Token-bucket pacing against an absolute schedule, so the long-run rate
//! is exact (no drift from sleep overshoot); a sender that falls behind may
//! catch up by at most one bucket.

use std::time::{Duration, Instant};

pub struct Pacer {
    start: Instant,
    bytes_per_s: f64,
    credited: f64,
    depth_s: f64,
}

impl Pacer {
    /// `rate_bps` in bits/s; the bucket holds 10 ms or two messages, whichever is larger.
    pub fn new(rate_bps: f64, message_size: usize) -> Pacer {
        let bytes_per_s = (rate_bps / 8.0).max(1.0);
        let depth_s = (0.010f64).max(2.0 * message_size as f64 / bytes_per_s);
        Pacer {
            start: Instant::now(),
            bytes_per_s,
            credited: 0.0,
            depth_s,
        }
    }

    /// How long to wait before sending `n` more bytes (zero: send now).
    pub fn delay(&mut self, n: usize) -> Duration {
        let now = Instant::now();
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let due = self.credited / self.bytes_per_s;
        if elapsed - due > self.depth_s {
            // Far behind schedule: forfeit the excess credit instead of bursting.
            self.credited = (elapsed - self.depth_s) * self.bytes_per_s;
        }
        let due = self.credited / self.bytes_per_s;
        self.credited += n as f64;
        if due > elapsed {
            Duration::from_secs_f64(due - elapsed)
        } else {
            Duration::ZERO
        }
    }

    /// Blocks until `n` bytes may go, or returns false if `cancel` says stop.
    pub fn wait(&mut self, n: usize, cancel: impl Fn() -> bool) -> bool {
        let mut d = self.delay(n);
        // Sleep in slices so a long gap (slow rate, big message) still sees a stop.
        while !d.is_zero() {
            if cancel() {
                return false;
            }
            let slice = d.min(Duration::from_millis(100));
            std::thread::sleep(slice);
            d -= slice;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_rate_is_close() {
        // 8 Mbit/s = 1 MB/s with 10 kB messages for 0.3 s → about 300 kB.
        let mut p = Pacer::new(8e6, 10_000);
        let t0 = Instant::now();
        let mut sent = 0usize;
        while t0.elapsed() < Duration::from_millis(300) {
            assert!(p.wait(10_000, || false));
            sent += 10_000;
        }
        let rate = sent as f64 / t0.elapsed().as_secs_f64();
        assert!((rate - 1e6).abs() / 1e6 < 0.1, "rate {} B/s", rate);
    }
}
