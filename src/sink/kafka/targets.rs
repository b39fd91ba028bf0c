//! The topics the Kafka sink writes to, as far as it must know them: a topic a template resolves
//! to is looked up (or created, with `sink.create_topic`) the first time, and with
//! `preserve_partition` each record's partition is checked against the topic's partitions.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use tracing::info;

use super::routing::TopicTemplate;
use super::settings::{CreateTopic, KafkaSinkSettings};
use crate::client::cluster::{self, ClientSpec, NewTopicSpec, Producer};
use crate::client::retry::retried;
use crate::error::{Error, Result};
use crate::record::Record;

/// The admin client that creates the sink's topic.
pub(crate) fn create_spec(settings: &KafkaSinkSettings) -> ClientSpec<'_> {
    ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "sink-admin")
}

/// The consumer that looks the sink's topics up, with the sink's connection `properties`.
pub(crate) fn lookup_spec<'a>(
    settings: &'a KafkaSinkSettings,
    properties: &'a std::collections::BTreeMap<String, String>,
    auto_create: bool,
) -> ClientSpec<'a> {
    ClientSpec::new(&settings.bootstrap_servers, properties, "sink-admin")
        .set("allow.auto.create.topics", if auto_create { "true" } else { "false" })
        .set("enable.auto.commit", "false")
}

/// Create `topic` unless it exists.
pub(super) fn create_topic_if_missing(settings: &KafkaSinkSettings, topic: &str, create: &CreateTopic) -> Result<()> {
    let spec = create_spec(settings);
    let new_topic = NewTopicSpec {
        name: topic.to_string(),
        partitions: create.partitions,
        replication: create.replication,
        configs: create.configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    };
    match cluster::of(&settings.bootstrap_servers).create_topic(&spec, &new_topic, Duration::from_secs(30))? {
        Ok(()) => info!(topic, partitions = create.partitions, configs = ?create.configs, "topic created"),
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

/// How long a literal topic the broker does not know may take to appear (one being created)
/// before the sink gives up on it.
const MISSING_TOPIC_WAIT: Duration = Duration::from_secs(10);

/// A literal `topic` exists: one the broker still does not know after [`MISSING_TOPIC_WAIT`]
/// fails the sink at once, naming the topic and the fix, instead of every record's delivery
/// timing out after `message.timeout.ms`. Any other trouble (a broker out of reach) is left to
/// the producer's own timeouts, as before.
pub(super) fn check_exists(settings: &KafkaSinkSettings, topic: &str) -> Result<()> {
    match lookup(settings, topic, MISSING_TOPIC_WAIT, true)? {
        Lookup::Unknown => Err(Error::config(
            "sink.topic",
            format!(
                "the topic {topic} does not exist on {}: create it, set sink.create_topic = \
                 {{ partitions = N }} (tidegate replay: --create-topic, with the source's partitions \
                 and configs)",
                settings.bootstrap_servers
            ),
        )),
        Lookup::Exists | Lookup::NoAnswer => Ok(()),
    }
}

/// `topic` exists, at a first look (no wait for one being created).
pub(super) fn exists(settings: &KafkaSinkSettings, topic: &str) -> Result<bool> {
    Ok(lookup(settings, topic, Duration::ZERO, false)? == Lookup::Exists)
}

#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    Exists,
    Unknown,
    NoAnswer,
}

/// What the broker says of `topic`, asked again for `wait` while it does not know it. With
/// `auto_create`, the metadata request lets a broker that creates topics on demand create it, as
/// the producer's first send would (a broker that does not still answers "unknown").
fn lookup(settings: &KafkaSinkSettings, topic: &str, wait: Duration, auto_create: bool) -> Result<Lookup> {
    let what = format!("looking up the sink's topic {topic}");
    // the connection's properties only: the sink's producer settings mean nothing to a consumer
    let properties = crate::client::connection_properties(&settings.properties);
    let spec = lookup_spec(settings, &properties, auto_create);
    let consumer = cluster::of(&settings.bootstrap_servers).consumer(&spec)?;
    let deadline = crate::core::sim::now() + wait;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(crate::core::sim::now());
        let metadata = match consumer.metadata(Some(topic), left.max(Duration::from_secs(2)), &properties, &what) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "{what}: no answer; the producer will say more");
                return Ok(Lookup::NoAnswer);
            }
        };
        let unknown = match metadata.topics.iter().find(|t| t.name == topic) {
            Some(t) if t.error.is_none() && !t.partitions.is_empty() => return Ok(Lookup::Exists),
            Some(t) => t.error.map(RDKafkaErrorCode::from) == Some(RDKafkaErrorCode::UnknownTopicOrPartition),
            None => false,
        };
        let settled = left.is_zero() || (crate::core::sim::active() && attempts >= 3);
        match (unknown, settled) {
            (true, true) => return Ok(Lookup::Unknown),
            // another error (a leader being elected): the producer's retries see to it
            (false, true) => return Ok(Lookup::NoAnswer),
            _ => {}
        }
        if !crate::core::sim::active() {
            std::thread::sleep(Duration::from_millis(200).min(left));
        }
    }
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
            if let Some(create) = &settings.create_topic {
                create_topic_if_missing(settings, topic, create)?;
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
