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
        let runs: Vec<(String, BTreeSet<String>)> = heads
            .iter()
            .map(|(_, owner, value)| (owner.clone(), mentions(value)))
            .collect();
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
/// take them: each split from the newest run that holds it (its readers' snapshot, or its
/// enumerator's when no reader had it), the newest run's other fields, and the fewest
/// partitions any run's first discovery saw. `None` without a run.
pub fn merged(runs: &[serde_json::Value]) -> Option<serde_json::Value> {
    use serde_json::Value;
    let mut newest = runs.last()?.clone();
    let id = |s: &Value| {
        Some(format!(
            "{}:{}",
            s["split"]["topic"].as_str()?,
            s["split"]["partition"].as_i64()?
        ))
    };
    let (mut known, mut splits) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
    let mut first: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for run in runs {
        let held: Vec<Value> = run["enumerator"]["splits"].as_array().cloned().unwrap_or_default();
        let snapshots: Vec<Value> = run["splits"].as_array().cloned().unwrap_or_default();
        for s in held.iter().chain(&snapshots) {
            if let Some(id) = id(s) {
                known.remove(&id);
                splits.remove(&id);
            }
        }
        known.extend(held.into_iter().filter_map(|s| Some((id(&s)?, s))));
        splits.extend(snapshots.into_iter().filter_map(|s| Some((id(&s)?, s))));
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
    newest["splits"] = Value::Array(splits.into_values().collect());
    if let Some(e) = newest["enumerator"].as_object_mut() {
        e.insert("splits".into(), Value::Array(known.into_values().collect()));
        if !first.is_empty() {
            e.insert("initial_partitions".into(), serde_json::json!(first));
        }
    }
    Some(newest)
}

/// The splits (`topic:partition`) a group member's checkpoint holds: its readers' and its
/// enumerator's (a Kafka source's state).
fn mentions(checkpoint: &serde_json::Value) -> BTreeSet<String> {
    let listed = [&checkpoint["enumerator"]["splits"], &checkpoint["splits"]];
    listed
        .into_iter()
        .filter_map(|l| l.as_array())
        .flatten()
        .filter_map(|s| {
            Some(format!(
                "{}:{}",
                s["split"]["topic"].as_str()?,
                s["split"]["partition"].as_i64()?
            ))
        })
        .collect()
}

/// Of `runs` (oldest first, each with the splits its last checkpoint holds), those whose every
/// split a newer run holds: a restore takes each split from the newest run that holds it, so
/// these give none. The newest run always stays.
fn superseded(runs: &[(String, BTreeSet<String>)]) -> Vec<String> {
    let mut newer: BTreeSet<&String> = BTreeSet::new();
    let mut gone = Vec::new();
    for (i, (owner, splits)) in runs.iter().enumerate().rev() {
        if i + 1 < runs.len() && splits.iter().all(|s| newer.contains(s)) {
            gone.push(owner.clone());
        }
        newer.extend(splits);
    }
    gone
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

    fn run(owner: &str, splits: &[&str]) -> (String, BTreeSet<String>) {
        (owner.to_string(), splits.iter().map(|s| s.to_string()).collect())
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
        assert_eq!(mentions(&value), ["t:1", "t:4"].map(String::from).into_iter().collect());
    }
}
