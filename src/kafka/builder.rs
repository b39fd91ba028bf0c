//! The Kafka source's builder (Flink's `KafkaSourceBuilder`): a [`KafkaSource`] from setters,
//! for tests and Rust programs, or from a config file's settings at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{emitter, KafkaSource, KafkaSourceSettings, Subscription};
use super::{DecoderFactory, StartingOffsets, StoppingOffsets, TopicPartition};
use crate::core::{EofOnRecordEvaluator, EventTimeOptions, FetcherMode};
use crate::error::{Error, Result};
use crate::format::DecodeErrorPolicy;
use crate::metrics::KafkaMetrics;
use crate::record::{Record, ValueFormat};

impl KafkaSource {
    /// A builder in the spirit of Flink's `KafkaSource.builder()`.
    pub fn builder() -> KafkaSourceBuilder {
        KafkaSourceBuilder::default()
    }
}

/// Builds a [`KafkaSource`] without a config file (tests, Rust programs).
#[derive(Default)]
pub struct KafkaSourceBuilder {
    settings: Option<KafkaSourceSettings>,
    bootstrap_servers: Option<String>,
    subscription: Option<Subscription>,
    starting: Option<StartingOffsets>,
    stopping: Option<StoppingOffsets>,
    discovery_interval: Option<Duration>,
    group_id: Option<String>,
    properties: BTreeMap<String, String>,
    format: ValueFormat,
    decoder: Option<DecoderFactory>,
    decode_errors: DecodeErrorPolicy,
    eof: Option<Arc<dyn EofOnRecordEvaluator<Record>>>,
    eof_text: Option<String>,
    eof_emit_marker: bool,
    eof_reads: Option<emitter::Decoded>,
    filter: Option<Arc<crate::expr::RecordExpression>>,
    fetcher_mode: FetcherMode,
    wait_for_topics: bool,
}

impl KafkaSourceBuilder {
    /// Every connection, subscription and offsets setting at once (from a config file); the
    /// individual setters below are then ignored.
    pub(crate) fn settings(mut self, settings: KafkaSourceSettings) -> Self {
        self.settings = Some(settings);
        self
    }
    /// The brokers to bootstrap from (`host:port,…`); required.
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.bootstrap_servers = Some(servers.into());
        self
    }
    /// Read every partition of these topics.
    pub fn topics<I: IntoIterator<Item = S>, S: Into<String>>(mut self, topics: I) -> Self {
        self.subscription = Some(Subscription::Topics(topics.into_iter().map(Into::into).collect()));
        self
    }
    /// Read every topic whose whole name matches this regular expression (as in Flink); an
    /// invalid pattern is a config error naming `source.topic_pattern`.
    pub fn topic_pattern(mut self, pattern: &str) -> Result<Self> {
        self.subscription =
            Some(Subscription::pattern(pattern).map_err(|e| Error::config("source.topic_pattern", e.to_string()))?);
        Ok(self)
    }
    /// Read exactly these partitions.
    pub fn partitions(mut self, partitions: Vec<TopicPartition>) -> Self {
        self.subscription = Some(Subscription::partitions(partitions));
        self
    }
    /// Where each split starts (default: the earliest offset).
    pub fn starting_offsets(mut self, starting: StartingOffsets) -> Self {
        self.starting = Some(starting);
        self
    }
    /// Stop at these offsets (the source becomes bounded unless `StoppingOffsets::None`).
    pub fn bounded(mut self, stopping: StoppingOffsets) -> Self {
        self.stopping = Some(stopping);
        self
    }
    /// Look for new partitions (and topics, with a pattern) this often; zero discovers once, at start.
    pub fn partition_discovery_interval(mut self, interval: Duration) -> Self {
        self.discovery_interval = (!interval.is_zero()).then_some(interval);
        self
    }
    /// The consumer group whose committed offsets [`StartingOffsets::Committed`] reads and
    /// checkpoints commit to.
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }
    /// A librdkafka property, passed through to every consumer (e.g. `security.protocol`).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }
    /// How values are read (default: bytes).
    pub fn format(mut self, format: ValueFormat) -> Self {
        self.format = format;
        self
    }
    /// A custom decoder (Avro, or anything else).
    pub fn decoder(mut self, factory: DecoderFactory) -> Self {
        self.decoder = Some(factory);
        self
    }
    /// What a record whose value cannot be decoded does (default: fail the job).
    pub fn decode_errors(mut self, policy: DecodeErrorPolicy) -> Self {
        self.decode_errors = policy;
        self
    }
    /// End a split at the first record this evaluator matches (FLIP-208); a closure works.
    pub fn eof_evaluator(mut self, eof: Arc<dyn EofOnRecordEvaluator<Record>>) -> Self {
        self.eof = Some(eof);
        self.eof_text = None;
        self.eof_reads = None;
        self
    }
    /// End a split at the first record this CEL expression matches.
    pub fn eof_expression(self, expression: &str) -> Result<Self> {
        let compiled =
            crate::expr::RecordExpression::compile(expression).map_err(|e| Error::config("source.eof", e))?;
        let reads = emitter::Decoded::read_by(&compiled);
        let mut builder = self.eof_evaluator(Arc::new(compiled));
        builder.eof_text = Some(expression.to_string());
        builder.eof_reads = Some(reads);
        Ok(builder)
    }
    /// Emit only the records this compiled filter matches (`source.where`); the others still
    /// advance the position, and are evaluated for the end of stream.
    pub(crate) fn filter(mut self, filter: Arc<crate::expr::RecordExpression>) -> Self {
        self.filter = Some(filter);
        self
    }
    /// Emit only the records this CEL expression matches.
    pub fn where_expression(self, expression: &str) -> Result<Self> {
        let compiled = crate::expr::RecordExpression::compile(expression)
            .map_err(|e| Error::config("source.where", e))?
            .in_role("filter");
        Ok(self.filter(Arc::new(compiled)))
    }
    /// Also emit the record that ended a split (Flink leaves it out; default: left out).
    pub fn eof_emit_marker(mut self, emit: bool) -> Self {
        self.eof_emit_marker = emit;
        self
    }
    /// One split fetcher thread per reader or one per split.
    pub fn fetcher_mode(mut self, mode: FetcherMode) -> Self {
        self.fetcher_mode = mode;
        self
    }
    /// Wait for subscribed topics that do not exist yet instead of failing at start.
    pub fn wait_for_topics(mut self, wait: bool) -> Self {
        self.wait_for_topics = wait;
        self
    }

    /// The source; a config error names the missing or invalid setting.
    pub fn build(self) -> Result<KafkaSource> {
        let settings = match self.settings {
            Some(s) => s,
            None => {
                let servers = self
                    .bootstrap_servers
                    .ok_or_else(|| Error::config("source.bootstrap_servers", "is required"))?;
                let subscription = self.subscription.ok_or_else(|| {
                    Error::config(
                        "source.topics",
                        "one of topics, topic_pattern or partitions is required",
                    )
                })?;
                let mut settings = KafkaSourceSettings::new(servers, subscription);
                settings.starting = self.starting.unwrap_or(StartingOffsets::Earliest);
                settings.stopping = self.stopping.unwrap_or(StoppingOffsets::None);
                settings.discovery_interval = self.discovery_interval;
                settings.group_id = self.group_id;
                settings.properties = self.properties;
                settings.wait_for_topics = self.wait_for_topics;
                settings
            }
        };
        let format = self.format;
        let decoder = match self.decoder {
            Some(d) => d,
            None => {
                if crate::format::simple_decoder(format).is_none() {
                    return Err(Error::config(
                        "source.format",
                        "avro needs a schema registry or a schema file",
                    ));
                }
                Arc::new(move || {
                    crate::format::simple_decoder(format).ok_or_else(|| Error::config("source.format", "no decoder"))
                })
            }
        };
        Ok(KafkaSource {
            settings: Arc::new(settings),
            format,
            decoder,
            decode_errors: self.decode_errors,
            eof: self.eof,
            eof_text: self.eof_text,
            eof_emit_marker: self.eof_emit_marker,
            eof_reads: self.eof_reads.unwrap_or(emitter::Decoded::ALL),
            filter: self.filter,
            fetcher_mode: self.fetcher_mode,
            queue_capacity: crate::core::queue::DEFAULT_CAPACITY,
            max_batch_records: 4096,
            max_batch_bytes: 1 << 20,
            keep_decoded: true,
            key_decoder: None,
            sink_check: None,
            metrics: KafkaMetrics::noop(),
            event_time: EventTimeOptions::default(),
            rate_limits: (None, None),
        })
    }
}
