//! Turning fetched elements into output records (Flink's `RecordEmitter`), and the per-record
//! end-of-stream hook of FLIP-208 (`EofOnRecordEvaluator`) applied by the reader's output.

use std::sync::Arc;

use crate::error::Result;

/// Where a record sits in its split (the Kafka offset), so a finished split can say where its
/// end-of-stream record was. Records without a position answer `None`.
pub trait RecordPosition {
    fn position(&self) -> Option<i64> {
        None
    }

    /// Its event time in milliseconds since the epoch, for pacing and a source-wide stop.
    fn timestamp(&self) -> Option<i64> {
        None
    }
}

impl RecordPosition for u64 {
    fn position(&self) -> Option<i64> {
        i64::try_from(*self).ok()
    }
}

/// Decides, per deserialized record, whether its split has ended (FLIP-208). The matching record
/// is not emitted (unless the reader is told to emit markers), nor any later record of its split.
pub trait EofOnRecordEvaluator<T>: Send + Sync {
    fn is_end_of_stream(&self, record: &T) -> bool;
}

impl<T, F> EofOnRecordEvaluator<T> for F
where
    F: Fn(&T) -> bool + Send + Sync,
{
    fn is_end_of_stream(&self, record: &T) -> bool {
        self(record)
    }
}

/// Converts one fetched element into zero or more output records and advances the split's
/// progress (Flink's `RecordEmitter`). Runs on the reader task, not the fetcher threads.
pub trait RecordEmitter<E, T, S>: Send {
    /// Emit `element` into `output` and update `split` to the position after it.
    /// An error fails the job (a decode failure under the `fail` policy, for example).
    fn emit_record(&mut self, element: E, output: &mut ReaderOutput<T>, split: &mut S) -> Result<()>;
}

/// Where records go when a reader emits them; applies the end-of-stream evaluator
/// (Flink's `SourceOutputWrapper` in `SourceReaderBase`).
pub struct ReaderOutput<T> {
    records: Vec<T>,
    eof: Option<Arc<dyn EofOnRecordEvaluator<T>>>,
    emit_marker: bool,
    /// Set when the evaluator matched in the current split: `Some(position of the marker)`.
    ended_at: Option<Option<i64>>,
    /// The timestamp of the last record the evaluator matched.
    marker_timestamp: Option<i64>,
}

impl<T: RecordPosition> ReaderOutput<T> {
    pub fn new(eof: Option<Arc<dyn EofOnRecordEvaluator<T>>>, emit_marker: bool) -> Self {
        ReaderOutput {
            records: Vec::new(),
            eof,
            emit_marker,
            ended_at: None,
            marker_timestamp: None,
        }
    }

    /// Emit one record. After an end-of-stream match, records of the same split are dropped.
    pub fn collect(&mut self, record: T) {
        if self.ended_at.is_some() {
            return;
        }
        if let Some(eof) = &self.eof {
            if eof.is_end_of_stream(&record) {
                self.ended_at = Some(record.position());
                self.marker_timestamp = record.timestamp();
                if self.emit_marker {
                    self.records.push(record);
                }
                return;
            }
        }
        self.records.push(record);
    }

    /// Emit a record that is not data for the evaluator (a dead letter): never an end of stream.
    pub fn collect_unevaluated(&mut self, record: T) {
        if self.ended_at.is_none() {
            self.records.push(record);
        }
    }

    /// Whether the evaluator matched since the last `take_end_of_split`.
    pub fn is_end_of_split(&self) -> bool {
        self.ended_at.is_some()
    }

    /// The timestamp of the record the evaluator matched last.
    pub(crate) fn marker_timestamp(&self) -> Option<i64> {
        self.marker_timestamp
    }

    /// Reset the end-of-split flag, returning the marker's position if it was set.
    pub(crate) fn take_end_of_split(&mut self) -> Option<Option<i64>> {
        self.ended_at.take()
    }
}

impl<T> ReaderOutput<T> {
    /// The record emitted last, if it was kept (an emitter may trim it after evaluation).
    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.records.last_mut()
    }

    /// Records emitted since the last call.
    pub fn take_records(&mut self) -> Vec<T> {
        // the next batch is likely as large: allocate its room once, not by doubling
        let capacity = self.records.len();
        std::mem::replace(&mut self.records, Vec::with_capacity(capacity))
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluator_stops_the_split_and_drops_later_records() {
        let eof: Arc<dyn EofOnRecordEvaluator<u64>> = Arc::new(|v: &u64| *v == 3);
        let mut out = ReaderOutput::new(Some(eof), false);
        for v in 0..6u64 {
            out.collect(v);
        }
        assert_eq!(out.take_records(), vec![0, 1, 2]);
        assert_eq!(out.take_end_of_split(), Some(Some(3)));
        out.collect(9);
        assert_eq!(out.take_records(), vec![9]);
    }

    #[test]
    fn emit_marker_keeps_the_matching_record() {
        let eof: Arc<dyn EofOnRecordEvaluator<u64>> = Arc::new(|v: &u64| *v == 1);
        let mut out = ReaderOutput::new(Some(eof), true);
        for v in 0..4u64 {
            out.collect(v);
        }
        assert_eq!(out.take_records(), vec![0, 1]);
        assert!(out.take_end_of_split().is_some());
    }
}
