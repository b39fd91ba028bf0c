//! The `Source` contract of FLIP-27 (Flink's `Source` and `SourceSplit`): a source ties its split,
//! enumerator, reader and checkpoint types together and creates the enumerator and the readers.

use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::enumerator::SplitEnumerator;
use super::reader::SourceReader;
use crate::error::Result;

/// A split's stable id (`topic-partition` for Kafka). Cheap to clone.
pub type SplitId = Arc<str>;

/// Whether the source ends on its own (Flink's `Boundedness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundedness {
    /// Every split has an end and the enumerator eventually signals no more splits.
    Bounded,
    /// The source runs until stopped.
    ContinuousUnbounded,
}

/// A unit of work assigned to one reader (Flink's `SourceSplit`). The split value is also its
/// progress: readers update it as they emit, and checkpoints store it with serde.
pub trait SourceSplit: Clone + Debug + Send + Serialize + DeserializeOwned + 'static {
    /// Stable id, the same across restarts.
    fn split_id(&self) -> SplitId;

    /// Records left to read, when the split is bounded and says so (for progress and ETA).
    fn remaining(&self) -> Option<u64> {
        None
    }

    /// How output names it for people (default: its id); the Kafka split's is `topic:partition`.
    fn name(&self) -> String {
        self.split_id().to_string()
    }

    /// Its progress in words, for the end-of-run summary (default: its JSON).
    fn describe(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Move its progress back to just before the record at `position` (which was emitted into
    /// the reader but is still held back, see [`crate::event_time`]); false if it cannot.
    fn rewind_to(&mut self, _position: i64) -> bool {
        false
    }
}

/// Why a split stopped. Recorded in the state file so a restart never reads a finished split again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The position reached the split's stop (exclusive), or its bounded range is done.
    StoppingOffset,
    /// The end-of-stream evaluator matched a record (FLIP-208).
    EofRecord,
    /// The split was empty from the start (start >= stop).
    Empty,
    /// The split disappeared from its origin (a deleted partition, a removed event).
    Removed,
    /// The source-wide stop (`eof_scope = "source"`): its next record is at or after the
    /// timestamp of an end-of-stream record found in some split.
    SourceStop,
}

impl FinishReason {
    /// Every reason, in a fixed order (the index of each in per-reason counters).
    pub const ALL: [FinishReason; 5] = [
        FinishReason::StoppingOffset,
        FinishReason::EofRecord,
        FinishReason::Empty,
        FinishReason::Removed,
        FinishReason::SourceStop,
    ];

    /// The reason as the state file and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::StoppingOffset => "stopping_offset",
            FinishReason::EofRecord => "eof_record",
            FinishReason::Empty => "empty",
            FinishReason::Removed => "removed",
            FinishReason::SourceStop => "source_stop",
        }
    }
}

/// A finished split's reason, and where the EOF record was for [`FinishReason::EofRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    pub reason: FinishReason,
    /// The position of the matching record (its offset, for Kafka), when the reason is `eof_record`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
}

impl Finished {
    pub fn new(reason: FinishReason) -> Self {
        Finished { reason, at: None }
    }
}

/// A split as a checkpoint stores it: its current progress, and whether it is finished.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "S: SourceSplit")]
pub struct SplitSnapshot<S: SourceSplit> {
    pub split: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Finished>,
}

/// A source: the factory of its enumerator and readers (Flink's `Source`).
///
/// The associated types are serialized with serde into the state file, so they are the
/// split and enumerator-state serializers of Flink.
pub trait Source: Send + Sync + 'static {
    type Split: SourceSplit;
    /// The enumerator's checkpoint.
    type EnumeratorState: Serialize + DeserializeOwned + Clone + Send + 'static;
    type Enumerator: SplitEnumerator<Split = Self::Split, State = Self::EnumeratorState>;
    type Reader: SourceReader<Split = Self::Split, Output = Self::Output>;
    /// What the readers emit downstream.
    type Output: super::emitter::RecordPosition + Send + 'static;

    /// A short name stored in the state file ("kafka", "datagen"); a state file written by
    /// another kind of source is rejected.
    fn kind(&self) -> &'static str;

    fn boundedness(&self) -> Boundedness;

    /// A fresh enumerator, for a job without state.
    fn create_enumerator(&self) -> Result<Self::Enumerator>;

    /// An enumerator from its checkpoint.
    fn restore_enumerator(&self, state: Self::EnumeratorState) -> Result<Self::Enumerator>;

    /// Reader `index` of `parallelism`.
    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader>;

    /// What its readers' event time does (pacing, a source-wide stop); `None`: nothing.
    fn event_time(&self) -> Option<super::event_time::EventTimeOptions> {
        None
    }

    /// The records/s and bytes/s limits the job starts with (see [`super::throttle::Throttle`]);
    /// a source that sets one also asks for event time with `rate_limited`, so its readers obey it.
    fn rate_limits(&self) -> (Option<f64>, Option<f64>) {
        (None, None)
    }

    /// The settings its state depends on, stored with every checkpoint (`None`: nothing to check).
    fn settings_fingerprint(&self) -> Option<serde_json::Value> {
        None
    }

    /// A restore, given the state's stored fingerprint: refuse what the state does not fit (a
    /// config error naming the key), or accept (logging what changes).
    fn check_restore(&self, _stored: &serde_json::Value) -> Result<()> {
        Ok(())
    }
}

/// This process's share of a job that runs as several processes (`job.instance`): an instance
/// takes only the work whose owner slot modulo `count` is its `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub index: usize,
    pub count: usize,
}

impl Default for Instance {
    fn default() -> Self {
        Instance { index: 0, count: 1 }
    }
}

impl Instance {
    /// Whether this instance owns work item `slot` (dealt round-robin over the instances).
    pub fn owns(&self, slot: u64) -> bool {
        slot % self.count.max(1) as u64 == self.index as u64
    }

    /// Whether this instance owns the work named `key` (a stable hash of it, dealt like a slot:
    /// every instance computes the same owner).
    pub fn owns_key(&self, key: &str) -> bool {
        // FNV-1a: stable across processes and versions, unlike std's SipHash with random keys
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.owns(hash)
    }
}

/// What a reader knows of its place in the job (Flink's `SourceReaderContext`).
#[derive(Debug, Clone)]
pub struct ReaderContext {
    pub index: usize,
    pub parallelism: usize,
    /// Counters of this reader's fetch hand-off, shared with the job's statistics.
    pub fetch_stats: Arc<super::fetcher::FetchStats>,
    /// The job's event-time clock, when the source asked for one ([`Source::event_time`]).
    pub event_time: Option<Arc<super::event_time::EventTimeClock>>,
    /// The job's pause switch and rate limits ([`super::throttle::Throttle`]), which readers
    /// holding records back for event time obey per record.
    pub throttle: Arc<super::throttle::Throttle>,
}
