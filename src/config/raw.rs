//! The config file as written: serde structs with a doc comment on every field (the source of
//! docs/config.md) and upstream defaults. `config::validate` turns them into typed settings.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

fn one() -> i64 {
    1
}
fn two() -> i64 {
    2
}
fn five_seconds() -> String {
    "5s".into()
}
fn thirty_seconds() -> String {
    "30s".into()
}
fn sixty_seconds() -> String {
    "60s".into()
}

/// A tidegate job: one source, one sink, checkpoints to a state file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// How the job runs.
    #[serde(default)]
    pub job: RawJob,
    /// Where records come from: a table with `type = "kafka"`, `"datagen"` or `"periodic"` and the
    /// fields of that source (see the sections below).
    pub source: Value,
    /// Where records go: a table with `type = "kafka"`, `"file"`, `"stdout"` or `"null"` and the
    /// fields of that sink (see the sections below).
    pub sink: Value,
    /// Checkpoints and the state file.
    #[serde(default)]
    pub checkpoint: RawCheckpoint,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: RawMetrics,
    /// Logging.
    #[serde(default)]
    pub log: RawLog,
}

/// `[job]`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    /// Name in logs and the state file. Default: the config file's name without extension.
    pub name: Option<String>,
    /// Number of parallel source readers.
    #[serde(default = "one")]
    pub parallelism: i64,
    /// Stop gracefully (final checkpoint, exit 0) after this long, e.g. "30s". Default: run until
    /// the input ends or a signal arrives.
    pub max_duration: Option<String>,
    /// This process's share of the splits when one job runs as several processes:
    /// `{ index = 0, count = 3 }`. Each instance needs its own state file.
    pub instance: Option<RawInstance>,
    /// Fetcher threads per reader: "single" (one for all its splits) or "per_split".
    #[serde(default)]
    pub fetcher_mode: Option<String>,
    /// Capacity of each reader's queue of fetched batches (Flink's default is 2).
    #[serde(default = "two")]
    pub queue_capacity: i64,
}

impl Default for RawJob {
    fn default() -> Self {
        RawJob {
            name: None,
            parallelism: 1,
            max_duration: None,
            instance: None,
            fetcher_mode: None,
            queue_capacity: 2,
        }
    }
}

/// `job.instance`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawInstance {
    /// This instance, from 0.
    pub index: i64,
    /// How many instances share the job.
    pub count: i64,
}

/// `[checkpoint]`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCheckpoint {
    /// The state file. Without it the job keeps no state and always starts from scratch.
    pub path: Option<String>,
    /// Time between checkpoints; a restart after a crash replays at most this much.
    #[serde(default = "five_seconds")]
    pub interval: String,
}

impl Default for RawCheckpoint {
    fn default() -> Self {
        RawCheckpoint {
            path: None,
            interval: five_seconds(),
        }
    }
}

/// `[metrics]`
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Address of the Prometheus endpoint (`/metrics`, `/healthz`), e.g. "127.0.0.1:9464"; a bare
    /// port binds to loopback. Default: no endpoint.
    pub listen: Option<String>,
}

/// `[log]`
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// "text" (default) or "json". The level comes from `RUST_LOG` (default `info`).
    pub format: Option<String>,
}

/// A librdkafka property value: text, a number or a boolean.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Int(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Bool(b) => write!(f, "{b}"),
        }
    }
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
    /// `{ timestamp = "2026-11-27T09:30:00-05:00" }` (or epoch milliseconds), or
    /// `{ offsets = { "topic:0" = 42 } }` (unlisted partitions start at earliest).
    pub starting_offsets: Option<Value>,
    /// Where to stop (exclusive): "none" (default, unbounded), "latest" (the end of each partition
    /// when it is discovered), `{ timestamp = … }`, or `{ offsets = { "topic:0" = 50 } }`
    /// (unlisted partitions stop at latest).
    pub stopping_offsets: Option<Value>,
    /// End-of-stream expression in CEL over `key`, `value`, `headers`, `topic`, `partition`,
    /// `offset`, `timestamp`, e.g. `value.type == "MARKET_CLOSE"`. The matching record ends its
    /// partition and is not emitted.
    pub eof: Option<String>,
    /// Emit the record that matched `eof` too.
    #[serde(default)]
    pub eof_emit_marker: bool,
    /// How often to look for new partitions, e.g. "5m"; "0" disables. Default: off when the source
    /// is bounded or has `eof`, else "5m". Not allowed with bounded stopping offsets.
    pub partition_discovery_interval: Option<String>,
    /// Wait for subscribed topics that do not exist yet, instead of failing.
    #[serde(default)]
    pub wait_for_topics: bool,
    /// Value format: "bytes" (default), "string", "json" or "avro".
    pub format: Option<String>,
    /// Avro settings, for `format = "avro"`.
    pub avro: Option<RawAvro>,
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

/// `source.avro`: where Avro schemas come from.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAvro {
    /// Confluent Schema Registry URL: values are in the Confluent wire format (magic byte, schema
    /// id, datum). Reading fetches each schema once by id; writing registers `schema_file` under
    /// the subject `<topic>-value`.
    pub schema_registry: Option<String>,
    /// A local `.avsc` schema: without a registry, values are raw Avro datums of it. Writing
    /// always needs it.
    pub schema_file: Option<String>,
}

/// `[source]` with `type = "datagen"`: generate records from a field template (FLIP-238).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDatagenSource {
    /// Records to generate, indices `0..count`; omit for an unbounded stream.
    pub count: Option<i64>,
    /// Records per second for the whole source, shared by the readers with work; omit for as fast
    /// as possible.
    pub rate: Option<f64>,
    /// Seed: record i is a pure function of (seed, i).
    #[serde(default)]
    pub seed: u64,
    /// "json" (default), "string" or "avro".
    pub format: Option<String>,
    /// Avro settings, for `format = "avro"`.
    pub avro: Option<RawAvro>,
    /// The fields of each record: `name = { <generator> = … }` with generators `value`,
    /// `sequence = { start, step }`, `uniform = { min, max }`, `normal = { mean, stddev }` (with
    /// optional `round`, `min`, `max`), `choice = [..]` (with optional `weights = [..]`),
    /// `uuid = {}`, `timestamp = { start, step, jitter, format }`, `fake = "name"`, and
    /// `object = { … }` for nesting.
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// Key template over the fields, e.g. "{symbol}".
    pub key: Option<String>,
    /// Value template for `format = "string"`, e.g. "{symbol} {price}".
    pub value: Option<String>,
    /// Header templates, e.g. `{ source = "tidegate" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The field whose value (epoch ms or RFC 3339) becomes the record timestamp.
    pub timestamp: Option<String>,
    /// A record written once to every partition of the target topic after every generated record
    /// is acknowledged (the market-close record).
    pub end_marker: Option<RawEndMarker>,
    /// Records generated per batch.
    pub batch_size: Option<i64>,
}

/// `source.end_marker`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndMarker {
    /// Its key.
    pub key: Option<String>,
    /// Its value (a table, written in the source's format).
    pub value: Value,
    /// Its timestamp: RFC 3339 or epoch milliseconds.
    pub timestamp: Option<Value>,
    /// Its headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `[source]` with `type = "periodic"`: events fired on wall-time or fixed-rate schedules, from
/// inline `events` or a supplier `file` re-read every `discover_interval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPeriodicSource {
    /// Inline events (exactly one of `events` and `file`): `[{ id = "tick", value = { … },
    /// schedule = { wall_time = true, period = "1s" } }]`; see the event fields below.
    pub events: Option<Vec<crate::periodic::supplier::RawEvent>>,
    /// A TOML (`[[events]]`) or JSON (a list) file of events, re-read every `discover_interval`;
    /// if it becomes unreadable or invalid, the previous events keep firing.
    pub file: Option<String>,
    /// Time between reads of `file`.
    pub discover_interval: Option<String>,
    /// Delay of the first read, after every reader registered.
    pub initial_delay: Option<String>,
    /// After a restart, missed fires are: "skip" (default), "fire_once" (the latest one), "all".
    pub catch_up: Option<String>,
    /// "json" (default: the value as JSON), "string" (a text value as is) or "avro".
    pub format: Option<String>,
    /// Avro settings, for `format = "avro"`.
    pub avro: Option<RawAvro>,
    /// The most events allowed (default 1000): many events is a misuse of this source.
    pub max_events: Option<i64>,
}

/// `[sink]` with `type = "kafka"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaSink {
    /// Brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// The topic to write.
    pub topic: String,
    /// Write each record to the partition number it was read from (else the key decides).
    #[serde(default)]
    pub preserve_partition: bool,
    /// Create the topic if it does not exist: `{ partitions = 3, replication_factor = 1 }`.
    pub create_topic: Option<RawCreateTopic>,
    /// How long a checkpoint waits for every send to be acknowledged.
    #[serde(default = "sixty_seconds")]
    pub flush_timeout: String,
    /// librdkafka producer properties, passed through.
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// `sink.create_topic`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCreateTopic {
    /// Partitions of the new topic.
    pub partitions: i64,
    /// Replication factor of the new topic.
    #[serde(default = "one")]
    pub replication_factor: i64,
}

/// `[sink]` with `type = "file"`: JSON lines, fsynced at each checkpoint.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFileSink {
    /// The file. A fresh job starts it anew; a resumed job appends.
    pub path: String,
}

/// `[sink]` with `type = "stdout"` or `type = "null"` (discards; for benchmarks).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNoOptions {}
