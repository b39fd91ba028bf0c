//! A running job's live counters (records emitted, written, filtered; checkpoints; each reader's
//! fetch hand-off), read by metrics, progress and `/status` while the job runs.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::event_time::EventTimeClock;
use super::fetcher::FetchStats;

/// Live counters of a running job, shared with metrics and progress reporting.
#[derive(Debug, Default)]
pub struct JobStats {
    /// Records the readers emitted.
    pub records_emitted: AtomicU64,
    /// Records the sink wrote.
    pub records_written: AtomicU64,
    /// Records the source's filter rejected: read, never emitted.
    pub records_filtered: AtomicU64,
    /// Records the sink wrote elsewhere (dead letters), not counted as written.
    pub records_diverted: AtomicU64,
    /// Checkpoints completed (durable).
    pub checkpoints_completed: AtomicU64,
    /// Checkpoints that failed (the job fails with the first).
    pub checkpoint_failures: AtomicU64,
    /// Duration of the last completed checkpoint, in milliseconds.
    pub last_checkpoint_ms: AtomicU64,
    /// Records the assigned bounded splits hold (an upper bound), for progress and ETA.
    pub expected_records: AtomicU64,
    /// Each reader's fetch hand-off counters.
    pub readers: Mutex<Vec<Arc<FetchStats>>>,
    /// The event-time clock of the job running now, when it paces, limits its rate or stops
    /// source-wide (replayed time, late records, the speed `POST /control` changes).
    pub event_time: ClockSlot,
    /// The source ends on its own (set at the start): an unbounded one has no expected total.
    pub bounded: std::sync::OnceLock<bool>,
    /// Pause and rate limits, changeable while the job runs (`POST /control`).
    pub throttle: Arc<super::throttle::Throttle>,
}

/// Where the running job's event-time clock is found. A session that runs its job again (a group
/// member's next assignment) puts each run's clock here in turn, so metrics, `/status` and
/// `POST /control` follow the run that is going on rather than the first one.
#[derive(Debug, Default)]
pub struct ClockSlot(Mutex<Option<Arc<EventTimeClock>>>);

impl ClockSlot {
    /// The clock of the run going on (or of the last one), if it has one.
    pub fn get(&self) -> Option<Arc<EventTimeClock>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A run's clock, in place of the run's before it, which is returned.
    pub fn set(&self, clock: Arc<EventTimeClock>) -> Option<Arc<EventTimeClock>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).replace(clock)
    }

    /// A run without a clock: the run's before it is not shown any more.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
