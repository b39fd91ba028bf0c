//! The sinks (`kafka`, `file`, `stdout`, `null`) and the one place that builds them from config.

pub mod dead_letter;
pub mod envelope;
pub mod file;
pub mod kafka;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use tracing::info;

use crate::config::SinkConfig;
use crate::core::Sink;
use crate::error::{Error, Result};
use crate::record::Record;

/// Build the configured sink. `append`: the job resumes from a state file (the file sink keeps
/// what it wrote). `end_marker`: written at the end of input (data generator).
pub fn build(config: &SinkConfig, append: bool, end_marker: Option<Record>) -> Result<Box<dyn Sink<Record>>> {
    Ok(match config {
        SinkConfig::Kafka(k) => {
            if let Some((partitions, replication)) = k.create_topic {
                create_topic_if_missing(&k.settings, partitions, replication)?;
            }
            Box::new(kafka::KafkaSink::new(k.settings.clone(), end_marker)?)
        }
        SinkConfig::File { path } => Box::new(file::FileSink::open(path, append, end_marker)?),
        SinkConfig::Stdout => Box::new(file::StdoutSink::new(end_marker)),
        SinkConfig::Null => Box::new(file::NullSink),
    })
}

/// Create the sink's topic unless it exists. Must run outside the job's runtime.
pub fn create_topic_if_missing(settings: &kafka::KafkaSinkSettings, partitions: i32, replication: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        crate::kafka::client::client_config(&settings.bootstrap_servers, &[], &settings.properties)
            .create()
            .map_err(|e| Error::kafka("creating an admin client", e))?;
    let topic = NewTopic::new(&settings.topic, partitions, TopicReplication::Fixed(replication));
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting a runtime for the admin client", e))?;
    let results = runtime
        .block_on(admin.create_topics([&topic], &options))
        .map_err(|e| Error::kafka(format!("creating topic {}", settings.topic), e))?;
    for r in results {
        match r {
            Ok(name) => info!(topic = %name, partitions, "topic created"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(Error::runtime(format!("creating topic {name}"), code)),
        }
    }
    Ok(())
}
