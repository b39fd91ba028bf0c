//! A group member's runs' checkpoint stores: each run's records under keys of their own, and the
//! next run's store opened while the member waits for its assignment: its producers' transactions initialised and the state topic read, which was most
//! of a new member's time from its assignment to its first record (1.4 of 1.6 s on the test
//! broker). Once the assignment comes, the store reads on from there, so that it holds the last
//! checkpoints of the partitions' previous owners, written before they let the partitions go.

use std::time::Duration;

use tracing::warn;

use crate::checkpoint_store::{open_member, OpenStore, StoreConfig};
use crate::core::sim;
use crate::error::Result;

/// How long a store opened ahead may wait for its run: older, it is opened again (a member dealt
/// nothing for long: its producers' transactional ids could have expired on the broker, its
/// `transactional.id.expiration.ms`, 7 days by default).
const KEEP_FOR: Duration = Duration::from_secs(3600);

/// A run's store, opening (or open) ahead of the run; dropped, its opening is abandoned (as a
/// process stopped while it opened its store would abandon it).
pub(super) struct PreparedStore {
    /// The run's store (its records under keys of their own: see `KafkaStoreConfig::for_run`).
    store: StoreConfig,
    opening: Option<tokio::task::JoinHandle<Result<OpenStore>>>,
    started: tokio::time::Instant,
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
            started: sim::now(),
        }
    }

    /// The run's store and its config, the topic read to its end now. Where the opening ahead
    /// failed (the cluster out of reach a moment, say), or is older than [`KEEP_FOR`], the store
    /// opens now, as it would have without it.
    pub(super) async fn open(mut self) -> Result<(StoreConfig, OpenStore)> {
        let ahead = match self.opening.take() {
            Some(opening) => match opening.await {
                Ok(Ok(opened)) => Some(opened),
                Ok(Err(e)) => {
                    warn!(error = %e, "opening the checkpoint store ahead of the run failed; opening it now");
                    None
                }
                Err(e) => {
                    warn!(error = %e, "opening the checkpoint store ahead of the run ended; opening it now");
                    None
                }
            },
            None => None,
        };
        let opened = match ahead {
            Some(opened) if sim::now().saturating_duration_since(self.started) < KEEP_FOR => opened,
            _ => open_member(&self.store).await?,
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

/// The store of one run of this member's job: its records under keys of their own (see
/// `KafkaStoreConfig::for_run`).
pub(super) fn run_store(store: &StoreConfig) -> StoreConfig {
    let mut store = store.clone();
    if let StoreConfig::Kafka(k) = &mut store {
        **k = (**k).clone().for_run(&run_id());
    }
    store
}

/// A name for one run of this member's job, unique among its runs: the time it began, in
/// milliseconds (hexadecimal), one later than the run before at least.
fn run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    if let Some(n) = sim::unique() {
        // the same for every run of a seed
        return format!("{:x}", sim::wall_millis().max(0) as u64 * 1000 + n);
    }
    let now = sim::wall_millis().max(0) as u64;
    // one thread (the group loop) asks
    let id = now.max(LAST.load(Ordering::SeqCst) + 1);
    LAST.store(id, Ordering::SeqCst);
    format!("{id:x}")
}
