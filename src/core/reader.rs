//! The source reader contract (Flink's `SourceReader`): a non-blocking `poll_next`, an
//! availability future to wait on instead of spinning, split additions and checkpoints.

use super::emitter::{ReaderOutput, RecordPosition};
use super::enumerator::SourceEvent;
use super::queue::AvailabilityFuture;
use super::split::{SourceSplit, SplitSnapshot};
use crate::error::Result;

/// What `poll_next` found (Flink's `InputStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStatus {
    /// Call `poll_next` again at once.
    MoreAvailable,
    /// Wait for [`SourceReader::is_available`] before polling again.
    NothingAvailable,
    /// No more splits will come and every split is finished.
    EndOfInput,
}

/// Requests a reader sends to the enumerator.
#[derive(Debug)]
pub enum ReaderRequest {
    /// Ask for a split (pull-based sources, like Flink's `sendSplitRequest`).
    SplitRequest {
        /// The splits the reader was given before it asked, every one counted (duplicates too):
        /// a request that splits assigned meanwhile overtook is stale, and the enumerator does
        /// not see it (the reader asks again once those are finished).
        received: u64,
    },
    /// A custom event.
    SourceEvent(SourceEvent),
}

/// Reads the splits assigned to one parallel reader (Flink's `SourceReader`).
pub trait SourceReader: Send + 'static {
    /// The splits it reads.
    type Split: SourceSplit;
    /// The records it emits.
    type Output: RecordPosition + Send + 'static;

    /// The output the driver passes to `poll_next` (it applies the end-of-stream evaluator).
    fn create_output(&self) -> ReaderOutput<Self::Output> {
        ReaderOutput::new(None, false)
    }

    /// Start the reader; requests (such as a first split request) are returned to the driver.
    fn start(&mut self) -> Result<Vec<ReaderRequest>>;

    /// Emit what is available into `output` without blocking.
    fn poll_next(&mut self, output: &mut ReaderOutput<Self::Output>) -> Result<InputStatus>;

    /// Completes when `poll_next` may return something new.
    fn is_available(&self) -> AvailabilityFuture;

    /// Splits the enumerator assigned.
    fn add_splits(&mut self, splits: Vec<Self::Split>) -> Result<()>;

    /// No split will come any more: once its splits are finished the reader ends.
    fn notify_no_more_splits(&mut self);

    /// Every split this reader owns or has finished, with its progress up to the last emitted record.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Vec<SplitSnapshot<Self::Split>>;

    /// Checkpoint `checkpoint_id` is durable (Kafka commits offsets here).
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// A custom event from the enumerator.
    fn handle_source_event(&mut self, _event: SourceEvent) -> Result<()> {
        Ok(())
    }

    /// Requests the reader wants sent to the enumerator (drained by the driver after each call).
    fn take_requests(&mut self) -> Vec<ReaderRequest> {
        Vec::new()
    }

    /// Stop fetching and release resources.
    fn close(&mut self) -> Result<()>;
}
