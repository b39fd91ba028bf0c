//! The blocking split reader a fetcher thread drives (Flink's `SplitReader`), and the batch it
//! hands to the reader (Flink's `RecordsWithSplitIds`).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::split::{FinishReason, SourceSplit, SplitId};
use crate::error::Result;

/// One fetch: records grouped by split, and the splits that finished in this fetch.
#[derive(Debug)]
pub struct RecordsWithSplitIds<E> {
    /// Records per split, in split order as fetched.
    pub records: Vec<(SplitId, Vec<E>)>,
    /// Splits finished by this fetch, after the records above.
    pub finished: Vec<(SplitId, FinishReason)>,
    /// Splits whose fetch reached the end of their log after the records above (for event
    /// time: the pacing clock does not wait for their first record, see [`crate::event_time`]).
    pub caught_up: Vec<SplitId>,
    /// Splits confirmed, at these wall-clock milliseconds, to have nothing in their log past
    /// their position, no open transaction either: whatever they read later was written after
    /// (for a source-wide stop, see [`crate::event_time`]).
    pub confirmed_caught_up: Vec<(SplitId, i64)>,
}

impl<E> Default for RecordsWithSplitIds<E> {
    fn default() -> Self {
        RecordsWithSplitIds {
            records: Vec::new(),
            finished: Vec::new(),
            caught_up: Vec::new(),
            confirmed_caught_up: Vec::new(),
        }
    }
}

impl<E> RecordsWithSplitIds<E> {
    /// Whether it carries nothing: no record, no finished or caught-up split.
    pub fn is_empty(&self) -> bool {
        self.finished.is_empty()
            && self.caught_up.is_empty()
            && self.confirmed_caught_up.is_empty()
            && self.records.iter().all(|(_, r)| r.is_empty())
    }

    /// Records it carries, over every split.
    pub fn record_count(&self) -> usize {
        self.records.iter().map(|(_, r)| r.len()).sum()
    }
}

/// Splits added to or removed from a split reader (Flink's `SplitsChange`).
#[derive(Debug)]
pub enum SplitsChange<S> {
    /// Start reading these splits.
    Add(Vec<S>),
    /// Stop reading these splits.
    Remove(Vec<SplitId>),
}

/// Wakes a split reader blocked in `fetch` from another thread.
pub type WakeUpHandle = Arc<dyn Fn() + Send + Sync>;

/// A sleep another thread can cut short: for split readers that wait in `fetch` (for a rate, a
/// schedule) and hand out its [`WakeableSleep::handle`] as their [`WakeUpHandle`].
#[derive(Clone, Default)]
pub struct WakeableSleep {
    state: Arc<(Mutex<bool>, Condvar)>,
}

impl WakeableSleep {
    /// A sleep nobody woke yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleep up to `timeout`: true if it elapsed, false if woken first (the wake-up is used up).
    pub fn sleep(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.state;
        let mut woken = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if *woken {
                *woken = false;
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            woken = cv
                .wait_timeout(woken, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Sleep until `due`: true if it came, false if woken first.
    pub fn sleep_until(&self, due: Instant) -> bool {
        self.sleep(due.saturating_duration_since(Instant::now()))
    }

    /// The handle that wakes this sleep (a wake-up with nobody asleep ends the next sleep at once).
    pub fn handle(&self) -> WakeUpHandle {
        let state = Arc::clone(&self.state);
        Arc::new(move || {
            let (lock, cv) = &*state;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cv.notify_all();
        })
    }
}

/// Reads records of its splits with blocking I/O, on a fetcher thread (Flink's `SplitReader`).
pub trait SplitReader: Send + 'static {
    /// What a fetch returns per record, before the emitter.
    type Element: Send + 'static;
    /// The splits it reads.
    type Split: SourceSplit;

    /// Fetch the next batch; may block, but briefly (a poll timeout), so split changes are seen.
    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Self::Element>>;

    /// Apply split additions and removals. Removed splits must not appear in later batches.
    fn handle_splits_changes(&mut self, change: SplitsChange<Self::Split>) -> Result<()>;

    /// A handle that interrupts a blocked `fetch`, if the reader can be interrupted.
    fn wake_up_handle(&self) -> Option<WakeUpHandle> {
        None
    }

    /// Pause and resume splits (Flink's `pauseOrResumeSplits`, for alignment).
    fn pause_or_resume_splits(&mut self, _pause: &[SplitId], _resume: &[SplitId]) -> Result<()> {
        Ok(())
    }

    /// The fetcher ends: release what the reader holds.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_up_ends_the_sleep_early_and_is_used_once() {
        let sleep = WakeableSleep::new();
        let wake = sleep.handle();
        wake();
        assert!(
            !sleep.sleep(Duration::from_secs(30)),
            "a stored wake-up ends the next sleep"
        );
        assert!(sleep.sleep(Duration::from_millis(1)), "and only that one");
        let sleeper = sleep.clone();
        let t = std::thread::spawn(move || sleeper.sleep(Duration::from_secs(30)));
        while !t.is_finished() {
            wake();
            std::thread::yield_now();
        }
        assert!(!t.join().unwrap());
    }
}
