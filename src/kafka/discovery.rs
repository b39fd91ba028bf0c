//! Partition discovery for the Kafka enumerator: which subscribed partitions exist (this
//! instance's share of them), their starting and stopping offsets when first seen, the topics'
//! ids, and which topics answered with an error rather than their partitions.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rdkafka::types::RDKafkaRespErr;
use tracing::debug;

use super::offsets::{OffsetsResolver, StartingOffsets, TopicPartition};
use super::settings::KafkaSourceSettings;
use super::split::KafkaPartitionSplit;
use super::subscription::Subscription;
use crate::client::cluster::{self, ClientSpec, Consumer, Metadata, TopicMetadata};
use crate::error::{Error, Result};

/// What the enumerator asks of one discovery, besides the partitions that exist.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryRequest {
    /// Partitions it knows: offsets are resolved for the others only.
    pub known: HashSet<TopicPartition>,
    /// The topic ids its splits' offsets belong to.
    pub topic_ids: HashMap<String, String>,
    /// Partitions whose log to report (restored splits, before they are assigned again). The
    /// partitions of a topic whose id changed are reported too.
    pub check: Vec<TopicPartition>,
    /// The first discovery (with the configured starting offsets) happened.
    pub initial_done: bool,
    /// A group member's job: how many partitions each topic had at the job's first discovery.
    /// After it, a new partition below that count is one no run read yet (dealt to a member
    /// that never checkpointed): it starts at the configured starting offsets; above it, one
    /// added since: at earliest. Empty: every partition after the first discovery is added.
    pub initial_partitions: BTreeMap<String, i32>,
}

/// The broker to ask for topic ids: the one that answered the metadata, or, when that was a
/// bootstrap connection that has no id yet (-1), any broker the metadata names. Without one,
/// librdkafka sends the call to the controller, which some clusters (its mock among them) never
/// name, and it times out: a CI run lost the recreated-topic check that way.
fn answering_broker(md: &Metadata) -> i32 {
    match md.orig_broker_id {
        id if id >= 0 => id,
        _ => md.brokers.first().copied().unwrap_or(-1),
    }
}

/// How long a discovery waits for the topic ids (a check, see `discover`).
const TOPIC_IDS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What one discovery found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Every subscribed partition that exists now (owned by this instance).
    pub partitions: BTreeSet<TopicPartition>,
    /// Partitions not known before, with resolved offsets.
    pub new_splits: Vec<KafkaPartitionSplit>,
    /// Subscribed topics (or listed partitions) the broker says do not exist.
    pub missing_topics: Vec<String>,
    /// Subscribed topics the broker answered with an error other than "unknown" (leader not
    /// available while a broker restarts): their partitions are not in `partitions`, but they
    /// are not gone either.
    pub unavailable: BTreeMap<String, String>,
    /// The ids of the existing topics (empty where the broker has none).
    pub topic_ids: HashMap<String, String>,
    /// The log of each partition asked to be checked, as it is now.
    pub logs: HashMap<TopicPartition, PartitionLog>,
    /// How many partitions each subscribed topic has now (every instance's and member's).
    pub partition_counts: BTreeMap<String, i32>,
}

/// A partition's log now, and the stop the configured stopping offsets give in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLog {
    pub earliest: i64,
    /// The end (the last stable offset, read_committed).
    pub latest: i64,
    pub stop: Option<i64>,
}

/// Whether a topic error says the topic does not exist (rather than that it cannot be read now).
fn is_unknown(error: RDKafkaRespErr) -> bool {
    matches!(
        error,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
            | RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_ID
            | RDKafkaRespErr::RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
            | RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION
    )
}

/// A consumer for metadata and offset lookups only (no assignment). It carries the group id,
/// if any, for committed offsets, and the isolation level, so `latest` is the last stable offset.
pub fn admin_consumer(settings: &KafkaSourceSettings) -> Result<Box<dyn Consumer>> {
    cluster::of(&settings.bootstrap_servers).consumer(&admin_spec(settings))
}

/// The admin client that reads the source topics' configs.
pub fn source_admin_spec(settings: &KafkaSourceSettings) -> ClientSpec<'_> {
    ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "source-admin")
}

/// The enumerator's client: metadata, offsets and partition discovery.
pub fn admin_spec(settings: &KafkaSourceSettings) -> ClientSpec<'_> {
    let mut spec = ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "enumerator")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("client.id", "tidegate-enumerator")
        .set("allow.auto.create.topics", "false");
    if let Some(group) = &settings.group_id {
        spec = spec.set("group.id", group.clone());
    }
    spec
}

/// `validate --connect`: the cluster's metadata, as the enumerator reaches it; a line saying so.
pub fn check_connection(settings: &KafkaSourceSettings) -> Result<String> {
    let consumer = admin_consumer(settings)?;
    let what = format!("connecting to {}", settings.bootstrap_servers);
    let properties = &settings.properties;
    let metadata = consumer.metadata(None, settings.request_timeout, properties, &what)?;
    let brokers = metadata.brokers.len();
    let found = format!("{brokers} broker{}", if brokers == 1 { "" } else { "s" });
    Ok(crate::client::connected_line(
        "source",
        &settings.bootstrap_servers,
        properties,
        &found,
    ))
}

/// Before a first run builds its sink (a topic created, a file started): the subscribed topics
/// that do not exist, when the job would fail on them (no `wait_for_topics`), as the enumerator
/// says it — so a job that cannot start leaves nothing behind. Only a definite answer counts.
pub fn check_topics_exist(settings: &KafkaSourceSettings) -> Result<()> {
    let (Subscription::Topics(topics) | Subscription::Partitions(_, topics)) = &settings.subscription else {
        return Ok(()); // a pattern matches what there is
    };
    if settings.wait_for_topics {
        return Ok(());
    }
    let consumer = admin_consumer(settings)?;
    // a quick look: a cluster that does not answer at once is left to the job's discovery,
    // which waits for it (request_timeout) while the job takes signals and checkpoints
    let timeout = settings.request_timeout.min(std::time::Duration::from_secs(2));
    let what = format!("fetching metadata from {}", settings.bootstrap_servers);
    let mut missing = Vec::new();
    for name in topics {
        let md = match consumer.metadata(Some(name), timeout, &settings.properties, &what) {
            Ok(md) => md,
            // no answer, or a refusal: the job's discovery meets it too, and reports it with
            // the job's endpoint up and its signals handled
            Err(e) => {
                debug!(error = %e, "no quick answer about the topics; the job's discovery will ask");
                return Ok(());
            }
        };
        if md.topics.first().and_then(|t| t.error).is_some_and(is_unknown) {
            missing.push(format!("topic {name}"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::runtime(
        "partition discovery",
        format!(
            "{} does not exist (set source.wait_for_topics = true to wait for it)",
            missing.join(", ")
        ),
    ))
}

/// The topic configs a copy takes from its source: how it is cleaned up and kept, and how large
/// its records may be. Not `message.timestamp.type`: a copy into a `LogAppendTime` topic would
/// lose the records' timestamps (a `LogAppendTime` source's are append times, kept as they are).
const COPIED_CONFIGS: &[&str] = &["cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes"];

/// How a copy of the subscribed topics is created: the largest partition count among them (a
/// copy that keeps each record's partition needs it), the first topic's [`COPIED_CONFIGS`]
/// (their values in effect, broker defaults included), and the largest `max.message.bytes` of
/// them all.
pub fn topic_layout(settings: &KafkaSourceSettings) -> Result<crate::connector::TopicLayout> {
    let (Subscription::Topics(topics) | Subscription::Partitions(_, topics)) = &settings.subscription else {
        return Err(Error::config(
            "sink.create_topic.like_source",
            "a source subscribed by pattern has no topic to copy the layout of: give partitions",
        ));
    };
    let consumer = admin_consumer(settings)?;
    let what = format!("reading the source topics' layout from {}", settings.bootstrap_servers);
    let spec = source_admin_spec(settings);
    let cluster = cluster::of(&settings.bootstrap_servers);
    let mut partitions = 0;
    let mut configs = BTreeMap::new();
    for (i, name) in topics.iter().enumerate() {
        // a topic error (a leader being elected) passes: asked again up to the request timeout
        let deadline = crate::core::sim::now() + settings.request_timeout;
        let count = loop {
            let md = consumer.metadata(Some(name), settings.request_timeout, &settings.properties, &what)?;
            if let Some(found) = md.partitions_of(name) {
                break found.len() as i32;
            }
            let unknown = md.topics.first().and_then(|t| t.error).is_some_and(is_unknown);
            if unknown || crate::core::sim::now() >= deadline || crate::core::sim::active() {
                return Err(Error::runtime(
                    what.clone(),
                    format!("the source topic {name} does not exist or has no partitions"),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        partitions = partitions.max(count);
        let described = match cluster.topic_configs(&spec, name, settings.request_timeout)? {
            Ok(all) => all,
            Err(code) => return Err(Error::runtime(format!("describing the source topic {name}"), code)),
        };
        for (key, value) in described {
            let larger = |old: &String| old.parse::<u64>().ok() < value.parse::<u64>().ok();
            match key.as_str() {
                "max.message.bytes" if configs.get(&key).is_none_or(larger) => {
                    configs.insert(key, value);
                }
                k if i == 0 && COPIED_CONFIGS.contains(&k) && k != "max.message.bytes" => {
                    configs.insert(key, value);
                }
                _ => {}
            }
        }
    }
    Ok(crate::connector::TopicLayout { partitions, configs })
}

/// One discovery: the subscribed partitions that exist, offsets for the new ones, and what the
/// request asked to check.
pub fn discover(
    settings: &KafkaSourceSettings,
    consumer: &dyn Consumer,
    request: &DiscoveryRequest,
    parallelism: usize,
) -> Result<Discovery> {
    let timeout = settings.request_timeout;
    let servers = &settings.bootstrap_servers;
    let what = format!("fetching metadata from {servers} (timeout {timeout:?})");
    let metadata = |topic: Option<&str>| consumer.metadata(topic, timeout, &settings.properties, &what);
    let user = settings
        .properties
        .get("sasl.username")
        .map(|u| format!(" (user {u})"))
        .unwrap_or_default();
    let mut partitions = BTreeSet::new();
    let mut missing_topics = Vec::new();
    let mut unavailable = BTreeMap::new();
    let mut present = Vec::new();
    // the broker that answered the metadata (-1: none yet)
    let mut broker = -1;
    let mut add_topic = |topic: &TopicMetadata, only: Option<&BTreeSet<i32>>| {
        for p in &topic.partitions {
            if only.is_none_or(|o| o.contains(p)) {
                partitions.insert((topic.name.clone(), *p));
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
                broker = answering_broker(&md);
                match md.topics.first() {
                    Some(t) if t.error.is_none() && !t.partitions.is_empty() => {
                        let only = wanted.as_ref().and_then(|w| w.get(name.as_str()));
                        if let Some(only) = only {
                            for p in only {
                                if !t.partitions.contains(p) {
                                    missing_topics.push(format!("partition {name}:{p}"));
                                }
                            }
                        }
                        present.push(name.clone());
                        add_topic(t, only)
                    }
                    Some(t) if t.error == Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) => {
                        return Err(Error::runtime(
                            "partition discovery",
                            format!(
                                "not authorized to describe topic {name}{user}: it needs the Describe and Read ACLs"
                            ),
                        ));
                    }
                    Some(t) => match t.error {
                        Some(e) if is_unknown(e) => missing_topics.push(format!("topic {name}")),
                        Some(e) => {
                            unavailable.insert(name.clone(), rdkafka::types::RDKafkaErrorCode::from(e).to_string());
                        }
                        None => {
                            unavailable.insert(name.clone(), "no partitions in its metadata".to_string());
                        }
                    },
                    None => missing_topics.push(format!("topic {name}")),
                }
            }
        }
        Subscription::Pattern(pattern) => {
            let md = metadata(None)?;
            broker = answering_broker(&md);
            for t in &md.topics {
                if !pattern.is_match(&t.name) || t.name.starts_with("__") {
                    continue;
                }
                match t.error {
                    None if !t.partitions.is_empty() => {
                        present.push(t.name.clone());
                        add_topic(t, None);
                    }
                    // a topic being deleted: listed no more soon; not there now
                    Some(e) if is_unknown(e) => {}
                    Some(e) => {
                        unavailable.insert(t.name.clone(), rdkafka::types::RDKafkaErrorCode::from(e).to_string());
                    }
                    None => {
                        unavailable.insert(t.name.clone(), "no partitions in its metadata".to_string());
                    }
                }
            }
        }
    }
    if !request.initial_done {
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
                if missing_topics.iter().any(|m| m.ends_with(t.as_str()))
                    || unavailable.contains_key(t)
                    || partitions.contains(&(t.clone(), *p))
                {
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
    let mut partition_counts = BTreeMap::new();
    for (t, p) in &partitions {
        let count = partition_counts.entry(t.clone()).or_insert(0);
        *count = (*count).max(p + 1);
    }
    // (a partition the enumerator holds is its own: a group member's taken in since its run began)
    partitions.retain(|(t, p)| settings.owns(t, *p, parallelism) || request.known.contains(&(t.clone(), *p)));
    // ids are a check, not a need: a broker without them (or refusing the call) leaves it out,
    // and so does one slow to answer (librdkafka may wait for a controller it does not know):
    // the check must not hold a discovery for the whole request timeout
    let ids_timeout = timeout.min(TOPIC_IDS_TIMEOUT);
    let topic_ids = match consumer.topic_ids(&present, broker, ids_timeout) {
        Ok(ids) => ids,
        Err(e) => {
            debug!(error = %e, "no topic ids: a recreated topic is told only by its offsets");
            HashMap::new()
        }
    };
    let new: Vec<TopicPartition> = partitions
        .iter()
        .filter(|tp| !request.known.contains(*tp))
        .cloned()
        .collect();
    let resolver = OffsetsResolver::new(consumer, timeout, settings.group_id.as_deref());
    // the configured starting offsets apply to the first discovery (and to a group member's
    // partitions that were there then but no run read); later partitions are new data, read
    // from their beginning
    let (initial, added): (Vec<TopicPartition>, Vec<TopicPartition>) = new
        .iter()
        .cloned()
        .partition(|(t, p)| !request.initial_done || request.initial_partitions.get(t).is_some_and(|count| p < count));
    // (offsets listed for a partition are checked at the first discovery: later, retention may
    // have passed them, and such a partition starts at earliest, as before the counts were kept)
    let initial_start = match &settings.starting {
        StartingOffsets::Specific(_) if request.initial_done => &StartingOffsets::Earliest,
        spec => spec,
    };
    let mut starts = if initial.is_empty() {
        HashMap::new()
    } else {
        resolver.resolve_start(initial_start, &initial)?
    };
    starts.extend(resolver.resolve_start(&StartingOffsets::Earliest, &added)?);
    let stops = resolver.resolve_stop(&settings.stopping, &new)?;
    let new_splits = new
        .into_iter()
        .map(|tp| {
            let start = starts.get(&tp).copied().unwrap_or(0);
            let stop = stops.get(&tp).copied().flatten();
            let id = topic_ids.get(&tp.0).cloned();
            KafkaPartitionSplit::new(tp.0, tp.1, start, stop).with_topic_id(id)
        })
        .collect();
    // the logs asked for, and those of every partition of a topic recreated under the splits
    let recreated = |t: &String| {
        request
            .topic_ids
            .get(t)
            .is_some_and(|old| topic_ids.get(t).is_some_and(|now| now != old))
    };
    let check: Vec<TopicPartition> = partitions
        .iter()
        .filter(|tp| request.check.contains(tp) || recreated(&tp.0))
        .cloned()
        .collect();
    let (lows, highs) = (resolver.earliest(&check)?, resolver.latest(&check)?);
    let check_stops = resolver.resolve_stop(&settings.stopping, &check)?;
    let logs = check
        .into_iter()
        .filter_map(|tp| {
            let log = PartitionLog {
                earliest: *lows.get(&tp)?,
                latest: *highs.get(&tp)?,
                stop: check_stops.get(&tp).copied().flatten(),
            };
            Some((tp, log))
        })
        .collect();
    Ok(Discovery {
        partitions,
        new_splits,
        missing_topics,
        unavailable,
        topic_ids,
        logs,
        partition_counts,
    })
}
