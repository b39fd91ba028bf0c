//! The Kafka store's topic: whether it exists, and its creation (compacted) or the check of an
//! existing one.

use std::time::Duration;

use rdkafka::types::RDKafkaErrorCode;
use tracing::info;

use super::super::config::KafkaStoreConfig;
use super::super::scan::reader;
use super::store::TIMEOUT;
use crate::client::cluster::{self, ClientSpec, NewTopicSpec};
use crate::core::sim;
use crate::error::{Error, Result};

/// The settings of a topic the store creates: compacted; a segment rolls every hour so the
/// cleaner can drop superseded values; a value stays at least a minute before it may be compacted.
const TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.ms", "3600000"),
    ("min.compaction.lag.ms", "60000"),
    ("delete.retention.ms", "86400000"),
];

/// Whether the topic exists; an unreachable cluster is an error naming its address.
pub fn topic_exists(config: &KafkaStoreConfig) -> Result<bool> {
    let reader = reader(config, &config.owner, "read_committed")?;
    let what = format!(
        "reaching the checkpoint store's cluster at {} ({}.bootstrap_servers)",
        config.bootstrap_servers, config.cluster_of
    );
    let metadata = reader.metadata(None, TIMEOUT, &config.properties, &what)?;
    Ok(metadata.partitions_of(&config.topic).is_some())
}

/// The admin client that creates the topic or reads its configs.
pub(crate) fn admin_spec(config: &KafkaStoreConfig) -> ClientSpec<'_> {
    ClientSpec::new(&config.bootstrap_servers, &config.properties, "state-admin")
}

/// Create the topic (`exists == false`), or check the existing one is compacted only.
pub(super) fn admin_call(config: &KafkaStoreConfig, exists: bool) -> Result<()> {
    let topic = config.topic.as_str();
    let context = format!("checkpoint topic {topic} at {}", config.bootstrap_servers);
    let cluster = cluster::of(&config.bootstrap_servers);
    let spec = admin_spec(config);
    if !exists {
        let new_topic = NewTopicSpec {
            name: topic.to_string(),
            partitions: 1,
            replication: -1,
            configs: TOPIC_CONFIG
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        match cluster.create_topic(&spec, &new_topic, TIMEOUT)? {
            Ok(()) => {
                // created with TOPIC_CONFIG: compacted by construction (a describe right
                // after the creation may not list the topic's configs yet)
                info!(topic, "checkpoint topic created (cleanup.policy=compact)");
                return Ok(());
            }
            // another process created it meanwhile: checked below like any existing topic
            Err(RDKafkaErrorCode::TopicAlreadyExists) => {}
            Err(code) => return Err(Error::runtime(format!("creating {context}"), code)),
        }
    }
    // a topic created a moment ago may be described without its configs: ask again, a while
    let deadline = sim::now() + Duration::from_secs(10);
    let policy = loop {
        let policy = match cluster.topic_configs(&spec, topic, TIMEOUT)? {
            Ok(configs) => configs.get("cleanup.policy").cloned(),
            // created by another process a moment ago and not known to every broker yet (several
            // instances create the topic at once): ask again, like a topic without configs
            Err(RDKafkaErrorCode::UnknownTopicOrPartition) if sim::now() < deadline => None,
            Err(code) => return Err(Error::runtime(format!("describing {context}"), code)),
        };
        if policy.is_some() || sim::now() >= deadline || sim::active() {
            break policy;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    match policy.as_deref() {
        Some("compact") => Ok(()),
        other => Err(Error::config(
            "checkpoint.topic",
            format!(
                "{context} has cleanup.policy={}: the checkpoint store needs a compacted topic \
                 (cleanup.policy=compact, without delete, or retention would remove a job's state); \
                 choose another topic or change its policy",
                other.unwrap_or("unknown")
            ),
        )),
    }
}
