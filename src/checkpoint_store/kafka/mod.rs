//! The Kafka checkpoint store: each checkpoint as records keyed by split in a compacted topic
//! (see [`super::records`]), written in one Kafka transaction by a producer whose
//! transactional id is the job's, so that a second process of the same job fences the first and
//! a checkpoint interrupted by a crash is aborted (restore reads `read_committed`). All records go
//! to partition 0, so a restore reads one partition to its end (the high watermark, waiting out
//! other producers' open transactions: see [`super::scan`]) and keeps the latest value of each
//! of the job's keys. Nothing is deleted: a split finished long ago is rewritten with every
//! checkpoint, and compaction only drops values a later one of the same key supersedes.
//! With an exactly-once Kafka sink on the same cluster, the checkpoint's records are written by
//! the sink's producer inside the transaction that holds the checkpoint's output (KIP-618, see
//! [`crate::client::exactly_once::StateInTransaction`]); the store's own producer then only
//! writes `--reset-state`'s tombstones.
//!
//! Here: the opening, the [`CheckpointStore`] it is to the job, and the read-only looks at the
//! topic; the store's state and its transaction in `store`, its generations in `generations`,
//! a group member's part in `members`.

mod generations;
pub mod members;
mod producer;
mod store;
mod topic;

use std::sync::{Arc, Mutex};

use tracing::{debug, info};

use super::config::KafkaStoreConfig;
use super::layout;
use super::records::{assemble, checkpoint_key, records_of};
use super::scan::{scan, scan_async};
use crate::client::exactly_once::{GroupFence, SinkTransactionSlot};
use crate::core::{sim, CheckpointStore, StateError, StoredCheckpoint};
use crate::error::{Error, Result};
use generations::layout_of;
use members::TORN_READS;
pub use members::{group_checkpoints, group_checkpoints_of_open_store};
use producer::producer_of;
use store::state_error;
pub use store::KafkaCheckpointStore;
use topic::admin_call;
pub use topic::topic_exists;

impl KafkaCheckpointStore {
    /// Reach the cluster, create the topic if missing (or check the existing one is compacted),
    /// take over the job's transactional id (a transaction a crashed process left open is
    /// aborted, and an older process still running is fenced), and find where this instance
    /// stands: with a changed `job.instance.count`, the instances of the count before are fenced
    /// before their last checkpoints are read (see [`super::layout`]). State the store cannot
    /// place (damaged, or of two counts at once) is reported by [`CheckpointStore::load`], so
    /// that `--reset-state` can still start the job over.
    pub fn open(mut config: KafkaStoreConfig) -> Result<Self> {
        let exists = topic_exists(&config)?;
        admin_call(&config, exists)?;
        let mut producer = producer_of(&config)?;
        let found = scan(&config)?;
        if config.member.is_some() {
            let store = Self::group_member(config, producer, found);
            if store.remove_superseded_runs() {
                *store.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(scan(&store.config)?);
            }
            store.read_untorn_blocking()?;
            return Ok(store);
        }
        let layout = layout_of(&config, &found).ok();
        if let Some(layout) = layout.as_ref().filter(|l| l.generation > 0) {
            config.owner = layout.owner.clone();
            if config.sink_transactional_id.is_some() {
                config.sink_transactional_id = Some(layout::sink_transactional_id(
                    &config.job,
                    layout.generation,
                    config.instance,
                ));
            }
            producer = producer_of(&config)?;
        }
        let in_sink = config.sink_transactional_id.clone().map(SinkTransactionSlot::new);
        let store = KafkaCheckpointStore {
            config,
            producer: Mutex::new(producer),
            layout: Mutex::new(layout),
            scanned: Mutex::new(Some(found)),
            reset: std::sync::atomic::AtomicBool::new(false),
            verified: std::sync::atomic::AtomicBool::new(false),
            in_sink,
            group: std::sync::OnceLock::new(),
        };
        store.settle_reshare()?;
        let layout = store.layout.lock().unwrap_or_else(|p| p.into_inner()).clone();
        info!(
            topic = %store.config.topic,
            bootstrap = %store.config.bootstrap_servers,
            owner = %store.config.owner,
            generation = layout.as_ref().map(|l| l.generation),
            reshare_from = layout.as_ref().map_or(0, |l| l.reshare.len()),
            in_sink_transactions = store.config.sink_transactional_id.is_some(),
            "checkpoint store: Kafka"
        );
        Ok(store)
    }

    /// A group member's store (`job.coordination = "group"`), as [`Self::open`] opens it, with
    /// the topic's reads waiting on the async runtime (on the virtual clock, under a simulation):
    /// a member that starts while another's transaction holds the topic waits for it there.
    pub async fn open_member(config: KafkaStoreConfig) -> Result<Arc<Self>> {
        let (config, producer) = crate::core::unblock(move || -> Result<_> {
            let exists = topic_exists(&config)?;
            admin_call(&config, exists)?;
            let producer = producer_of(&config)?;
            Ok((config, producer))
        })
        .await??;
        let found = scan_async(&config).await?;
        let store = Arc::new(Self::group_member(config, producer, found));
        store.read_untorn().await?;
        let removing = Arc::clone(&store);
        if crate::core::unblock(move || removing.remove_superseded_runs()).await? {
            store.read_on().await?;
        }
        Ok(store)
    }

    /// Read the topic again, on from where the last read ended (see [`scan_async`]): a member's
    /// store opened ahead of its assignment then holds what was checkpointed since, the last
    /// checkpoints of the partitions' previous owners among them.
    pub async fn read_on(&self) -> Result<()> {
        *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(scan_async(&self.config).await?);
        self.read_untorn().await
    }
}

impl KafkaCheckpointStore {
    /// `tidegate state set`: this instance's last checkpoint (as [`CheckpointStore::load`] gave
    /// it), changed by hand, written back under its keys in one transaction of the store's
    /// producer, whose transactional ids the opening took over (a process of the job still
    /// running is fenced by that).
    pub fn replace(&self, checkpoint: serde_json::Value) -> Result<()> {
        *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let records = store::stored_records(&self.config, &self.config.owner, checkpoint)?;
        self.transaction(&records)
    }
}

impl CheckpointStore for KafkaCheckpointStore {
    fn location(&self) -> String {
        format!(
            "kafka topic {} at {}, keys {}/…",
            self.config.topic, self.config.bootstrap_servers, self.config.owner
        )
    }

    /// What the scan at the opening found, until a write or a reset (one restore, one answer).
    /// Only this instance's records are read (and must be sound).
    fn load(&self) -> Result<Option<serde_json::Value>> {
        if self.config.member.is_some() {
            // a member's own last checkpoint is one part of what it restores
            return Ok(None);
        }
        self.layout()?;
        let scanned = self.scanned()?;
        let records = scanned.as_ref().map(|s| s.of(&self.config.owner)).unwrap_or_default();
        assemble(&self.config.owner, &self.config.job, &records).map_err(|(key, e)| state_error(&self.config, &key, e))
    }

    /// The last checkpoints of the instances of the count before, when this instance has none
    /// of its own in the newest generation (none after `--reset-state`).
    /// A group member: the last checkpoints of every member (its own included), oldest first.
    fn load_reshare(&self) -> Result<Vec<serde_json::Value>> {
        if self.config.member.is_some() {
            if self.reset.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(Vec::new());
            }
            return self.group_checkpoints();
        }
        let layout = self.layout()?;
        if self.reset.load(std::sync::atomic::Ordering::Relaxed) || layout.reshare.is_empty() {
            return Ok(Vec::new());
        }
        if self.load()?.is_some() {
            return Ok(Vec::new());
        }
        let scanned = self.scanned()?;
        let Some(found) = scanned.as_ref() else {
            return Ok(Vec::new());
        };
        layout
            .reshare
            .iter()
            .map(|m| {
                assemble(&m.owner, &self.config.job, &found.of(&m.owner))
                    .map_err(|(key, e)| state_error(&self.config, &key, e))?
                    .ok_or_else(|| {
                        state_error(
                            &self.config,
                            &checkpoint_key(&m.owner),
                            StateError::Truncated("the checkpoint of an instance of the count before vanished".into()),
                        )
                    })
            })
            .collect()
    }

    fn write(&self, checkpoint: &StoredCheckpoint) -> Result<()> {
        *self.scanned.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // after a change of the instance count, the job record says its generation and the one it
        // was cut from: a sibling without a checkpoint yet cuts its share from the same
        let stamped;
        self.verify_layout()?;
        let layout = self.layout()?;
        let checkpoint = match layout.base {
            Some(base) => {
                let mut c = checkpoint.clone();
                if let Some(fields) = c.value.as_object_mut() {
                    fields.insert("generation".into(), layout.generation.into());
                    fields.insert("base".into(), base.into());
                }
                stamped = c;
                &stamped
            }
            None => checkpoint,
        };
        let records = records_of(&self.config.owner, &self.config.job, checkpoint)
            .map_err(|e| state_error(&self.config, &checkpoint_key(&self.config.owner), e))?;
        if let Some(slot) = &self.in_sink {
            let sink = slot.writer().ok_or_else(|| {
                Error::runtime(
                    "kafka checkpoint store",
                    "the exactly-once sink that carries the checkpoints was not attached (a job built without \
                     the store's sink slot, crate::assembly::build::sink_of)",
                )
            })?;
            let started = sim::now();
            // a member's metadata as of this checkpoint; none at all is not an unfenced commit
            let fence = match self.group.get() {
                Some(source) => Some(GroupFence::of(
                    &source.current().ok_or_else(|| {
                        Error::runtime(
                            "kafka checkpoint store",
                            "the consumer group gave no member metadata to fence the checkpoint with",
                        )
                    })?,
                    &checkpoint.value,
                )),
                None => None,
            };
            sink.write_in_transaction(&self.config.topic, &records, fence.as_ref())?;
            debug!(
                records = records.len(),
                flushed_ms = sim::now().saturating_duration_since(started).as_millis() as u64,
                "state records in the sink's transaction"
            );
            return Ok(());
        }
        let records: Vec<(String, Option<Vec<u8>>)> = records.into_iter().map(|(k, v)| (k, Some(v))).collect();
        self.transaction(&records)
    }

    fn commits_with_sink(&self) -> bool {
        self.in_sink.is_some()
    }

    fn parts_may_overlap(&self) -> bool {
        self.config.member.is_some()
    }
}

/// The job's last checkpoint, read without taking over its transactional id (`state show`,
/// `plan`: a running job is not fenced); `None` when the topic or the instance's records are
/// missing. A group member's job: every member run's last checkpoint merged into one, each split
/// from the run a restore takes it from (see [`members::merged`]), whichever member wrote it.
pub fn read_only(config: &KafkaStoreConfig) -> Result<Option<serde_json::Value>> {
    if config.member.is_some() {
        let runs = read_runs(config)?;
        return Ok(members::merged(&runs.into_iter().map(|(_, v)| v).collect::<Vec<_>>()));
    }
    if !topic_exists(config)? {
        return Ok(None);
    }
    let found = scan(config)?;
    let owner = layout_of(config, &found)?.owner;
    assemble(&owner, &config.job, &found.of(&owner)).map_err(|(key, e)| state_error(config, &key, e))
}

/// A group member's job: every member run's last checkpoint, `(owner, checkpoint)`, oldest
/// first, read without taking over any transactional id.
pub fn read_runs(config: &KafkaStoreConfig) -> Result<Vec<(String, serde_json::Value)>> {
    if !topic_exists(config)? {
        return Ok(Vec::new());
    }
    let mut found = scan(config)?;
    for _ in 0..TORN_READS {
        if !members::cuts_a_member(&config.job, &found) {
            break;
        }
        found = scan(config)?;
    }
    Ok(members::heads_in(config, &found)?
        .into_iter()
        .map(|(_, owner, v)| (owner, v))
        .collect())
}

/// Every client the Kafka store makes, as it makes it (for `validate`): the admin client of its
/// topic, its transactional producers (its own, and the sink's when the checkpoints travel in
/// the sink's transactions) and its reader.
pub(crate) fn probes(config: &KafkaStoreConfig) -> Vec<crate::client::probe::Probe> {
    use crate::client::probe::Probe;
    let section = config.properties_of;
    let own = config.own_transactional_id();
    let mut probes = vec![
        Probe::admin(section, &topic::admin_spec(config)),
        Probe::producer(section, &producer::producer_spec(config, &own, &config.properties)),
        Probe::consumer(
            section,
            &super::scan::reader_spec(config, &config.owner, "read_committed"),
        ),
    ];
    if let Some(id) = &config.sink_transactional_id {
        probes.push(Probe::producer(
            "sink",
            &producer::producer_spec(config, id, &config.sink_properties),
        ));
    }
    probes
}

/// Read a group job's state topic ahead of its member's first run, up to its committed end now
/// (nothing when the topic does not exist): that run's read continues from there.
pub async fn read_ahead(config: &KafkaStoreConfig) -> Result<()> {
    let probe = config.clone();
    if !crate::core::unblock(move || topic_exists(&probe)).await?? {
        return Ok(());
    }
    super::scan::read_ahead(config).await
}
