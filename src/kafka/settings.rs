//! What the Kafka source's enumerator and readers talk to Kafka with: the brokers, the
//! subscription, the starting and stopping offsets, discovery, the consumer group and the
//! librdkafka properties; and which partitions this process reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::offsets::{StartingOffsets, StoppingOffsets, TopicPartition};
use super::split::instance_owns;
use super::subscription::Subscription;
use crate::core::Instance;

/// Everything the enumerator and readers need to talk to Kafka.
#[derive(Debug, Clone)]
pub(crate) struct KafkaSourceSettings {
    pub(crate) bootstrap_servers: String,
    pub(crate) subscription: Subscription,
    pub(crate) starting: StartingOffsets,
    pub(crate) stopping: StoppingOffsets,
    /// `None`: discover once, at start.
    pub(crate) discovery_interval: Option<Duration>,
    pub(crate) wait_for_topics: bool,
    pub(crate) group_id: Option<String>,
    /// librdkafka properties, passed through.
    pub(crate) properties: BTreeMap<String, String>,
    /// Timeout of metadata and offset requests.
    pub(crate) request_timeout: Duration,
    pub(crate) instance: Instance,
    /// With `job.coordination = "group"`: the partitions the consumer group assigned to this
    /// process (`None`: the instance's share, [`instance_owns`]).
    pub(crate) assignment: Option<Arc<std::collections::BTreeSet<TopicPartition>>>,
    /// librdkafka's `auto.offset.reset` for a position deleted by retention: `error` (default),
    /// `earliest` or `latest`.
    pub(crate) offset_reset: String,
}

impl KafkaSourceSettings {
    pub(crate) fn new(bootstrap_servers: impl Into<String>, subscription: Subscription) -> Self {
        KafkaSourceSettings {
            bootstrap_servers: bootstrap_servers.into(),
            subscription,
            starting: StartingOffsets::Earliest,
            stopping: StoppingOffsets::None,
            discovery_interval: None,
            wait_for_topics: false,
            group_id: None,
            properties: BTreeMap::new(),
            request_timeout: Duration::from_secs(30),
            instance: Instance::default(),
            assignment: None,
            offset_reset: "error".to_string(),
        }
    }
}

impl KafkaSourceSettings {
    /// Whether this process reads a partition: the group's assignment, or the instance's share.
    pub(crate) fn owns(&self, topic: &str, partition: i32, parallelism: usize) -> bool {
        match &self.assignment {
            Some(assigned) => assigned.iter().any(|(t, p)| t == topic && *p == partition),
            None => instance_owns(topic, partition, parallelism, self.instance),
        }
    }
}
