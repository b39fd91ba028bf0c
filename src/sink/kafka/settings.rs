//! The Kafka sink's settings as the sink runs with them, and the producer they configure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::routing::HeaderRules;
use crate::client::cluster::ClientSpec;
use crate::client::exactly_once::Delivery;
use crate::error::{Error, Result};

/// Settings of the Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkSettings {
    pub bootstrap_servers: String,
    /// The topic, or a template over the record ([`TopicTemplate`](super::routing::TopicTemplate)).
    pub topic: String,
    /// What happens to the headers on the way (shared: the config enum stays small).
    pub headers: Arc<HeaderRules>,
    /// How to create a topic a template resolves to and which does not exist yet (a literal
    /// topic is created when the sink is built).
    pub create_topic: Option<CreateTopic>,
    /// Write each record to the partition it came from (else the key decides).
    pub preserve_partition: bool,
    pub properties: BTreeMap<String, String>,
    /// How long a checkpoint waits for acknowledgements (and a transaction call for its answer).
    pub flush_timeout: Duration,
    pub delivery: Delivery,
    /// The producer's `transactional.id` for exactly-once delivery: derived from the job's name
    /// (and instance), so a second process running the same job fences the first.
    pub transactional_id: Option<String>,
    /// librdkafka's `transaction.timeout.ms`: an open transaction older than this is aborted by
    /// the broker, so it must outlast a checkpoint interval.
    pub transaction_timeout: Duration,
    /// Stamp records with the time they are written, not their source timestamp.
    pub stamp_now: bool,
}

/// A topic the sink creates when it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopic {
    pub partitions: i32,
    pub replication: i32,
    /// Topic configs (`cleanup.policy`, `retention.ms`, …).
    pub configs: BTreeMap<String, String>,
    /// Partitions and configs still to be taken from the source (`partitions` is 0 until then).
    pub like_source: bool,
}

impl KafkaSinkSettings {
    /// At-least-once settings for `topic`.
    pub fn new(bootstrap_servers: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSinkSettings {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            headers: Arc::default(),
            create_topic: None,
            preserve_partition: false,
            properties: BTreeMap::new(),
            flush_timeout: Duration::from_secs(60),
            delivery: Delivery::AtLeastOnce,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            stamp_now: false,
        }
    }
}

/// The sink's producer: tidegate's settings, then the user's properties.
pub fn producer_spec(settings: &KafkaSinkSettings) -> Result<ClientSpec<'_>> {
    let mut spec = ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "sink")
        // no duplicates from retries, no reordering, and every replica has it
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("client.id", "tidegate-sink")
        // batch for throughput; the checkpoint's flush bounds the latency anyway
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        // what librdkafka holds before the broker has it, bounded in messages and in bytes so a
        // generator faster than the broker waits instead of growing (with 1,000,000 messages and
        // librdkafka's 1 GiB, 100-byte records peaked at 286 MiB, bench/results-20261202005946.json;
        // with 100,000 the producer's peak was 64-68 MiB, bench/results-20261207151946.json);
        // 50,000 messages are still 75 ms of the fastest producing measured
        .set("queue.buffering.max.messages", "50000")
        .set("queue.buffering.max.kbytes", "16384")
        // the delivery callback acts on failures only (the checkpoint's flush waits for every
        // acknowledgement): a report per delivered record cost the poll thread 7 % of the data
        // generator's CPU (perf, docs/performance.md)
        .set("delivery.report.only.error", "true");
    if settings.delivery == Delivery::ExactlyOnce {
        let id = settings.transactional_id.as_deref().ok_or_else(|| {
            Error::config(
                "sink.delivery",
                "exactly_once needs a transactional id (the job's name)",
            )
        })?;
        spec = spec.set("transactional.id", id).set(
            "transaction.timeout.ms",
            settings.transaction_timeout.as_millis().to_string(),
        );
    }
    Ok(spec)
}
