//! A split as its fetcher tracks it: where it stands, where it stops, its metrics, and when it
//! last moved (the split reader's bookkeeping, apart from the fetch loop).

use std::sync::Arc;
use std::time::Instant;

use crate::core::SplitId;
use crate::metrics::PartitionMetrics;

/// A split being fetched.
pub(super) struct LiveSplit {
    pub(super) id: SplitId,
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    /// Exclusive; `None` for unbounded.
    pub(super) stop: Option<i64>,
    /// The offset after the last record handed over.
    pub(super) position: i64,
    pub(super) metrics: PartitionMetrics,
    /// Index of this split's records in the batch being built.
    pub(super) slot: Option<usize>,
    pub(super) fetched_records: u64,
    pub(super) fetched_bytes: u64,
    pub(super) last_timestamp: Option<i64>,
    /// When the split last moved (records, or its position past markers), or resumed.
    pub(super) progress_at: Instant,
    /// Paused (pacing, alignment): it fetches nothing on purpose, so it is never stalled.
    pub(super) paused: bool,
    /// An error was open when it was paused: re-arm librdkafka's reporting when it resumes.
    pub(super) rearm: bool,
    /// librdkafka reset the position below where the split stood (`offset_reset` after the log was
    /// recreated or truncated): the first offset of the log it reads now. Set in a fetch, handled
    /// at its end.
    pub(super) reset_from: Option<i64>,
}

impl LiveSplit {
    pub(super) fn new(split: &super::split::KafkaPartitionSplit, id: SplitId, metrics: PartitionMetrics) -> Self {
        LiveSplit {
            id,
            topic: Arc::from(split.topic.as_str()),
            partition: split.partition,
            stop: split.stop_offset,
            position: split.next_offset,
            metrics,
            slot: None,
            fetched_records: 0,
            fetched_bytes: 0,
            last_timestamp: None,
            progress_at: Instant::now(),
            paused: false,
            rearm: false,
            reset_from: None,
        }
    }
}

/// The index of a live split, trying the last hit first.
pub(super) fn index_in(splits: &[LiveSplit], last_hit: &mut usize, topic: &str, partition: i32) -> Option<usize> {
    let hit = |s: &LiveSplit| s.partition == partition && &*s.topic == topic;
    if splits.get(*last_hit).is_some_and(hit) {
        return Some(*last_hit);
    }
    let i = splits.iter().position(hit)?;
    *last_hit = i;
    Some(i)
}
