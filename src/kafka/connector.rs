//! The Kafka source as a connector (`crate::connector::SourceConnector`): its validated config
//! in the registry's terms, what `validate` prints of it and checks with the cluster, and how it
//! becomes a [`KafkaSource`] (with the dead-letter sink when undecodable records go to a topic).

use std::sync::Arc;

use super::config::{validate_kafka_source, KafkaSourceConfig, RawKafkaSource};
use super::source::KafkaSource;
use super::{describe, discovery, emitter};
use crate::connector::{JobConfig, SourceConnector, SourceContext};
use crate::core::Sink;
use crate::error::{Error, Result};
use crate::format::schema_config::decoders;
use crate::metrics::KafkaMetrics;
use crate::record::{Record, ValueFormat};

impl SourceConnector for KafkaSourceConfig {
    const TYPE: &'static str = "kafka";
    type Raw = RawKafkaSource;
    type Source = KafkaSource;
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

    fn validate(raw: RawKafkaSource, job: &JobConfig) -> Result<Self> {
        validate_kafka_source(raw, job)
    }

    fn schema_registries(&self) -> Vec<&crate::format::registry::RegistrySettings> {
        let avro = self.avro.iter().filter_map(|a| a.schema_registry.as_ref());
        avro.chain(self.wire_schema.iter().filter_map(|w| w.registry()))
            .collect()
    }

    fn describe(&self) -> Vec<String> {
        describe::lines(self)
    }

    fn check_connection(&self) -> Result<Vec<String>> {
        discovery::check_connection(&self.settings).map(|line| vec![line])
    }

    fn check_before_start(&self) -> Result<()> {
        discovery::check_topics_exist(&self.settings)
    }

    fn unbounded_hint(&self) -> Option<String> {
        describe::unbounded_hint(self)
    }

    fn topic_layout(&self) -> Result<Option<crate::connector::TopicLayout>> {
        discovery::topic_layout(&self.settings).map(Some)
    }

    fn build(&self, ctx: &SourceContext<'_>) -> Result<KafkaSource> {
        // the envelope prints a JSON value as its bytes (checked in full by the decoder): only
        // Avro, Protobuf and JSON Schema values are printed from their decoded form
        let keep_decoded = ctx.sink_prints_values && self.format.prints_decoded();
        let metrics = KafkaMetrics::register();
        let expression = self
            .eof
            .as_deref()
            .map(crate::expr::RecordExpression::compile)
            .transpose()
            .map_err(|e| Error::config("source.eof", e))?
            .map(|e| e.counting_failures_in(metrics.eof_evaluation_errors.clone()));
        let filter = self
            .filter
            .as_deref()
            .map(crate::expr::RecordExpression::compile)
            .transpose()
            .map_err(|e| Error::config("source.where", e))?
            .map(|e| {
                e.in_role("filter")
                    .counting_failures_in(metrics.filter_evaluation_errors.clone())
            });
        // JSON: decode only the fields the expressions select (none without one) when they use
        // the value only that way; the document is still checked in full
        let mut fields: Option<Vec<String>> = Some(Vec::new());
        for e in expression.iter().chain(filter.iter().filter(|f| f.reads_value())) {
            fields = match (fields, e.value_fields()) {
                (Some(mut all), Some(more)) => {
                    for f in more {
                        if !all.contains(f) {
                            all.push(f.clone());
                        }
                    }
                    Some(all)
                }
                _ => None,
            };
        }
        let eof_reads = expression
            .as_ref()
            .map_or(emitter::Decoded::NOTHING, emitter::Decoded::read_by);
        let timeout = self.settings.request_timeout;
        let decoder: crate::format::DecoderFactory = match (self.format, fields) {
            (ValueFormat::Json, Some(fields)) => Arc::new(move || {
                Ok(Box::new(crate::format::JsonFieldsDecoder::new(fields.clone()))
                    as Box<dyn crate::format::ValueDecoder>)
            }),
            _ => decoders(self.format, self.avro.as_ref(), self.wire_schema.as_ref(), timeout)?,
        };
        let mut builder = KafkaSource::builder()
            .settings(self.settings.clone())
            .format(self.format)
            .decoder(decoder)
            .decode_errors(self.decode_errors)
            .eof_emit_marker(self.eof_emit_marker)
            .fetcher_mode(ctx.job.fetcher_mode);
        if let Some(expression) = expression {
            builder = builder.eof_evaluator(Arc::new(expression));
        }
        if let Some(filter) = filter {
            builder = builder.filter(Arc::new(filter));
        }
        let mut source = builder.build()?;
        source.eof_reads = eof_reads;
        source.eof_text = self.eof.clone();
        source.event_time = self.event_time.clone();
        source.rate_limits = self.rate_limits;
        source.queue_capacity = ctx.job.queue_capacity;
        source.keep_decoded = keep_decoded;
        source.sink_check = ctx.sink_check.clone();
        source.key_decoder =
            crate::format::key_decoder_factory(self.key_format, self.avro.as_ref(), self.settings.request_timeout)?;
        source.metrics = metrics;
        Ok(source)
    }

    fn wrap_sink(&self, sink: Box<dyn Sink<Record>>) -> Result<Box<dyn Sink<Record>>> {
        let Some(topic) = &self.dead_letter_topic else {
            return Ok(sink);
        };
        let s = &self.settings;
        let sink = crate::sink::dead_letter::DeadLetterSink::to_topic(
            sink,
            &s.bootstrap_servers,
            &s.properties,
            topic,
            s.request_timeout,
        )?;
        Ok(Box::new(sink))
    }
}
