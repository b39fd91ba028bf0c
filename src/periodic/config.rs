//! The periodic source's config: the `[source]` table as written (and each event's, in
//! [`super::supplier::RawEvent`]), its validation, what `validate` prints, and how it becomes a
//! [`PeriodicSource`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::schedule::CatchUp;
use super::settings::PeriodicSettings;
use super::source::PeriodicSource;
use super::supplier::{read_file, validate_events, RawEvent, Supplier, DEFAULT_MAX_EVENTS};
use crate::connector::values::{duration_at, keyword, positive};
use crate::connector::{JobConfig, ReferenceSection, SourceConnector, SourceContext};
use crate::error::{Error, Result};
use crate::format::config::{produced_format, RawAvro};
use crate::format::schema_config::{wire_schema, RawJsonSchema, RawProtobuf};

/// `[source]` with `type = "periodic"`: events fired on wall-time or fixed-rate schedules, from
/// inline `events` or a supplier `file` re-read every `discover_interval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPeriodicSource {
    /// Inline events (exactly one of `events` and `file`): `[{ id = "tick", value = { … },
    /// schedule = { wall_time = true, period = "1s" } }]`; see the event fields below.
    pub events: Option<Vec<RawEvent>>,
    /// A TOML (`[[events]]`) or JSON (a list) file of events, re-read every `discover_interval`;
    /// if it becomes unreadable or invalid, the previous events keep firing.
    pub file: Option<String>,
    /// Time between reads of `file` (default "60s").
    pub discover_interval: Option<String>,
    /// Delay of the first read, after every reader registered (default "0").
    pub initial_delay: Option<String>,
    /// After a restart, missed fires are: "skip" (default), "fire_once" (the latest one), "all".
    pub catch_up: Option<String>,
    /// "json" (default: the value as JSON), "string" (a text value as is), "avro", "protobuf" or
    /// "json_schema".
    pub format: Option<String>,
    /// Avro settings, for `format = "avro"`.
    pub avro: Option<RawAvro>,
    /// Protobuf settings, for `format = "protobuf"`: each event's value becomes the message.
    pub protobuf: Option<RawProtobuf>,
    /// JSON Schema settings, for `format = "json_schema"`: each value is checked against it.
    pub json_schema: Option<RawJsonSchema>,
    /// The most events allowed (default 1000): many events is a misuse of this source.
    pub max_events: Option<i64>,
}

/// The validated periodic source.
#[derive(Debug, Clone)]
pub struct PeriodicConfig {
    pub settings: PeriodicSettings,
}

fn validate_periodic(raw: RawPeriodicSource) -> Result<PeriodicSettings> {
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
    let catch_up = keyword(
        "source.catch_up",
        raw.catch_up.as_deref(),
        CatchUp::Skip,
        &[
            ("skip", CatchUp::Skip),
            ("fire_once", CatchUp::FireOnce),
            ("all", CatchUp::All),
        ],
    )?;
    let (format, avro) = produced_format(raw.format.as_deref(), None, raw.avro)?;
    let wire_schema = wire_schema("source", format, raw.protobuf, raw.json_schema, true)?;
    Ok(PeriodicSettings {
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
        wire_schema,
        encoder: None,
        keep_decoded: true,
        instance: crate::core::Instance::default(),
    })
}

impl SourceConnector for PeriodicConfig {
    const TYPE: &'static str = "periodic";
    type Raw = RawPeriodicSource;
    type Source = PeriodicSource;
    const PATH_KEYS: &'static [&'static str] = &[
        "file",
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

    fn validate(raw: RawPeriodicSource, _job: &JobConfig) -> Result<Self> {
        validate_periodic(raw).map(|settings| PeriodicConfig { settings })
    }

    fn schema_registries(&self) -> Vec<&crate::format::registry::RegistrySettings> {
        self.settings
            .avro
            .iter()
            .filter_map(|a| a.schema_registry.as_ref())
            .collect()
    }

    fn describe(&self) -> Vec<String> {
        let p = &self.settings;
        let events =
            |events: &[super::supplier::EventDef]| events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>().join(", ");
        let mut lines = match &p.supplier {
            Supplier::Inline(list) => vec![format!(
                "source periodic: {} inline events ({}), format {}",
                list.len(),
                events(list),
                p.format
            )],
            Supplier::File { path, max_events } => {
                let mut lines = vec![format!(
                    "source periodic: events from {}, read every {}, format {}",
                    path.display(),
                    humantime::format_duration(p.discover_interval),
                    p.format
                )];
                match read_file(path, *max_events) {
                    Ok(list) => lines.push(format!(
                        "  the file holds {} valid events ({})",
                        list.len(),
                        events(&list)
                    )),
                    Err(e) => lines.push(format!(
                        "  warning: the file cannot be used now ({e}); the job would wait for it"
                    )),
                }
                lines
            }
        };
        lines.push(format!("  after a restart, missed fires: {}", p.catch_up));
        lines
    }

    fn build(&self, ctx: &SourceContext<'_>) -> Result<PeriodicSource> {
        let mut settings = self.settings.clone();
        // a JSON value is printed from its bytes; an Avro (Protobuf, JSON Schema) one from the
        // generated JSON
        settings.keep_decoded = ctx.sink_prints_values && settings.format.prints_decoded();
        settings.instance = ctx.job.instance;
        settings.encoder = match &settings.wire_schema {
            Some(schema) => Some(schema.encoder("source", ctx.sink_topic)?),
            None => crate::format::encoder_for(settings.format, settings.avro.as_ref(), "source.avro", ctx.sink_topic)?,
        };
        Ok(PeriodicSource {
            settings: Arc::new(settings),
            metrics: crate::metrics::PeriodicMetrics::register(),
        })
    }

    fn more_reference() -> Vec<ReferenceSection> {
        vec![ReferenceSection::of::<RawEvent>(
            "source.events[]` (periodic), and each event of a supplier file",
            "event",
        )]
    }
}
