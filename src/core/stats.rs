//! A running job's live counters (records emitted, written, filtered; checkpoints; each reader's
//! fetch hand-off), read by metrics, progress and `/status` while the job runs.

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Records read and not emitted because they could not be decoded (`decode_errors = "skip"`).
    pub records_skipped: AtomicU64,
    /// Checkpoints completed (durable).
    pub checkpoints_completed: AtomicU64,
    /// Checkpoints that failed (the job fails with the first).
    pub checkpoint_failures: AtomicU64,
    /// Duration of the last completed checkpoint, in milliseconds.
    pub last_checkpoint_ms: AtomicU64,
    /// Offsets the assigned bounded splits hold (an upper bound of their records); see
    /// [`JobStats::expected`] for the records a person can expect.
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
    /// A run is going on: its state restored, its sink recovered, its enumerator started; false
    /// again once the run ends (`/ready`).
    pub running: std::sync::atomic::AtomicBool,
    /// The job's end in this process, once it has ended (what `/status` says while the endpoint
    /// lingers).
    pub ended: std::sync::OnceLock<JobEnd>,
    /// The last run was stopped short of its input (a signal, `job.max_duration`, a group
    /// member's revocation or departure) rather than finishing it.
    pub stopped_short: std::sync::atomic::AtomicBool,
    /// A group member's consumer group protocol ("consumer" or "classic"), once it joined.
    pub group_protocol: Mutex<Option<&'static str>>,
    /// A group member's runs of the job so far: one per change of its own assignment that its
    /// running job could not take in place.
    pub group_runs: AtomicU64,
    /// Partitions a group member's running jobs gave up without stopping.
    pub group_released: AtomicU64,
    /// Partitions a group member's running jobs took in without stopping.
    pub group_taken: AtomicU64,
}

/// How a job ended in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// It read its whole input (a job with no splits to read included).
    Finished,
    /// It was stopped short of its input.
    Stopped,
    /// It failed: the error's one-line text.
    Failed(String),
}

impl JobStats {
    /// Records done: written, and read but not written (filtered out, dead-lettered, skipped
    /// as undecodable).
    pub fn done(&self) -> u64 {
        self.records_written.load(Ordering::Relaxed)
            + self.records_filtered.load(Ordering::Relaxed)
            + self.records_diverted.load(Ordering::Relaxed)
            + self.records_skipped.load(Ordering::Relaxed)
    }

    /// The records a person can expect the job to read in all (progress, ETA, `/status`, the
    /// metrics): the offsets of the assigned bounded splits, less those of finished splits that
    /// no record came from; once the job has read its input, what it read (an upper bound until
    /// then: transaction markers are offsets without records).
    pub fn expected(&self) -> u64 {
        self.expected_records
            .load(Ordering::Relaxed)
            .saturating_sub(self.offsets_unread())
    }

    fn offsets_unread(&self) -> u64 {
        let readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        readers.iter().map(|r| r.offsets_unread.load(Ordering::Relaxed)).sum()
    }

    /// The input was read to its end: what it held is what was done, and [`Self::expected`]
    /// says so (100 %).
    pub fn settle_expected(&self) {
        self.expected_records
            .store(self.done() + self.offsets_unread(), Ordering::Relaxed);
    }
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
