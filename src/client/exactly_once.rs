//! What the exactly-once Kafka sink and the Kafka checkpoint store share, below both: the
//! delivery modes, the sink's transactional ids, and the way a checkpoint's state records travel
//! in the sink's transactions (KIP-618) with a group member's proof of membership (KIP-447).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use super::cluster::GroupMetadata;
use crate::core::Instance;
use crate::error::Result;

/// What a checkpoint guarantees of the records a Kafka sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delivery {
    /// Every record at least once: a crash repeats what was written after the last checkpoint.
    #[default]
    AtLeastOnce,
    /// Every record exactly once, for consumers reading `read_committed`.
    ExactlyOnce,
}

/// The transactional id of a job's exactly-once Kafka sink: the job's name, and a group member's
/// name or a static instance's index; a second process running the same job (member, instance)
/// fences the first.
pub fn transactional_id(job: &str, member: Option<&str>, instance: Instance) -> String {
    if let Some(member) = member {
        format!("tidegate-{job}@{member}")
    } else if instance.count > 1 {
        format!("tidegate-{job}-{}", instance.index)
    } else {
        format!("tidegate-{job}")
    }
}

/// The exactly-once Kafka sink's side of a Kafka store whose checkpoints travel in the sink's
/// transactions (as Kafka Connect's exactly-once sources write their offsets, KIP-618): a
/// checkpoint's state records join the transaction that holds its output, and the sink's commit
/// makes both visible at once. A crash before the commit aborts both; nothing has to be looked
/// up to tell whether the output of the last checkpoint restored was committed.
pub trait StateInTransaction: Send + Sync {
    /// Send `records` (key, value) to partition 0 of `topic` inside the sink's open transaction
    /// (beginning one if nothing was written since the last commit), and wait until every one is
    /// acknowledged. The sink's next commit commits them.
    fn write_in_transaction(
        &self,
        topic: &str,
        records: &[(String, Vec<u8>)],
        fence: Option<&GroupFence>,
    ) -> Result<()>;
}

/// A group member's proof of membership in its checkpoint's transaction (KIP-447): the source
/// positions the checkpoint holds, committed to the job's consumer group as offsets with the
/// member's group metadata, so that the transaction of a member the group has dropped (its
/// partitions given to another) fails to commit.
pub struct GroupFence {
    /// The member's group metadata, as of its assignment.
    pub metadata: GroupMetadata,
    /// `(topic, partition, next offset)` of each split the checkpoint holds.
    pub offsets: Vec<(String, i32, i64)>,
}

impl GroupFence {
    /// The fence of checkpoint `value` (a Kafka source's: each split's topic, partition and
    /// next offset) for the member of `metadata`.
    pub fn of(metadata: &GroupMetadata, value: &serde_json::Value) -> GroupFence {
        // the readers' splits, and the enumerator's not yet handed to a reader (a checkpoint
        // that holds any split carries the fence: an older position of it must not win)
        let mut offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let listed = [&value["enumerator"]["splits"], &value["splits"]];
        // a partition released mid-run is another member's now: its position there is newer,
        // and the fence must not undo it
        let released: std::collections::BTreeSet<(&str, i64)> = value["splits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["finished"]["reason"] == "released")
            .filter_map(|s| Some((s["split"]["topic"].as_str()?, s["split"]["partition"].as_i64()?)))
            .collect();
        let kept = |s: &&serde_json::Value| {
            let id = (
                s["split"]["topic"].as_str().unwrap_or_default(),
                s["split"]["partition"].as_i64().unwrap_or(-1),
            );
            !released.contains(&id)
        };
        // a partition gone from the cluster has no offset to commit
        for s in listed
            .into_iter()
            .filter_map(|l| l.as_array())
            .flatten()
            .filter(|s| s["removed"] != true)
            .filter(kept)
        {
            let split = &s["split"];
            let (Some(topic), Some(partition), Some(offset)) = (
                split["topic"].as_str(),
                split["partition"].as_i64().and_then(|p| i32::try_from(p).ok()),
                split["next_offset"].as_i64(),
            ) else {
                continue;
            };
            // an offset not resolved yet (earliest, latest) commits as the partition's start
            offsets.insert((topic.to_string(), partition), offset.max(0));
        }
        let offsets = offsets.into_iter().map(|((t, p), o)| (t, p, o)).collect();
        GroupFence {
            metadata: metadata.clone(),
            offsets,
        }
    }
}

/// Where the sink puts its [`StateInTransaction`] when it is built (the store is opened first),
/// and the transactional id the store opened the sink's transactions under (it depends on the
/// generation of the job's instances, which the store finds: see [`layout`]).
#[derive(Clone)]
pub struct SinkTransactionSlot {
    /// The sink's transactional id.
    pub transactional_id: String,
    writer: Arc<OnceLock<Arc<dyn StateInTransaction>>>,
}

impl SinkTransactionSlot {
    /// An empty slot for the sink of `transactional_id`.
    pub fn new(transactional_id: String) -> Self {
        SinkTransactionSlot {
            transactional_id,
            writer: Arc::default(),
        }
    }

    /// Attach the sink's writer; `false` when one is attached already.
    pub fn attach(&self, writer: Arc<dyn StateInTransaction>) -> bool {
        self.writer.set(writer).is_ok()
    }

    /// The attached writer.
    pub fn writer(&self) -> Option<&Arc<dyn StateInTransaction>> {
        self.writer.get()
    }
}
