//! The Kafka store of a group member (`job.coordination = "group"`): its runs' keys, the restore
//! from every member's last checkpoint (read again when it cut one half way), the fence of its
//! checkpoints by its group metadata (KIP-447), and the removal of the runs whose every split a
//! newer run holds.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tracing::{debug, info, warn};

use super::super::config::KafkaStoreConfig;
use super::super::layout::{self, Layout};
use super::super::records::{assemble, checkpoint_key, torn};
use super::super::scan::{scan, scan_async, Scan};
use super::store::{state_error, KafkaCheckpointStore};
use super::topic::topic_exists;
use crate::client::cluster::{GroupMetadataSource, Producer};
use crate::client::exactly_once::SinkTransactionSlot;
use crate::error::{Error, Result};

/// How many times a group member reads the topic again when a read cut another member's
/// checkpoint (each read cuts at most the checkpoints in flight at its end).
pub(super) const TORN_READS: usize = 20;

impl KafkaCheckpointStore {
    /// The store of a group member (`job.coordination = "group"`): no generations to settle, its
    /// ids are its own (`<job>@<member>`); see [`crate::core::CheckpointStore::load_reshare`].
    pub(super) fn group_member(config: KafkaStoreConfig, producer: std::sync::Arc<dyn Producer>, found: Scan) -> Self {
        let in_sink = config.sink_transactional_id.clone().map(SinkTransactionSlot::new);
        let layout = Layout {
            generation: 0,
            owner: config.owner.clone(),
            base: None,
            reshare: Vec::new(),
        };
        info!(
            topic = %config.topic,
            bootstrap = %config.bootstrap_servers,
            owner = %config.owner,
            in_sink_transactions = config.sink_transactional_id.is_some(),
            "checkpoint store: Kafka, as a member of the job's consumer group"
        );
        KafkaCheckpointStore {
            config,
            producer: Mutex::new(producer),
            layout: Mutex::new(Some(layout)),
            scanned: Mutex::new(Some(found)),
            reset: std::sync::atomic::AtomicBool::new(false),
            verified: std::sync::atomic::AtomicBool::new(true),
            in_sink,
            group: std::sync::OnceLock::new(),
        }
    }

    /// The last checkpoint of every member of the job's group, oldest first (by where each was
    /// written in the topic): a split is restored from the newest that holds it.
    pub(super) fn group_checkpoints(&self) -> Result<Vec<serde_json::Value>> {
        Ok(self.group_heads()?.into_iter().map(|(_, _, value)| value).collect())
    }

    /// Whether the last scan cut another member's checkpoint half way (its transaction's records
    /// after the end the scan read to).
    fn torn_scan(&self) -> bool {
        let scanned = self.scanned.lock().unwrap_or_else(|p| p.into_inner());
        scanned
            .as_ref()
            .is_some_and(|found| cuts_a_member(&self.config.job, found))
    }

    /// The other members checkpoint while this one reads: a read that cut one's transaction is
    /// read again (the rest of that transaction is in the log by then), at most [`TORN_READS`]
    /// times.
    pub(super) async fn read_untorn(&self) -> Result<()> {
        for _ in 0..TORN_READS {
            if !self.torn_scan() {
                break;
            }
            debug!("the read of the checkpoint topic cut another member's checkpoint; reading again");
            let found = scan_async(&self.config).await?;
            *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
        }
        Ok(())
    }

    /// [`Self::read_untorn`], blocking.
    pub(super) fn read_untorn_blocking(&self) -> Result<()> {
        for _ in 0..TORN_READS {
            if !self.torn_scan() {
                break;
            }
            debug!("the read of the checkpoint topic cut another member's checkpoint; reading again");
            let found = scan(&self.config)?;
            *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(found);
        }
        Ok(())
    }

    /// Every member run's last checkpoint, `(offset, owner, checkpoint)`, oldest first.
    fn group_heads(&self) -> Result<Vec<(i64, String, serde_json::Value)>> {
        let scanned = self.scanned()?;
        match scanned.as_ref() {
            Some(found) => heads_in(&self.config, found),
            None => Ok(Vec::new()),
        }
    }

    /// See [`crate::checkpoint_store::OpenStore::fence_with_group`]: only with the checkpoints in
    /// the sink's transactions (a group-coordinated job's exactly-once sink).
    pub fn fence_with_group(&self, metadata: GroupMetadataSource) {
        let _ = self.group.set(metadata);
    }

    /// Replace by tombstones the records of every run whose every split a newer run's last
    /// checkpoint holds ([`superseded`]): no restore reads them any more. Each run's job record
    /// goes first, so a read that cuts the transaction sees the run gone. Best effort: a failure
    /// is logged, and the next run tries again. Whether records were removed (the topic must
    /// then be read again).
    pub(super) fn remove_superseded_runs(&self) -> bool {
        let heads = match self.group_heads() {
            Ok(heads) => heads,
            // the restore reports it
            Err(_) => return false,
        };
        let runs: Vec<(String, serde_json::Value)> =
            heads.into_iter().map(|(_, owner, value)| (owner, value)).collect();
        let gone = superseded(&runs);
        if gone.is_empty() {
            return false;
        }
        let records: Vec<(String, Option<Vec<u8>>)> = {
            let Ok(scanned) = self.scanned() else { return false };
            let Some(found) = scanned.as_ref() else { return false };
            gone.iter()
                .flat_map(|owner| {
                    let job_record = checkpoint_key(owner);
                    let rest: Vec<String> = found
                        .live_keys_of(owner)
                        .into_iter()
                        .filter(|k| *k != job_record)
                        .collect();
                    std::iter::once(job_record).chain(rest)
                })
                .map(|k| (k, None))
                .collect()
        };
        match self.transaction(&records) {
            Ok(()) => {
                info!(
                    runs = gone.len(),
                    records = records.len(),
                    "checkpoint store: the records of runs whose every split a newer run holds removed (tombstones)"
                );
                *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = None;
                true
            }
            Err(e) => {
                warn!(error = %e, "checkpoint store: removing superseded runs' records failed; the next run tries again");
                false
            }
        }
    }
}

/// Whether `found` cut a member's checkpoint half way (its transaction's records after the end
/// the scan read to).
pub(super) fn cuts_a_member(job: &str, found: &Scan) -> bool {
    found
        .heads(job)
        .filter(|h| layout::parse_member(job, h.owner).is_some())
        .any(|h| torn(h.owner, job, &found.of(h.owner)))
}

/// Every member run's last checkpoint in `found`, `(offset, owner, checkpoint)`, oldest first;
/// an error when the topic holds the job's static instances' checkpoints.
pub(super) fn heads_in(config: &KafkaStoreConfig, found: &Scan) -> Result<Vec<(i64, String, serde_json::Value)>> {
    if let Some(head) = found
        .heads(&config.job)
        .find(|h| h.checkpointed && layout::parse_owner(&config.job, h.owner).is_some())
    {
        return Err(Error::config(
            "job.coordination",
            format!(
                "is \"group\", but the checkpoint topic holds the checkpoints of the job's static instances \
                 ({}): finish the job with job.coordination = \"static\", or start it over with --reset-state",
                head.key
            ),
        ));
    }
    let mut heads: Vec<(i64, &str)> = found
        .heads(&config.job)
        .filter(|h| h.checkpointed && layout::parse_member(&config.job, h.owner).is_some())
        .map(|h| (h.offset, h.owner))
        .collect();
    heads.sort();
    heads
        .into_iter()
        .filter_map(|(offset, owner)| {
            assemble(owner, &config.job, &found.of(owner))
                .map_err(|(key, e)| state_error(config, &key, e))
                .transpose()
                .map(|value| value.map(|v| (offset, owner.to_string(), v)))
        })
        .collect()
}

/// The last checkpoint of every run of the job's group members, oldest first, as the topic holds
/// them now, read without taking over any transactional id (a look at the group's progress).
pub async fn group_checkpoints(config: &KafkaStoreConfig) -> Result<Vec<serde_json::Value>> {
    let probe = config.clone();
    if !crate::core::unblock(move || topic_exists(&probe)).await?? {
        return Ok(Vec::new());
    }
    group_checkpoints_of_open_store(config).await
}

/// [`group_checkpoints`] of a topic that a running job's store reads (a member's partitions
/// taken in): without asking first whether it exists (a look at the cluster's metadata, 160 of
/// the 380 ms a take's read took on the test broker).
pub async fn group_checkpoints_of_open_store(config: &KafkaStoreConfig) -> Result<Vec<serde_json::Value>> {
    let mut found = scan_async(config).await?;
    for _ in 0..TORN_READS {
        if !cuts_a_member(&config.job, &found) {
            break;
        }
        found = scan_async(config).await?;
    }
    Ok(heads_in(config, &found)?.into_iter().map(|(_, _, v)| v).collect())
}

/// Member runs' last checkpoints (oldest first) as one, as a restore of every partition would
/// take them: each split from the run whose entry stands ([`holders`]: its readers' snapshot, or
/// its enumerator's when no reader had it; a split a run released goes on unfinished), the
/// newest run's other fields, and the fewest partitions any run's first discovery saw. `None`
/// without a run.
pub fn merged(runs: &[serde_json::Value]) -> Option<serde_json::Value> {
    use serde_json::Value;
    let mut newest = runs.last()?.clone();
    let (mut known, mut splits) = (Vec::new(), Vec::new());
    for (id, run) in holders(runs) {
        let run = &runs[run];
        let of = |list: &Value| {
            list.as_array()
                .into_iter()
                .flatten()
                .find(|s| split_name(s).as_deref() == Some(id.as_str()))
                .cloned()
        };
        known.extend(of(&run["enumerator"]["splits"]));
        if let Some(mut snapshot) = of(&run["splits"]) {
            if is_released(&snapshot) {
                if let Some(fields) = snapshot.as_object_mut() {
                    fields.remove("finished");
                }
            }
            splits.push(snapshot);
        }
    }
    let mut first: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for run in runs {
        for (topic, count) in run["enumerator"]["initial_partitions"]
            .as_object()
            .into_iter()
            .flatten()
        {
            if let Some(count) = count.as_i64() {
                let least = first.entry(topic.clone()).or_insert(count);
                *least = (*least).min(count);
            }
        }
    }
    newest["splits"] = Value::Array(splits);
    if let Some(e) = newest["enumerator"].as_object_mut() {
        e.insert("splits".into(), Value::Array(known));
        if !first.is_empty() {
            e.insert("initial_partitions".into(), serde_json::json!(first));
        }
    }
    Some(newest)
}

/// For each split (`topic:partition`) the runs' last checkpoints (oldest first) mention, the
/// index of the run whose entry a restore takes: the one whose run restored the split most
/// often (`handovers`), then one that did not release it, then the newest. A run that gave a
/// split up goes on checkpointing it as released, and its checkpoints may be newer than those
/// of the member that took it over, whose restore counted one handover more (the Kafka
/// source's `reshare` takes them alike).
pub fn holders(runs: &[serde_json::Value]) -> std::collections::BTreeMap<String, usize> {
    let mut best: std::collections::BTreeMap<String, (u64, bool, usize)> = std::collections::BTreeMap::new();
    for (index, run) in runs.iter().enumerate() {
        let mut entries: std::collections::BTreeMap<String, (u64, bool)> = std::collections::BTreeMap::new();
        let listed = [&run["enumerator"]["splits"], &run["splits"]];
        for s in listed.into_iter().filter_map(|l| l.as_array()).flatten() {
            let Some(name) = split_name(s) else { continue };
            let entry = entries.entry(name).or_insert((0, false));
            entry.0 = entry.0.max(s["split"]["handovers"].as_u64().unwrap_or(0));
            entry.1 |= is_released(s);
        }
        for (name, (handovers, released)) in entries {
            let candidate = (handovers, !released, index);
            let stands = best.get(&name).is_none_or(|b| *b <= candidate);
            if stands {
                best.insert(name, candidate);
            }
        }
    }
    best.into_iter().map(|(name, (_, _, index))| (name, index)).collect()
}

/// `topic:partition` of a split entry of a checkpoint.
fn split_name(entry: &serde_json::Value) -> Option<String> {
    Some(format!(
        "{}:{}",
        entry["split"]["topic"].as_str()?,
        entry["split"]["partition"].as_i64()?
    ))
}

/// Whether a reader's snapshot says its run gave the split up mid-run.
fn is_released(entry: &serde_json::Value) -> bool {
    entry["finished"]["reason"] == "released"
}

/// Of `runs` (oldest first: owner, last checkpoint), those whose entry stands for no split
/// ([`holders`]): a restore takes none of theirs. The newest run always stays.
fn superseded(runs: &[(String, serde_json::Value)]) -> Vec<String> {
    let values: Vec<serde_json::Value> = runs.iter().map(|(_, v)| v.clone()).collect();
    let standing: BTreeSet<usize> = holders(&values).into_values().collect();
    runs.iter()
        .enumerate()
        .filter(|(i, _)| i + 1 < runs.len() && !standing.contains(i))
        .map(|(_, (owner, _))| owner.clone())
        .collect()
}

/// The member name of the runs `tidegate state set` writes into a group's job.
pub const SET_BY_HAND: &str = "tidegate-state-set";

/// `tidegate state set` on a group's job: `checkpoint` (what the group's runs hold of the changed
/// partition, with the newest run's other fields) written as a run of its own, the newest, in one
/// transaction under a transactional id of its own: a restore takes the partition from it and
/// every other from the runs before (see [`merged`]). Returns the run's owner name.
pub fn write_run(config: &KafkaStoreConfig, checkpoint: serde_json::Value) -> Result<String> {
    let run = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
    let owner = layout::member_run_owner(&config.job, SET_BY_HAND, &run);
    let records = super::store::stored_records(config, &owner, checkpoint)?;
    let producer =
        super::producer::transactional_producer(config, &format!("tidegate.state.{owner}"), &config.properties)?;
    super::store::transaction(config, producer.as_ref(), &records)?;
    Ok(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(owner: &str, splits: &[&str]) -> (String, serde_json::Value) {
        let entries: Vec<serde_json::Value> = splits
            .iter()
            .map(|s| {
                let (topic, partition) = s.split_once(':').unwrap();
                serde_json::json!({"split": {"topic": topic, "partition": partition.parse::<i64>().unwrap(), "next_offset": 0}})
            })
            .collect();
        (
            owner.to_string(),
            serde_json::json!({"enumerator": {"splits": []}, "splits": entries}),
        )
    }

    #[test]
    fn a_run_goes_once_newer_runs_hold_every_split_it_holds() {
        let runs = [
            run("j@a~1", &["t:0", "t:1", "t:2"]),
            run("j@b~1", &["t:3"]),
            run("j@a~2", &["t:0", "t:1"]),
            run("j@c~1", &["t:2", "t:3"]),
            run("j@b~2", &[]),
        ];
        let mut gone = superseded(&runs);
        gone.sort();
        // j@a~1: t:0 and t:1 in a~2, t:2 in c~1; j@b~1: t:3 in c~1; the newest stays, empty or not
        assert_eq!(gone, ["j@a~1", "j@b~1"]);
        assert!(superseded(&runs[..1]).is_empty(), "a single run stays");
        // a split only an old run holds keeps that run
        let runs = [run("j@a~1", &["t:0", "t:9"]), run("j@a~2", &["t:0"])];
        assert!(superseded(&runs).is_empty());
    }

    /// A run that released a split mid-run checkpoints on, newer than the member that took the
    /// split over: the taker's entry (one handover more) stands, and the releasing run goes
    /// only when it stands for nothing else.
    #[test]
    fn a_split_stands_where_it_was_restored_most_often_not_in_the_newer_run_that_released_it() {
        let entry = |p: i64, next: i64, handovers: u64, released: bool| {
            let mut e = serde_json::json!({"split": {"topic": "t", "partition": p, "next_offset": next, "handovers": handovers}});
            if released {
                e["finished"] = serde_json::json!({"reason": "released"});
            }
            e
        };
        let checkpoint =
            |splits: Vec<serde_json::Value>| serde_json::json!({"enumerator": {"splits": []}, "splits": splits});
        // a~1 gave t:1 up at 50 (b~1 restored it: one handover more, read on to 70), and
        // checkpointed after b~1 did; t:2 was released by a~1 and taken by nobody yet
        let runs = [
            ("j@b~1".to_string(), checkpoint(vec![entry(1, 70, 1, false)])),
            (
                "j@a~1".to_string(),
                checkpoint(vec![
                    entry(0, 30, 0, false),
                    entry(1, 50, 0, true),
                    entry(2, 9, 0, true),
                ]),
            ),
        ];
        let values: Vec<serde_json::Value> = runs.iter().map(|(_, v)| v.clone()).collect();
        let m = merged(&values).unwrap();
        assert_eq!(
            m["splits"],
            serde_json::json!([entry(0, 30, 0, false), entry(1, 70, 1, false), entry(2, 9, 0, false)]),
            "t:1 from b~1, where it went on; t:2 from a~1, unfinished"
        );
        assert!(superseded(&runs).is_empty(), "b~1 stands for t:1");
        // b~1 released t:1 at 90 too, before a~1's last checkpoint: b~1's entry still stands
        let runs = [
            ("j@b~1".to_string(), checkpoint(vec![entry(1, 90, 1, true)])),
            runs[1].clone(),
        ];
        let values: Vec<serde_json::Value> = runs.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(merged(&values).unwrap()["splits"][1]["split"]["next_offset"], 90);
        // a restore of t:1 by a~2 (two handovers): a~1 and b~1 stand for nothing of it
        let runs = [
            runs[0].clone(),
            runs[1].clone(),
            (
                "j@a~2".to_string(),
                checkpoint(vec![
                    entry(0, 31, 1, false),
                    entry(1, 95, 2, false),
                    entry(2, 9, 1, false),
                ]),
            ),
        ];
        let mut gone = superseded(&runs);
        gone.sort();
        assert_eq!(gone, ["j@a~1", "j@b~1"]);
    }

    #[test]
    fn the_runs_merge_into_one_checkpoint_of_every_split_from_its_newest_run() {
        let split =
            |p: i64, next: i64| serde_json::json!({"split": {"topic": "t", "partition": p, "next_offset": next}});
        let old = serde_json::json!({
            "checkpoint_id": 4,
            "enumerator": {"splits": [], "initial_partitions": {"t": 4}},
            "splits": [split(0, 10), split(1, 20)],
        });
        let new = serde_json::json!({
            "checkpoint_id": 9,
            "enumerator": {"splits": [{"split": {"topic": "t", "partition": 2, "next_offset": 0}, "assigned": false}], "initial_partitions": {"t": 3}},
            "splits": [split(1, 25)],
        });
        let m = merged(&[old, new]).unwrap();
        assert_eq!(m["checkpoint_id"], 9);
        assert_eq!(
            m["splits"],
            serde_json::json!([split(0, 10), split(1, 25)]),
            "partition 0 from the old run, 1 from the new"
        );
        assert_eq!(m["enumerator"]["splits"][0]["split"]["partition"], 2);
        assert_eq!(m["enumerator"]["initial_partitions"]["t"], 3);
        assert!(merged(&[]).is_none());
    }

    #[test]
    fn a_checkpoint_mentions_its_readers_and_its_enumerator_s_splits() {
        let value = serde_json::json!({
            "enumerator": {"splits": [{"split": {"topic": "t", "partition": 4, "next_offset": 7}, "assigned": false}]},
            "splits": [{"split": {"topic": "t", "partition": 1, "next_offset": 3}}],
        });
        let held: Vec<String> = holders(&[value]).into_keys().collect();
        assert_eq!(held, ["t:1", "t:4"]);
    }
}
