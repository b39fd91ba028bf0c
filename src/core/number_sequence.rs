//! A bounded source of the numbers `from..to` (Flink's `NumberSequenceSource`): the range is cut
//! into contiguous splits, handed out on request (Flink's `IteratorSourceEnumerator`), and each
//! split is emitted in order. It exercises the whole runtime without Kafka, and the data generator
//! builds on its splits.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::emitter::{EofOnRecordEvaluator, ReaderOutput, RecordEmitter};
use super::enumerator::{EnumeratorContext, SplitEnumerator};
use super::fetcher::FetcherMode;
use super::reader_base::{ReaderOptions, SourceReaderBase};
use super::source::{Boundedness, ReaderContext, Source};
use super::split::{FinishReason, SourceSplit, SplitId};
use super::split_reader::{RecordsWithSplitIds, SplitReader, SplitsChange};
use crate::error::Result;

/// A contiguous range of a sequence; the split is also its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumberSequenceSplit {
    /// Stable id: the split's index in the original cut.
    pub id: String,
    /// The next number to emit (inclusive) (`next` in older state files).
    #[serde(alias = "next")]
    pub next_offset: u64,
    /// The end of the range (exclusive).
    pub end: u64,
    /// Only the numbers whose record falls in this partition (the data generator's
    /// `source.partitions`): the split scans the whole range in order and keeps those, so one
    /// reader writes each partition in index order. `None`: every number of the range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// With `partition`: how many partitions share the range, so the split expects a share of
    /// what it scans (`None` in older state files: the whole range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
}

impl SourceSplit for NumberSequenceSplit {
    fn split_id(&self) -> SplitId {
        Arc::from(self.id.as_str())
    }

    /// A partition's split scans the whole range and keeps its partition's share: about the
    /// range over the partitions (an estimate for progress; keys need not spread evenly).
    fn remaining(&self) -> Option<u64> {
        let share = u64::from(self.partitions.filter(|_| self.partition.is_some()).unwrap_or(1).max(1));
        Some(self.left() / share)
    }

    fn describe(&self) -> String {
        match (self.partition, self.end) {
            (Some(p), u64::MAX) => format!("partition {p}'s records, index {} scanned (no end)", self.next_offset),
            (Some(p), end) => format!("partition {p}'s records, index {} of {end} scanned", self.next_offset),
            (None, u64::MAX) => format!("next index {} (no end)", self.next_offset),
            (None, end) => format!("next index {} of {end}", self.next_offset),
        }
    }
}

impl NumberSequenceSplit {
    /// Numbers left to emit (to scan, for a partition's split).
    pub fn left(&self) -> u64 {
        self.end.saturating_sub(self.next_offset)
    }
}

/// Cut `from..to` into `n` contiguous ranges of near-equal size (none empty, unless the
/// range is empty, in which case there are no splits).
pub fn split_range(from: u64, to: u64, n: usize) -> Vec<NumberSequenceSplit> {
    let total = to.saturating_sub(from);
    let n = (n.max(1) as u64).min(total);
    // in u128: an unbounded generator's range is `0..u64::MAX`, where `total * i` overflows
    let at = |i: u64| from + (u128::from(total) * u128::from(i) / u128::from(n)) as u64;
    (0..n)
        .map(|i| NumberSequenceSplit {
            id: i.to_string(),
            next_offset: at(i),
            end: at(i + 1),
            partition: None,
            partitions: None,
        })
        .collect()
}

/// Hands out splits on request; a reader asking when none are left is told no more will come
/// (Flink's `IteratorSourceEnumerator`).
pub struct IteratorEnumerator<S> {
    remaining: VecDeque<S>,
}

impl<S> IteratorEnumerator<S> {
    /// An enumerator handing out these splits in order.
    pub fn new(splits: impl IntoIterator<Item = S>) -> Self {
        IteratorEnumerator {
            remaining: splits.into_iter().collect(),
        }
    }
}

impl<S: SourceSplit> SplitEnumerator for IteratorEnumerator<S> {
    type Split = S;
    type State = Vec<S>;
    type CallResult = ();

    fn start(&mut self, _ctx: &mut EnumeratorContext<S, ()>) -> Result<()> {
        Ok(())
    }

    fn handle_split_request(&mut self, ctx: &mut EnumeratorContext<S, ()>, reader: usize) -> Result<()> {
        match self.remaining.pop_front() {
            Some(split) => ctx.assign_splits(reader, vec![split]),
            None => ctx.signal_no_more_splits(reader),
        }
    }

    fn add_splits_back(&mut self, _ctx: &mut EnumeratorContext<S, ()>, splits: Vec<S>) -> Result<()> {
        for split in splits.into_iter().rev() {
            self.remaining.push_front(split);
        }
        Ok(())
    }

    fn add_reader(&mut self, _ctx: &mut EnumeratorContext<S, ()>, _reader: usize) -> Result<()> {
        Ok(()) // readers pull
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<S>> {
        Ok(self.remaining.iter().cloned().collect())
    }
}

/// Emits its splits' numbers in batches of `batch_size`.
pub struct NumberSequenceSplitReader {
    splits: VecDeque<NumberSequenceSplit>,
    batch_size: u64,
}

impl NumberSequenceSplitReader {
    /// A reader emitting up to `batch_size` numbers per fetch.
    pub fn new(batch_size: usize) -> Self {
        NumberSequenceSplitReader {
            splits: VecDeque::new(),
            batch_size: batch_size.max(1) as u64,
        }
    }
}

impl SplitReader for NumberSequenceSplitReader {
    type Element = u64;
    type Split = NumberSequenceSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<u64>> {
        let mut batch = RecordsWithSplitIds::default();
        let Some(split) = self.splits.front_mut() else {
            return Ok(batch);
        };
        let end = split.end.min(split.next_offset.saturating_add(self.batch_size));
        let values: Vec<u64> = (split.next_offset..end).collect();
        split.next_offset = end;
        batch.records.push((split.split_id(), values));
        if split.next_offset >= split.end {
            batch.finished.push((split.split_id(), FinishReason::StoppingOffset));
            self.splits.pop_front();
        }
        Ok(batch)
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<NumberSequenceSplit>) -> Result<()> {
        match change {
            SplitsChange::Add(splits) => self.splits.extend(splits),
            SplitsChange::Remove(ids) => self.splits.retain(|s| !ids.contains(&s.split_id())),
        }
        Ok(())
    }
}

/// Emits each number as it is and advances the split past it.
pub struct NumberEmitter;

impl RecordEmitter<u64, u64, NumberSequenceSplit> for NumberEmitter {
    fn emit_record(
        &mut self,
        element: u64,
        output: &mut ReaderOutput<u64>,
        split: &mut NumberSequenceSplit,
    ) -> Result<()> {
        output.collect(element);
        split.next_offset = element + 1;
        Ok(())
    }
}

/// The numbers `from..to`, in `splits` ranges.
pub struct NumberSequenceSource {
    /// The first number.
    pub from: u64,
    /// One past the last number.
    pub to: u64,
    /// Number of splits; defaults to the parallelism when `None`.
    pub splits: usize,
    /// Numbers per fetch.
    pub batch_size: usize,
    /// One fetcher thread per reader or per split.
    pub fetcher_mode: FetcherMode,
    /// The element queue's capacity, in batches.
    pub queue_capacity: usize,
    /// Ends a split at the first number it matches.
    pub eof: Option<Arc<dyn EofOnRecordEvaluator<u64>>>,
    /// The records/s and bytes/s limits a job of it starts with ([`Source::rate_limits`]).
    pub rate_limits: (Option<f64>, Option<f64>),
}

impl NumberSequenceSource {
    /// The numbers `from..to` in `splits` ranges, 1,000 per fetch.
    pub fn new(from: u64, to: u64, splits: usize) -> Self {
        NumberSequenceSource {
            from,
            to,
            splits,
            batch_size: 1024,
            fetcher_mode: FetcherMode::Single,
            queue_capacity: super::queue::DEFAULT_CAPACITY,
            eof: None,
            rate_limits: (None, None),
        }
    }
}

impl Source for NumberSequenceSource {
    type Split = NumberSequenceSplit;
    type EnumeratorState = Vec<NumberSequenceSplit>;
    type Enumerator = IteratorEnumerator<NumberSequenceSplit>;
    type Reader = SourceReaderBase<NumberSequenceSplitReader, u64, NumberEmitter>;
    type Output = u64;

    fn kind(&self) -> &'static str {
        "number_sequence"
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn create_enumerator(&self) -> Result<Self::Enumerator> {
        Ok(IteratorEnumerator::new(split_range(self.from, self.to, self.splits)))
    }

    fn restore_enumerator(&self, state: Vec<NumberSequenceSplit>) -> Result<Self::Enumerator> {
        Ok(IteratorEnumerator::new(state))
    }

    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
        self.reader(context, true)
    }

    fn rate_limits(&self) -> (Option<f64>, Option<f64>) {
        self.rate_limits
    }
}

impl NumberSequenceSource {
    /// Reader `context.index`, reading with this source's settings; `pull`: it asks the
    /// enumerator for splits (else they are pushed to it).
    pub(crate) fn reader(
        &self,
        context: ReaderContext,
        pull: bool,
    ) -> Result<SourceReaderBase<NumberSequenceSplitReader, u64, NumberEmitter>> {
        let batch_size = self.batch_size;
        let mut options = ReaderOptions::new(context.index);
        options.fetcher_mode = self.fetcher_mode;
        options.queue_capacity = self.queue_capacity;
        options.request_splits = pull;
        options.eof = self.eof.clone();
        options.stats = context.fetch_stats;
        Ok(SourceReaderBase::new(
            Box::new(move |_| Ok(NumberSequenceSplitReader::new(batch_size))),
            NumberEmitter,
            options,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_contiguous_and_cover_everything() {
        // the last: an unbounded generator's range (`count` absent)
        for (total, n) in [(10u64, 3usize), (2, 4), (0, 4), (100_000, 4), (7, 7), (u64::MAX - 5, 4)] {
            let splits = split_range(5, 5 + total, n);
            assert_eq!(splits.len() as u64, total.min(n as u64));
            let mut next = 5;
            for s in &splits {
                assert_eq!(s.next_offset, next);
                assert!(s.end > s.next_offset);
                next = s.end;
            }
            assert_eq!(next, 5 + total);
        }
    }
}
