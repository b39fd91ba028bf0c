//! The Kafka source's config: the `[source]` table as written and its validation into a
//! [`KafkaSourceConfig`] (every error names its key).

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::config_offsets::{starting_offsets, stopping_offsets};
use super::offsets::{parse_topic_partition, StartingOffsets, StoppingOffsets};
use super::settings::KafkaSourceSettings;
use super::subscription::Subscription;
use crate::connector::values::{duration_at, keyword, properties, PropertyValue};
use crate::connector::JobConfig;
use crate::core::EventTimeOptions;
use crate::error::{Error, Result};
use crate::format::config::{key_format, AvroConfig, RawAvro};
use crate::format::schema_config::{read_formats, RawJsonSchema, RawProtobuf, WireSchema};
use crate::format::DecodeErrorPolicy;
use crate::record::ValueFormat;

fn thirty_seconds() -> String {
    "30s".into()
}

/// `[source]` with `type = "kafka"`: read topics, bounded or not, until stopping offsets or an
/// end-of-stream record.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaSource {
    /// Brokers to bootstrap from, e.g. "127.0.0.1:9092".
    pub bootstrap_servers: String,
    /// Topics to read. Exactly one of `topics`, `topic_pattern` and `partitions`.
    pub topics: Option<Vec<String>>,
    /// A regular expression that whole topic names must match.
    pub topic_pattern: Option<String>,
    /// Fixed partitions, as "topic:partition".
    pub partitions: Option<Vec<String>>,
    /// Where to start: "earliest" (default), "latest", "committed" (group offsets, error when a
    /// partition has none), `{ committed = "earliest" | "latest" | "none" }`,
    /// `{ timestamp = "2026-11-27T09:30:00-05:00" }` (or epoch milliseconds),
    /// `{ offsets = { "topic:0" = 42 } }` (unlisted partitions start at earliest), or
    /// `{ offset = 42 }` (every partition, kept within what it holds).
    pub starting_offsets: Option<Value>,
    /// Where to stop (exclusive): "none" (default, unbounded), "latest" (the end of each partition
    /// when it is discovered), `{ timestamp = … }`, `{ offsets = { "topic:0" = 50 } }`
    /// (unlisted partitions stop at latest), or `{ offset = 50 }` (every partition, or its end
    /// at discovery where that comes first).
    pub stopping_offsets: Option<Value>,
    /// End-of-stream expression in CEL over `key`, `value`, `headers`, `topic`, `partition`,
    /// `offset`, `timestamp`, e.g. `value.type == "MARKET_CLOSE"`. The matching record ends its
    /// partition and is not emitted.
    pub eof: Option<String>,
    /// Emit the record that matched `eof` too (unless `where` rejects it).
    #[serde(default)]
    pub eof_emit_marker: bool,
    /// A filter in CEL over the same variables as `eof`, e.g. `headers.region == "eu"`: records for which it is
    /// false are not emitted, but still advance the position (checkpoints, stops and `eof` are unaffected). When it
    /// reads only `key`, `headers`, `topic`, `partition`, `offset` or `timestamp`, it runs before the value is
    /// decoded (a rejected value is never decoded). An evaluation that fails (a missing field) rejects the record.
    #[serde(rename = "where")]
    pub filter: Option<String>,
    /// What an `eof` match ends: "partition" (default: its own partition) or "source" (every
    /// partition, at the marker's timestamp: each record before it is emitted, none at or after
    /// it, exact across skewed partitions; kept across a restart).
    pub eof_scope: Option<String>,
    /// Replay at event time: each record is emitted when (its timestamp - the first record's) /
    /// `replay_speed` has passed since the replay started, all partitions on one clock (1.0 is
    /// real time, 60.0 plays an hour in a minute). Absent: as fast as possible.
    pub replay_speed: Option<f64>,
    /// At most this many records per second, shared by every reader (beside `replay_speed`: the
    /// slower wins). Changeable while running (`POST /control`, `max_rate`). Absent: unlimited.
    pub max_rate: Option<f64>,
    /// At most this many key and value bytes per second, shared by every reader (a record larger
    /// than what 10 ms allow still passes, and the next waits). Changeable while running
    /// (`max_bytes_rate`). Absent: unlimited.
    pub max_bytes_rate: Option<f64>,
    /// With `eof_scope = "source"`: how long before reaching the log a record may be stamped (clock skew plus
    /// produce-to-log time). A partition the broker confirms caught up (nothing past the reader, no open
    /// transaction) holds the others back only for records newer than the confirmation less this. Default "2s".
    pub caught_up_grace: Option<String>,
    /// With `eof_scope = "source"`: how far a timestamp may run back behind an earlier one of its partition (Flink's
    /// bounded out-of-orderness), e.g. "2s" for several producers. Within it the stop is exact: partitions are read
    /// until past the stop by this much. A record further out of order is logged. Default "0s" (in order).
    pub max_out_of_orderness: Option<String>,
    /// How often to look for new partitions, e.g. "5m"; "0" disables. Default: off when the source
    /// is bounded or has `eof`, else "5m". Not allowed with bounded stopping offsets.
    pub partition_discovery_interval: Option<String>,
    /// Wait for subscribed topics that do not exist yet, instead of failing.
    #[serde(default)]
    pub wait_for_topics: bool,
    /// Value format: "bytes" (default), "string", "json", "avro", "protobuf" or "json_schema".
    pub format: Option<String>,
    /// Key format: absent keeps keys as they are (text when UTF-8, else base64); "string",
    /// "json" or "avro" decode them for `eof`'s `key` and the envelope (decode errors follow
    /// `decode_errors`). Avro keys: the registry, or `avro.key_schema_file`.
    pub key_format: Option<String>,
    /// Avro settings, for `format = "avro"` or `key_format = "avro"`.
    pub avro: Option<RawAvro>,
    /// Protobuf settings, for `format = "protobuf"`.
    pub protobuf: Option<RawProtobuf>,
    /// JSON Schema settings, for `format = "json_schema"`.
    pub json_schema: Option<RawJsonSchema>,
    /// What to do with a record whose value cannot be decoded: "fail" (default), "skip" or
    /// "dead_letter".
    pub decode_errors: Option<String>,
    /// Topic for `decode_errors = "dead_letter"`.
    pub dead_letter_topic: Option<String>,
    /// Consumer group: offsets are committed to it after each checkpoint (progress report only),
    /// and `committed` starting offsets read from it.
    pub group_id: Option<String>,
    /// When a position to read was deleted by retention: "error" (default), "earliest" or "latest".
    pub offset_reset: Option<String>,
    /// Timeout of metadata and offset requests; an unreachable cluster fails the job after it.
    #[serde(default = "thirty_seconds")]
    pub request_timeout: String,
    /// librdkafka consumer properties, passed through, e.g. `"fetch.min.bytes" = 1`.
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// The formats a Kafka source reads.
const ALL_FORMATS: &[ValueFormat] = &[
    ValueFormat::Bytes,
    ValueFormat::String,
    ValueFormat::Json,
    ValueFormat::Avro,
];

/// The validated Kafka source.
#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub settings: KafkaSourceSettings,
    pub format: ValueFormat,
    /// `None`: keys are not decoded.
    pub key_format: Option<ValueFormat>,
    pub avro: Option<AvroConfig>,
    pub wire_schema: Option<WireSchema>,
    pub eof: Option<String>,
    pub eof_emit_marker: bool,
    /// `source.where` as written.
    pub filter: Option<String>,
    pub event_time: EventTimeOptions,
    /// `source.max_rate` and `source.max_bytes_rate`.
    pub rate_limits: (Option<f64>, Option<f64>),
    pub decode_errors: DecodeErrorPolicy,
    pub dead_letter_topic: Option<String>,
}

pub(super) fn validate_kafka_source(raw: RawKafkaSource, job: &JobConfig) -> Result<KafkaSourceConfig> {
    let subscription = match (raw.topics, raw.topic_pattern, raw.partitions) {
        (Some(topics), None, None) => {
            if topics.is_empty() || topics.iter().any(|t| t.trim().is_empty()) {
                return Err(Error::config(
                    "source.topics",
                    "must list at least one topic, without empty names",
                ));
            }
            Subscription::Topics(topics)
        }
        (None, Some(pattern), None) => Subscription::pattern(&pattern)
            .map_err(|e| Error::config("source.topic_pattern", format!("invalid regular expression: {e}")))?,
        (None, None, Some(list)) => {
            let mut parsed = Vec::with_capacity(list.len());
            for (i, s) in list.iter().enumerate() {
                parsed.push(parse_topic_partition(s).ok_or_else(|| {
                    Error::config(
                        format!("source.partitions[{i}]"),
                        format!("{s:?} is not \"topic:partition\""),
                    )
                })?);
            }
            if parsed.is_empty() {
                return Err(Error::config("source.partitions", "must list at least one partition"));
            }
            Subscription::partitions(parsed)
        }
        (None, None, None) => {
            return Err(Error::config(
                "source.topics",
                "one of topics, topic_pattern or partitions is required",
            ))
        }
        _ => {
            return Err(Error::config(
                "source.topics",
                "set only one of topics, topic_pattern and partitions",
            ))
        }
    };
    let starting = starting_offsets(raw.starting_offsets.as_ref())?;
    let stopping = stopping_offsets(raw.stopping_offsets.as_ref())?;
    if let (StartingOffsets::Timestamp(start), StoppingOffsets::Timestamp(stop)) = (&starting, &stopping) {
        if stop < start {
            return Err(Error::config(
                "source.stopping_offsets",
                "stops before the starting timestamp",
            ));
        }
    }
    if let (StartingOffsets::Specific(starts), StoppingOffsets::Specific(stops)) = (&starting, &stopping) {
        for (tp, start) in starts {
            if let Some(stop) = stops.get(tp) {
                if stop < start {
                    return Err(Error::config(
                        format!("source.stopping_offsets.offsets.\"{}:{}\"", tp.0, tp.1),
                        format!("{stop} is before the starting offset {start}"),
                    ));
                }
            }
        }
    }
    if let (StartingOffsets::Offset(start), StoppingOffsets::Offset(stop)) = (&starting, &stopping) {
        if stop < start {
            return Err(Error::config(
                "source.stopping_offsets.offset",
                format!("{stop} is before the starting offset {start}"),
            ));
        }
    }
    if matches!(starting, StartingOffsets::Committed { .. }) && raw.group_id.is_none() {
        return Err(Error::config(
            "source.starting_offsets",
            "\"committed\" needs source.group_id",
        ));
    }
    let discovery = match raw.partition_discovery_interval.as_deref() {
        Some(text) => {
            let d = duration_at("source.partition_discovery_interval", text)?;
            if !d.is_zero() && stopping.is_bounded() {
                return Err(Error::config(
                    "source.partition_discovery_interval",
                    "cannot be used with bounded stopping_offsets: the job could never end",
                ));
            }
            (!d.is_zero()).then_some(d)
        }
        // a bounded read, or a replay that ends at a marker, must not wait for new partitions
        None if stopping.is_bounded() || raw.eof.is_some() => None,
        None => Some(Duration::from_secs(300)),
    };
    let key_format = key_format("source.key_format", raw.key_format.as_deref(), ALL_FORMATS)?;
    let (format, avro, wire_schema) = read_formats(
        raw.format.as_deref(),
        key_format,
        raw.avro,
        raw.protobuf,
        raw.json_schema,
    )?;
    super::config_checks::expressions(&raw.eof, &raw.filter, format)?;
    let decode_errors = keyword(
        "source.decode_errors",
        raw.decode_errors.as_deref(),
        DecodeErrorPolicy::Fail,
        &[
            ("fail", DecodeErrorPolicy::Fail),
            ("skip", DecodeErrorPolicy::Skip),
            ("dead_letter", DecodeErrorPolicy::DeadLetter),
        ],
    )?;
    if decode_errors == DecodeErrorPolicy::DeadLetter && raw.dead_letter_topic.is_none() {
        return Err(Error::config(
            "source.dead_letter_topic",
            "is required with decode_errors = \"dead_letter\"",
        ));
    }
    let offset_reset = keyword(
        "source.offset_reset",
        raw.offset_reset.as_deref(),
        "error",
        &[("error", "error"), ("earliest", "earliest"), ("latest", "latest")],
    )?;
    if raw.bootstrap_servers.trim().is_empty() {
        return Err(Error::config("source.bootstrap_servers", "must not be empty"));
    }
    let source_wide_stop = keyword(
        "source.eof_scope",
        raw.eof_scope.as_deref(),
        false,
        &[("partition", false), ("source", true)],
    )?;
    if source_wide_stop && raw.eof.is_none() {
        return Err(Error::config(
            "source.eof_scope",
            "\"source\" needs an end-of-stream expression: set source.eof",
        ));
    }
    super::config_checks::pacing(
        raw.replay_speed,
        (&raw.caught_up_grace, &raw.max_out_of_orderness),
        (raw.max_rate, raw.max_bytes_rate),
        source_wide_stop,
    )?;
    let rate_limits = (raw.max_rate, raw.max_bytes_rate);
    let disorder = raw.max_out_of_orderness.as_deref().unwrap_or("0s");
    let event_time = EventTimeOptions {
        speed: raw.replay_speed,
        source_wide_stop,
        idle_grace: duration_at("source.caught_up_grace", raw.caught_up_grace.as_deref().unwrap_or("2s"))?,
        max_out_of_orderness: duration_at("source.max_out_of_orderness", disorder)?,
        rate_limited: rate_limits.0.is_some() || rate_limits.1.is_some(),
        // set per run by a group member (crate::coordination)
        peers: false,
    };
    let mut settings = KafkaSourceSettings::new(raw.bootstrap_servers, subscription);
    settings.starting = starting;
    settings.stopping = stopping;
    settings.discovery_interval = discovery;
    settings.wait_for_topics = raw.wait_for_topics;
    settings.group_id = raw.group_id;
    settings.properties = properties("source", raw.properties)?;
    settings.request_timeout = duration_at("source.request_timeout", &raw.request_timeout)?;
    settings.instance = job.instance;
    settings.offset_reset = offset_reset.to_string();
    // librdkafka checks properties only when a client is created: every client a run makes of
    // these properties is created once when the whole config is loaded (crate::config's clients)
    Ok(KafkaSourceConfig {
        settings,
        format,
        key_format,
        avro,
        wire_schema,
        eof: raw.eof,
        eof_emit_marker: raw.eof_emit_marker,
        filter: raw.filter,
        event_time,
        rate_limits,
        decode_errors,
        dead_letter_topic: raw.dead_letter_topic,
    })
}
