//! Configuration: a TOML file loaded with the `config` crate and overridden by `TIDEGATE__…`
//! environment variables and `--set key.path=value`, deserialized into the raw structs of
//! [`raw`], then validated once into typed settings. Every error names the offending key.

pub mod raw;
pub mod reference;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::FetcherMode;
use crate::datagen::template::{self, TextTemplate};
use crate::datagen::TemplateGenerator;
use crate::error::{Error, Result};
use crate::format::DecodeErrorPolicy;
use crate::kafka::offsets::parse_topic_partition;
use crate::kafka::{CommittedReset, Instance, StartingOffsets, StoppingOffsets, Subscription};
use crate::record::{Header, Record, ValueFormat};
use raw::*;

/// A validated job configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub job: JobConfig,
    pub source: SourceConfig,
    pub sink: SinkConfig,
    pub checkpoint: CheckpointConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone)]
pub struct JobConfig {
    pub name: String,
    pub parallelism: usize,
    pub max_duration: Option<Duration>,
    pub instance: Instance,
    pub fetcher_mode: FetcherMode,
    pub queue_capacity: usize,
}

#[derive(Debug, Clone)]
pub enum SourceConfig {
    Kafka(KafkaSourceConfig),
    Datagen(DatagenConfig),
    Periodic(crate::periodic::PeriodicSettings),
}

impl SourceConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Kafka(_) => "kafka",
            SourceConfig::Datagen(_) => "datagen",
            SourceConfig::Periodic(_) => "periodic",
        }
    }
}

#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub settings: crate::kafka::KafkaSourceSettings,
    pub format: ValueFormat,
    pub avro: Option<AvroConfig>,
    pub eof: Option<String>,
    pub eof_emit_marker: bool,
    pub decode_errors: DecodeErrorPolicy,
    pub dead_letter_topic: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AvroConfig {
    pub schema_registry: Option<String>,
    pub schema_file: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct DatagenConfig {
    pub count: Option<u64>,
    pub rate: Option<f64>,
    pub generator: TemplateGenerator,
    pub avro: Option<AvroConfig>,
    pub end_marker: Option<Record>,
    pub batch_size: usize,
}

#[derive(Debug, Clone)]
pub enum SinkConfig {
    Kafka(KafkaSinkConfig),
    File { path: PathBuf },
    Stdout,
    Null,
}

#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub settings: crate::sink::kafka::KafkaSinkSettings,
    /// Partitions and replication factor, to create the topic if missing.
    pub create_topic: Option<(i32, i32)>,
}

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub path: Option<PathBuf>,
    pub interval: Duration,
}

#[derive(Debug, Clone)]
pub struct MetricsConfig {
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// Parse a human duration ("250ms", "5s", "10m", "1h 30m", or "0"); negative values are refused.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; a duration is like \"250ms\", \"5s\" or \"10m\""
        ));
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{text:?} is not a duration like \"250ms\", \"5s\" or \"10m\" ({e})"))
}

fn duration_at(key: &str, text: &str) -> Result<Duration> {
    parse_duration(text).map_err(|m| Error::config(key, m))
}

/// Load, override and validate a config file.
pub fn load(path: &Path, sets: &[String]) -> Result<Config> {
    let tree = load_tree(path, sets)?;
    validate(path, tree)
}

/// The merged config tree (file, environment, `--set`), before validation.
pub fn load_tree(path: &Path, sets: &[String]) -> Result<Value> {
    if !path.is_file() {
        return Err(Error::config(
            "--config",
            format!("{} does not exist or is not a file", path.display()),
        ));
    }
    let built = ::config::Config::builder()
        .add_source(::config::File::from(path).format(::config::FileFormat::Toml))
        .add_source(
            ::config::Environment::with_prefix("TIDEGATE")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        )
        .build()
        .map_err(|e| Error::config(path.display().to_string(), e.to_string()))?;
    let mut tree: Value = built
        .try_deserialize()
        .map_err(|e| Error::config(path.display().to_string(), e.to_string()))?;
    for set in sets {
        apply_set(&mut tree, set)?;
    }
    Ok(tree)
}

/// Split a `--set` path on dots, keeping quoted segments whole: `source.properties."fetch.min.bytes"`.
fn set_path(path: &str) -> std::result::Result<Vec<String>, String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in path.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => segments.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    if quoted {
        return Err("unclosed quote".into());
    }
    segments.push(current);
    if segments.iter().any(String::is_empty) {
        return Err("empty segment".into());
    }
    Ok(segments)
}

/// Apply one `key.path=value` override; the value is JSON if it parses as JSON, else text.
fn apply_set(tree: &mut Value, set: &str) -> Result<()> {
    let Some((path, value)) = set.split_once('=') else {
        return Err(Error::config("--set", format!("{set:?} is not key.path=value")));
    };
    let segments = set_path(path.trim()).map_err(|e| Error::config("--set", format!("{path:?}: {e}")))?;
    let value: Value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    let mut node = tree;
    for (i, seg) in segments.iter().enumerate() {
        if !node.is_object() {
            return Err(Error::config(
                segments[..i].join("."),
                "is not a table, so --set cannot go inside it",
            ));
        }
        let map = node.as_object_mut().expect("checked");
        if i + 1 == segments.len() {
            map.insert(seg.clone(), value);
            return Ok(());
        }
        node = map
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(())
}

/// Deserialize a subtree, naming the exact key on error (`prefix` is the subtree's own path).
fn typed<T: DeserializeOwned>(prefix: &str, value: Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let mut key = if path == "." || path.is_empty() {
            prefix.to_string()
        } else if prefix.is_empty() {
            path
        } else {
            format!("{prefix}.{path}")
        };
        // an unknown or missing field is reported on its table; name the field itself
        let named = inner
            .strip_prefix("unknown field `")
            .or_else(|| inner.strip_prefix("missing field `"))
            .and_then(|r| r.split('`').next());
        if let Some(field) = named {
            if key.rsplit('.').next() != Some(field) {
                key = if key.is_empty() {
                    field.to_string()
                } else {
                    format!("{key}.{field}")
                };
            }
        }
        Error::config(key, inner)
    })
}

/// Validate a merged tree into a [`Config`].
pub fn validate(path: &Path, tree: Value) -> Result<Config> {
    let raw: RawConfig = typed("", tree)?;
    let job = validate_job(path, raw.job)?;
    let source = validate_source(raw.source, &job)?;
    let sink = validate_sink(raw.sink)?;
    let checkpoint = CheckpointConfig {
        path: raw.checkpoint.path.map(PathBuf::from),
        interval: duration_at("checkpoint.interval", &raw.checkpoint.interval)?,
    };
    if checkpoint.interval.is_zero() {
        return Err(Error::config("checkpoint.interval", "must be more than 0"));
    }
    let metrics = MetricsConfig {
        listen: raw.metrics.listen.as_deref().map(parse_listen).transpose()?,
    };
    let log = LogConfig {
        format: match raw.log.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(Error::config(
                    "log.format",
                    format!("is \"text\" or \"json\", not {other:?}"),
                ))
            }
        },
    };
    Ok(Config {
        path: path.to_path_buf(),
        job,
        source,
        sink,
        checkpoint,
        metrics,
        log,
    })
}

fn parse_listen(text: &str) -> Result<SocketAddr> {
    let t = text.trim().trim_start_matches(':');
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.trim()
        .parse()
        .map_err(|_| Error::config("metrics.listen", format!("{text:?} is not host:port (or a port)")))
}

fn positive(key: &str, n: i64) -> Result<usize> {
    if n < 1 {
        return Err(Error::config(key, format!("must be at least 1, not {n}")));
    }
    Ok(n as usize)
}

fn validate_job(path: &Path, raw: RawJob) -> Result<JobConfig> {
    let name = raw.name.unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tidegate".into())
    });
    let instance = match raw.instance {
        None => Instance::default(),
        Some(i) => {
            let count = positive("job.instance.count", i.count)?;
            if i.index < 0 || i.index as usize >= count {
                return Err(Error::config(
                    "job.instance.index",
                    format!("must be in 0..{count}, not {}", i.index),
                ));
            }
            Instance {
                index: i.index as usize,
                count,
            }
        }
    };
    Ok(JobConfig {
        name,
        parallelism: positive("job.parallelism", raw.parallelism)?,
        max_duration: raw
            .max_duration
            .as_deref()
            .map(|d| duration_at("job.max_duration", d))
            .transpose()?,
        instance,
        fetcher_mode: match raw.fetcher_mode.as_deref() {
            None | Some("single") => FetcherMode::Single,
            Some("per_split") => FetcherMode::PerSplit,
            Some(other) => {
                return Err(Error::config(
                    "job.fetcher_mode",
                    format!("is \"single\" or \"per_split\", not {other:?}"),
                ))
            }
        },
        queue_capacity: positive("job.queue_capacity", raw.queue_capacity)?,
    })
}

/// Split a `source`/`sink` table into its `type` and the rest.
fn tagged(section: &str, value: Value, types: &[&str]) -> Result<(String, Value)> {
    let Value::Object(mut map) = value else {
        return Err(Error::config(section, "must be a table"));
    };
    let key = format!("{section}.type");
    let kind = match map.remove("type") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(Error::config(key, format!("must be text, not {other}"))),
        None => return Err(Error::config(key, format!("is required: one of {}", types.join(", ")))),
    };
    if !types.contains(&kind.as_str()) {
        return Err(Error::config(
            key,
            format!("unknown type {kind:?}; one of {}", types.join(", ")),
        ));
    }
    Ok((kind, Value::Object(map)))
}

fn properties(map: BTreeMap<String, PropertyValue>) -> BTreeMap<String, String> {
    map.into_iter().map(|(k, v)| (k, v.to_string())).collect()
}

fn value_format(key: &str, text: Option<&str>, default: ValueFormat, allowed: &[ValueFormat]) -> Result<ValueFormat> {
    let f = match text {
        None => default,
        Some("bytes") => ValueFormat::Bytes,
        Some("string") => ValueFormat::String,
        Some("json") => ValueFormat::Json,
        Some("avro") => ValueFormat::Avro,
        Some(other) => return Err(Error::config(key, format!("unknown format {other:?}"))),
    };
    if !allowed.contains(&f) {
        let names: Vec<String> = allowed.iter().map(|a| format!("{a:?}").to_lowercase()).collect();
        return Err(Error::config(key, format!("must be one of {}", names.join(", "))));
    }
    Ok(f)
}

/// Avro settings. Reading needs a registry or a schema file; writing needs the schema file, and
/// with a registry too the schema is registered and the wire format is Confluent's.
fn avro(key: &str, format: ValueFormat, raw: Option<RawAvro>) -> Result<Option<AvroConfig>> {
    match (format, raw) {
        (ValueFormat::Avro, Some(a)) => {
            if a.schema_registry.is_none() && a.schema_file.is_none() {
                return Err(Error::config(key, "set schema_registry, schema_file, or both"));
            }
            Ok(Some(AvroConfig {
                schema_registry: a.schema_registry,
                schema_file: a.schema_file.map(PathBuf::from),
            }))
        }
        (ValueFormat::Avro, None) => Err(Error::config(
            key,
            "format \"avro\" needs schema_registry or schema_file",
        )),
        (_, Some(_)) => Err(Error::config(key, "only applies to format = \"avro\"")),
        (_, None) => Ok(None),
    }
}

fn time_value(key: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| Error::config(key, "must be epoch milliseconds")),
        Value::String(s) => template::parse_time(s).map_err(|e| Error::config(key, e)),
        other => Err(Error::config(
            key,
            format!("must be RFC 3339 text or epoch milliseconds, not {other}"),
        )),
    }
}

fn offsets_map(key: &str, v: &Value) -> Result<BTreeMap<(String, i32), i64>> {
    let Value::Object(map) = v else {
        return Err(Error::config(key, "must be a table of \"topic:partition\" = offset"));
    };
    let mut out = BTreeMap::new();
    for (tp, o) in map {
        let entry = format!("{key}.\"{tp}\"");
        let parsed = parse_topic_partition(tp).ok_or_else(|| Error::config(&entry, "is not \"topic:partition\""))?;
        let offset = o
            .as_i64()
            .filter(|o| *o >= 0)
            .ok_or_else(|| Error::config(&entry, "must be an offset (>= 0)"))?;
        out.insert(parsed, offset);
    }
    Ok(out)
}

/// The single key of a one-entry table like `{ timestamp = … }`.
fn single_entry<'a>(key: &str, v: &'a Value, expected: &str) -> Result<(&'a str, &'a Value)> {
    match v.as_object() {
        Some(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().expect("one entry");
            Ok((k.as_str(), v))
        }
        _ => Err(Error::config(key, format!("must be {expected}"))),
    }
}

fn starting_offsets(v: Option<&Value>) -> Result<StartingOffsets> {
    const KEY: &str = "source.starting_offsets";
    const EXPECTED: &str =
        "\"earliest\", \"latest\", \"committed\", { committed = … }, { timestamp = … } or { offsets = { … } }";
    let Some(v) = v else {
        return Ok(StartingOffsets::Earliest);
    };
    if let Some(s) = v.as_str() {
        return match s {
            "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            "committed" => Ok(StartingOffsets::Committed {
                reset: CommittedReset::None,
            }),
            other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
        };
    }
    let (kind, arg) = single_entry(KEY, v, EXPECTED)?;
    let at = format!("{KEY}.{kind}");
    match kind {
        "timestamp" => Ok(StartingOffsets::Timestamp(time_value(&at, arg)?)),
        "offsets" => Ok(StartingOffsets::Specific(offsets_map(&at, arg)?)),
        "committed" => Ok(StartingOffsets::Committed {
            reset: match arg.as_str() {
                Some("earliest") => CommittedReset::Earliest,
                Some("latest") => CommittedReset::Latest,
                Some("none") => CommittedReset::None,
                _ => return Err(Error::config(at, "is \"earliest\", \"latest\" or \"none\"")),
            },
        }),
        other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
    }
}

fn stopping_offsets(v: Option<&Value>) -> Result<StoppingOffsets> {
    const KEY: &str = "source.stopping_offsets";
    const EXPECTED: &str = "\"none\", \"latest\", { timestamp = … } or { offsets = { … } }";
    let Some(v) = v else {
        return Ok(StoppingOffsets::None);
    };
    if let Some(s) = v.as_str() {
        return match s {
            "none" => Ok(StoppingOffsets::None),
            "latest" => Ok(StoppingOffsets::Latest),
            other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
        };
    }
    let (kind, arg) = single_entry(KEY, v, EXPECTED)?;
    let at = format!("{KEY}.{kind}");
    match kind {
        "timestamp" => Ok(StoppingOffsets::Timestamp(time_value(&at, arg)?)),
        "offsets" => Ok(StoppingOffsets::Specific(offsets_map(&at, arg)?)),
        other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
    }
}

fn validate_source(value: Value, job: &JobConfig) -> Result<SourceConfig> {
    let (kind, body) = tagged("source", value, &["kafka", "datagen", "periodic"])?;
    match kind.as_str() {
        "kafka" => validate_kafka_source(typed("source", body)?, job).map(SourceConfig::Kafka),
        "datagen" => validate_datagen(typed("source", body)?, job).map(SourceConfig::Datagen),
        _ => validate_periodic(typed("source", body)?).map(SourceConfig::Periodic),
    }
}

fn validate_periodic(raw: RawPeriodicSource) -> Result<crate::periodic::PeriodicSettings> {
    use crate::periodic::schedule::CatchUp;
    use crate::periodic::supplier::{validate_events, Supplier, DEFAULT_MAX_EVENTS};
    let max_events = match raw.max_events {
        None => DEFAULT_MAX_EVENTS,
        Some(m) => positive("source.max_events", m)?,
    };
    let supplier = match (raw.events, raw.file) {
        (Some(events), None) => Supplier::Inline(
            validate_events(events, "source.events", max_events).map_err(|(k, m)| Error::config(k, m))?,
        ),
        (None, Some(file)) => Supplier::File {
            path: PathBuf::from(file),
            max_events,
        },
        _ => return Err(Error::config("source.events", "set exactly one of events and file")),
    };
    let discover_interval = match raw.discover_interval.as_deref() {
        None => Duration::from_secs(60),
        Some(d) => duration_at("source.discover_interval", d)?,
    };
    if discover_interval.is_zero() {
        return Err(Error::config("source.discover_interval", "must be more than 0"));
    }
    let catch_up = match raw.catch_up.as_deref() {
        None | Some("skip") => CatchUp::Skip,
        Some("fire_once") => CatchUp::FireOnce,
        Some("all") => CatchUp::All,
        Some(other) => {
            return Err(Error::config(
                "source.catch_up",
                format!("is \"skip\", \"fire_once\" or \"all\", not {other:?}"),
            ))
        }
    };
    let format = value_format(
        "source.format",
        raw.format.as_deref(),
        ValueFormat::Json,
        &[ValueFormat::Json, ValueFormat::String, ValueFormat::Avro],
    )?;
    let avro = avro("source.avro", format, raw.avro)?;
    Ok(crate::periodic::PeriodicSettings {
        supplier,
        discover_interval,
        initial_delay: raw
            .initial_delay
            .as_deref()
            .map(|d| duration_at("source.initial_delay", d))
            .transpose()?
            .unwrap_or_default(),
        catch_up,
        format,
        avro,
        encoder: None,
        keep_decoded: true,
    })
}

fn validate_kafka_source(raw: RawKafkaSource, job: &JobConfig) -> Result<KafkaSourceConfig> {
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
    if let Some(expr) = &raw.eof {
        crate::expr::RecordExpression::compile(expr).map_err(|e| Error::config("source.eof", e))?;
    }
    let format = value_format(
        "source.format",
        raw.format.as_deref(),
        ValueFormat::Bytes,
        &[
            ValueFormat::Bytes,
            ValueFormat::String,
            ValueFormat::Json,
            ValueFormat::Avro,
        ],
    )?;
    let avro = avro("source.avro", format, raw.avro)?;
    let decode_errors = match raw.decode_errors.as_deref() {
        None | Some("fail") => DecodeErrorPolicy::Fail,
        Some("skip") => DecodeErrorPolicy::Skip,
        Some("dead_letter") => DecodeErrorPolicy::DeadLetter,
        Some(other) => {
            return Err(Error::config(
                "source.decode_errors",
                format!("is \"fail\", \"skip\" or \"dead_letter\", not {other:?}"),
            ))
        }
    };
    if decode_errors == DecodeErrorPolicy::DeadLetter && raw.dead_letter_topic.is_none() {
        return Err(Error::config(
            "source.dead_letter_topic",
            "is required with decode_errors = \"dead_letter\"",
        ));
    }
    let offset_reset = match raw.offset_reset.as_deref() {
        None | Some("error") => "error",
        Some("earliest") => "earliest",
        Some("latest") => "latest",
        Some(other) => {
            return Err(Error::config(
                "source.offset_reset",
                format!("is \"error\", \"earliest\" or \"latest\", not {other:?}"),
            ))
        }
    };
    if raw.bootstrap_servers.trim().is_empty() {
        return Err(Error::config("source.bootstrap_servers", "must not be empty"));
    }
    let mut settings = crate::kafka::KafkaSourceSettings::new(raw.bootstrap_servers, subscription);
    settings.starting = starting;
    settings.stopping = stopping;
    settings.discovery_interval = discovery;
    settings.wait_for_topics = raw.wait_for_topics;
    settings.group_id = raw.group_id;
    settings.properties = properties(raw.properties);
    settings.request_timeout = duration_at("source.request_timeout", &raw.request_timeout)?;
    settings.instance = job.instance;
    settings.offset_reset = offset_reset.to_string();
    Ok(KafkaSourceConfig {
        settings,
        format,
        avro,
        eof: raw.eof,
        eof_emit_marker: raw.eof_emit_marker,
        decode_errors,
        dead_letter_topic: raw.dead_letter_topic,
    })
}

fn validate_datagen(raw: RawDatagenSource, _job: &JobConfig) -> Result<DatagenConfig> {
    let count = match raw.count {
        None => None,
        Some(c) if c >= 0 => Some(c as u64),
        Some(c) => return Err(Error::config("source.count", format!("must be 0 or more, not {c}"))),
    };
    if let Some(rate) = raw.rate {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(Error::config(
                "source.rate",
                format!("must be more than 0 records per second, not {rate}"),
            ));
        }
    }
    let format = value_format(
        "source.format",
        raw.format.as_deref(),
        ValueFormat::Json,
        &[ValueFormat::Json, ValueFormat::String, ValueFormat::Avro],
    )?;
    let avro = avro("source.avro", format, raw.avro)?;
    let fields = template::compile_fields(&raw.fields, "source.fields").map_err(|(k, m)| Error::config(k, m))?;
    let text = |key: &str, t: &str| TextTemplate::parse(t, &fields).map_err(|m| Error::config(key, m));
    let key = raw.key.as_deref().map(|t| text("source.key", t)).transpose()?;
    let value = raw.value.as_deref().map(|t| text("source.value", t)).transpose()?;
    if value.is_some() && format != ValueFormat::String {
        return Err(Error::config("source.value", "only applies to format = \"string\""));
    }
    let mut headers = Vec::new();
    for (k, t) in &raw.headers {
        headers.push((k.clone(), text(&format!("source.headers.{k}"), t)?));
    }
    if let Some(ts) = &raw.timestamp {
        if !raw.fields.contains_key(ts) {
            return Err(Error::config("source.timestamp", format!("names no field ({ts:?})")));
        }
    }
    let end_marker = match raw.end_marker {
        None => None,
        Some(m) => {
            let value = match format {
                ValueFormat::String => match &m.value {
                    Value::String(s) => s.clone().into_bytes(),
                    other => other.to_string().into_bytes(),
                },
                _ => {
                    serde_json::to_vec(&m.value).map_err(|e| Error::config("source.end_marker.value", e.to_string()))?
                }
            };
            Some(Record {
                key: m.key.map(String::into_bytes),
                value: Some(value),
                decoded: matches!(format, ValueFormat::Json | ValueFormat::Avro).then(|| m.value.clone()),
                format,
                timestamp: m
                    .timestamp
                    .as_ref()
                    .map(|t| time_value("source.end_marker.timestamp", t))
                    .transpose()?,
                headers: m
                    .headers
                    .into_iter()
                    .map(|(k, v)| Header {
                        key: k,
                        value: Some(v.into_bytes()),
                    })
                    .collect(),
                ..Record::default()
            })
        }
    };
    let batch_size = match raw.batch_size {
        None => 1024,
        Some(b) => positive("source.batch_size", b)?,
    };
    Ok(DatagenConfig {
        count,
        rate: raw.rate,
        generator: TemplateGenerator {
            seed: raw.seed,
            format,
            fields,
            key,
            value,
            headers,
            timestamp_field: raw.timestamp,
            keep_decoded: true,
            encoder: None,
        },
        avro,
        end_marker,
        batch_size,
    })
}

fn validate_sink(value: Value) -> Result<SinkConfig> {
    let (kind, body) = tagged("sink", value, &["kafka", "file", "stdout", "null"])?;
    Ok(match kind.as_str() {
        "kafka" => {
            let raw: RawKafkaSink = typed("sink", body)?;
            if raw.topic.trim().is_empty() {
                return Err(Error::config("sink.topic", "must not be empty"));
            }
            let create_topic = match raw.create_topic {
                None => None,
                Some(c) => {
                    let p = positive("sink.create_topic.partitions", c.partitions)?;
                    let r = positive("sink.create_topic.replication_factor", c.replication_factor)?;
                    Some((p as i32, r as i32))
                }
            };
            SinkConfig::Kafka(KafkaSinkConfig {
                settings: crate::sink::kafka::KafkaSinkSettings {
                    bootstrap_servers: raw.bootstrap_servers,
                    topic: raw.topic,
                    preserve_partition: raw.preserve_partition,
                    properties: properties(raw.properties),
                    flush_timeout: duration_at("sink.flush_timeout", &raw.flush_timeout)?,
                },
                create_topic,
            })
        }
        "file" => {
            let raw: RawFileSink = typed("sink", body)?;
            if raw.path.trim().is_empty() {
                return Err(Error::config("sink.path", "must not be empty"));
            }
            SinkConfig::File {
                path: PathBuf::from(raw.path),
            }
        }
        "stdout" => {
            let _: RawNoOptions = typed("sink", body)?;
            SinkConfig::Stdout
        }
        _ => {
            let _: RawNoOptions = typed("sink", body)?;
            SinkConfig::Null
        }
    })
}

#[cfg(test)]
mod tests;
