//! The one list of connectors. A new source or sink is a module implementing
//! [`SourceConnector`] or [`SinkConnector`], plus one line below (in the spirit of RisingWave's
//! `for_all_classified_sources!`): the macro derives the config enums and their dispatch.

use serde_json::Value;

use super::values::typed;
use super::{JobConfig, ReferenceSection, SinkConnector, SinkContext, SourceConnector, SourceContext, SourceVisitor};
use crate::core::Sink;
use crate::error::{Error, Result};
use crate::record::Record;

macro_rules! connectors {
    (
        sources { $($source:ident => $source_ty:ty,)+ }
        sinks { $($sink:ident => $sink_ty:ty,)+ }
    ) => {
        /// The validated `[source]`: one variant per source connector.
        #[derive(Debug, Clone)]
        pub enum SourceConfig {
            $($source($source_ty),)+
        }

        impl SourceConfig {
            /// Every `source.type`.
            pub const TYPES: &'static [&'static str] = &[$(<$source_ty as SourceConnector>::TYPE,)+];

            /// Validate a `[source]` table of type `kind` (one of [`Self::TYPES`]).
            pub fn validate(kind: &str, body: Value, job: &JobConfig) -> Result<Self> {
                $(
                    if kind == <$source_ty as SourceConnector>::TYPE {
                        return <$source_ty as SourceConnector>::validate(typed("source", body)?, job).map(Self::$source);
                    }
                )+
                Err(unknown("source", kind, Self::TYPES))
            }

            /// Its `source.type`.
            pub fn kind(&self) -> &'static str {
                match self { $(Self::$source(_) => <$source_ty as SourceConnector>::TYPE,)+ }
            }

            /// The path keys of source type `kind`.
            pub fn path_keys(kind: &str) -> &'static [&'static str] {
                $( if kind == <$source_ty as SourceConnector>::TYPE { return <$source_ty as SourceConnector>::PATH_KEYS; } )+
                &[]
            }

            /// What `validate` prints of it.
            pub fn describe(&self) -> Vec<String> {
                match self { $(Self::$source(c) => c.describe(),)+ }
            }

            /// What `validate --connect` found.
            pub fn check_connection(&self) -> Result<Vec<String>> {
                match self { $(Self::$source(c) => c.check_connection(),)+ }
            }

            /// What would certainly stop a first run at its start (see [`SourceConnector::check_before_start`]).
            pub fn check_before_start(&self) -> Result<()> {
                match self { $(Self::$source(c) => c.check_before_start(),)+ }
            }

            /// The schema registries the source uses.
            pub fn schema_registries(&self) -> Vec<&crate::format::registry::RegistrySettings> {
                match self { $(Self::$source(c) => c.schema_registries(),)+ }
            }

            /// What to say of a source that never ends by itself, and how to bound it.
            pub fn unbounded_hint(&self) -> Option<String> {
                match self { $(Self::$source(c) => c.unbounded_hint(),)+ }
            }

            /// How a copy of the source's topics is created, if it has topics.
            pub fn topic_layout(&self) -> Result<Option<super::TopicLayout>> {
                match self { $(Self::$source(c) => c.topic_layout(),)+ }
            }

            /// The record the sink writes at the end of input, if the source has one.
            pub fn end_marker(&self, ctx: &SourceContext<'_>) -> Result<Option<Record>> {
                match self { $(Self::$source(c) => c.end_marker(ctx),)+ }
            }

            /// The sink as this source wants it wrapped.
            pub fn wrap_sink(&self, sink: Box<dyn Sink<Record>>) -> Result<Box<dyn Sink<Record>>> {
                match self { $(Self::$source(c) => c.wrap_sink(sink),)+ }
            }

            /// Build the source and hand it to `visitor` (which runs the job).
            pub fn visit<'a, V: SourceVisitor<'a>>(&self, ctx: &SourceContext<'_>, visitor: V) -> Result<super::JobFuture<'a>> {
                match self { $(Self::$source(c) => Ok(visitor.visit(c.build(ctx)?)),)+ }
            }

            /// A split of a checkpoint that source type `kind` wrote, in the words the summary
            /// uses: its name, where it stands, and the records it has left when bounded. `None`
            /// for a kind this build does not know or a split it cannot read.
            pub fn split_view(kind: &str, split: &Value) -> Option<(String, String, Option<u64>)> {
                $(
                    if kind == <$source_ty as SourceConnector>::TYPE {
                        let split: <<$source_ty as SourceConnector>::Source as crate::core::Source>::Split =
                            serde_json::from_value(split.clone()).ok()?;
                        return Some((
                            crate::core::SourceSplit::name(&split),
                            crate::core::SourceSplit::describe(&split),
                            crate::core::SourceSplit::remaining(&split),
                        ));
                    }
                )+
                None
            }

            /// The reference sections of every source.
            pub fn reference() -> Vec<ReferenceSection> {
                let mut sections = Vec::new();
                $(
                    sections.push(ReferenceSection::of::<<$source_ty as SourceConnector>::Raw>(
                        format!("source` with `type = \"{}\"", <$source_ty as SourceConnector>::TYPE),
                        "source",
                    ));
                )+
                $( sections.extend(<$source_ty as SourceConnector>::more_reference()); )+
                sections
            }
        }

        /// The validated `[sink]`: one variant per sink connector.
        #[derive(Debug, Clone)]
        pub enum SinkConfig {
            $($sink($sink_ty),)+
        }

        impl SinkConfig {
            /// Every `sink.type`.
            pub const TYPES: &'static [&'static str] = &[$(<$sink_ty as SinkConnector>::TYPE,)+];

            /// Validate a `[sink]` table of type `kind` (one of [`Self::TYPES`]).
            pub fn validate(kind: &str, body: Value) -> Result<Self> {
                $(
                    if kind == <$sink_ty as SinkConnector>::TYPE {
                        return <$sink_ty as SinkConnector>::validate(typed("sink", body)?).map(Self::$sink);
                    }
                )+
                Err(unknown("sink", kind, Self::TYPES))
            }

            /// Its `sink.type`.
            pub fn kind(&self) -> &'static str {
                match self { $(Self::$sink(_) => <$sink_ty as SinkConnector>::TYPE,)+ }
            }

            /// The path keys of sink type `kind`.
            pub fn path_keys(kind: &str) -> &'static [&'static str] {
                $( if kind == <$sink_ty as SinkConnector>::TYPE { return <$sink_ty as SinkConnector>::PATH_KEYS; } )+
                &[]
            }

            /// What `validate` prints of it.
            pub fn describe(&self) -> Vec<String> {
                match self { $(Self::$sink(c) => c.describe(),)+ }
            }

            /// What `validate --connect` found.
            pub fn check_connection(&self) -> Result<Vec<String>> {
                match self { $(Self::$sink(c) => c.check_connection(),)+ }
            }

            /// Whether it prints decoded values.
            pub fn prints_values(&self) -> bool {
                match self { $(Self::$sink(c) => c.prints_values(),)+ }
            }

            /// The topic it writes, when it is Kafka.
            pub fn topic(&self) -> Option<&str> {
                match self { $(Self::$sink(c) => c.topic(),)+ }
            }

            /// The check the sink makes of each record, for the source to make first.
            pub fn record_check(&self) -> Option<super::RecordCheck> {
                match self { $(Self::$sink(c) => c.record_check(),)+ }
            }

            /// Refuse a checkpoint interval the sink cannot work with.
            pub fn check_checkpoint_interval(&self, interval: std::time::Duration) -> Result<()> {
                match self { $(Self::$sink(c) => c.check_checkpoint_interval(interval),)+ }
            }

            /// The sink to write to.
            pub fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
                match self { $(Self::$sink(c) => c.build(ctx),)+ }
            }

            /// The reference sections of every sink.
            pub fn reference() -> Vec<ReferenceSection> {
                vec![$(
                    ReferenceSection::of::<<$sink_ty as SinkConnector>::Raw>(
                        format!("sink` with `type = \"{}\"", <$sink_ty as SinkConnector>::TYPE),
                        "sink",
                    ),
                )+]
            }
        }
    };
}

connectors! {
    sources {
        Kafka => crate::kafka::config::KafkaSourceConfig,
        Datagen => crate::datagen::config::DatagenConfig,
        Periodic => crate::periodic::config::PeriodicConfig,
    }
    sinks {
        Kafka => crate::sink::kafka::KafkaSinkConfig,
        File => crate::sink::file::FileSinkConfig,
        Stdout => crate::sink::file::StdoutSinkConfig,
        Null => crate::sink::file::NullSinkConfig,
    }
}

fn unknown(section: &str, kind: &str, types: &[&str]) -> Error {
    Error::config(
        format!("{section}.type"),
        format!("unknown type {kind:?}; one of {}", types.join(", ")),
    )
}
