//! Where a job keeps its checkpoints (`checkpoint.store`): the state file (`"file"`, the default,
//! [`crate::core::StateStore`]) or records keyed by split in a compacted Kafka topic (`"kafka"`,
//! [`kafka::KafkaCheckpointStore`]). The choice is validated in [`config`]; this module opens the
//! store.

mod config;
pub mod kafka;
pub mod layout;
pub mod records;
mod scan;

pub use crate::client::exactly_once::SinkTransactionSlot;
pub use config::{validate, KafkaStoreConfig, Neighbours, RawCheckpoint, StoreConfig};
// the config tests check the default topic
#[cfg(test)]
pub use config::DEFAULT_TOPIC;
pub use scan::RESTORE_WAIT;

use std::sync::Arc;

use crate::core::{CheckpointStore, StateStore};
use crate::error::{Error, Result};

/// An open store of the job's checkpoints, and how `--reset-state` clears it.
pub struct OpenStore {
    /// The store (`None`: a file store without a path keeps no state).
    pub store: Option<Arc<dyn CheckpointStore>>,
    kafka: Option<Arc<kafka::KafkaCheckpointStore>>,
}

impl OpenStore {
    /// A group member's run: every checkpoint's transaction carries the member's group
    /// metadata as of that checkpoint (KIP-447), so a member the group dropped cannot commit.
    pub fn fence_with_group(&self, metadata: crate::client::cluster::GroupMetadataSource) {
        if let Some(k) = &self.kafka {
            k.fence_with_group(metadata);
        }
    }

    /// Where the exactly-once Kafka sink attaches itself when the checkpoints travel in its
    /// transactions (`None`: they do not). Pass it to [`crate::assembly::build::sink_of`].
    pub fn sink_slot(&self) -> Option<SinkTransactionSlot> {
        self.kafka.as_ref().and_then(|k| k.sink_slot())
    }

    /// A group member's `--reset-state`: the Kafka store's records of the job replaced by
    /// tombstones, on a blocking thread.
    pub async fn reset_async(&self) -> Result<()> {
        match &self.kafka {
            Some(k) => {
                let k = Arc::clone(k);
                crate::core::unblock(move || k.reset()).await?
            }
            None => Ok(()),
        }
    }

    /// A Kafka store's [`kafka::KafkaCheckpointStore::read_on`] (a group member's store, opened
    /// ahead of its assignment); nothing for a state file.
    pub async fn read_on(&self) -> Result<()> {
        match &self.kafka {
            Some(k) => k.read_on().await,
            None => Ok(()),
        }
    }

    /// `--reset-state`: the state file moved aside by `move_aside`; the Kafka store's records of
    /// this job replaced by tombstones, in one transaction.
    pub fn reset(&self, move_aside: impl FnOnce() -> Result<()>) -> Result<()> {
        match &self.kafka {
            Some(k) => k.reset(),
            None => move_aside(),
        }
    }
}

/// Open the configured store: the state file at `path` (`--state`, else `checkpoint.path`;
/// none: no state kept), or the Kafka store.
pub fn open(store: &StoreConfig, path: Option<std::path::PathBuf>) -> Result<OpenStore> {
    match store {
        StoreConfig::File => {
            let store = path.map(StateStore::open).transpose()?;
            Ok(OpenStore {
                store: store.map(|s| Arc::new(s) as Arc<dyn CheckpointStore>),
                kafka: None,
            })
        }
        StoreConfig::Kafka(k) => {
            let store = Arc::new(kafka::KafkaCheckpointStore::open((**k).clone())?);
            Ok(OpenStore {
                store: Some(Arc::clone(&store) as Arc<dyn CheckpointStore>),
                kafka: Some(store),
            })
        }
    }
}

/// Open a group member's Kafka store (`job.coordination = "group"`), its reads of the topic
/// waiting on the async runtime (see [`kafka::KafkaCheckpointStore::open_member`]).
pub async fn open_member(store: &StoreConfig) -> Result<OpenStore> {
    let StoreConfig::Kafka(k) = store else {
        return Err(Error::config(
            "checkpoint.store",
            "must be \"kafka\" with job.coordination = \"group\"",
        ));
    };
    let store = kafka::KafkaCheckpointStore::open_member((**k).clone()).await?;
    Ok(OpenStore {
        store: Some(Arc::clone(&store) as Arc<dyn CheckpointStore>),
        kafka: Some(store),
    })
}
