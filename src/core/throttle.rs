//! What a running job may emit, changeable while it runs (the `POST /control` surface): a pause
//! switch every reader driver obeys, and one rate limit in records/s and bytes/s shared by every
//! reader of the job (a token bucket holding at most 10 ms of records, so neither a pause nor a
//! lowered rate is ever "caught up" in a burst afterwards). Readers that hold records back for
//! event time ask it per record before releasing one (see `held`), so held records wait for it
//! exactly as they wait for the pacing clock: checkpoint barriers still flow past them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
// the runtime's clock: the system's, virtual under a simulation (sim::now)
use tokio::time::Instant;

use tokio::sync::watch;

/// The most the bucket holds, in seconds of the rate: the largest burst after an idle spell.
const BURST_SECONDS: f64 = 0.01;

/// What [`Throttle::admit`] says about the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Emit it (its tokens are taken).
    Now,
    /// Not before this instant, or until the limits change.
    At(Instant),
    /// Paused: wait for a change.
    Wait,
}

#[derive(Debug)]
struct Bucket {
    /// Records per second; `None`: unlimited.
    rate: Option<f64>,
    /// Key and value bytes per second; `None`: unlimited.
    bytes_rate: Option<f64>,
    tokens: f64,
    /// May fall below zero by one record's size: a record larger than the bucket still passes.
    byte_tokens: f64,
    last: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        if let Some(r) = self.rate {
            self.tokens = (self.tokens + dt * r).min(cap(r));
        }
        if let Some(b) = self.bytes_rate {
            self.byte_tokens = (self.byte_tokens + dt * b).min(cap(b));
        }
    }
}

fn cap(rate: f64) -> f64 {
    (rate * BURST_SECONDS).max(1.0)
}

/// The job's emission control: pause and rate limits, shared by its readers.
#[derive(Debug)]
pub struct Throttle {
    /// The configured limits were applied (by the session's first run): later runs keep what
    /// the session made of them since.
    configured: AtomicBool,
    paused: AtomicBool,
    /// Whether any limit is set (a quick test without the lock).
    limited: AtomicBool,
    bucket: Mutex<Bucket>,
    /// Bumped at every change, so waiting readers re-check at once.
    version: watch::Sender<u64>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            configured: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            limited: AtomicBool::new(false),
            bucket: Mutex::new(Bucket {
                rate: None,
                bytes_rate: None,
                tokens: 0.0,
                byte_tokens: 0.0,
                last: Instant::now(),
            }),
            version: watch::channel(0).0,
        }
    }
}

impl Throttle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver whose `changed()` completes at the next change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Set both limits (`None`: unlimited). Takes effect for the next record: the bucket keeps
    /// what it earned at the old rate up to now, at most the new burst.
    pub fn set_limits(&self, rate: Option<f64>, bytes_rate: Option<f64>) {
        let now = Instant::now();
        let mut b = self.lock();
        b.refill(now);
        // a limit newly set starts empty: no burst of what "unlimited" never counted
        b.tokens = match (b.rate, rate) {
            (Some(_), Some(r)) => b.tokens.min(cap(r)),
            _ => 0.0,
        };
        b.byte_tokens = match (b.bytes_rate, bytes_rate) {
            (Some(_), Some(r)) => b.byte_tokens.min(cap(r)),
            _ => 0.0,
        };
        b.rate = rate;
        b.bytes_rate = bytes_rate;
        self.limited
            .store(rate.is_some() || bytes_rate.is_some(), Ordering::Relaxed);
        drop(b);
        self.changed();
    }

    /// The limits a job starts with (its source's config): applied by the first run of a
    /// session only, so that a change made while it ran (`POST /control`) carries over to its
    /// next runs (a group member's, after a rebalance).
    pub fn configure(&self, rate: Option<f64>, bytes_rate: Option<f64>) {
        if !self.configured.swap(true, Ordering::SeqCst) && (rate.is_some() || bytes_rate.is_some()) {
            self.set_limits(rate, bytes_rate);
        }
    }

    /// The limits: records/s and bytes/s.
    pub fn limits(&self) -> (Option<f64>, Option<f64>) {
        let b = self.lock();
        (b.rate, b.bytes_rate)
    }

    /// Pause or resume; returns whether it changed. A resumed bucket earns nothing for the time
    /// it was paused.
    pub fn set_paused(&self, paused: bool) -> bool {
        let was = self.paused.swap(paused, Ordering::SeqCst);
        if was != paused {
            if !paused {
                let mut b = self.lock();
                let now = Instant::now();
                b.last = now;
            }
            self.changed();
        }
        was != paused
    }

    /// Whether the job is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// May a record of `bytes` (key and value) be emitted now? Takes its tokens if so.
    pub fn admit(&self, bytes: u64, now: Instant) -> Admit {
        if self.is_paused() {
            return Admit::Wait;
        }
        if !self.limited.load(Ordering::Relaxed) {
            return Admit::Now;
        }
        let mut b = self.lock();
        b.refill(now);
        let mut wait = 0.0f64;
        if let Some(r) = b.rate {
            if b.tokens < 1.0 {
                wait = wait.max((1.0 - b.tokens) / r);
            }
        }
        if let Some(r) = b.bytes_rate {
            if b.byte_tokens < 0.0 {
                wait = wait.max(-b.byte_tokens / r);
            }
        }
        if wait > 0.0 {
            // rounded up to whole nanoseconds, at least one: a wait that rounds to no time at all
            // names `now`, where the bucket has earned nothing more (a clock standing still, as
            // the simulation's does, would spin on it)
            let nanos = (wait * 1e9).ceil().max(1.0);
            let wait = Duration::try_from_secs_f64(nanos / 1e9)
                .ok()
                .map(|d| d.max(Duration::from_nanos(1)));
            return match wait.and_then(|d| now.checked_add(d)) {
                Some(at) => Admit::At(at),
                None => Admit::Wait,
            };
        }
        if b.rate.is_some() {
            b.tokens -= 1.0;
        }
        if b.bytes_rate.is_some() {
            b.byte_tokens -= bytes as f64;
        }
        Admit::Now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(t: &Throttle, at: Instant, n: usize) -> usize {
        (0..n).filter(|_| t.admit(10, at) == Admit::Now).count()
    }

    #[test]
    fn a_rate_admits_its_records_per_second_and_no_burst_after_idling() {
        let t = Throttle::default();
        assert_eq!(admitted(&t, Instant::now(), 1000), 1000, "unlimited");
        t.set_limits(Some(1000.0), None);
        // the instant the limit took effect (not a later reading of the clock: a loaded machine's
        // millisecond between the two earned a token, and CI saw 1 admitted where 0 was due)
        let start = t.lock().last;
        // newly limited: empty, then 1 per ms
        assert_eq!(admitted(&t, start, 100), 0);
        assert_eq!(admitted(&t, start + Duration::from_millis(5), 100), 5);
        // idle for a second: at most the 10 ms bucket
        assert_eq!(admitted(&t, start + Duration::from_secs(1), 1000), 10);
        match t.admit(10, start + Duration::from_secs(1)) {
            Admit::At(at) => assert_eq!(at - start, Duration::from_millis(1001)),
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    /// A reader that sleeps until the instant `admit` names must then find progress there: a
    /// wait that rounds to no time at all spins a reader whose clock stands still (a simulated
    /// member spun at one virtual instant this way: group simulation seed 498247045).
    #[test]
    fn every_wait_named_ends_after_now_and_following_them_admits_at_the_rate() {
        for rate in [1.0, 3.0, 7.0, 246.0, 999.0, 12_345.0] {
            for bytes_rate in [None, Some(rate * 10.0 + 1.0)] {
                let t = Throttle::default();
                t.set_limits(Some(rate), bytes_rate);
                let start = Instant::now();
                let mut now = start;
                let mut admitted = 0u32;
                for _ in 0..20_000 {
                    match t.admit(10, now) {
                        Admit::Now => admitted += 1,
                        Admit::At(at) => {
                            assert!(at > now, "rate {rate}/{bytes_rate:?}: a wait until {at:?} at {now:?}");
                            now = at;
                        }
                        Admit::Wait => panic!("rate {rate}: not paused, yet told to wait"),
                    }
                    if admitted == 50 {
                        break;
                    }
                }
                assert_eq!(admitted, 50, "rate {rate}/{bytes_rate:?}: stuck at {:?}", now - start);
            }
        }
    }

    #[test]
    fn bytes_limit_and_pause() {
        let t = Throttle::default();
        t.set_limits(None, Some(100.0));
        let start = Instant::now();
        // a record passes while the bucket is not overdrawn (it may overdraw it), the next waits
        assert_eq!(t.admit(50, start), Admit::Now);
        match t.admit(50, start) {
            // (the bucket earned at most its 1 byte between the limit's setting and `start`)
            Admit::At(at) => assert!((490..=500).contains(&(at - start).as_millis()), "{:?}", at - start),
            other => panic!("expected a wait, got {other:?}"),
        }
        // 500 ms later the 50 bytes are paid back; the bucket holds at most 10 ms (1 byte)
        let later = start + Duration::from_secs(5);
        assert_eq!(t.admit(50, later), Admit::Now);
        assert!(matches!(t.admit(50, later), Admit::At(_)), "overdrawn");
        t.set_paused(true);
        assert_eq!(t.admit(1, later + Duration::from_secs(10)), Admit::Wait);
        t.set_limits(None, None);
        assert_eq!(t.admit(1, later), Admit::Wait, "paused wins over unlimited");
        assert!(t.set_paused(false));
        assert_eq!(t.admit(1, later), Admit::Now);
    }
}
