//! Where a job's checkpoints are kept: the [`CheckpointStore`] trait the job and the coordinator
//! write through (the state file, [`crate::StateStore`], is one; the tidegate crate adds a store
//! in a compacted Kafka topic), and [`StoredCheckpoint`], a checkpoint as a store receives it.

use crate::error::Result;

/// A completed checkpoint handed to a store: its id, its JSON (a [`crate::Checkpoint`]), and the
/// id of each split in `value["splits"]`, in the same order (a store keyed by split needs them;
/// a split's JSON does not carry its id in a form the store could read).
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    /// The checkpoint's number.
    pub checkpoint_id: u64,
    /// The checkpoint's JSON.
    pub value: serde_json::Value,
    /// `split_ids[i]` is the id of `value["splits"][i]`.
    pub split_ids: Vec<String>,
}

/// A store of the job's last checkpoint. `write` is atomic: after a crash at any point, `load`
/// returns either the checkpoint written before or the new one, whole.
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Where the checkpoints are (a path, a topic at an address), for messages and `state show`.
    fn location(&self) -> String;

    /// The last checkpoint written, as the JSON of a [`crate::Checkpoint`]; `None` when there is
    /// none yet. Damaged or foreign state is an [`crate::Error::State`] (exit 3), left as it is.
    /// A program may look before the job starts and the job loads again: until the next
    /// `write`, a store should give the same answer both times (the Kafka store keeps its first).
    fn load(&self) -> Result<Option<serde_json::Value>>;

    /// When [`CheckpointStore::load`] finds no checkpoint of this instance because the job's
    /// instance count changed: the last checkpoint of every instance of the run before (the
    /// JSON of a [`crate::Checkpoint`] each), from which this instance cuts its share (see
    /// [`crate::Source::reshare`]). Empty (the default): start afresh.
    fn load_reshare(&self) -> Result<Vec<serde_json::Value>> {
        Ok(Vec::new())
    }

    /// Whether [`CheckpointStore::load_reshare`]'s checkpoints may hold the same split (a group
    /// member's older checkpoint beside the newer one of the member that took the split over):
    /// they come oldest first then, and the newest holding a split stands. Otherwise (the
    /// default) a split in two of them is damaged state.
    fn parts_may_overlap(&self) -> bool {
        false
    }

    /// Whether a job would resume from something: its last checkpoint, or the checkpoints its
    /// share is cut from.
    fn resumes(&self) -> Result<bool> {
        Ok(self.load()?.is_some() || !self.load_reshare()?.is_empty())
    }

    /// Replace the last checkpoint with `checkpoint`, atomically.
    fn write(&self, checkpoint: &StoredCheckpoint) -> Result<()>;

    /// Whether a written checkpoint becomes visible only with the transactional sink's commit
    /// (the Kafka store writing in the sink's transaction, KIP-618): the restored checkpoint's
    /// output is then always committed, and a checkpoint need not keep the one before it.
    fn commits_with_sink(&self) -> bool {
        false
    }
}

impl CheckpointStore for crate::StateStore {
    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn load(&self) -> Result<Option<serde_json::Value>> {
        crate::StateStore::load(self)
    }

    fn write(&self, checkpoint: &StoredCheckpoint) -> Result<()> {
        self.write_encoded(&crate::state::encode(&checkpoint.value)?)
    }
}
