//! The sinks (`kafka`, `file`, `stdout`, `null`), each with its config, and the dead-letter wrapper.

pub mod dead_letter;
pub mod envelope;
pub mod file;
pub mod kafka;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use tracing::info;

use crate::error::{Error, Result};

/// Create `topic` unless it exists. Must run outside the job's runtime.
pub fn create_topic_if_missing(
    settings: &kafka::KafkaSinkSettings,
    topic: &str,
    partitions: i32,
    replication: i32,
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        crate::kafka::client::client_config(&settings.bootstrap_servers, &[], &settings.properties)
            .create()
            .map_err(|e| crate::error::kafka("creating an admin client", e))?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting a runtime for the admin client", e))?;
    let results = runtime
        .block_on(admin.create_topics([&new_topic], &options))
        .map_err(|e| crate::error::kafka(format!("creating topic {topic} on {}", settings.bootstrap_servers), e))?;
    for r in results {
        match r {
            Ok(name) => info!(topic = %name, partitions, "topic created"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(Error::runtime(
                    format!("creating topic {name} on {}", settings.bootstrap_servers),
                    code,
                ))
            }
        }
    }
    Ok(())
}
