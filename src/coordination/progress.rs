//! Whether a group-coordinated job's input is finished, whoever read it: every partition of its
//! subscription, as of the job's first discovery, finished in the checkpoint a restore takes it
//! from (see `checkpoint_store::kafka::members::merged`). A member whose own
//! assignment is done asks this before it exits: until the answer is yes, another member's
//! partitions are still to be read (by it, once the group deals them again, if their member died).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use crate::checkpoint_store::StoreConfig;
use crate::client::cluster::{self, ClientSpec};
use crate::client::committed::committed_offsets;
use crate::client::retry::retried;
use crate::error::{Error, Result};
use crate::kafka::config::KafkaSourceConfig;
use crate::kafka::{Subscription, TopicPartition};

/// How long a member waits between two looks at the job's progress.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(2);

/// The partitions of the job's input not finished yet (`topic:partition`), by the last
/// checkpoints of every member's runs; empty when the whole input is.
pub(crate) async fn unfinished(source: &KafkaSourceConfig, store: &StoreConfig) -> Result<Vec<String>> {
    let StoreConfig::Kafka(store) = store else {
        return Err(Error::config("job.coordination", "\"group\" needs the Kafka store"));
    };
    let checkpoints = crate::checkpoint_store::kafka::group_checkpoints(store).await?;
    let finished = finished_splits(&checkpoints);
    let input: BTreeSet<TopicPartition> = match &source.settings.subscription {
        Subscription::Partitions(list, _) => list.iter().cloned().collect(),
        Subscription::Topics(topics) => {
            let first = first_discovery(&checkpoints);
            let mut input = BTreeSet::new();
            for topic in topics {
                let count = match first.get(topic) {
                    Some(count) => *count,
                    None => partitions_now(source, topic).await?,
                };
                input.extend((0..count).map(|p| (topic.clone(), p)));
            }
            input
        }
        Subscription::Pattern(_) => {
            return Err(Error::config(
                "source.topic_pattern",
                "not used with job.coordination = \"group\"",
            ))
        }
    };
    Ok(input
        .into_iter()
        .filter(|tp| finished.get(tp) != Some(&true))
        .map(|(t, p)| format!("{t}:{p}"))
        .collect())
}

/// Before a member's first run: a state topic that does not exist while the job's consumer group
/// holds positions its checkpoints committed (KIP-447) was deleted, or the config names another.
/// A new, empty topic would start the job over and write everything again: refused, naming the
/// topic and the group (exit 3). `--reset-state` starts over on purpose.
pub(crate) async fn state_topic_still_there(
    source: &KafkaSourceConfig,
    store: &StoreConfig,
    group: &str,
) -> Result<()> {
    let StoreConfig::Kafka(store) = store else {
        return Ok(());
    };
    let probe = (**store).clone();
    if crate::core::unblock(move || crate::checkpoint_store::kafka::topic_exists(&probe)).await?? {
        return Ok(());
    }
    let settings = source.settings.clone();
    let (topics, group_name) = (super::topics(&source.settings.subscription), group.to_string());
    let held: Vec<String> = crate::core::unblock(move || -> Result<Vec<String>> {
        let spec = offsets_spec(&settings, &group_name);
        let consumer = cluster::of(&settings.bootstrap_servers).consumer(&spec)?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        for topic in &topics {
            let what = format!("looking up the partitions of {topic}");
            let metadata = consumer.metadata(Some(topic), settings.request_timeout, &settings.properties, &what)?;
            for p in metadata.partitions_of(topic).unwrap_or_default() {
                tpl.add_partition(topic, *p);
            }
        }
        // a new group's coordinator may be moving or loading (NotCoordinator on a cluster):
        // passing answers, retried
        let what = format!("reading the offsets of consumer group {group_name}");
        let committed = retried(&what, settings.request_timeout, |left| {
            let answer = consumer
                .committed_offsets(tpl.clone(), left)
                .map_err(|e| crate::error::kafka(&what, e))?;
            committed_offsets(&answer, &what)
        })?;
        Ok(committed
            .into_iter()
            .filter_map(|((topic, partition), offset)| offset.map(|o| format!("{topic}:{partition} at {o}")))
            .collect())
    })
    .await??;
    if held.is_empty() {
        return Ok(());
    }
    Err(Error::State {
        path: format!("kafka topic {} at {}", store.topic, store.bootstrap_servers).into(),
        source: crate::error::StateError::Vanished(format!(
            "the checkpoint topic does not exist, but consumer group {group} holds positions this job's checkpoints \
             committed ({}{}): the topic was deleted, or checkpoint.topic names another one. A new, empty topic \
             would start the job over and write everything again: restore the topic or fix checkpoint.topic, or \
             start over on purpose with --reset-state",
            held.iter().take(4).cloned().collect::<Vec<_>>().join(", "),
            if held.len() > 4 { ", …" } else { "" }
        )),
    })
}

/// Whether each split the checkpoints hold is finished, where a restore takes it from
/// (`checkpoints` oldest first): its readers' snapshots say, and a split its enumerator has not
/// handed to a reader is not.
fn finished_splits(checkpoints: &[Value]) -> BTreeMap<TopicPartition, bool> {
    // each split where a restore would take it (a split a run released goes on unfinished)
    let Some(cp) = crate::checkpoint_store::kafka::members::merged(checkpoints) else {
        return BTreeMap::new();
    };
    let mut finished = BTreeMap::new();
    for known in cp["enumerator"]["splits"].as_array().into_iter().flatten() {
        if let Some(tp) = topic_partition(&known["split"]) {
            if known["removed"] == true {
                // gone from the cluster: nothing left to read
                finished.insert(tp, true);
            } else if known["assigned"] == false {
                finished.insert(tp, false);
            }
        }
    }
    for snapshot in cp["splits"].as_array().into_iter().flatten() {
        if let Some(tp) = topic_partition(&snapshot["split"]) {
            finished.insert(tp, !snapshot["finished"].is_null());
        }
    }
    finished
}

fn topic_partition(split: &Value) -> Option<TopicPartition> {
    Some((
        split["topic"].as_str()?.to_string(),
        i32::try_from(split["partition"].as_i64()?).ok()?,
    ))
}

/// Each topic's partition count at the job's first discovery: the fewest any member's saw
/// (partitions added later are not part of what the first discovery bounded).
fn first_discovery(checkpoints: &[Value]) -> BTreeMap<String, i32> {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    for cp in checkpoints {
        for (topic, count) in cp["enumerator"]["initial_partitions"].as_object().into_iter().flatten() {
            if let Some(count) = count.as_i64().and_then(|c| i32::try_from(c).ok()) {
                let least = counts.entry(topic.clone()).or_insert(count);
                *least = (*least).min(count);
            }
        }
    }
    counts
}

/// `topic`'s partition count now (no checkpoint knows the job's first discovery yet).
async fn partitions_now(source: &KafkaSourceConfig, topic: &str) -> Result<i32> {
    let settings = source.settings.clone();
    let topic = topic.to_string();
    crate::core::unblock(move || {
        let spec = partitions_spec(&settings);
        let consumer = cluster::of(&settings.bootstrap_servers).consumer(&spec)?;
        let what = format!("looking up the partitions of {topic}");
        let metadata = consumer.metadata(Some(&topic), settings.request_timeout, &settings.properties, &what)?;
        metadata
            .partitions_of(&topic)
            .map(|p| p.len() as i32)
            .ok_or_else(|| Error::runtime(what, "the topic does not exist"))
    })
    .await?
}

/// The client that reads the positions the group's members committed.
pub(crate) fn offsets_spec<'a>(settings: &'a crate::kafka::KafkaSourceSettings, group: &str) -> ClientSpec<'a> {
    ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "group-offsets")
        .set("group.id", group.to_string())
        .set("enable.auto.commit", "false")
}

/// The client that counts a topic's partitions.
pub(crate) fn partitions_spec(settings: &crate::kafka::KafkaSourceSettings) -> ClientSpec<'_> {
    ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "group-progress")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_checkpoint_holding_a_split_says_whether_it_is_finished() {
        let split = |p: i64| serde_json::json!({"topic": "t", "partition": p, "next_offset": 5});
        let older = serde_json::json!({
            "enumerator": {"splits": [{"split": split(2), "assigned": false}], "initial_partitions": {"t": 4}},
            "splits": [
                {"split": split(0), "finished": {"reason": "stopping_offset"}},
                {"split": split(1), "finished": null},
            ],
        });
        let newer = serde_json::json!({
            "enumerator": {"splits": [], "initial_partitions": {"t": 3}},
            "splits": [{"split": split(1), "finished": {"reason": "stopping_offset"}}],
        });
        let finished = finished_splits(&[older.clone(), newer.clone()]);
        assert_eq!(finished.get(&("t".to_string(), 0)), Some(&true));
        assert_eq!(
            finished.get(&("t".to_string(), 1)),
            Some(&true),
            "the newer run finished it"
        );
        assert_eq!(
            finished.get(&("t".to_string(), 2)),
            Some(&false),
            "not handed to a reader"
        );
        assert_eq!(
            finished_splits(&[newer, older]).get(&("t".to_string(), 1)),
            Some(&false)
        );
        assert_eq!(first_discovery(&[serde_json::json!({})]), BTreeMap::new());
        let both = [
            serde_json::json!({"enumerator": {"initial_partitions": {"t": 4}}}),
            serde_json::json!({"enumerator": {"initial_partitions": {"t": 3}}}),
        ];
        assert_eq!(first_discovery(&both)["t"], 3);
    }
}
