//! A group member's partitions taken in while its job runs on: where each one's previous owner
//! left it, read from the members' last checkpoints in the Kafka store as a restore would take
//! it (see `checkpoint_store::kafka::members::merged`).

use std::collections::BTreeSet;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::checkpoint_store::kafka::{group_checkpoints_of_open_store, members};
use crate::checkpoint_store::{KafkaStoreConfig, StoreConfig};
use crate::core::SplitHandover;
use crate::error::Result;
use crate::kafka::TopicPartition;

/// The splits (the Kafka source's split, as JSON) to take `added` in with, each one handover
/// more than the checkpoint it comes from: unfinished ones only (a partition finished where it
/// was has nothing to read, nor one gone from the cluster). `None` when a partition is in no
/// member's checkpoint: the job's discovery decides where such a one starts, and the job runs
/// again on it.
pub(crate) async fn splits_taken_in(
    store: &KafkaStoreConfig,
    added: &BTreeSet<TopicPartition>,
) -> Result<Option<Vec<Value>>> {
    let runs = group_checkpoints_of_open_store(store).await?;
    let Some(merged) = members::merged(&runs) else {
        return Ok(None);
    };
    let mut splits = Vec::with_capacity(added.len());
    for (topic, partition) in added {
        let of = |list: &Value| {
            list.as_array()
                .into_iter()
                .flatten()
                .find(|s| s["split"]["topic"] == topic.as_str() && s["split"]["partition"] == *partition)
                .cloned()
        };
        let entry = match (of(&merged["splits"]), of(&merged["enumerator"]["splits"])) {
            (Some(snapshot), _) if snapshot["finished"].is_null() => snapshot,
            (Some(_), _) => continue,
            // handed to a reader that did not give it back: finished before (as a restore
            // judges it), or gone from the cluster
            (None, Some(known)) if known["assigned"] == true || known["removed"] == true => continue,
            (None, Some(known)) => known,
            (None, None) => return Ok(None),
        };
        let mut split = entry["split"].clone();
        let handovers = split["handovers"].as_u64().unwrap_or(0) + 1;
        split["handovers"] = Value::from(handovers);
        splits.push(split);
    }
    Ok(Some(splits))
}

/// Take `added` into the running job (see [`SplitHandover::Take`]): each where the members'
/// checkpoints left it, read from the store while the job runs on. False when the job cannot,
/// or a partition is in no checkpoint, or the store cannot be read (the job then stops and
/// runs again on the whole assignment, which reads it again and says why).
pub(crate) async fn take_in(
    store: StoreConfig,
    added: BTreeSet<TopicPartition>,
    handovers: mpsc::UnboundedSender<SplitHandover>,
) -> bool {
    let StoreConfig::Kafka(store) = store else {
        return false;
    };
    let splits = match splits_taken_in(&store, &added).await {
        Ok(Some(splits)) => splits,
        Ok(None) => return false,
        Err(e) => {
            warn!(error = %e, "group member: reading where the partitions it was dealt stand failed");
            return false;
        }
    };
    let (done, answer) = oneshot::channel();
    if handovers.send(SplitHandover::Take { splits, done }).is_err() {
        return false;
    }
    answer.await.unwrap_or(false)
}
