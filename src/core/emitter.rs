//! Turning fetched elements into output records (Flink's `RecordEmitter`), and the per-record
//! end-of-stream hook of FLIP-208 (`EofOnRecordEvaluator`) applied by the reader's output.

use std::sync::Arc;

use crate::error::Result;

/// Where a record sits in its split (the Kafka offset), so a finished split can say where its
/// end-of-stream record was. Records without a position answer `None`.
pub trait RecordPosition {
    /// Its position in its split (the Kafka offset).
    fn position(&self) -> Option<i64> {
        None
    }

    /// Its event time in milliseconds since the epoch, for pacing and a source-wide stop.
    fn timestamp(&self) -> Option<i64> {
        None
    }

    /// Its key and value bytes, for a bytes/s limit (`source.max_bytes_rate`).
    fn size_bytes(&self) -> u64 {
        0
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
    /// Whether `record` ends its split.
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

/// A record a source's filter rejected, as the event-time hold sees it: its place among the
/// records collected (it came after the first `after` of them) and its timestamp, so it moves
/// its split's watermark as it would unfiltered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilteredAt {
    pub(crate) after: usize,
    pub(crate) timestamp: Option<i64>,
    /// Its position: where a source-wide stop at or before it ends its split.
    pub(crate) position: Option<i64>,
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
    /// The last marker was kept (emitted): `emit_marker`, and the filter let it through.
    marker_kept: bool,
    /// Records the filter rejected since the last [`ReaderOutput::take_filtered`].
    filtered: u64,
    /// Records the decode policy skipped since the last [`ReaderOutput::take_skipped`].
    skipped: u64,
    /// With event time: where the rejected records were ([`ReaderOutput::take_staged`]).
    filtered_at: Option<Vec<FilteredAt>>,
}

impl<T: RecordPosition> ReaderOutput<T> {
    /// An output applying `eof` to every record; with `emit_marker` the matching record is emitted too.
    pub fn new(eof: Option<Arc<dyn EofOnRecordEvaluator<T>>>, emit_marker: bool) -> Self {
        ReaderOutput {
            records: Vec::new(),
            eof,
            emit_marker,
            ended_at: None,
            marker_timestamp: None,
            marker_kept: false,
            filtered: 0,
            skipped: 0,
            filtered_at: None,
        }
    }

    /// Note where rejected records were, for the event-time hold.
    pub(crate) fn tracking_filtered(mut self) -> Self {
        self.filtered_at = Some(Vec::new());
        self
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
                self.marker_kept = self.emit_marker;
                if self.emit_marker {
                    self.records.push(record);
                }
                return;
            }
        }
        self.records.push(record);
    }

    /// A record the source's filter rejected: never emitted, but the evaluator still sees it (a
    /// filter decides what is emitted, the evaluator where the split ends), and it is counted.
    /// A marker it rejected is not emitted, whatever `emit_marker` says.
    pub fn filter(&mut self, record: &T) {
        self.filter_maybe_evaluated(record, true);
    }

    /// A rejected record the evaluator cannot judge (its value could not be decoded for it): it
    /// is counted, and never ends its split, as an undecodable record never does.
    pub fn filter_unevaluated(&mut self, record: &T) {
        self.filter_maybe_evaluated(record, false);
    }

    fn filter_maybe_evaluated(&mut self, record: &T, evaluate: bool) {
        if self.ended_at.is_some() {
            return;
        }
        self.filtered += 1;
        if let Some(at) = &mut self.filtered_at {
            at.push(FilteredAt {
                after: self.records.len(),
                timestamp: record.timestamp(),
                position: record.position(),
            });
        }
        if let Some(eof) = self.eof.as_ref().filter(|_| evaluate) {
            if eof.is_end_of_stream(record) {
                self.ended_at = Some(record.position());
                self.marker_timestamp = record.timestamp();
                self.marker_kept = false;
            }
        }
    }

    /// Whether `record` is an end-of-stream record, without collecting it.
    pub fn is_end_of_stream(&self, record: &T) -> bool {
        self.ended_at.is_none() && self.eof.as_ref().is_some_and(|eof| eof.is_end_of_stream(record))
    }

    /// Whether an end-of-stream record is emitted (`eof_emit_marker`).
    pub fn emits_marker(&self) -> bool {
        self.emit_marker
    }

    /// End the split at an end-of-stream record that is not emitted (the decode-error policy
    /// had it: the sink could not take it), at its `position` and `timestamp`.
    pub fn end_without_marker(&mut self, position: Option<i64>, timestamp: Option<i64>) {
        if self.ended_at.is_none() {
            self.ended_at = Some(position);
            self.marker_timestamp = timestamp;
            self.marker_kept = false;
        }
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

    /// Whether the record the evaluator matched last was emitted (the last record collected).
    pub(crate) fn marker_kept(&self) -> bool {
        self.marker_kept
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

    /// The records collected and where the rejected ones were among them, since the last call.
    pub(crate) fn take_staged(&mut self) -> (Vec<T>, Vec<FilteredAt>) {
        let filtered = self.filtered_at.as_mut().map(std::mem::take).unwrap_or_default();
        (self.take_records(), filtered)
    }

    /// Records the filter rejected since the last call.
    pub fn take_filtered(&mut self) -> u64 {
        std::mem::take(&mut self.filtered)
    }

    /// Count records another output rejected (the event-time staging) as this one's.
    pub(crate) fn add_filtered(&mut self, n: u64) {
        self.filtered += n;
    }

    /// A record read and not emitted because it could not be decoded (`decode_errors = "skip"`).
    pub fn skip(&mut self) {
        self.skipped += 1;
    }

    /// Records skipped since the last call (with another output's, the event-time staging's,
    /// added by `add_skipped`).
    pub fn take_skipped(&mut self) -> u64 {
        std::mem::take(&mut self.skipped)
    }

    /// Count records another output skipped as this one's.
    pub(crate) fn add_skipped(&mut self, n: u64) {
        self.skipped += n;
    }

    /// Records collected and not yet taken.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is waiting.
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

    #[test]
    fn a_filtered_record_is_evaluated_for_the_end_but_never_emitted() {
        let eof: Arc<dyn EofOnRecordEvaluator<u64>> = Arc::new(|v: &u64| *v == 3);
        for emit_marker in [false, true] {
            let mut out = ReaderOutput::new(Some(Arc::clone(&eof)), emit_marker).tracking_filtered();
            out.collect(0);
            out.filter(&1);
            out.collect(2);
            out.filter(&3); // the marker, rejected: the split ends there, nothing emitted
            out.collect(4);
            out.filter(&5);
            let (records, filtered) = out.take_staged();
            assert_eq!(records, vec![0, 2], "emit_marker {emit_marker}");
            assert_eq!(
                filtered.iter().map(|f| f.after).collect::<Vec<_>>(),
                vec![1, 2],
                "where the rejected ones were"
            );
            assert_eq!(out.take_filtered(), 2, "records after the end are not counted");
            assert_eq!(out.take_end_of_split(), Some(Some(3)));
            assert!(!out.marker_kept());
        }
        // a marker the filter lets through is kept with emit_marker
        let mut out = ReaderOutput::new(Some(eof), true);
        out.filter(&2);
        out.collect(3);
        assert_eq!(out.take_records(), vec![3]);
        assert!(out.marker_kept());
        assert_eq!(out.take_filtered(), 1);
    }
}
