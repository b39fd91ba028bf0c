//! The data generator's config: the `[source]` table as written, its validation (every error
//! names its key), what `validate` prints, and how it becomes a [`DataGeneratorSource`] (and the
//! end marker the sink writes last).

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::compile::compile_fields;
use super::generator::TemplateGenerator;
use super::source::{DataGeneratorSource, DatagenSettings};
use super::text::TextTemplate;
use crate::connector::values::{positive, time_value};
use crate::connector::{JobConfig, SourceConnector, SourceContext};
use crate::error::{Error, Result};
use crate::format::config::{produced_format, AvroConfig, RawAvro};
use crate::format::schema_config::{wire_schema, RawJsonSchema, RawProtobuf, WireSchema};
use crate::record::{Header, Record, ValueFormat};

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
    /// "json" (default), "string", "avro", "protobuf" or "json_schema".
    pub format: Option<String>,
    /// Avro settings, for `format = "avro"`.
    pub avro: Option<RawAvro>,
    /// Protobuf settings, for `format = "protobuf"`: the fields become the message's fields.
    pub protobuf: Option<RawProtobuf>,
    /// JSON Schema settings, for `format = "json_schema"`: each value is checked against it.
    pub json_schema: Option<RawJsonSchema>,
    /// The fields of each record: `name = { <generator> = … }` with generators `value = <any>`;
    /// `sequence = { start, step }` (defaults 0 and 1); `uniform = { min, max }` (integers, or
    /// numbers with `round = <places>` beside); `normal = { mean, stddev }` (with optional
    /// `round`, `min`, `max` beside, `min` not above `max`); `choice = [..]` (with optional
    /// `weights = [..]` beside, numbers of 0 or more); `uuid = {}`; `timestamp = { start, step,
    /// jitter, format }` (`start` RFC 3339 or epoch ms; `step` and `jitter` durations, default 0;
    /// `format` "rfc3339" (default) or "epoch_millis"); `fake = "<kind>"` with kinds name,
    /// first_name, last_name, email, company, city, country, word, sentence, phone; and
    /// `object = { … }` for nesting. Any other key is an error naming the valid ones.
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// Key template over the fields, e.g. "{symbol}".
    pub key: Option<String>,
    /// "string" (default: the key template's text) or "avro": keys of `avro.key_schema_file`
    /// (registered under `<topic>-key` with a registry); a record schema takes its fields from the
    /// generated ones, any other schema the key template's text.
    pub key_format: Option<String>,
    /// Value template for `format = "string"`, e.g. "{symbol} {price}".
    pub value: Option<String>,
    /// Header templates, e.g. `{ source = "tidegate" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The field whose value (epoch ms or RFC 3339) becomes the record timestamp. Default: none,
    /// and the record's timestamp is the time it is written (the one part of a record that the
    /// seed does not decide).
    pub timestamp: Option<String>,
    /// A record written once to every partition of the target topic after every generated record
    /// is acknowledged (the market-close record).
    pub end_marker: Option<RawEndMarker>,
    /// Records generated per batch.
    pub batch_size: Option<i64>,
    /// The target topic's partition count, to write each partition in index order (so in
    /// timestamp order with a `timestamp` field that grows with the index, as an exchange feed
    /// is) at any parallelism: each record is stamped with the partition the Kafka sink picks for
    /// its key by default (librdkafka's CRC-32 partitioner; a keyless record by its index), and one
    /// split per partition generates that partition's records, so one reader writes each
    /// partition. With a Kafka sink set `preserve_partition = true`, so another `partitioner`
    /// property cannot move them. Omit: readers generate contiguous index ranges,
    /// and a partition several of them write interleaves their ranges.
    pub partitions: Option<i64>,
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

/// The validated data generator.
#[derive(Debug, Clone)]
pub struct DatagenConfig {
    pub count: Option<u64>,
    pub rate: Option<f64>,
    pub generator: TemplateGenerator,
    /// `Some(Avro)`: keys are written in Avro.
    pub key_format: Option<ValueFormat>,
    pub avro: Option<AvroConfig>,
    /// Protobuf or JSON Schema settings.
    pub wire_schema: Option<WireSchema>,
    pub end_marker: Option<Record>,
    pub batch_size: usize,
    /// `source.partitions`.
    pub partitions: Option<u32>,
}

fn validate_datagen(raw: RawDatagenSource) -> Result<DatagenConfig> {
    let count = match raw.count {
        None => None,
        Some(c) if c >= 0 => Some(c as u64),
        Some(c) => return Err(Error::config("source.count", format!("must be 0 or more, not {c}"))),
    };
    let partitions = match raw.partitions {
        None => None,
        Some(p) if (1..=i64::from(i32::MAX)).contains(&p) => Some(p as u32),
        Some(p) => {
            return Err(Error::config(
                "source.partitions",
                format!("must be 1 or more (the target topic's partition count), not {p}"),
            ))
        }
    };
    if let Some(rate) = raw.rate {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(Error::config(
                "source.rate",
                format!("must be more than 0 records per second, not {rate}"),
            ));
        }
    }
    let key_format = crate::format::config::key_format(
        "source.key_format",
        raw.key_format.as_deref(),
        &[ValueFormat::String, ValueFormat::Avro],
    )?
    .filter(|f| *f == ValueFormat::Avro);
    let (format, avro) = produced_format(raw.format.as_deref(), key_format, raw.avro)?;
    let wire_schema = wire_schema("source", format, raw.protobuf, raw.json_schema, true)?;
    let fields = compile_fields(&raw.fields, "source.fields").map_err(|(k, m)| Error::config(k, m))?;
    let text = |key: &str, t: &str| TextTemplate::parse(t, &fields).map_err(|m| Error::config(key, m));
    let key = raw.key.as_deref().map(|t| text("source.key", t)).transpose()?;
    let record_keys = match avro.as_ref().and_then(|a| a.key_schema_file.as_ref()) {
        Some(path) if key_format.is_some() => matches!(
            crate::format::avro::read_schema("source.avro.key_schema_file", path)?,
            apache_avro::Schema::Record(_)
        ),
        _ => false,
    };
    if key_format.is_some() && !record_keys && key.is_none() {
        return Err(Error::config(
            "source.key",
            "an Avro key of a schema that is no record is the key template's text: set source.key",
        ));
    }
    if record_keys && raw.end_marker.as_ref().is_some_and(|m| m.key.is_some()) {
        return Err(Error::config(
            "source.end_marker.key",
            "keys are Avro records (avro.key_schema_file): a marker's key text cannot be one",
        ));
    }
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
                key: m.key.map(|k| k.into_bytes().into()),
                value: Some(value.into()),
                decoded: format.is_structured().then(|| m.value.clone()),
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
    let batch_size = raw
        .batch_size
        .map(|b| positive("source.batch_size", b))
        .transpose()?
        .unwrap_or(1024);
    let generator = TemplateGenerator {
        seed: raw.seed,
        format,
        fields,
        key,
        value,
        headers,
        timestamp_field: raw.timestamp,
        keep_decoded: true,
        encoder: None,
        key_encoder: None,
        keep_decoded_key: false,
    };
    // generate record 0 now: what `run` would fail on (a timestamp field that is no time, say)
    // is a config error at `validate`
    let mut probe = generator.clone();
    probe.format = ValueFormat::Json;
    if let Err(e) = super::generator::GeneratorFunction::map(&mut probe, 0) {
        let key = if generator.timestamp_field.is_some() && e.to_string().contains("timestamp field") {
            "source.timestamp"
        } else {
            "source.fields"
        };
        return Err(Error::config(key, e.to_string()));
    }
    // and the end marker must fit a local Avro schema (a registry is not asked at validation)
    if let (Some(marker), Some(file)) = (&end_marker, avro.as_ref().and_then(|a| a.schema_file.as_ref())) {
        let schema = crate::format::avro::read_schema("source.avro.schema_file", file)?;
        if let Some(value) = &marker.decoded {
            crate::format::avro::json_to_avro(value, &schema)
                .map_err(|m| Error::config("source.end_marker.value", m))?;
        }
    }
    // and the Protobuf message or JSON Schema
    if let (Some(marker), Some(schema)) = (&end_marker, &wire_schema) {
        if let Some(value) = &marker.decoded {
            schema.check_value("source", "source.end_marker.value", value)?;
        }
    }
    Ok(DatagenConfig {
        count,
        rate: raw.rate,
        generator,
        key_format,
        avro,
        wire_schema,
        end_marker,
        batch_size,
        partitions,
    })
}

impl DatagenConfig {
    /// What the generated records are, for the state: count, seed, format, and a digest of the
    /// field template (FNV-1a of its compiled form).
    fn fingerprint(&self) -> serde_json::Value {
        let mut template = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}",
            self.generator.fields,
            self.generator.key,
            self.generator.value,
            self.generator.headers,
            self.generator.timestamp_field
        );
        if self.key_format.is_some() {
            template.push_str("|avro keys");
        }
        let digest = template.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        serde_json::json!({
            "count": self.count,
            "seed": self.generator.seed,
            "format": self.generator.format.to_string(),
            "fields": format!("template {digest:016x}"),
            "partitions": self.partitions,
        })
    }
}

impl DatagenConfig {
    /// The encoder of generated values (none for JSON and string).
    fn encoder(&self, ctx: &SourceContext<'_>) -> Result<Option<crate::format::EncoderHandle>> {
        match &self.wire_schema {
            Some(schema) => schema.encoder("source", ctx.sink_topic).map(Some),
            None => {
                crate::format::encoder_for(self.generator.format, self.avro.as_ref(), "source.avro", ctx.sink_topic)
            }
        }
    }
}

impl SourceConnector for DatagenConfig {
    const TYPE: &'static str = "datagen";
    type Raw = RawDatagenSource;
    type Source = DataGeneratorSource;
    const PATH_KEYS: &'static [&'static str] = &[
        "avro.schema_file",
        "avro.key_schema_file",
        "avro.schema_registry.ca_file",
        "avro.schema_registry.password.file",
        "protobuf.schema_file",
        "protobuf.schema_registry.ca_file",
        "protobuf.schema_registry.password.file",
        "json_schema.schema_file",
        "json_schema.schema_registry.ca_file",
        "json_schema.schema_registry.password.file",
    ];

    fn validate(raw: RawDatagenSource, job: &JobConfig) -> Result<Self> {
        let config = validate_datagen(raw)?;
        if config.end_marker.is_some() && job.instance.count > 1 {
            return Err(Error::config(
                "source.end_marker",
                "cannot be used with job.instance: no instance knows when the others have written \
                 their last record",
            ));
        }
        Ok(config)
    }

    fn schema_registries(&self) -> Vec<&crate::format::registry::RegistrySettings> {
        self.avro.iter().filter_map(|a| a.schema_registry.as_ref()).collect()
    }

    fn describe(&self) -> Vec<String> {
        let g = &self.generator;
        let count = match self.count {
            Some(n) => format!("{n} records"),
            None => "records without end".to_string(),
        };
        let rate = match self.rate {
            Some(r) => format!("{r} a second"),
            None => "as fast as possible".to_string(),
        };
        let mut lines = vec![format!(
            "source datagen: {count}, {rate}, seed {}, format {}",
            g.seed, g.format
        )];
        if let Some(p) = self.partitions {
            lines.push(format!(
                "  {p} partitions by key, each generated in index order by one reader"
            ));
        }
        let fields = match &g.fields {
            super::template::Gen::Object(fields) => {
                fields.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            }
            _ => String::new(),
        };
        lines.push(format!("  fields {fields}"));
        let mut record = Vec::new();
        if let Some(key) = &g.key {
            record.push(format!("key \"{key}\""));
        }
        if let Some(value) = &g.value {
            record.push(format!("value \"{value}\""));
        }
        for (name, template) in &g.headers {
            record.push(format!("header {name} \"{template}\""));
        }
        if let Some(ts) = &g.timestamp_field {
            record.push(format!("timestamp from field {ts}"));
        }
        if !record.is_empty() {
            lines.push(format!("  {}", record.join("; ")));
        }
        if let Some(avro) = &self.avro {
            lines.push(format!("  avro {}", avro));
        }
        if let (Some(_), Some(file)) = (
            self.key_format,
            self.avro.as_ref().and_then(|a| a.key_schema_file.as_ref()),
        ) {
            lines.push(format!("  keys in Avro, schema_file {}", file.display()));
        }
        if let Some(schema) = &self.wire_schema {
            lines.push(format!("  {schema}"));
        }
        if let Some(marker) = &self.end_marker {
            let value =
                marker.decoded.as_ref().map(|v| v.to_string()).unwrap_or_else(|| {
                    String::from_utf8_lossy(marker.value.as_deref().unwrap_or_default()).into_owned()
                });
            lines.push(format!(
                "  end marker {value}, once on every partition after the last record"
            ));
        }
        lines
    }

    fn build(&self, ctx: &SourceContext<'_>) -> Result<DataGeneratorSource> {
        let mut generator = self.generator.clone();
        // a JSON value is printed from its bytes; an Avro (Protobuf, JSON Schema) one from the
        // generated JSON
        generator.keep_decoded = ctx.sink_prints_values && generator.format.prints_decoded();
        generator.encoder = self.encoder(ctx)?;
        if self.key_format.is_some() {
            generator.keep_decoded_key = ctx.sink_prints_values;
            generator.key_encoder = Some(crate::format::key_encoder_for(
                self.avro.as_ref(),
                "source.avro",
                ctx.sink_topic,
            )?);
        }
        let settings = DatagenSettings {
            count: self.count,
            rate: self.rate,
            splits: ctx.job.parallelism,
            partitions: self.partitions,
            batch_size: self.batch_size,
            instance: ctx.job.instance,
            fingerprint: Some(self.fingerprint()),
        };
        Ok(DataGeneratorSource::new(
            settings,
            Arc::new(move || Box::new(generator.clone())),
        ))
    }

    fn end_marker(&self, ctx: &SourceContext<'_>) -> Result<Option<Record>> {
        let Some(marker) = &self.end_marker else {
            return Ok(None);
        };
        let mut marker = marker.clone();
        if self.generator.format.prints_decoded() {
            // the marker is written in the topic's format too
            if let (Some(encoder), Some(value)) = (self.encoder(ctx)?, &marker.decoded) {
                // the value fits the schema (checked at validation): a failure here is the
                // registry's, a runtime one
                marker.value = Some(
                    encoder
                        .0
                        .encode(value)
                        .map_err(|m| Error::runtime("encoding the end marker", m))?
                        .into(),
                );
            }
        }
        if let (Some(_), Some(key)) = (self.key_format, &marker.key) {
            // a key schema that is no record: the marker's key text is the key (checked at validation)
            let (encoder, _) = crate::format::key_encoder_for(self.avro.as_ref(), "source.avro", ctx.sink_topic)?;
            let text = serde_json::Value::String(String::from_utf8_lossy(key).into_owned());
            marker.key = Some(
                encoder
                    .0
                    .encode(&text)
                    .map_err(|m| Error::runtime("encoding the end marker's key", m))?
                    .into(),
            );
        }
        Ok(Some(marker))
    }
}
