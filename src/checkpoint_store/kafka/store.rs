//! The Kafka checkpoint store's state (its config, its producer, where it stands, what its last
//! read of the topic found) and its one write: a transaction of state records, or none of them;
//! the errors that name the store's topic.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tracing::{debug, warn};

use super::super::config::KafkaStoreConfig;
use super::super::layout::Layout;
use super::super::scan::{scan, Scan};
use crate::client::cluster::{self, GroupMetadataSource, Outgoing, Producer};
use crate::client::exactly_once::SinkTransactionSlot;
use crate::core::{sim, StateError};
use crate::error::{kafka, Error, Result};

/// How long a call to the cluster may take (metadata, a transaction, watermarks).
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);

/// A job's checkpoints in a compacted Kafka topic.
pub struct KafkaCheckpointStore {
    pub(super) config: KafkaStoreConfig,
    /// Its transactions one at a time.
    pub(super) producer: Mutex<Arc<dyn Producer>>,
    /// Where this instance stands among the job's generations of instances (`None`: its state
    /// cannot be placed, see [`KafkaCheckpointStore::layout`]).
    pub(super) layout: Mutex<Option<Layout>>,
    /// What the scan at the opening found, until the next write or reset: the daemon's look
    /// before the sink starts and the job's restore see the same checkpoints (a second scan
    /// could find one the first missed, after the sink had started afresh).
    pub(super) scanned: Mutex<Option<Scan>>,
    /// `--reset-state` ran: the job starts over, whatever other owners of its name hold.
    pub(super) reset: std::sync::atomic::AtomicBool,
    /// The layout was read again after every transactional id this instance writes under was
    /// taken (see [`KafkaCheckpointStore::verify_layout`]).
    pub(super) verified: std::sync::atomic::AtomicBool,
    /// The exactly-once sink's transactions, when the checkpoints travel in them.
    pub(super) in_sink: Option<SinkTransactionSlot>,
    /// A group member's metadata, proving its membership in each checkpoint's transaction.
    pub(super) group: std::sync::OnceLock<GroupMetadataSource>,
}

impl std::fmt::Debug for KafkaCheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCheckpointStore")
            .field("config", &self.config)
            .finish()
    }
}

impl KafkaCheckpointStore {
    /// The last scan's records, scanning again after a write or a reset.
    pub(super) fn scanned(&self) -> Result<std::sync::MutexGuard<'_, Option<Scan>>> {
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
    pub(super) fn transaction(&self, records: &[(String, Option<Vec<u8>>)]) -> Result<()> {
        let producer = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        transaction(&self.config, producer.as_ref(), records)
    }
}

/// Write `records` (`None`: a tombstone) to the store's topic in one transaction of `producer`
/// (its transactions initialised), or none of them.
pub(super) fn transaction(
    c: &KafkaStoreConfig,
    producer: &dyn Producer,
    records: &[(String, Option<Vec<u8>>)],
) -> Result<()> {
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

/// `checkpoint` (a Kafka source's, as JSON) as `owner`'s state records.
pub(super) fn stored_records(
    config: &KafkaStoreConfig,
    owner: &str,
    checkpoint: serde_json::Value,
) -> Result<Vec<(String, Option<Vec<u8>>)>> {
    let malformed = |what: &str| {
        state_error(
            config,
            &super::super::records::checkpoint_key(owner),
            StateError::Malformed(what.into()),
        )
    };
    let split_ids = checkpoint["splits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            Some(crate::kafka::KafkaPartitionSplit::id_of(
                s["split"]["topic"].as_str()?,
                i32::try_from(s["split"]["partition"].as_i64()?).ok()?,
            ))
        })
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| malformed("a split without its topic and partition"))?;
    let stored = crate::core::StoredCheckpoint {
        checkpoint_id: checkpoint["checkpoint_id"].as_u64().unwrap_or(0),
        value: checkpoint,
        split_ids,
    };
    let records = super::super::records::records_of(owner, &config.job, &stored)
        .map_err(|e| state_error(config, &super::super::records::checkpoint_key(owner), e))?;
    Ok(records.into_iter().map(|(k, v)| (k, Some(v))).collect())
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

/// A record of the store's state that cannot be read or written, named by its key.
pub(super) fn state_error(config: &KafkaStoreConfig, key: &str, source: StateError) -> Error {
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
            properties_of: "checkpoint",
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
