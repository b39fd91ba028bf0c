//! The `[checkpoint]` section: its raw keys, the store they choose (`checkpoint.store`) and the
//! Kafka store's settings, validated against the job and what its source and sink offer.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::layout;
use crate::connector::JobConfig;
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

/// `[checkpoint]`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCheckpoint {
    /// The state file. Without it the job keeps no state and always starts from scratch.
    pub path: Option<String>,
    /// Time between checkpoints; a restart after a crash replays at most this much.
    #[serde(default = "five_seconds")]
    pub interval: String,
    /// Where checkpoints are kept: "file" (default: the state file at `checkpoint.path`) or
    /// "kafka": records keyed by split in a compacted topic (`checkpoint.topic`), written in one
    /// Kafka transaction per checkpoint, so a restart anywhere, with an empty working directory,
    /// resumes exactly.
    pub store: Option<String>,
    /// With `store = "kafka"`: the compacted topic of the state records, shared by jobs (keys
    /// start with `job.name`, then `#<index>` with several `job.instance`s, `~<generation>` after
    /// a change of their count, or `@<member>~<run>` with `job.coordination = "group"`); created
    /// with `cleanup.policy=compact` when missing. A renamed job cannot be told from a new one: it
    /// finds no state and starts from scratch, its old records left under the old name. Default
    /// "tidegate-state".
    pub topic: Option<String>,
    /// With `store = "kafka"`: the cluster of the state topic. Default: the Kafka source's
    /// `bootstrap_servers`, else the Kafka sink's.
    pub bootstrap_servers: Option<String>,
    /// With `store = "kafka"`: librdkafka properties of the store's clients (security, TLS,
    /// SASL). Default: the connection properties (`security.*`, `sasl.*`, `ssl.*`, …) of the
    /// source or sink whose `bootstrap_servers` it uses. The store sets `isolation.level`,
    /// `enable.partition.eof`, `transactional.id`, `enable.idempotence`, `acks` and
    /// `transaction.timeout.ms` itself: they are refused here.
    pub properties: Option<std::collections::BTreeMap<String, crate::connector::values::PropertyValue>>,
}

impl Default for RawCheckpoint {
    fn default() -> Self {
        RawCheckpoint {
            path: None,
            interval: five_seconds(),
            store: None,
            topic: None,
            bootstrap_servers: None,
            properties: None,
        }
    }
}

fn five_seconds() -> String {
    "5s".to_string()
}

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
    /// Which section the properties come from, for messages (`checkpoint`, or the section the
    /// connection properties are inherited from).
    pub properties_of: &'static str,
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
    /// [`super::kafka::KafkaCheckpointStore::open`]).
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

/// What the store may take from the job's source and sink (the job assembly says, from their
/// configs): a cluster to default to, and an exactly-once Kafka sink, whose transactions carry the
/// checkpoints when it writes to the store's cluster.
pub struct Neighbours<'a> {
    /// A Kafka source's cluster and properties.
    pub source_cluster: Option<(&'a str, &'a BTreeMap<String, String>)>,
    /// A Kafka sink's cluster and properties.
    pub sink_cluster: Option<(&'a str, &'a BTreeMap<String, String>)>,
    /// An exactly-once Kafka sink's cluster (its properties are `sink_cluster`'s).
    pub exactly_once_sink: Option<&'a str>,
}

/// Validate `[checkpoint]`'s store keys against the job and what its source and sink offer.
pub fn validate(raw: &RawCheckpoint, job: &JobConfig, neighbours: &Neighbours<'_>) -> Result<StoreConfig> {
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
            let inherited = neighbours
                .source_cluster
                .map(|c| ("source", c))
                .or(neighbours.sink_cluster.map(|c| ("sink", c)));
            let (bootstrap_servers, cluster_of, inherited_properties) = match (&raw.bootstrap_servers, inherited) {
                (Some(b), _) => (b.clone(), "checkpoint", BTreeMap::new()),
                (None, Some((section, (b, p)))) => (b.to_string(), section, crate::client::connection_properties(p)),
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
            let (properties, properties_of) = match &raw.properties {
                Some(p) => (
                    crate::connector::values::properties("checkpoint", p.clone())?,
                    "checkpoint",
                ),
                None => (inherited_properties, cluster_of),
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
            let (sink_transactional_id, sink_properties) = match (neighbours.exactly_once_sink, neighbours.sink_cluster)
            {
                (Some(servers), Some((_, properties))) if servers == bootstrap_servers => (
                    Some(crate::client::exactly_once::transactional_id(
                        &job.name,
                        job.member.as_deref(),
                        job.instance,
                    )),
                    crate::client::connection_properties(properties),
                ),
                _ => (None, BTreeMap::new()),
            };
            Ok(StoreConfig::Kafka(Box::new(KafkaStoreConfig {
                bootstrap_servers,
                cluster_of,
                topic,
                properties,
                properties_of,
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
