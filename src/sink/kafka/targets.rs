//! The topics the Kafka sink writes to, as far as it must know them: a topic a template resolves
//! to is looked up (or created, with `sink.create_topic`) the first time, and with
//! `preserve_partition` each record's partition is checked against the topic's partitions.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use tracing::info;

use super::retry::retried;
use super::routing::TopicTemplate;
use super::settings::KafkaSinkSettings;
use crate::client::cluster::{self, ClientSpec, NewTopicSpec, Producer};
use crate::error::{Error, Result};
use crate::record::Record;

/// Create `topic` unless it exists.
pub(super) fn create_topic_if_missing(
    settings: &KafkaSinkSettings,
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
        Err(RDKafkaErrorCode::TopicAlreadyExists) => {}
        Err(code) => {
            return Err(Error::runtime(
                format!("creating topic {topic} on {}", settings.bootstrap_servers),
                code,
            ))
        }
    }
    Ok(())
}

/// Where `record` goes. The Kafka source runs the same resolution in its emit path (so its
/// `decode_errors` policy decides about a record without a topic); other sources have no such
/// policy, and the job fails naming the record.
pub(super) fn topic_of<'a>(route: &'a TopicTemplate, record: &Record) -> Result<Cow<'a, str>> {
    route.resolve(record).map_err(|e| {
        Error::runtime(
            format!(
                "kafka sink: no topic for the record {}:{}@{}",
                record.topic.as_deref().unwrap_or("-"),
                record.partition.map_or("-".to_string(), |p| p.to_string()),
                record.offset.map_or("-".to_string(), |o| o.to_string()),
            ),
            format!("sink.topic {:?}: {e}", route.text()),
        )
    })
}

/// `topic`'s partitions, from one metadata request of up to `timeout`. A topic error,
/// or a topic without partitions, is an error: never "no partition to write to".
pub(super) fn partitions_of(
    producer: &dyn Producer,
    properties: &BTreeMap<String, String>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>> {
    let context = format!("reading the partitions of {topic}");
    let metadata = producer.metadata(Some(topic), timeout, properties, &context)?;
    let Some(found) = metadata.topics.iter().find(|t| t.name == topic) else {
        return Err(Error::runtime(context, "the broker's metadata does not list the topic"));
    };
    if let Some(code) = found.error {
        return Err(Error::runtime(context, RDKafkaErrorCode::from(code)));
    }
    if found.partitions.is_empty() {
        return Err(Error::runtime(context, "the topic has no partitions"));
    }
    Ok(found.partitions.clone())
}

/// The partition count of each topic written so far (when it matters: templates and
/// `preserve_partition`).
#[derive(Default)]
pub(super) struct Targets {
    partitions: HashMap<String, i32>,
}

impl Targets {
    /// Make sure `topic` can take a record for `partition`: a literal topic without
    /// `preserve_partition` needs nothing (as before templates); else the topic's partition
    /// count is looked up once (and again when a partition is beyond it: partitions may be added).
    pub(super) fn ready(
        &mut self,
        producer: &dyn Producer,
        settings: &KafkaSinkSettings,
        route: &TopicTemplate,
        topic: &str,
        partition: Option<i32>,
        record: &Record,
    ) -> Result<()> {
        let templated = route.literal().is_none();
        if !templated && !settings.preserve_partition {
            return Ok(());
        }
        let fits = |count: i32| partition.is_none_or(|p| p < count);
        if self.partitions.get(topic).copied().is_some_and(fits) {
            return Ok(());
        }
        if templated && !self.partitions.contains_key(topic) {
            if let Some((partitions, replication)) = settings.create_topic {
                create_topic_if_missing(settings, topic, partitions, replication)?;
            }
        }
        let what = if templated {
            format!(
                "looking up topic {topic} (sink.topic {:?} resolved to it; create it, or set sink.create_topic)",
                route.text()
            )
        } else {
            format!("looking up the partitions of {topic}")
        };
        let partitions = retried(&what, settings.flush_timeout, |left| {
            partitions_of(producer, &settings.properties, topic, left)
        })?;
        let count = partitions.len() as i32;
        tracing::info!(topic, partitions = count, "sink topic looked up");
        self.partitions.insert(topic.to_string(), count);
        match partition {
            Some(p) if p >= count => Err(Error::runtime(
                "sink.preserve_partition",
                format!(
                    "the record {}:{p}@{} goes to partition {p} of {topic}, but {topic} has {count} partitions: \
                     give it as many partitions as the source, or turn preserve_partition off",
                    record.topic.as_deref().unwrap_or("-"),
                    record.offset.map_or("-".to_string(), |o| o.to_string()),
                ),
            )),
            _ => Ok(()),
        }
    }
}
