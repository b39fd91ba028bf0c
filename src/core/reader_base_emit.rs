//! The plain path of `SourceReaderBase` (no event time): a fetched batch emitted through the
//! record emitter as it comes; and the reader's split states as a checkpoint stores them.

use super::super::emitter::{ReaderOutput, RecordEmitter, RecordPosition};
use super::super::held::HeldRecords;
use super::super::split::{FinishReason, Finished, SourceSplit, SplitSnapshot};
use super::super::split_reader::{RecordsWithSplitIds, SplitReader};
use super::SourceReaderBase;
use crate::error::Result;

impl<R, T, E> SourceReaderBase<R, T, E>
where
    R: SplitReader,
    T: RecordPosition + Send + 'static,
    E: RecordEmitter<R::Element, T, R::Split> + 'static,
{
    /// Every split's state now, as a checkpoint stores it (held records not yet emitted).
    pub(super) fn current_snapshot(&self) -> Vec<SplitSnapshot<R::Split>> {
        let held = self.held.as_ref();
        let mut snapshot: Vec<_> = self
            .splits
            .iter()
            .map(|(id, e)| match held.and_then(|h| h.first_position(id)) {
                // records evaluated but held back are not emitted yet: the split stands before them
                Some(position) => {
                    let mut split = e.split.clone();
                    if !split.rewind_to(position) {
                        tracing::warn!(split_id = %id, "cannot rewind the split to its held records");
                    }
                    SplitSnapshot { split, finished: None }
                }
                None => HeldRecords::finished_snapshot(held, e.split.clone(), e.finished),
            })
            .collect();
        snapshot.sort_by_key(|s| s.split.split_id());
        snapshot
    }

    pub(super) fn emit_batch(
        &mut self,
        batch: RecordsWithSplitIds<R::Element>,
        output: &mut ReaderOutput<T>,
    ) -> Result<()> {
        for (id, elements) in batch.records {
            let Some(entry) = self.splits.get_mut(&id) else {
                continue; // removed split
            };
            if entry.finished.is_some() {
                continue; // ended by the evaluator: drop what was already fetched
            }
            let mut ended = None;
            for element in elements {
                self.emitter.emit_record(element, output, &mut entry.split)?;
                if let Some(at) = output.take_end_of_split() {
                    ended = Some(at);
                    break;
                }
            }
            if let Some(at) = ended {
                self.finish_split(
                    &id,
                    Finished {
                        reason: FinishReason::EofRecord,
                        at,
                    },
                    false,
                );
            }
        }
        for (id, reason) in batch.finished {
            self.finish_split(&id, Finished::new(reason), true);
        }
        Ok(())
    }
}
