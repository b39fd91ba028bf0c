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
    /// When the split last moved (records, or its position past markers).
    pub(super) progress_at: Instant,
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
