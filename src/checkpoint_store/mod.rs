//! Where a job keeps its checkpoints (`checkpoint.store`): the state file (`"file"`, the default,
//! [`crate::core::StateStore`]) or records keyed by split in a compacted Kafka topic (`"kafka"`,
//! [`kafka::KafkaCheckpointStore`]). This module validates the choice and opens the store.

pub mod kafka;
pub mod layout;
pub mod records;
mod scan;

pub use scan::RESTORE_WAIT;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::config::raw::RawCheckpoint;
use crate::config::Config;
use crate::connector::{JobConfig, SinkConfig, SourceConfig};
use crate::core::{CheckpointStore, StateStore};
use crate::error::{Error, Result};

/// The default `checkpoint.topic`.
pub const DEFAULT_TOPIC: &str = "tidegate-state";

/// librdkafka properties the Kafka store sets itself: how it reads (committed records, an event at
/// the partition's end) and how it writes (one transaction per checkpoint, every replica, a
/// transaction a crashed process left open aborted within a minute, before a restore gives up
/// waiting for it).
const RESERVED_PROPERTIES: &[&str] = &[
    "isolation.level",
    "enable.partition.eof",
    "transactional.id",
    "enable.idempotence",
    "acks",
    "transaction.timeout.ms",
];

/// `checkpoint.store`, validated.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The state file at `checkpoint.path` (or `--state`); none: no state kept.
    File,
    /// A compacted Kafka topic.
    Kafka(Box<KafkaStoreConfig>),
}

/// The Kafka store's settings.
#[derive(Debug, Clone)]
pub struct KafkaStoreConfig {
    /// The cluster (`checkpoint.bootstrap_servers`, or the source's or sink's).
    pub bootstrap_servers: String,
    /// Which section the cluster comes from, for messages (`checkpoint`, `source`, `sink`).
    pub cluster_of: &'static str,
    /// The compacted topic.
    pub topic: String,
    /// librdkafka properties of the store's clients.
    pub properties: BTreeMap<String, String>,
    /// `job.name`.
    pub job: String,
    /// `job.instance`: which share of the job this process has, of how many.
    pub instance: crate::core::Instance,
    /// `job.member` with `job.coordination = "group"`: the owner is `<job>@<member>`, and the
    /// splits a member restores are each from the newest checkpoint of any member that holds it.
    pub member: Option<String>,
    /// The key prefix of this instance's records: the job's name, with the instance when the job
    /// runs as several (`<job>#<index>`), and the generation after a change of the instance count
    /// ([`layout::owner_of`]; the first generation's until the store is open).
    pub owner: String,
    /// The transactional id of the job's exactly-once Kafka sink when it writes to the store's
    /// cluster: the checkpoints then travel in the sink's transactions (KIP-618).
    pub sink_transactional_id: Option<String>,
    /// The sink's connection properties, with which the store takes over the sink's
    /// transactional id (the sink's principal writes the state records then).
    pub sink_properties: BTreeMap<String, String>,
}

impl KafkaStoreConfig {
    /// The transactional id of the store's producer: one per job (and instance), so a second
    /// process of the same job fences the first. `tidegate.state.<owner>`: an exactly-once
    /// sink's id is `tidegate-<job.name>…`, whatever the name, so the two never meet. When the
    /// checkpoints travel in the sink's transactions, the sink's id: opening the store then
    /// aborts a transaction a crashed process left open (its output and its state together),
    /// so the restore does not wait for the broker to time it out.
    pub fn transactional_id(&self) -> String {
        match &self.sink_transactional_id {
            Some(id) => id.clone(),
            None => self.own_transactional_id(),
        }
    }

    /// The store's own transactional id, `tidegate.state.<owner>`: its producer's when the sink
    /// does not carry the checkpoints (and fenced when it does, see
    /// [`kafka::KafkaCheckpointStore::open`]).
    pub fn own_transactional_id(&self) -> String {
        match &self.member {
            // one id per member, whichever run of it writes
            Some(member) => format!("tidegate.state.{}", layout::member_owner(&self.job, member)),
            None => format!("tidegate.state.{}", self.owner),
        }
    }

    /// A group member's store for its run on a new assignment: its records under keys of their
    /// own, `<job>@<member>~<run>`, so that no later run overwrites the checkpoint that last
    /// held a split another member has not checkpointed yet (see [`layout::member_run_owner`]).
    pub fn for_run(mut self, run: &str) -> Self {
        if let Some(member) = &self.member {
            self.owner = layout::member_run_owner(&self.job, member, run);
        }
        self
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
    pub metadata: crate::client::cluster::GroupMetadata,
    /// `(topic, partition, next offset)` of each split the checkpoint holds.
    pub offsets: Vec<(String, i32, i64)>,
}

impl GroupFence {
    /// The fence of checkpoint `value` (a Kafka source's: each split's topic, partition and
    /// next offset) for the member of `metadata`.
    pub fn of(metadata: &crate::client::cluster::GroupMetadata, value: &serde_json::Value) -> GroupFence {
        // the readers' splits, and the enumerator's not yet handed to a reader (a checkpoint
        // that holds any split carries the fence: an older position of it must not win)
        let mut offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let listed = [&value["enumerator"]["splits"], &value["splits"]];
        // a partition gone from the cluster has no offset to commit
        for s in listed
            .into_iter()
            .filter_map(|l| l.as_array())
            .flatten()
            .filter(|s| s["removed"] != true)
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

/// Validate `[checkpoint]`'s store keys against the job, source and sink they serve.
pub fn validate(raw: &RawCheckpoint, job: &JobConfig, source: &SourceConfig, sink: &SinkConfig) -> Result<StoreConfig> {
    let kafka_only = [
        ("checkpoint.topic", raw.topic.is_some()),
        ("checkpoint.bootstrap_servers", raw.bootstrap_servers.is_some()),
        ("checkpoint.properties", raw.properties.is_some()),
    ];
    match raw.store.as_deref().unwrap_or("file") {
        "file" => {
            if let Some((key, _)) = kafka_only.iter().find(|(_, set)| *set) {
                return Err(Error::config(*key, "only used with checkpoint.store = \"kafka\""));
            }
            Ok(StoreConfig::File)
        }
        "kafka" => {
            if raw.path.is_some() {
                return Err(Error::config(
                    "checkpoint.path",
                    "not used with checkpoint.store = \"kafka\" (the state is in checkpoint.topic): remove it",
                ));
            }
            if let Some(c) = job.name.chars().find(|c| matches!(c, '/' | '#' | '@')) {
                return Err(Error::config(
                    "job.name",
                    format!(
                        "must not contain '{c}' with checkpoint.store = \"kafka\" (the name starts the keys of the \
                         job's state records, '#' marks an instance, '@' a group member and '/' ends the name)"
                    ),
                ));
            }
            let source_cluster = match source {
                SourceConfig::Kafka(k) => Some((&k.settings.bootstrap_servers, &k.settings.properties)),
                _ => None,
            };
            let sink_cluster = match sink {
                SinkConfig::Kafka(k) => Some((&k.settings.bootstrap_servers, &k.settings.properties)),
                _ => None,
            };
            let inherited = source_cluster
                .map(|c| ("source", c))
                .or(sink_cluster.map(|c| ("sink", c)));
            let (bootstrap_servers, cluster_of, inherited_properties) = match (&raw.bootstrap_servers, inherited) {
                (Some(b), _) => (b.clone(), "checkpoint", BTreeMap::new()),
                (None, Some((section, (b, p)))) => (b.clone(), section, crate::client::connection_properties(p)),
                (None, None) => {
                    return Err(Error::config(
                        "checkpoint.bootstrap_servers",
                        "required with checkpoint.store = \"kafka\" when neither the source nor the sink is Kafka",
                    ))
                }
            };
            if bootstrap_servers.trim().is_empty() {
                return Err(Error::config("checkpoint.bootstrap_servers", "must not be empty"));
            }
            let properties = match &raw.properties {
                Some(p) => crate::connector::values::properties("checkpoint", p.clone())?,
                None => inherited_properties,
            };
            if let Some(key) = RESERVED_PROPERTIES.iter().find(|k| properties.contains_key(**k)) {
                return Err(Error::config(
                    format!("checkpoint.properties.\"{key}\""),
                    "is set by the Kafka checkpoint store (its restore and its transactions rely on it); remove it",
                ));
            }
            let topic = raw.topic.clone().unwrap_or_else(|| DEFAULT_TOPIC.into());
            if topic.trim().is_empty() {
                return Err(Error::config("checkpoint.topic", "must not be empty"));
            }
            let owner = match &job.member {
                Some(member) => layout::member_owner(&job.name, member),
                None => layout::owner_of(&job.name, 0, job.instance),
            };
            // an exactly-once sink on the same cluster carries the checkpoints in its transactions
            let (sink_transactional_id, sink_properties) = match sink {
                SinkConfig::Kafka(k)
                    if k.settings.delivery == crate::sink::kafka::Delivery::ExactlyOnce
                        && k.settings.bootstrap_servers == bootstrap_servers =>
                {
                    (
                        Some(crate::sink::kafka::config::transactional_id(job)),
                        crate::client::connection_properties(&k.settings.properties),
                    )
                }
                _ => (None, BTreeMap::new()),
            };
            Ok(StoreConfig::Kafka(Box::new(KafkaStoreConfig {
                bootstrap_servers,
                cluster_of,
                topic,
                properties,
                job: job.name.clone(),
                instance: job.instance,
                member: job.member.clone(),
                owner,
                sink_transactional_id,
                sink_properties,
            })))
        }
        other => Err(Error::config(
            "checkpoint.store",
            format!("unknown store {other:?}; one of file, kafka"),
        )),
    }
}

/// An open store of the job's checkpoints, and how `--reset-state` clears it.
pub struct OpenStore {
    /// The store (`None`: a file store without a path keeps no state).
    pub store: Option<Arc<dyn CheckpointStore>>,
    kafka: Option<Arc<kafka::KafkaCheckpointStore>>,
}

impl OpenStore {
    /// A group member's run: every checkpoint's transaction carries the member's group
    /// metadata (KIP-447), so a member the group dropped cannot commit.
    pub fn fence_with_group(&self, metadata: crate::client::cluster::GroupMetadata) {
        if let Some(k) = &self.kafka {
            k.fence_with_group(metadata);
        }
    }

    /// Where the exactly-once Kafka sink attaches itself when the checkpoints travel in its
    /// transactions (`None`: they do not). Pass it to [`crate::daemon::sink_of`].
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

    /// `--reset-state`: the state file moved aside by `move_aside`; the Kafka store's records of
    /// this job replaced by tombstones, in one transaction.
    pub fn reset(&self, move_aside: impl FnOnce() -> Result<()>) -> Result<()> {
        match &self.kafka {
            Some(k) => k.reset(),
            None => move_aside(),
        }
    }
}

/// Open the configured store; `state` (`--state`) overrides `checkpoint.path`.
pub fn open(config: &Config, state: Option<&Path>) -> Result<OpenStore> {
    match &config.checkpoint.store {
        StoreConfig::File => {
            let path = state.map(Path::to_path_buf).or_else(|| config.checkpoint.path.clone());
            let store = path.map(StateStore::open).transpose()?;
            Ok(OpenStore {
                store: store.map(|s| Arc::new(s) as Arc<dyn CheckpointStore>),
                kafka: None,
            })
        }
        StoreConfig::Kafka(k) => {
            if let Some(path) = state {
                return Err(Error::config(
                    "--state",
                    format!(
                        "names a state file ({}), but this job keeps its checkpoints in Kafka (checkpoint.store = \"kafka\", topic {})",
                        path.display(),
                        k.topic
                    ),
                ));
            }
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
pub async fn open_member(config: &Config) -> Result<OpenStore> {
    let StoreConfig::Kafka(k) = &config.checkpoint.store else {
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

/// `tidegate state show FILE`, or `tidegate state show --config JOB` (the configured store).
pub fn show(file: Option<&Path>, config: Option<&Path>, sets: &[String]) -> Result<()> {
    let config = match (file, config) {
        (Some(file), _) => return crate::daemon::show_state(file),
        (None, Some(config)) => crate::config::load(config, sets)?,
        (None, None) => return Err(Error::config("state show", "give a state file or --config")),
    };
    let (location, state) = match &config.checkpoint.store {
        StoreConfig::File => match &config.checkpoint.path {
            Some(path) => return crate::daemon::show_state(path),
            None => {
                return Err(Error::config(
                    "checkpoint.path",
                    "the job keeps no state (no checkpoint.path, checkpoint.store = \"file\")",
                ))
            }
        },
        StoreConfig::Kafka(k) if k.member.is_some() => {
            // a group's job: every member run's last checkpoint, and what a restore makes of them
            let runs = kafka::read_runs(k)?;
            let merged = kafka::members::merged(&runs.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>());
            let state = merged.map(|merged| {
                serde_json::json!({
                    "group": crate::coordination::group_id(&k.job),
                    "runs": runs
                        .into_iter()
                        .map(|(owner, checkpoint)| serde_json::json!({"run": owner, "checkpoint": checkpoint}))
                        .collect::<Vec<_>>(),
                    "merged": merged,
                })
            });
            (
                format!(
                    "kafka topic {} at {}, job {}'s members",
                    k.topic, k.bootstrap_servers, k.job
                ),
                state,
            )
        }
        StoreConfig::Kafka(k) => (
            format!("kafka topic {} at {}, job {}", k.topic, k.bootstrap_servers, k.owner),
            kafka::read_only(k)?,
        ),
    };
    let Some(state) = state else {
        return Err(Error::State {
            path: location.into(),
            source: crate::error::StateError::Unreadable(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no checkpoint of this job in the topic",
            )),
        });
    };
    let text = serde_json::to_string_pretty(&state).unwrap_or_default();
    // a closed pipe (`state show | head`) ends the output; it is not a failure
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), format!("{text}\n").as_bytes());
    Ok(())
}
