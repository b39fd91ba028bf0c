//! Exactly-once delivery for the Kafka sink: one Kafka transaction per checkpoint, committed
//! after the checkpoint is in the state file (two-phase commit, with the state file as the
//! coordinator's log).
//!
//! librdkafka cannot resume a prepared transaction after a crash: `init_transactions` on the same
//! `transactional.id` aborts it (Flink's KafkaSink resumes through reflection; KIP-939 is not in
//! librdkafka). So a restart must be able to tell whether the last checkpoint's transaction
//! committed before the crash. Each transaction carries a commit marker, written atomically with
//! its records (as Kafka Connect's exactly-once sources write their offsets, KIP-618): a
//! transactional offset commit, for the consumer group named like the transactional id, of
//! partition 0 of the first topic the transaction wrote to (the sink's topic, unless `sink.topic`
//! is a template), whose metadata is the transaction's random token. The state file records the
//! token and that topic with the checkpoint. After `init_transactions` has settled any transaction
//! left open, the group's committed metadata either equals the state file's token (committed:
//! resume from this checkpoint) or not (aborted: resume from the checkpoint before it, which the
//! state file keeps for this case).
//!
//! With the Kafka checkpoint store on the sink's cluster, the checkpoint's state records go into
//! the transaction itself ([`Transactions::carry_state`]): a restored checkpoint is then always
//! a committed one, and no marker is written or read.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::TopicPartitionList;
use serde_json::json;
use tracing::{debug, info, warn};

use super::settings::KafkaSinkSettings;
use crate::client::cluster::{self, ClientSpec, Consumer, GroupMetadata, GroupOffset, Producer};
use crate::client::connection_properties;
use crate::client::retry::retried;
use crate::core::{sim, SinkState};
use crate::error::{Error, Result};

/// The transactions of one sink.
pub(super) struct Transactions {
    id: String,
    /// The sink's topic: where the commit marker of a state file that names no topic is.
    topic: String,
    timeout: Duration,
    /// Reads the commit markers (a consumer of the group named like the transactional id; it
    /// never subscribes).
    markers: Box<dyn Consumer>,
    /// Shared with the thread that writes a commit marker (see [`send_marker`]).
    group: GroupMetadata,
    initialised: bool,
    /// The token of the open transaction, and the topic its commit marker goes to (the first it
    /// wrote to: one transaction may span several topics).
    open: Option<(String, String)>,
    /// The checkpoint store writes each checkpoint's state into the transaction: no marker.
    carries_state: bool,
}

impl Transactions {
    pub(super) fn new(settings: &KafkaSinkSettings, id: String) -> Result<Self> {
        let properties = connection_properties(&settings.properties);
        let spec = markers_spec(settings, &id, &properties);
        let markers = cluster::of(&settings.bootstrap_servers).consumer(&spec)?;
        let group = markers
            .group_metadata()
            .ok_or_else(|| Error::runtime("kafka sink", "librdkafka gave no consumer group metadata"))?;
        Ok(Transactions {
            id,
            topic: settings.topic.clone(),
            timeout: settings.flush_timeout,
            markers,
            group,
            initialised: false,
            open: None,
            carries_state: false,
        })
    }

    /// From now on the checkpoint store writes each checkpoint's state records into the
    /// transaction (KIP-618): its commit makes state and output visible together, so no commit
    /// marker is needed.
    pub(super) fn carry_state(&mut self) {
        self.carries_state = true;
    }

    /// The error of a producer that another one fenced.
    pub(super) fn fenced(&self) -> Error {
        // a group member's id ends with its name: two processes of one name fence each other
        let twin = match self.id.split_once('@') {
            Some((_, member)) => format!(
                " (two processes running as group member {member:?} do: give each its own job.member, the host \
                 name by default)"
            ),
            None => String::new(),
        };
        Error::runtime(
            "kafka sink",
            format!(
                "fenced: another tidegate process started the same job (transactional.id {}) and took over \
                 its transactions{twin}, or the broker aborted a transaction that outlived transaction.timeout.ms; \
                 this one stops so that only one writes them",
                self.id
            ),
        )
    }

    fn error(&self, context: &str, e: KafkaError) -> Error {
        match e.rdkafka_error_code() {
            Some(code) if cluster::is_fencing(code) => self.fenced(),
            _ => crate::error::kafka(format!("{context} (transactional.id {})", self.id), e),
        }
    }

    fn init(&mut self, producer: &Arc<dyn Producer>) -> Result<()> {
        if !self.initialised {
            // fences an older producer with this id, and settles a transaction it left open
            producer
                .init_transactions(self.timeout)
                .map_err(|e| self.error("initialising transactions", e))?;
            self.initialised = true;
        }
        Ok(())
    }

    /// Make sure the checkpoint's records go into a transaction.
    pub(super) fn begin_if_needed(&mut self, producer: &Arc<dyn Producer>, topic: &str) -> Result<()> {
        if self.open.is_some() {
            return Ok(());
        }
        self.init(producer)?;
        producer
            .begin_transaction()
            .map_err(|e| self.error("beginning a transaction", e))?;
        self.open = Some((uuid::Uuid::new_v4().to_string(), topic.to_string()));
        Ok(())
    }

    /// Put checkpoint `checkpoint_id`'s commit marker into the open transaction; the state the
    /// checkpoint keeps is its token (`null` when nothing was written since the last commit).
    pub(super) fn prepare(&mut self, producer: &Arc<dyn Producer>, checkpoint_id: u64) -> Result<SinkState> {
        if self.carries_state {
            // no token: the checkpoint that records this state is committed with the output
            return Ok(json!({ "transactional_id": self.id, "transaction": null, "state_in_transaction": true }));
        }
        let Some((token, topic)) = self.open.clone() else {
            return Ok(json!({ "transactional_id": self.id, "transaction": null }));
        };
        let marker = vec![GroupOffset {
            topic: topic.clone(),
            partition: 0,
            offset: checkpoint_id as i64,
            metadata: Some(token.clone()),
        }];
        send_marker(producer, marker, &self.group, self.timeout, checkpoint_id)?
            .map_err(|e| self.error("writing the commit marker into the transaction", e))?;
        debug!(checkpoint = checkpoint_id, transaction = %token, "transaction prepared");
        // the marker's topic only when it is not the sink's: older state files have none
        let mut state = json!({ "transactional_id": self.id, "transaction": token });
        if topic != self.topic {
            state["marker_topic"] = json!(topic);
        }
        Ok(state)
    }

    /// Commit the open transaction (the checkpoint is in the state file).
    pub(super) fn commit(&mut self, producer: &Arc<dyn Producer>, checkpoint_id: u64) -> Result<()> {
        if self.open.is_none() {
            return Ok(());
        }
        producer
            .commit_transaction(self.timeout)
            .map_err(|e| self.error("committing the transaction", e))?;
        self.open = None;
        debug!(checkpoint = checkpoint_id, "transaction committed");
        Ok(())
    }

    /// Before the job starts: settle what a previous run left open, then say whether the state
    /// file's last checkpoint was committed.
    pub(super) fn recover(
        &mut self,
        producer: &Arc<dyn Producer>,
        last: Option<(u64, Option<&SinkState>)>,
    ) -> Result<bool> {
        self.init(producer)?;
        let Some((checkpoint, state)) = last else {
            return Ok(true);
        };
        // no token: the checkpoint wrote nothing after the commit before it, its state was in
        // its transaction (committed, since it was read), or it was written without transactions
        let Some(token) = state.and_then(|s| s.get("transaction")).and_then(|t| t.as_str()) else {
            return Ok(true);
        };
        let topic = state
            .and_then(|s| s.get("marker_topic"))
            .and_then(|t| t.as_str())
            .unwrap_or(&self.topic);
        let marker = self.read_marker(topic)?;
        let done = marker == token;
        debug!(checkpoint, marker = %marker, token, "commit marker read");
        if done {
            info!(checkpoint, transactional_id = %self.id, "the last checkpoint's transaction was committed");
        } else {
            warn!(checkpoint, transactional_id = %self.id, "the last checkpoint's transaction was not committed (aborted now)");
        }
        Ok(done)
    }

    /// The commit marker's metadata (empty when none was committed). A lookup that fails, for
    /// the whole request or for the partition, is retried up to the timeout and then an error:
    /// read as "not committed", it would write the checkpoint's records again.
    fn read_marker(&self, topic: &str) -> Result<String> {
        let what = format!("reading the commit marker of {topic}:0 (transactional.id {})", self.id);
        retried(&what, self.timeout, |left| {
            let mut wanted = TopicPartitionList::new();
            wanted.add_partition(topic, 0);
            let committed = self
                .markers
                .committed_offsets(wanted, left)
                .map_err(|e| self.error("reading the commit markers", e))?;
            let marker = committed
                .find_partition(topic, 0)
                .ok_or_else(|| Error::runtime(&what, "the broker's answer does not list the partition"))?;
            marker
                .error()
                .map_err(|e| crate::error::kafka(format!("{what}: the partition's answer"), e))?;
            Ok(marker.metadata().to_string())
        })
    }

    /// Abort a transaction still open at the end (nothing should be in it).
    pub(super) fn abort_open(&mut self, producer: &Arc<dyn Producer>) {
        if self.open.take().is_some() {
            if let Err(e) = producer.abort_transaction(self.timeout) {
                warn!(error = %e, "aborting the open transaction failed; the broker aborts it after transaction.timeout.ms");
            }
        }
    }
}

/// The consumer that reads the commit markers: of the group named like the transactional id
/// `id`, with the sink's connection `properties`.
pub(crate) fn markers_spec<'a>(
    settings: &'a KafkaSinkSettings,
    id: &str,
    properties: &'a std::collections::BTreeMap<String, String>,
) -> ClientSpec<'a> {
    ClientSpec::new(&settings.bootstrap_servers, properties, "sink-markers")
        .set("group.id", id.to_string())
        .set("client.id", "tidegate-sink-markers")
        .set("enable.auto.commit", "false")
        // committed offsets of pending transactions are not returned until they settle
        .set("isolation.level", "read_committed")
}

/// The transactions, for the one thread that uses them at a time (the sink's, or the checkpoint
/// store's between a prepare and its commit); a panic elsewhere leaves them usable.
pub(super) fn lock(transactions: &Mutex<Transactions>) -> MutexGuard<'_, Transactions> {
    transactions.lock().unwrap_or_else(|p| p.into_inner())
}

/// How much longer than its timeout writing a commit marker may take before the job gives up.
const STUCK_MARGIN: Duration = Duration::from_secs(10);

/// A group member's checkpoint positions, committed to its consumer group inside the open
/// transaction with its group metadata (KIP-447): the broker refuses them when the group has
/// moved on without this member, and the transaction cannot commit.
pub(super) fn send_group_offsets(
    producer: &Arc<dyn Producer>,
    fence: &crate::client::exactly_once::GroupFence,
    timeout: Duration,
) -> Result<()> {
    let offsets = fence
        .offsets
        .iter()
        .map(|(topic, partition, offset)| GroupOffset {
            topic: topic.clone(),
            partition: *partition,
            offset: *offset,
            metadata: None,
        })
        .collect();
    send_marker(producer, offsets, &fence.metadata, timeout, 0)?.map_err(|e| {
        let dropped = e.rdkafka_error_code().is_some_and(cluster::is_stale_member);
        let why = if dropped {
            ": the consumer group moved on without this member (its partitions are another's now), so its \
             transaction is refused (KIP-447) and aborted"
        } else {
            ""
        };
        crate::error::kafka(
            format!("committing the checkpoint's positions to the job's consumer group in its transaction{why}"),
            e,
        )
    })
}

/// `send_offsets_to_transaction`, watched: librdkafka does not honour its timeout when the
/// consumer group's coordinator dies mid-call (confluentinc/librdkafka issues 5456 and 5511; the
/// cluster tier's leader-kill test met it about one run in three), and would wait forever. The call
/// runs on a thread of its own; past the timeout and a margin the job stops with an error naming
/// the cause, so that a restart (which fences the stuck producer and aborts its transaction)
/// resumes from the last checkpoint with nothing lost or repeated. The stuck thread keeps the
/// producer alive until the process exits.
fn send_marker(
    producer: &Arc<dyn Producer>,
    marker: Vec<GroupOffset>,
    group: &GroupMetadata,
    timeout: Duration,
    checkpoint_id: u64,
) -> Result<std::result::Result<(), KafkaError>> {
    if sim::active() {
        // the simulated cluster answers at once, on the simulation's one thread
        return Ok(producer.send_offsets_to_transaction(&marker, group, timeout));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (producer, group) = (Arc::clone(producer), group.clone());
    std::thread::Builder::new()
        .name("tidegate-txn-marker".to_string())
        .spawn(move || {
            let _ = tx.send(producer.send_offsets_to_transaction(&marker, &group, timeout));
        })
        .map_err(|e| Error::runtime("kafka sink", format!("starting the commit-marker thread: {e}")))?;
    rx.recv_timeout(timeout + STUCK_MARGIN).map_err(|_| {
        Error::runtime(
            "kafka sink",
            format!(
                "checkpoint {checkpoint_id}'s commit marker was not written within {}: the sink cluster's group \
                 coordinator did not answer (librdkafka waits forever when that broker dies, \
                 confluentinc/librdkafka#5456); stopping, so that a restart resumes from the last checkpoint \
                 with nothing lost or repeated",
                humantime::format_duration(timeout + STUCK_MARGIN)
            ),
        )
    })
}
