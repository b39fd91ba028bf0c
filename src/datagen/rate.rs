//! One rate for the whole data generator, on an absolute schedule: slot `n` (counted over every
//! reader) is due at `start + n / rate`. Readers claim slots as they go, so the rate is shared by
//! exactly the readers that have work, and a late reader catches up instead of drifting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shared schedule.
#[derive(Debug)]
pub struct RateLimiter {
    start: Instant,
    rate: f64,
    next_slot: AtomicU64,
    /// Slots per claim: about 5 ms of records, so batches stay smooth at any rate.
    chunk: u64,
}

impl RateLimiter {
    pub fn new(rate: f64, max_chunk: usize) -> Self {
        let chunk = ((rate / 200.0) as u64).clamp(1, max_chunk.max(1) as u64);
        RateLimiter {
            start: Instant::now(),
            rate,
            next_slot: AtomicU64::new(0),
            chunk,
        }
    }

    /// Claim up to `want` consecutive slots; returns how many and when the first is due.
    pub fn claim(&self, want: u64) -> (u64, Instant) {
        let n = want.clamp(1, self.chunk);
        let first = self.next_slot.fetch_add(n, Ordering::Relaxed);
        (n, self.start + Duration::from_secs_f64(first as f64 / self.rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_an_absolute_schedule_across_claimers() {
        let limiter = RateLimiter::new(1000.0, 100);
        let (n1, d1) = limiter.claim(50);
        let (n2, d2) = limiter.claim(50);
        assert_eq!((n1, n2), (5, 5));
        assert_eq!(d2 - d1, Duration::from_millis(5));
        // a claim from another reader continues the same schedule
        let (_, d3) = limiter.claim(1);
        assert_eq!(d3 - d1, Duration::from_millis(10));
    }
}
