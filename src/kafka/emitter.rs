//! The Kafka record emitter (Flink's `KafkaRecordEmitter`): decodes each fetched record's value
//! (and key, with a `key_format`), checks the sink can route it (a topic template), applies the
//! decode-error policy to a record that fails either, emits it, and advances the split past it.

use tracing::warn;

use super::split::KafkaPartitionSplit;
use crate::core::{ReaderOutput, RecordEmitter};
use crate::error::{Error, Result};
use crate::format::{DecodeError, DecodeErrorPolicy, ValueDecoder};
use crate::metrics::ReaderMetrics;
use crate::record::Record;

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

    /// The record's key and value decoded; a key's error says it is the key's.
    fn decode(&mut self, record: &mut Record) -> std::result::Result<(), DecodeError> {
        if let (Some(decoder), Some(bytes)) = (self.key_decoder.as_mut(), record.key.as_deref()) {
            record.decoded_key = decoder.decode(bytes).map_err(|e| match e {
                DecodeError::Invalid(m) => DecodeError::Invalid(format!("key: {m}")),
                DecodeError::Unavailable(m) => DecodeError::Unavailable(format!("key: {m}")),
            })?;
        }
        if let Some(bytes) = record.value.as_deref() {
            record.decoded = self.decoder.decode(bytes)?;
        }
        if let Some(check) = &self.sink_check {
            check(record).map_err(DecodeError::Invalid)?;
        }
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
        match self.decode(&mut record) {
            Ok(()) => {}
            // not the record's fault: never skipped nor dead-lettered for it; the split is not
            // advanced, so a restart decodes the record again
            Err(DecodeError::Unavailable(message)) => {
                return Err(Error::runtime(
                    format!("decoding {}:{}@{offset}", split.topic, split.partition),
                    message,
                ));
            }
            Err(DecodeError::Invalid(message)) => match self.policy {
                DecodeErrorPolicy::Fail => {
                    // the split is not advanced: a restart meets the same record again
                    return Err(Error::Decode {
                        topic: split.topic.clone(),
                        partition: split.partition,
                        offset,
                        message,
                    });
                }
                DecodeErrorPolicy::Skip => {
                    warn!(topic = %split.topic, partition = split.partition, offset, error = %message, "skipping a record that cannot be decoded");
                    self.metrics.decode_skipped.increment(1);
                    split.next_offset = offset + 1;
                    return Ok(());
                }
                DecodeErrorPolicy::DeadLetter => {
                    warn!(topic = %split.topic, partition = split.partition, offset, error = %message, "sending a record that cannot be decoded to the dead-letter topic");
                    self.metrics.dead_lettered.increment(1);
                    record.dead_letter = Some(message);
                    output.collect_unevaluated(record);
                    split.next_offset = offset + 1;
                    return Ok(());
                }
            },
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
