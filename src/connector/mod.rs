//! How sources and sinks plug into the daemon. Each connector owns its raw config (documented
//! field by field: docs/config.md is generated from it), its validation, what `validate` prints
//! of it, and how it becomes a running source or sink; [`registry`] lists them, one line each.
//! The config loader knows no connector, and no connector imports the loader.

pub mod humane;
pub mod registry;
pub mod secret;
pub mod values;

use std::future::Future;
use std::pin::Pin;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::{FetcherMode, Instance, Sink, Source};
use crate::error::Result;
use crate::record::Record;

/// Checks a record before the sink has it: the Kafka source runs it in its emit path, so a record
/// the sink could not route goes through `source.decode_errors` like an undecodable one.
pub type RecordCheck = std::sync::Arc<dyn Fn(&Record) -> std::result::Result<(), String> + Send + Sync>;

/// The validated `[job]`: what connectors need to know of the job they are part of.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub name: String,
    /// Readers of the job.
    pub parallelism: usize,
    /// Stop gracefully after this long.
    pub max_duration: Option<std::time::Duration>,
    /// This process's share when the job runs as several instances.
    pub instance: Instance,
    pub fetcher_mode: FetcherMode,
    /// Capacity of each reader's queue of fetched batches.
    pub queue_capacity: usize,
    /// `job.coordination = "group"`: this process's member name (`job.member`); `None`: static
    /// instances (`job.instance`).
    pub member: Option<String>,
    /// `job.member` was set (not the host name): the member joins as a static member
    /// (`group.instance.id`), and a restart within its session keeps its partitions.
    pub static_member: bool,
}

/// What a source is built with, besides its own config.
pub struct SourceContext<'a> {
    pub job: &'a JobConfig,
    /// The sink prints decoded values (file, stdout); sources keep them beside the bytes only then.
    pub sink_prints_values: bool,
    /// The sink's topic when it is Kafka (Avro subjects are named after it).
    pub sink_topic: Option<&'a str>,
    /// A check of each record the sink runs too (a topic template's resolution): a source with a
    /// decode-error policy applies it in its emit path, so such a record follows that policy.
    pub sink_check: Option<RecordCheck>,
}

/// What a sink is built with, besides its own config.
pub struct SinkContext<'a> {
    pub job: &'a JobConfig,
    /// The job resumes from a state file.
    pub resuming: bool,
    /// A record to write once at the end of input (the data generator's end marker).
    pub end_marker: Option<Record>,
    /// The Kafka checkpoint store's slot for the exactly-once sink whose transactions carry the
    /// checkpoints ([`crate::client::exactly_once::StateInTransaction`]); that sink fills it.
    pub state_in_transaction: Option<crate::client::exactly_once::SinkTransactionSlot>,
    /// The source's topics as a copy of them should be created (`sink.create_topic = {
    /// like_source = true }`), looked up when asked.
    pub source_layout: &'a dyn Fn() -> Result<Option<TopicLayout>>,
}

/// How a copy of a source's topics is created: its partition count (the largest of the
/// source's topics) and the topic configs worth copying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLayout {
    pub partitions: i32,
    pub configs: std::collections::BTreeMap<String, String>,
}

/// One section of the config reference: a title and the JSON schema of a raw config table.
pub struct ReferenceSection {
    pub title: String,
    /// The key prefix of its fields (`source`, `sink`, `event`).
    pub prefix: &'static str,
    /// The schema and its definitions.
    pub schema: (Value, Value),
}

impl ReferenceSection {
    pub fn of<T: JsonSchema>(title: impl Into<String>, prefix: &'static str) -> Self {
        let schema = schemars::schema_for!(T).to_value();
        let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
        ReferenceSection {
            title: title.into(),
            prefix,
            schema: (schema, defs),
        }
    }
}

/// A source type the daemon can run (`source.type = TYPE`).
pub trait SourceConnector: Clone + std::fmt::Debug + Send + Sync + Sized + 'static {
    /// The `source.type` that selects it.
    const TYPE: &'static str;
    /// The `[source]` table as written.
    type Raw: DeserializeOwned + JsonSchema;
    /// The running source.
    type Source: Source<Output = Record>;
    /// Its keys that hold file paths: relative ones written in a config file are resolved
    /// against that file's folder.
    const PATH_KEYS: &'static [&'static str] = &[];

    /// Check the raw table once; every error names its key.
    fn validate(raw: Self::Raw, job: &JobConfig) -> Result<Self>;

    /// What `validate` prints of it, one line each, in the config's own words.
    fn describe(&self) -> Vec<String>;

    /// The source to run.
    fn build(&self, ctx: &SourceContext<'_>) -> Result<Self::Source>;

    /// `validate --connect`: reach what the source reads, one line each on what was found; an
    /// unreachable or refusing service is an error.
    fn check_connection(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// The schema registries it uses, for `validate` to contact.
    fn schema_registries(&self) -> Vec<&crate::format::registry::RegistrySettings> {
        Vec::new()
    }

    /// Before a first run builds its sink: what would certainly stop the job at its start (a
    /// missing topic), so a job that cannot start leaves no side effects behind.
    fn check_before_start(&self) -> Result<()> {
        Ok(())
    }

    /// What to say of a source that never ends by itself, and how to bound it (`validate` and the
    /// start log say it: a replay config written by hand without a stop runs until a signal).
    fn unbounded_hint(&self) -> Option<String> {
        None
    }

    /// How a copy of the source's topics is created (`None`: the source has no topics).
    fn topic_layout(&self) -> Result<Option<TopicLayout>> {
        Ok(None)
    }

    /// A record the sink writes once at the end of input (the data generator's end marker).
    fn end_marker(&self, _ctx: &SourceContext<'_>) -> Result<Option<Record>> {
        Ok(None)
    }

    /// Wrap the sink (the Kafka source sends undecodable records to a dead-letter topic).
    fn wrap_sink(&self, sink: Box<dyn Sink<Record>>) -> Result<Box<dyn Sink<Record>>> {
        Ok(sink)
    }

    /// Reference sections beyond the `[source]` table (the periodic source's events).
    fn more_reference() -> Vec<ReferenceSection> {
        Vec::new()
    }
}

/// A sink type the daemon can write to (`sink.type = TYPE`).
pub trait SinkConnector: Clone + std::fmt::Debug + Send + Sync + Sized + 'static {
    /// The `sink.type` that selects it.
    const TYPE: &'static str;
    /// The `[sink]` table as written.
    type Raw: DeserializeOwned + JsonSchema;
    /// Its keys that hold file paths (see [`SourceConnector::PATH_KEYS`]).
    const PATH_KEYS: &'static [&'static str] = &[];

    /// Check the raw table once; every error names its key.
    fn validate(raw: Self::Raw) -> Result<Self>;

    /// What `validate` prints of it, one line each.
    fn describe(&self) -> Vec<String>;

    /// Whether it prints decoded values (the file and stdout envelopes do; Kafka writes bytes).
    fn prints_values(&self) -> bool {
        false
    }

    /// The topic it writes, when it is Kafka.
    fn topic(&self) -> Option<&str> {
        None
    }

    /// A check the sink makes of each record and a source may make first (see
    /// [`SourceContext::sink_check`]).
    fn record_check(&self) -> Option<RecordCheck> {
        None
    }

    /// Refuse a checkpoint interval the sink cannot work with (a transaction that would time out).
    fn check_checkpoint_interval(&self, _interval: std::time::Duration) -> Result<()> {
        Ok(())
    }

    /// `validate --connect`: reach what the sink writes to (see
    /// [`SourceConnector::check_connection`]).
    fn check_connection(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// The sink to write to. Runs before the job's async runtime starts.
    fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>>;
}

/// A job run with whatever source the config names (each source has its own types).
pub type JobFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Something to do with the configured source, once it is built.
pub trait SourceVisitor<'a> {
    fn visit<S: Source<Output = Record>>(self, source: S) -> JobFuture<'a>;
}
