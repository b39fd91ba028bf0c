//! The Kafka record emitter (Flink's `KafkaRecordEmitter`): applies the source's filter
//! (`source.where`, before decoding when it reads no value), decodes each fetched record's value
//! (and key, with a `key_format`), checks the sink can route it (a topic template), applies the
//! decode-error policy to a record that fails either, emits it, and advances the split past it.

use std::sync::Arc;

use tracing::{trace, warn};

use super::split::KafkaPartitionSplit;
use crate::core::{ReaderOutput, RecordEmitter};
use crate::error::{Error, Result};
use crate::expr::RecordExpression;
use crate::format::{DecodeError, DecodeErrorPolicy, ValueDecoder};
use crate::metrics::ReaderMetrics;
use crate::record::Record;

/// What an expression needs decoded before it is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub key: bool,
    pub value: bool,
}

impl Decoded {
    pub const NOTHING: Decoded = Decoded {
        key: false,
        value: false,
    };
    pub const ALL: Decoded = Decoded { key: true, value: true };

    /// What `expression` reads.
    pub fn read_by(expression: &RecordExpression) -> Decoded {
        Decoded {
            key: expression.reads_key(),
            value: expression.reads_value(),
        }
    }
}

/// Decodes and emits Kafka records.
pub struct KafkaRecordEmitter {
    decoder: Box<dyn ValueDecoder>,
    /// Decodes keys, when the source has a `key_format`.
    key_decoder: Option<Box<dyn ValueDecoder>>,
    /// The sink's check (a topic template's resolution): a failure is a decode error.
    sink_check: Option<crate::connector::RecordCheck>,
    policy: DecodeErrorPolicy,
    metrics: ReaderMetrics,
    emitted: u64,
    /// Keep the decoded value for the sink (file and stdout print it); otherwise it goes back to
    /// the decoder once the end-of-stream expression has seen it.
    keep_decoded: bool,
    /// The source's filter: a record it rejects is not emitted, but still advances the split.
    filter: Option<Arc<RecordExpression>>,
    /// What the end-of-stream evaluator reads, decoded for it on a record the filter rejected
    /// before decoding (nothing without an evaluator).
    eof_reads: Decoded,
}

impl KafkaRecordEmitter {
    pub fn new(decoder: Box<dyn ValueDecoder>, policy: DecodeErrorPolicy, metrics: ReaderMetrics) -> Self {
        KafkaRecordEmitter {
            decoder,
            key_decoder: None,
            sink_check: None,
            policy,
            metrics,
            emitted: 0,
            keep_decoded: true,
            filter: None,
            eof_reads: Decoded::NOTHING,
        }
    }
}

impl KafkaRecordEmitter {
    /// Whether records keep their decoded value on the way to the sink.
    pub fn keep_decoded(mut self, keep: bool) -> Self {
        self.keep_decoded = keep;
        self
    }

    /// Decode keys with `decoder` too.
    pub fn key_decoder(mut self, decoder: Option<Box<dyn ValueDecoder>>) -> Self {
        self.key_decoder = decoder;
        self
    }

    /// Check each record as the sink will (`None`: no check).
    pub fn sink_check(mut self, check: Option<crate::connector::RecordCheck>) -> Self {
        self.sink_check = check;
        self
    }

    /// Emit only the records `filter` matches; `eof_reads`: what the end-of-stream evaluator
    /// needs decoded on the others.
    pub fn filter(mut self, filter: Option<Arc<RecordExpression>>, eof_reads: Decoded) -> Self {
        self.filter = filter;
        self.eof_reads = eof_reads;
        self
    }

    /// Decode the key (with a `key_format`); its error says it is the key's.
    fn decode_key(&mut self, record: &mut Record) -> std::result::Result<(), DecodeError> {
        if let (Some(decoder), Some(bytes)) = (self.key_decoder.as_mut(), record.key.as_deref()) {
            record.decoded_key = decoder.decode(bytes).map_err(|e| match e {
                DecodeError::Invalid(m) => DecodeError::Invalid(format!("key: {m}")),
                DecodeError::Unavailable(m) => DecodeError::Unavailable(format!("key: {m}")),
            })?;
        }
        Ok(())
    }

    /// Decode what `wanted` says and `done` has not decoded yet.
    fn decode(&mut self, record: &mut Record, wanted: Decoded, done: Decoded) -> std::result::Result<(), DecodeError> {
        if wanted.key && !done.key {
            self.decode_key(record)?;
        }
        if wanted.value && !done.value {
            if let Some(bytes) = record.value.as_deref() {
                record.decoded = self.decoder.decode(bytes)?;
            }
        }
        Ok(())
    }

    /// Apply the decode-error policy to a record that could not be decoded.
    fn undecodable(
        &mut self,
        error: DecodeError,
        mut record: Record,
        output: &mut ReaderOutput<Record>,
        split: &mut KafkaPartitionSplit,
        offset: i64,
    ) -> Result<()> {
        let message = match error {
            // not the record's fault: never skipped nor dead-lettered for it; the split is not
            // advanced, so a restart decodes the record again
            DecodeError::Unavailable(message) => {
                return Err(Error::runtime(
                    format!("decoding {}:{}@{offset}", split.topic, split.partition),
                    message,
                ));
            }
            DecodeError::Invalid(message) => message,
        };
        match self.policy {
            // the split is not advanced: a restart meets the same record again
            DecodeErrorPolicy::Fail => Err(Error::Decode {
                topic: split.topic.clone(),
                partition: split.partition,
                offset,
                message,
            }),
            DecodeErrorPolicy::Skip => {
                warn!(topic = %split.topic, partition = split.partition, offset, error = %message, "skipping a record that cannot be decoded");
                self.metrics.decode_skipped.increment(1);
                output.skip();
                split.next_offset = offset + 1;
                Ok(())
            }
            DecodeErrorPolicy::DeadLetter => {
                warn!(topic = %split.topic, partition = split.partition, offset, error = %message, "sending a record that cannot be decoded to the dead-letter topic");
                self.metrics.dead_lettered.increment(1);
                record.dead_letter = Some(message);
                output.collect_unevaluated(record);
                split.next_offset = offset + 1;
                Ok(())
            }
        }
    }

    /// A record the filter rejected, with `done` decoded: the end-of-stream evaluator still
    /// judges it (decoding what it reads first), then the split advances past it. A value that
    /// cannot be decoded for the evaluator is no decode error (the record is not emitted), only
    /// never an end of stream, as an undecodable record never is.
    fn reject(
        &mut self,
        mut record: Record,
        done: Decoded,
        output: &mut ReaderOutput<Record>,
        split: &mut KafkaPartitionSplit,
        offset: i64,
    ) -> Result<()> {
        match self.decode(&mut record, self.eof_reads, done) {
            Ok(()) => output.filter(&record),
            Err(DecodeError::Unavailable(message)) => {
                // the end may lie in it: the job cannot go on without deciding
                return Err(Error::runtime(
                    format!("decoding {}:{}@{offset}", split.topic, split.partition),
                    message,
                ));
            }
            Err(DecodeError::Invalid(message)) => {
                trace!(topic = %split.topic, partition = split.partition, offset, error = %message, "a filtered record cannot be decoded for the end-of-stream expression");
                output.filter_unevaluated(&record);
            }
        }
        if let Some(decoded) = record.decoded.take() {
            self.decoder.recycle(decoded);
        }
        split.next_offset = offset + 1;
        Ok(())
    }
}

impl RecordEmitter<Record, Record, KafkaPartitionSplit> for KafkaRecordEmitter {
    fn emit_record(
        &mut self,
        mut record: Record,
        output: &mut ReaderOutput<Record>,
        split: &mut KafkaPartitionSplit,
    ) -> Result<()> {
        let offset = record.offset.unwrap_or(split.next_offset);
        record.format = self.decoder.format();
        // a filter that reads no value runs first: a record it rejects is never decoded
        let mut done = Decoded::NOTHING;
        let before_decoding = self.filter.as_ref().filter(|f| !f.reads_value());
        if let Some(reads_key) = before_decoding.map(|f| f.reads_key()) {
            if reads_key {
                if let Err(e) = self.decode_key(&mut record) {
                    return self.undecodable(e, record, output, split, offset);
                }
                done.key = true;
            }
            if !self.filter.as_ref().is_none_or(|f| f.matches(&record)) {
                return self.reject(record, done, output, split, offset);
            }
        }
        if let Err(e) = self.decode(&mut record, Decoded::ALL, done) {
            return self.undecodable(e, record, output, split, offset);
        }
        if let Some(filter) = self.filter.as_ref().filter(|f| f.reads_value()) {
            if !filter.matches(&record) {
                return self.reject(record, Decoded::ALL, output, split, offset);
            }
        }
        // a record the sink cannot route (a topic template) follows the decode-error policy; an
        // end-of-stream record that is not written needs no route, and one that is still ends
        // its split, whatever the policy does with it
        if let Some(check) = &self.sink_check {
            if let Err(message) = check(&record) {
                let marker = output.is_end_of_stream(&record);
                if !marker || output.emits_marker() {
                    let (position, timestamp) = (record.offset, record.timestamp);
                    self.undecodable(DecodeError::Invalid(message), record, output, split, offset)?;
                    if marker {
                        output.end_without_marker(position, timestamp);
                    }
                    return Ok(());
                }
            }
        }
        // the lag gauge needs a clock read: one in 1024 records is plenty for a gauge
        self.emitted = self.emitted.wrapping_add(1);
        if self.emitted % 1024 == 1 {
            if let Some(ts) = record.timestamp {
                let lag_ms = chrono::Utc::now().timestamp_millis() - ts;
                self.metrics.emit_lag.set(lag_ms.max(0) as f64 / 1000.0);
            }
        }
        let structured = record.decoded.is_some();
        output.collect(record);
        if structured && !self.keep_decoded {
            // back to the decoder, whose next record reuses its allocations
            if let Some(decoded) = output.last_mut().and_then(|last| last.decoded.take()) {
                self.decoder.recycle(decoded);
            }
        }
        split.next_offset = offset + 1;
        Ok(())
    }
}

#[cfg(test)]
#[path = "emitter_tests.rs"]
mod tests;
