//! Each reader's splits as the job's status shows them (`GET /status`): a copy published at
//! batch granularity (at most every [`PUBLISH_EVERY`], and at every checkpoint and the end), so
//! reading the status never takes a lock the per-record path holds.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::split::{Finished, SourceSplit, SplitId, SplitSnapshot};

/// How often a busy reader republishes its splits.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// One split as last published: its progress as a checkpoint would store it (the held records
/// not counted as emitted).
#[derive(Debug, Clone, Serialize)]
pub struct SplitStatus {
    #[serde(serialize_with = "as_str")]
    /// The split's id.
    pub id: SplitId,
    /// The split's own fields (for Kafka: `topic`, `partition`, `next_offset`, `stop_offset`).
    pub split: serde_json::Value,
    /// Records left, when the split is bounded and says so.
    pub remaining: Option<u64>,
    /// Set once the split has ended.
    pub finished: Option<Finished>,
}

fn as_str<S: serde::Serializer>(id: &SplitId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(id)
}

/// The published copies of one reader's splits.
#[derive(Debug, Default)]
pub struct SplitBoard {
    splits: Mutex<Vec<SplitStatus>>,
    last: Mutex<Option<Instant>>,
}

impl SplitBoard {
    /// Whether a reader that just polled should publish again (at most every [`PUBLISH_EVERY`]).
    pub fn due(&self) -> bool {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.is_none_or(|t| t.elapsed() >= PUBLISH_EVERY)
    }

    /// Replace the published copies with `snapshot`.
    pub fn publish<S: SourceSplit>(&self, snapshot: &[SplitSnapshot<S>]) {
        let splits = snapshot
            .iter()
            .map(|s| SplitStatus {
                id: s.split.split_id(),
                split: serde_json::to_value(&s.split).unwrap_or_default(),
                remaining: if s.finished.is_some() {
                    Some(0)
                } else {
                    s.split.remaining()
                },
                finished: s.finished,
            })
            .collect();
        *self.splits.lock().unwrap_or_else(|p| p.into_inner()) = splits;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// The last published copies.
    pub fn get(&self) -> Vec<SplitStatus> {
        self.splits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
