//! The data generator's split reader: each fetch generates the next indices of its first split,
//! in order, paced by the shared rate, and the emitter that advances the split past each.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::generator::GeneratorFunction;
use super::partition;
use super::rate::RateLimiter;
use crate::core::number_sequence::NumberSequenceSplit;
use crate::core::split_reader::{WakeUpHandle, WakeableSleep};
use crate::core::{
    FinishReason, ReaderOutput, RecordEmitter, RecordsWithSplitIds, SourceSplit, SplitReader, SplitsChange,
};
use crate::error::{Error, Result};
use crate::record::Record;

/// Emits generated records and advances the split past each index.
pub struct IndexEmitter;

impl RecordEmitter<Record, Record, NumberSequenceSplit> for IndexEmitter {
    fn emit_record(
        &mut self,
        record: Record,
        output: &mut ReaderOutput<Record>,
        split: &mut NumberSequenceSplit,
    ) -> Result<()> {
        let next = record.offset.map(|o| o as u64 + 1).unwrap_or(split.next_offset);
        output.collect(record);
        split.next_offset = next;
        Ok(())
    }
}

/// Generates the records of its splits, in index order, paced by the shared rate.
pub struct GeneratorSplitReader {
    splits: VecDeque<NumberSequenceSplit>,
    generator: Box<dyn GeneratorFunction>,
    limiter: Option<Arc<RateLimiter>>,
    batch: u64,
    /// `source.partitions`: the partition count its partitions' splits filter by.
    partitions: Option<u32>,
    /// Slots claimed from the rate but not generated yet (a wake-up interrupted the wait).
    claimed: Option<(u64, Instant)>,
    sleep: WakeableSleep,
}

impl GeneratorSplitReader {
    pub(super) fn new(
        generator: Box<dyn GeneratorFunction>,
        limiter: Option<Arc<RateLimiter>>,
        batch: usize,
        partitions: Option<u32>,
    ) -> Self {
        GeneratorSplitReader {
            splits: VecDeque::new(),
            generator,
            limiter,
            batch: batch as u64,
            partitions,
            claimed: None,
            sleep: WakeableSleep::new(),
        }
    }
}

impl SplitReader for GeneratorSplitReader {
    type Element = Record;
    type Split = NumberSequenceSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Record>> {
        let mut batch = RecordsWithSplitIds::default();
        let Some(remaining) = self.splits.front().map(NumberSequenceSplit::left) else {
            return Ok(batch);
        };
        let want = remaining.min(self.batch);
        let n = match &self.limiter {
            None => want,
            Some(limiter) => {
                let (n, due) = match self.claimed.take() {
                    Some(c) => c,
                    None => limiter.claim(want),
                };
                if !self.sleep.sleep_until(due) {
                    self.claimed = Some((n, due));
                    return Ok(batch);
                }
                n.min(want)
            }
        };
        let Some(split) = self.splits.front_mut() else {
            return Ok(batch);
        };
        // a partition's split keeps about 1 in `partitions` of the indices it scans: it scans
        // until it has its n records, and at most `partitions` batches' worth (a partition no key
        // falls in must not scan an unbounded range in one fetch)
        let filter = split.partition.zip(self.partitions);
        let scan = match filter {
            Some((_, partitions)) => n.saturating_mul(u64::from(partitions).max(1)),
            None => n,
        };
        let last = split.end.min(split.next_offset.saturating_add(scan));
        let mut records = Vec::with_capacity(n as usize);
        let mut i = split.next_offset;
        while i < last && (records.len() as u64) < n {
            let mut record = self.generator.map(i).map_err(|e| match e {
                Error::Runtime { .. } => e,
                other => Error::runtime(format!("generating record {i}"), other),
            })?;
            i += 1;
            if let Some((mine, partitions)) = filter {
                if partition::partition_of(record.key.as_deref(), i - 1, partitions) != mine {
                    continue;
                }
                record.partition = Some(mine as i32);
            }
            records.push(record);
        }
        split.next_offset = i;
        batch.records.push((split.split_id(), records));
        if split.next_offset >= split.end {
            batch.finished.push((split.split_id(), FinishReason::StoppingOffset));
            self.splits.pop_front();
        }
        Ok(batch)
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<NumberSequenceSplit>) -> Result<()> {
        match change {
            SplitsChange::Add(splits) => {
                for s in splits {
                    if s.left() == 0 {
                        continue;
                    }
                    self.splits.push_back(s);
                }
            }
            SplitsChange::Remove(ids) => self.splits.retain(|s| !ids.contains(&s.split_id())),
        }
        Ok(())
    }

    fn wake_up_handle(&self) -> Option<WakeUpHandle> {
        Some(self.sleep.handle())
    }

    fn close(&mut self) -> Result<()> {
        self.generator.close()
    }
}
