//! The `Source` contract of FLIP-27 (Flink's `Source`): a source ties its split,
//! enumerator, reader and checkpoint types together and creates the enumerator and the readers.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::enumerator::SplitEnumerator;
use super::reader::SourceReader;
use super::split::SourceSplit;
use crate::error::Result;

/// Whether the source ends on its own (Flink's `Boundedness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundedness {
    /// Every split has an end and the enumerator eventually signals no more splits.
    Bounded,
    /// The source runs until stopped.
    ContinuousUnbounded,
}

/// A source: the factory of its enumerator and readers (Flink's `Source`).
///
/// The associated types are serialized with serde into the state file, so they are the
/// split and enumerator-state serializers of Flink.
pub trait Source: Send + Sync + 'static {
    /// Its unit of work (a Kafka partition).
    type Split: SourceSplit;
    /// The enumerator's checkpoint.
    type EnumeratorState: Serialize + DeserializeOwned + Clone + Send + 'static;
    /// Discovers and assigns splits.
    type Enumerator: SplitEnumerator<Split = Self::Split, State = Self::EnumeratorState>;
    /// Reads assigned splits.
    type Reader: SourceReader<Split = Self::Split, Output = Self::Output>;
    /// What the readers emit downstream.
    type Output: super::emitter::RecordPosition + Send + 'static;

    /// A short name stored in the state file ("kafka", "datagen"); a state file written by
    /// another kind of source is rejected.
    fn kind(&self) -> &'static str;

    /// Whether its input ends on its own.
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

    /// This instance's share of the job's state when the instance count (`job.instance.count`)
    /// changed: `parts` are the enumerator state and split snapshots of every instance of the
    /// run before, and the answer is the enumerator state and the snapshots of the splits this
    /// instance owns now, for a job of `parallelism` readers. Every split of `parts` must end up
    /// with exactly one instance of the new count (each instance cuts its share from the same
    /// parts), the one that would own it were it discovered now. Parts come oldest first; where
    /// two hold a split (a consumer group's members, [`crate::CheckpointStore::parts_may_overlap`]),
    /// the later one's stands. The default refuses: a source
    /// whose splits cannot move between instances.
    fn reshare(&self, parts: Vec<Share<Self>>, parallelism: usize) -> Result<Share<Self>> {
        let _ = (parts, parallelism);
        Err(crate::error::Error::config(
            "job.instance.count",
            format!(
                "changed since the job's state was written, and the {} source's state cannot move between \
                 instances: finish the job with the count that wrote it, or start over with --reset-state",
                self.kind()
            ),
        ))
    }
}

/// An instance's part of a job's state: its enumerator's state and its splits' snapshots (see
/// [`Source::reshare`]).
pub type Share<S> = (
    <S as Source>::EnumeratorState,
    Vec<super::split::SplitSnapshot<<S as Source>::Split>>,
);

/// This process's share of a job that runs as several processes (`job.instance`): an instance
/// takes only the work whose owner slot modulo `count` is its `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// This instance's index, from 0.
    pub index: usize,
    /// How many instances share the job.
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
    /// The reader's index, from 0.
    pub index: usize,
    /// The job's number of readers.
    pub parallelism: usize,
    /// Counters of this reader's fetch hand-off, shared with the job's statistics.
    pub fetch_stats: Arc<super::fetcher::FetchStats>,
    /// The job's event-time clock, when the source asked for one ([`Source::event_time`]).
    pub event_time: Option<Arc<super::event_time::EventTimeClock>>,
    /// The job's pause switch and rate limits ([`super::throttle::Throttle`]), which readers
    /// holding records back for event time obey per record.
    pub throttle: Arc<super::throttle::Throttle>,
}
