//! A group member's next run's checkpoint store, opened while the member waits for its
//! assignment: its producers' transactions initialised and the state topic read, which was most
//! of a new member's time from its assignment to its first record (1.4 of 1.6 s on the test
//! broker). Once the assignment comes, the store reads on from there, so that it holds the last
//! checkpoints of the partitions' previous owners, written before they let the partitions go.

use crate::checkpoint_store::{open_member, OpenStore, StoreConfig};
use crate::error::{Error, Result};

/// A run's store, opening (or open) ahead of the run; dropped, its opening is abandoned (as a
/// process stopped while it opened its store would abandon it).
pub(super) struct PreparedStore {
    /// The run's store (its records under keys of their own: see `KafkaStoreConfig::for_run`).
    store: StoreConfig,
    opening: Option<tokio::task::JoinHandle<Result<OpenStore>>>,
}

impl PreparedStore {
    /// Start opening `store` (a run's).
    pub(super) fn start(store: StoreConfig) -> PreparedStore {
        let opening = {
            let store = store.clone();
            crate::core::spawn(async move { open_member(&store).await })
        };
        PreparedStore {
            store,
            opening: Some(opening),
        }
    }

    /// The run's store and its config, the topic read to its end now.
    pub(super) async fn open(mut self) -> Result<(StoreConfig, OpenStore)> {
        let opened = match self.opening.take() {
            Some(opening) => opening
                .await
                .map_err(|e| Error::runtime("opening the checkpoint store ahead of the run", e))??,
            None => open_member(&self.store).await?,
        };
        opened.read_on().await?;
        Ok((self.store.clone(), opened))
    }
}

impl Drop for PreparedStore {
    fn drop(&mut self) {
        if let Some(opening) = &self.opening {
            opening.abort();
        }
    }
}
