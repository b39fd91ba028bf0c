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
//! [`super::StateInTransaction`]); the store's own producer then only writes `--reset-state`'s
//! tombstones.

mod generations;
pub mod members;
mod producer;
mod topic;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tracing::{debug, info, warn};

use super::layout::{self, Layout, Member};
use super::records::{
    assemble, base_of, check, checkpoint_key, claim_key, claim_record, records_of, sink_to_recover, written_by,
};
use super::scan::{reader, scan, scan_async, Scan};
use super::{KafkaStoreConfig, SinkTransactionSlot};
use crate::client::cluster::{self, ClientSpec, GroupMetadata, Outgoing, Producer};
use crate::core::{sim, CheckpointStore, StateError, StoredCheckpoint};
use crate::error::{kafka, Error, Result};
use generations::layout_of;
pub use members::group_checkpoints;
use producer::{producer_of, transactional_producer};
use topic::admin_call;
pub use topic::topic_exists;

/// How long a call to the cluster may take (metadata, a transaction, watermarks).
const TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a group member reads the topic again when a read cut another member's
/// checkpoint (each read cuts at most the checkpoints in flight at its end).
const TORN_READS: usize = 20;

/// A job's checkpoints in a compacted Kafka topic.
pub struct KafkaCheckpointStore {
    config: KafkaStoreConfig,
    /// Its transactions one at a time.
    producer: Mutex<Arc<dyn Producer>>,
    /// Where this instance stands among the job's generations of instances (`None`: its state
    /// cannot be placed, see [`KafkaCheckpointStore::layout`]).
    layout: Mutex<Option<Layout>>,
    /// What the scan at the opening found, until the next write or reset: the daemon's look
    /// before the sink starts and the job's restore see the same checkpoints (a second scan
    /// could find one the first missed, after the sink had started afresh).
    scanned: Mutex<Option<Scan>>,
    /// `--reset-state` ran: the job starts over, whatever other owners of its name hold.
    reset: std::sync::atomic::AtomicBool,
    /// The layout was read again after every transactional id this instance writes under was
    /// taken (see [`KafkaCheckpointStore::verify_layout`]).
    verified: std::sync::atomic::AtomicBool,
    /// The exactly-once sink's transactions, when the checkpoints travel in them.
    in_sink: Option<SinkTransactionSlot>,
    /// A group member's metadata, proving its membership in each checkpoint's transaction.
    group: std::sync::OnceLock<GroupMetadata>,
}

impl std::fmt::Debug for KafkaCheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCheckpointStore")
            .field("config", &self.config)
            .finish()
    }
}

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
            *store.scanned.lock().unwrap_or_else(|p| p.into_inner()) = Some(scan_async(&store.config).await?);
            store.read_untorn().await?;
        }
        Ok(store)
    }

    /// Where this instance stands; the error the store's state gives when it cannot be placed.
    fn layout(&self) -> Result<Layout> {
        if let Some(layout) = self.layout.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(layout);
        }
        let scanned = self.scanned()?;
        match scanned.as_ref() {
            Some(found) => layout_of(&self.config, found),
            None => Err(Error::runtime("kafka checkpoint store", "the topic was not read")),
        }
    }

    /// The last scan's records, scanning again after a write or a reset.
    fn scanned(&self) -> Result<std::sync::MutexGuard<'_, Option<Scan>>> {
        let mut scanned = self.scanned.lock().unwrap_or_else(|p| p.into_inner());
        if scanned.is_none() {
            *scanned = Some(scan(&self.config)?);
        }
        Ok(scanned)
    }

    /// Where the exactly-once sink attaches itself, when the checkpoints travel in its
    /// transactions.
    pub fn sink_slot(&self) -> Option<SinkTransactionSlot> {
        self.in_sink.clone()
    }

    /// Write `records` (`None`: a tombstone) in one transaction, or none of them.
    fn transaction(&self, records: &[(String, Option<Vec<u8>>)]) -> Result<()> {
        let c = &self.config;
        let producer = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        let fail = |what: &str, e: KafkaError| store_error(c, what, e);
        let started = sim::now();
        producer
            .begin_transaction()
            .map_err(|e| fail("beginning a transaction", e))?;
        let mut committing = false;
        let result = (|| {
            for (key, value) in records {
                let mut record = Outgoing::to(&c.topic);
                record.partition = Some(0);
                record.key = Some(key.as_bytes());
                record.value = value.as_deref();
                loop {
                    match producer.send(&record) {
                        Ok(()) => break,
                        Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                            // deliveries make room
                            let _ = producer.flush(Duration::from_millis(50));
                        }
                        Err(e) => return Err(fail(&format!("writing key {key}"), e)),
                    }
                }
            }
            // every record acknowledged
            let left = TIMEOUT.saturating_sub(sim::now().saturating_duration_since(started));
            producer
                .flush(left)
                .map_err(|e| fail("flushing the state records", e))?;
            let flushed = sim::now().saturating_duration_since(started);
            crate::core::failpoint::hit("kafka_store.before_commit");
            committing = true;
            producer.commit_transaction(TIMEOUT).map_err(|e| {
                fail(
                    "committing the state records (whether they were committed is unknown: the next start \
                     restores whichever checkpoint the topic holds, and the sink's recovery follows it)",
                    e,
                )
            })?;
            debug!(
                records = records.len(),
                flushed_ms = flushed.as_millis() as u64,
                committed_ms = sim::now().saturating_duration_since(started).as_millis() as u64,
                "state records committed"
            );
            Ok(())
        })();
        if result.is_err() {
            if let Err(e) = producer.abort_transaction(TIMEOUT) {
                if committing {
                    warn!(topic = %c.topic, error = %e, "aborting the checkpoint store's transaction after a failed commit failed too: whether the checkpoint was committed is unknown; the next start settles it (it restores whichever checkpoint is committed, and the sink's recovery follows it)");
                } else {
                    warn!(topic = %c.topic, error = %e, "aborting the checkpoint store's transaction failed; the broker aborts it after transaction.timeout.ms, or the next start of the job does");
                }
            }
        }
        result
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
                     the store's sink slot, crate::assembly::sink_of)",
                )
            })?;
            let started = sim::now();
            let fence = self.group.get().map(|g| super::GroupFence::of(g, &checkpoint.value));
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

/// A failed step of the store's transaction, in context.
/// A fencing error (another producer took over the transactional id) says so.
fn store_error(c: &KafkaStoreConfig, what: &str, e: KafkaError) -> Error {
    let fenced = if e.rdkafka_error_code().is_some_and(cluster::is_fencing) {
        format!(
            "; another process of job {} took over the store's transactional id: a second process fences the first",
            c.job
        )
    } else {
        String::new()
    };
    kafka(
        format!(
            "{what} in checkpoint topic {} at {} (transactional.id {}{fenced})",
            c.topic,
            c.bootstrap_servers,
            c.transactional_id(),
        ),
        e,
    )
}

/// The job's last checkpoint, read without taking over its transactional id (`state show`,
/// `plan`: a running job is not fenced); `None` when the topic or the instance's records are
/// missing. A group member's job: every member run's last checkpoint merged into one, each split
/// from the newest run that holds it (as a restore takes it), whichever member wrote it.
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

fn state_error(config: &KafkaStoreConfig, key: &str, source: StateError) -> Error {
    Error::State {
        path: PathBuf::from(format!(
            "kafka topic {} at {}, key {key}",
            config.topic, config.bootstrap_servers
        )),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    use super::{store_error, KafkaStoreConfig};

    #[test]
    fn only_a_fencing_error_says_another_process_took_over() {
        let c = KafkaStoreConfig {
            bootstrap_servers: "127.0.0.1:1".into(),
            cluster_of: "checkpoint",
            topic: "state".into(),
            properties: BTreeMap::new(),
            job: "j".into(),
            instance: crate::core::Instance::default(),
            member: None,
            owner: "j".into(),
            sink_transactional_id: None,
            sink_properties: BTreeMap::new(),
        };
        let fenced = store_error(
            &c,
            "writing",
            KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced),
        );
        assert!(fenced.to_string().contains("fences the first"), "{fenced}");
        let other = store_error(
            &c,
            "writing",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert!(!other.to_string().contains("fences"), "{other}");
        assert!(
            other.to_string().contains("transactional.id tidegate.state.j"),
            "{other}"
        );
    }
}
