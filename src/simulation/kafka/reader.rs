//! The simulation's split reader for a Kafka source: it reads the simulated cluster's logs as
//! the split reader over librdkafka reads a real one (`read_committed` up to the last stable
//! offset, aborted records and markers skipped), and finishes a split when its *position*
//! reaches its stop, so markers and gaps cannot hang a bounded read.

use std::sync::Arc;

use super::SimKafka;
use crate::core::{sim, FinishReason, RecordsWithSplitIds, SourceSplit, SplitId, SplitReader, SplitsChange};
use crate::error::{Error, Result};
use crate::kafka::KafkaPartitionSplit;
use crate::record::Record;

/// The most records one fetch takes of a split.
const BATCH: usize = 16;

struct Reading {
    id: SplitId,
    topic: Arc<str>,
    partition: i32,
    position: i64,
    stop: Option<i64>,
}

pub(super) struct SimSplitReader {
    kafka: Arc<SimKafka>,
    process: usize,
    committed: bool,
    splits: Vec<Reading>,
    finished: Vec<(SplitId, FinishReason)>,
}

impl SimSplitReader {
    pub(super) fn new(kafka: Arc<SimKafka>, committed: bool) -> Self {
        SimSplitReader {
            kafka,
            process: sim::current_process(),
            committed,
            splits: Vec::new(),
            finished: Vec::new(),
        }
    }
}

impl SplitReader for SimSplitReader {
    type Element = Record;
    type Split = KafkaPartitionSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Record>> {
        if !sim::alive(self.process) {
            return Err(Error::runtime("simulated split reader", "the process is gone"));
        }
        let mut batch = RecordsWithSplitIds {
            finished: std::mem::take(&mut self.finished),
            ..RecordsWithSplitIds::default()
        };
        let broker = self.kafka.broker();
        let mut done = Vec::new();
        for split in &mut self.splits {
            let Some(log) = broker.log(&split.topic, split.partition) else {
                continue;
            };
            let mut records = Vec::new();
            let mut ended = false;
            while records.len() < BATCH {
                let (entry, next) = log.next(split.position, self.committed);
                let Some(e) = entry else {
                    split.position = next.max(split.position);
                    break;
                };
                if split.stop.is_some_and(|stop| e.offset >= stop) {
                    ended = true;
                    break;
                }
                records.push(Record {
                    topic: Some(Arc::clone(&split.topic)),
                    partition: Some(split.partition),
                    offset: Some(e.offset),
                    timestamp: Some(e.timestamp),
                    key: e.key.clone().map(Into::into),
                    value: e.value.clone().map(Into::into),
                    headers: e.headers.clone(),
                    ..Record::default()
                });
                split.position = next;
            }
            if !records.is_empty() {
                batch.records.push((Arc::clone(&split.id), records));
            }
            if ended || split.stop.is_some_and(|stop| split.position >= stop) {
                done.push(Arc::clone(&split.id));
            }
        }
        self.splits.retain(|s| !done.contains(&s.id));
        batch
            .finished
            .extend(done.into_iter().map(|id| (id, FinishReason::StoppingOffset)));
        Ok(batch)
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<KafkaPartitionSplit>) -> Result<()> {
        match change {
            SplitsChange::Add(splits) => {
                for split in splits {
                    let id = split.split_id();
                    if split.is_empty() {
                        self.finished.push((id, FinishReason::Empty));
                        continue;
                    }
                    self.splits.retain(|s| s.id != id);
                    self.splits.push(Reading {
                        id,
                        topic: Arc::from(split.topic.as_str()),
                        partition: split.partition,
                        position: split.next_offset,
                        stop: split.stop_offset,
                    });
                }
            }
            SplitsChange::Remove(ids) => self.splits.retain(|s| !ids.contains(&s.id)),
        }
        Ok(())
    }
}
