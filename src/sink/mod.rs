//! The sinks (`kafka`, `file`, `stdout`, `null`), each with its config, and the dead-letter wrapper.

pub mod dead_letter;
pub mod envelope;
pub mod file;
pub mod kafka;

use std::time::Duration;

use tracing::info;

use crate::client::cluster::{self, ClientSpec, NewTopicSpec};
use crate::error::{Error, Result};

/// Create `topic` unless it exists.
pub fn create_topic_if_missing(
    settings: &kafka::KafkaSinkSettings,
    topic: &str,
    partitions: i32,
    replication: i32,
) -> Result<()> {
    let spec = ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "sink-admin");
    let new_topic = NewTopicSpec {
        name: topic.to_string(),
        partitions,
        replication,
        configs: Vec::new(),
    };
    match cluster::of(&settings.bootstrap_servers).create_topic(&spec, &new_topic, Duration::from_secs(30))? {
        Ok(()) => info!(topic, partitions, "topic created"),
        Err(rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists) => {}
        Err(code) => {
            return Err(Error::runtime(
                format!("creating topic {topic} on {}", settings.bootstrap_servers),
                code,
            ))
        }
    }
    Ok(())
}
