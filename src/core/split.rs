//! Splits (Flink's `SourceSplit`): the unit of work a reader is assigned, its id, how it
//! finished, and the snapshot a checkpoint stores. Every other part of the runtime speaks of
//! splits, so this file depends on none of them.

use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A split's stable id (`topic-partition` for Kafka). Cheap to clone.
pub type SplitId = Arc<str>;

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
    /// Given up to another process mid-run (a group member's revoked partition): its position
    /// is where the next owner goes on, so a restore by that owner reads it as unfinished.
    Released,
}

impl FinishReason {
    /// Every reason, in a fixed order (the index of each in per-reason counters).
    pub const ALL: [FinishReason; 6] = [
        FinishReason::StoppingOffset,
        FinishReason::EofRecord,
        FinishReason::Empty,
        FinishReason::Removed,
        FinishReason::SourceStop,
        FinishReason::Released,
    ];

    /// The reason as the state file and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::StoppingOffset => "stopping_offset",
            FinishReason::EofRecord => "eof_record",
            FinishReason::Empty => "empty",
            FinishReason::Removed => "removed",
            FinishReason::SourceStop => "source_stop",
            FinishReason::Released => "released",
        }
    }
}

/// A finished split's reason, and where the EOF record was for [`FinishReason::EofRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// Why it finished.
    pub reason: FinishReason,
    /// The position of the matching record (its offset, for Kafka), when the reason is `eof_record`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
}

impl Finished {
    /// Finished for `reason`, at no particular record.
    pub fn new(reason: FinishReason) -> Self {
        Finished { reason, at: None }
    }
}

/// A split as a checkpoint stores it: its current progress, and whether it is finished.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "S: SourceSplit")]
pub struct SplitSnapshot<S: SourceSplit> {
    /// The split, with its progress.
    pub split: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Set once the split has ended: a restart does not read it again.
    pub finished: Option<Finished>,
}
