//! The blocking split reader a fetcher thread drives (Flink's `SplitReader`), and the batch it
//! hands to the reader (Flink's `RecordsWithSplitIds`).

use std::sync::Arc;

use super::source::{FinishReason, SourceSplit, SplitId};
use crate::error::Result;

/// One fetch: records grouped by split, and the splits that finished in this fetch.
#[derive(Debug)]
pub struct RecordsWithSplitIds<E> {
    /// Records per split, in split order as fetched.
    pub records: Vec<(SplitId, Vec<E>)>,
    /// Splits finished by this fetch, after the records above.
    pub finished: Vec<(SplitId, FinishReason)>,
}

impl<E> Default for RecordsWithSplitIds<E> {
    fn default() -> Self {
        RecordsWithSplitIds {
            records: Vec::new(),
            finished: Vec::new(),
        }
    }
}

impl<E> RecordsWithSplitIds<E> {
    pub fn is_empty(&self) -> bool {
        self.finished.is_empty() && self.records.iter().all(|(_, r)| r.is_empty())
    }

    pub fn record_count(&self) -> usize {
        self.records.iter().map(|(_, r)| r.len()).sum()
    }
}

/// Splits added to or removed from a split reader (Flink's `SplitsChange`).
#[derive(Debug)]
pub enum SplitsChange<S> {
    Add(Vec<S>),
    Remove(Vec<SplitId>),
}

/// Wakes a split reader blocked in `fetch` from another thread.
pub type WakeUpHandle = Arc<dyn Fn() + Send + Sync>;

/// Reads records of its splits with blocking I/O, on a fetcher thread (Flink's `SplitReader`).
pub trait SplitReader: Send + 'static {
    type Element: Send + 'static;
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

    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}
