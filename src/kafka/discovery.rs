//! Partition discovery for the Kafka enumerator: which subscribed partitions exist (this
//! instance's share of them), their starting and stopping offsets when first seen, and which
//! reader owns each (Flink's `KafkaSourceEnumerator.getSplitOwner`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use rdkafka::consumer::BaseConsumer;

use super::client::TracingContext;
use super::offsets::{OffsetsResolver, StartingOffsets, TopicPartition};
use super::split::{split_owner, KafkaPartitionSplit};
use super::{Instance, KafkaSourceSettings, Subscription};
use crate::error::{Error, Result};

/// What one discovery found.
#[derive(Debug)]
pub struct Discovery {
    /// Every subscribed partition that exists now (owned by this instance).
    pub partitions: BTreeSet<TopicPartition>,
    /// Partitions not known before, with resolved offsets.
    pub new_splits: Vec<KafkaPartitionSplit>,
    /// Subscribed topics that do not exist.
    pub missing_topics: Vec<String>,
    /// New stops of the restored partitions, when the stopping offsets changed since the state.
    pub restored_stops: Option<HashMap<TopicPartition, Option<i64>>>,
}

/// The reader (of this instance) that owns a partition. With one instance this is Flink's
/// `getSplitOwner`; with `count` instances, the owner slot over all `count × parallelism` readers
/// is dealt round-robin to instances, so consecutive partitions spread over instances and readers.
pub fn reader_owner(topic: &str, partition: i32, parallelism: usize, instance: Instance) -> usize {
    let count = instance.count.max(1);
    split_owner(topic, partition, count * parallelism.max(1)) / count
}

/// Whether this instance reads a partition.
pub fn instance_owns(topic: &str, partition: i32, parallelism: usize, instance: Instance) -> bool {
    let count = instance.count.max(1);
    split_owner(topic, partition, count * parallelism.max(1)) % count == instance.index
}

/// A consumer for metadata and offset lookups only (no assignment). It carries the group id,
/// if any, for committed offsets, and the isolation level, so `latest` is the last stable offset.
pub fn admin_consumer(settings: &KafkaSourceSettings) -> Result<BaseConsumer<TracingContext>> {
    let mut defaults: Vec<(&str, &str)> = vec![
        ("enable.auto.commit", "false"),
        ("isolation.level", "read_committed"),
        ("client.id", "tidegate-enumerator"),
        ("allow.auto.create.topics", "false"),
    ];
    if let Some(group) = &settings.group_id {
        defaults.push(("group.id", group));
    }
    super::client::client_config(&settings.bootstrap_servers, &defaults, &settings.properties)
        .create_with_context(TracingContext::new("enumerator"))
        .map_err(|e| crate::error::kafka("creating the enumerator's client", e))
}

/// One discovery: the subscribed partitions that exist, and offsets for the new ones.
pub fn discover(
    settings: &KafkaSourceSettings,
    consumer: &BaseConsumer<TracingContext>,
    known: &Mutex<HashSet<TopicPartition>>,
    initial_done: bool,
    parallelism: usize,
) -> Result<Discovery> {
    let timeout = settings.request_timeout;
    let servers = &settings.bootstrap_servers;
    let what = format!("fetching metadata from {servers} (timeout {timeout:?})");
    let metadata =
        |topic: Option<&str>| super::client::fetch_metadata(consumer, topic, timeout, &settings.properties, &what);
    let user = settings
        .properties
        .get("sasl.username")
        .map(|u| format!(" (user {u})"))
        .unwrap_or_default();
    let mut partitions = BTreeSet::new();
    let mut missing_topics = Vec::new();
    let mut add_topic = |topic: &rdkafka::metadata::MetadataTopic, only: Option<&BTreeSet<i32>>| {
        for p in topic.partitions() {
            if only.is_none_or(|o| o.contains(&p.id())) {
                partitions.insert((topic.name().to_string(), p.id()));
            }
        }
    };
    match &settings.subscription {
        Subscription::Topics(topics) | Subscription::Partitions(_, topics) => {
            let wanted: Option<BTreeMap<&str, BTreeSet<i32>>> = match &settings.subscription {
                Subscription::Partitions(list, _) => {
                    let mut m: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
                    for (t, p) in list {
                        m.entry(t.as_str()).or_default().insert(*p);
                    }
                    Some(m)
                }
                _ => None,
            };
            for name in topics {
                let md = metadata(Some(name))?;
                match md.topics().first() {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        let only = wanted.as_ref().and_then(|w| w.get(name.as_str()));
                        if let Some(only) = only {
                            for p in only {
                                if !t.partitions().iter().any(|tp| tp.id() == *p) {
                                    missing_topics.push(format!("partition {name}:{p}"));
                                }
                            }
                        }
                        add_topic(t, only)
                    }
                    Some(t)
                        if t.error()
                            == Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) =>
                    {
                        return Err(Error::runtime(
                            "partition discovery",
                            format!(
                                "not authorized to describe topic {name}{user}: it needs the Describe and Read ACLs"
                            ),
                        ));
                    }
                    _ => missing_topics.push(format!("topic {name}")),
                }
            }
        }
        Subscription::Pattern(pattern) => {
            let md = metadata(None)?;
            for t in md.topics() {
                if t.error().is_none() && pattern.is_match(t.name()) && !t.name().starts_with("__") {
                    add_topic(t, None);
                }
            }
        }
    }
    if !initial_done {
        // offsets given for partitions that do not exist would be ignored without a word
        let starts = match &settings.starting {
            StartingOffsets::Specific(map) => Some(map),
            _ => None,
        };
        let stops = match &settings.stopping {
            super::offsets::StoppingOffsets::Specific(map) => Some(map),
            _ => None,
        };
        for (key, map) in [("source.starting_offsets", starts), ("source.stopping_offsets", stops)] {
            for (t, p) in map.into_iter().flat_map(|m| m.keys()) {
                if missing_topics.iter().any(|m| m.ends_with(t.as_str())) || partitions.contains(&(t.clone(), *p)) {
                    continue;
                }
                let of_topic: Vec<i32> = partitions.iter().filter(|(pt, _)| pt == t).map(|(_, pp)| *pp).collect();
                let why = if of_topic.is_empty() {
                    format!("{t} is not a subscribed topic")
                } else {
                    format!("{t} has partitions {} to {}", of_topic[0], of_topic[of_topic.len() - 1])
                };
                return Err(Error::config(
                    format!("{key}.offsets.\"{t}:{p}\""),
                    format!("no such partition: {why}"),
                ));
            }
        }
    }
    partitions.retain(|(t, p)| instance_owns(t, *p, parallelism, settings.instance));
    let new: Vec<TopicPartition> = {
        let known = known.lock().unwrap_or_else(|p| p.into_inner());
        partitions.iter().filter(|tp| !known.contains(*tp)).cloned().collect()
    };
    let resolver = OffsetsResolver::new(consumer, timeout, settings.group_id.as_deref());
    // the configured starting offsets apply to the first discovery; later partitions are new
    // data, read from their beginning
    let starting = if initial_done {
        &StartingOffsets::Earliest
    } else {
        &settings.starting
    };
    let starts = resolver.resolve_start(starting, &new)?;
    let stops = resolver.resolve_stop(&settings.stopping, &new)?;
    let new_splits = new
        .into_iter()
        .map(|tp| {
            let start = starts.get(&tp).copied().unwrap_or(0);
            let stop = stops.get(&tp).copied().flatten();
            KafkaPartitionSplit::new(tp.0, tp.1, start, stop)
        })
        .collect();
    Ok(Discovery {
        partitions,
        new_splits,
        missing_topics,
        restored_stops: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_instance_uses_flinks_owner() {
        let one = Instance { index: 0, count: 1 };
        for p in 0..12 {
            assert_eq!(reader_owner("trades", p, 3, one), split_owner("trades", p, 3));
            assert!(instance_owns("trades", p, 3, one));
        }
    }

    #[test]
    fn instances_split_partitions_and_readers_evenly() {
        let (count, parallelism) = (2usize, 2usize);
        let mut per_reader = BTreeMap::new();
        for p in 0..16 {
            let owners: Vec<usize> = (0..count)
                .filter(|i| instance_owns("trades", p, parallelism, Instance { index: *i, count }))
                .collect();
            assert_eq!(owners.len(), 1, "partition {p} must belong to exactly one instance");
            let inst = Instance {
                index: owners[0],
                count,
            };
            *per_reader
                .entry((owners[0], reader_owner("trades", p, parallelism, inst)))
                .or_insert(0) += 1;
        }
        assert_eq!(per_reader.len(), 4);
        assert!(per_reader.values().all(|n| *n == 4), "{per_reader:?}");
    }
}
