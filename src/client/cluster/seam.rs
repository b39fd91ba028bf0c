//! The seam's calls and values: the traits a cluster implements (admin calls, producers,
//! consumers, group membership) and what passes through them, and what their errors mean.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::TopicPartition;
use crate::error::{Error, Result};
use crate::record::Header;

/// A client call's answer, in librdkafka's error type (its codes say what happened: a fencing, a
/// stale generation, a full queue), whichever cluster answered.
pub type KafkaResult<T> = std::result::Result<T, KafkaError>;

/// What a client is built from: tidegate's settings for its role, then the cluster's address,
/// then the user's pass-through properties, which win (see [`crate::client::client_config`]).
#[derive(Debug, Clone)]
pub struct ClientSpec<'a> {
    /// `bootstrap.servers`.
    pub bootstrap_servers: &'a str,
    /// tidegate's settings for this client's role.
    pub defaults: Vec<(&'a str, String)>,
    /// The user's properties.
    pub properties: &'a BTreeMap<String, String>,
    /// The client's name in the logs ("sink", "state-store").
    pub name: &'static str,
}

impl<'a> ClientSpec<'a> {
    /// A client of `bootstrap_servers` named `name`, with the user's `properties`.
    pub fn new(bootstrap_servers: &'a str, properties: &'a BTreeMap<String, String>, name: &'static str) -> Self {
        ClientSpec {
            bootstrap_servers,
            defaults: Vec::new(),
            properties,
            name,
        }
    }

    /// With tidegate's setting `key` for this role.
    pub fn set(mut self, key: &'a str, value: impl Into<String>) -> Self {
        self.defaults.push((key, value.into()));
        self
    }

    /// librdkafka's config of this client as a producer or an admin client: tidegate's settings,
    /// then the user's properties.
    pub fn client_config(&self) -> rdkafka::config::ClientConfig {
        let defaults: Vec<(&str, &str)> = self.defaults.iter().map(|(k, v)| (*k, v.as_str())).collect();
        crate::client::client_config(self.bootstrap_servers, &defaults, self.properties)
    }

    /// librdkafka's config of this client as a consumer: tidegate's settings, then the user's
    /// properties, the message size fitted to the fetch size (what `validate` checks is what the
    /// cluster creates).
    pub fn consumer_config(&self) -> rdkafka::config::ClientConfig {
        let defaults: Vec<(&str, &str)> = self.defaults.iter().map(|(k, v)| (*k, v.as_str())).collect();
        crate::client::consumer_client_config(self.bootstrap_servers, &defaults, self.properties)
    }

    /// The value the client will use for `key`: the user's, else tidegate's.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(String::as_str).or_else(|| {
            self.defaults
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
        })
    }
}

/// One record to produce, borrowed from its owner.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub topic: &'a str,
    /// `None`: the key (or the partitioner) decides.
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
    /// Milliseconds since the epoch; `None`: the time of the send.
    pub timestamp: Option<i64>,
}

impl<'a> Outgoing<'a> {
    /// A record of `topic` without headers or timestamp.
    pub fn to(topic: &'a str) -> Self {
        Outgoing {
            topic,
            partition: None,
            key: None,
            value: None,
            headers: &[],
            timestamp: None,
        }
    }
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

/// An offset committed to a consumer group inside a transaction (KIP-447: a member's positions;
/// the sink's commit marker, whose `metadata` is its transaction's token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: Option<String>,
}

/// A consumer group member's metadata (group, generation or member epoch, member id), which a
/// transaction's offsets carry so that the broker refuses a member the group has dropped
/// (KIP-447). Opaque: each cluster reads back only its own.
#[derive(Clone)]
pub struct GroupMetadata(pub(crate) Arc<dyn std::any::Any + Send + Sync>);

impl GroupMetadata {
    /// Wrap a cluster's own metadata.
    pub fn new<T: std::any::Any + Send + Sync>(inner: T) -> Self {
        GroupMetadata(Arc::new(inner))
    }

    /// The cluster's own metadata, if it is of type `T`.
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for GroupMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupMetadata")
    }
}

/// A cluster's metadata, as far as tidegate reads it.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// The broker that answered (-1: a bootstrap connection without an id yet).
    pub orig_broker_id: i32,
    /// The brokers' ids.
    pub brokers: Vec<i32>,
    pub topics: Vec<TopicMetadata>,
}

/// A topic's metadata.
#[derive(Debug, Clone)]
pub struct TopicMetadata {
    pub name: String,
    /// Why the broker could not describe it.
    pub error: Option<RDKafkaRespErr>,
    /// Its partitions' ids.
    pub partitions: Vec<i32>,
}

impl Metadata {
    /// `topic`'s partitions, when the broker describes it without an error and with partitions.
    pub fn partitions_of(&self, topic: &str) -> Option<&[i32]> {
        self.topics
            .iter()
            .find(|t| t.name == topic)
            .filter(|t| t.error.is_none() && !t.partitions.is_empty())
            .map(|t| t.partitions.as_slice())
    }
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopicSpec {
    pub name: String,
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication: i32,
    pub configs: Vec<(String, String)>,
}

/// What each producer's deliveries came to, recorded as they are reported (by librdkafka's
/// thread, or the simulated broker).
#[derive(Debug, Default)]
pub struct Deliveries {
    /// The first failed delivery: its message and code.
    first_failure: Mutex<Option<(String, Option<RDKafkaErrorCode>)>>,
    /// Since when deliveries fail, none succeeding since, and the last failure.
    failing: Mutex<Option<(tokio::time::Instant, String)>>,
}

impl Deliveries {
    /// A delivery to `topic`:`partition` came back: `Err` with its error.
    pub fn record(&self, topic: &str, partition: i32, result: std::result::Result<(), &KafkaError>) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => *failing = None,
            Err(e) => {
                let mut first = self.first_failure.lock().unwrap_or_else(|p| p.into_inner());
                if first.is_none() {
                    *first = Some((
                        format!("delivery to {topic}:{partition} failed: {e}"),
                        e.rdkafka_error_code(),
                    ));
                }
                let since = failing.as_ref().map_or_else(crate::core::sim::now, |(since, _)| *since);
                *failing = Some((since, e.to_string()));
            }
        }
    }

    /// The first failed delivery, if any.
    pub fn first_failure(&self) -> Option<(String, Option<RDKafkaErrorCode>)> {
        self.first_failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The last failure, when deliveries have failed for `at_least` and none succeeded since.
    pub fn failing_for(&self, at_least: Duration) -> Option<String> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        failing
            .as_ref()
            .filter(|(since, _)| crate::core::sim::now().saturating_duration_since(*since) >= at_least)
            .map(|(_, e)| e.clone())
    }
}

/// A producer: idempotent, and transactional when its spec names a `transactional.id`.
/// Deliveries are reported to [`Producer::deliveries`] as they come back.
pub trait Producer: Send + Sync {
    /// Hand `record` to the client; `QueueFull` when its queue is full (deliveries make room).
    fn send(&self, record: &Outgoing<'_>) -> KafkaResult<()>;
    /// Hand `records` to the client in order, as many as it takes: how many were taken from the
    /// first, and why the next was not. After `QueueFull` none of the rest was taken, and it
    /// can be sent again once deliveries made room; after another error (a record over
    /// `message.max.bytes`, say) some of the rest may have been taken: the caller fails, and
    /// at least once may repeat them, as it repeats those before.
    fn send_batch(&self, records: &[Outgoing<'_>]) -> (usize, Option<KafkaError>) {
        for (i, record) in records.iter().enumerate() {
            if let Err(e) = self.send(record) {
                return (i, Some(e));
            }
        }
        (records.len(), None)
    }
    /// Wait up to `timeout` until every send is acknowledged (or failed).
    fn flush(&self, timeout: Duration) -> KafkaResult<()>;
    /// What the deliveries came to.
    fn deliveries(&self) -> &Deliveries;
    /// The producer's fatal error (a fencing, say), once it has one: every call fails after it.
    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)>;
    /// The cluster refused this client (credentials, a certificate): the refusal, explained.
    fn refusal(&self, properties: &BTreeMap<String, String>) -> Option<Error>;
    /// The cluster's metadata of `topic` (all topics: `None`), in slices up to `timeout`; a
    /// refused authentication ends the wait at once.
    fn metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
        properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata>;
    /// Fence older producers of the transactional id, and settle a transaction they left open.
    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()>;
    fn begin_transaction(&self) -> KafkaResult<()>;
    /// Commit `offsets` to `group`'s consumer group inside the open transaction.
    fn send_offsets_to_transaction(
        &self,
        offsets: &[GroupOffset],
        group: &GroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()>;
    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()>;
    fn abort_transaction(&self, timeout: Duration) -> KafkaResult<()>;
}

/// A consumer that reads assigned partitions (the checkpoint store's scans, the event-time
/// link's tail) or only asks the cluster (metadata, offsets, committed offsets).
pub trait Consumer: Send + Sync {
    /// Read these partitions from these offsets (replacing any assignment).
    fn assign(&self, partitions: &[(&str, i32, Offset)]) -> KafkaResult<()>;
    /// The next record, waiting up to `timeout`; `Err(PartitionEOF)` at a partition's end when
    /// the spec asked for it (`enable.partition.eof`).
    fn poll(&self, timeout: Duration) -> Option<KafkaResult<Received>>;
    /// Where the consumer stands in an assigned partition (`None`: not known yet).
    fn position(&self, topic: &str, partition: i32) -> KafkaResult<Option<i64>>;
    /// The partition's low and high watermarks (for `read_committed`, the high one is the last
    /// stable offset).
    fn fetch_watermarks(&self, topic: &str, partition: i32, timeout: Duration) -> KafkaResult<(i64, i64)>;
    /// ListOffsets: each element's offset a timestamp, `Beginning` or `End`.
    fn offsets_for_times(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList>;
    /// The offsets the consumer's group committed (with their metadata).
    fn committed_offsets(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList>;
    /// The metadata of the consumer's group, for a transaction's offsets.
    fn group_metadata(&self) -> Option<GroupMetadata>;
    /// The cluster's metadata of `topic` (all topics: `None`), in slices up to `timeout`; a
    /// refused authentication ends the wait at once.
    fn metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
        properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata>;
    /// The ids of the existing ones of `topics` (KIP-516), asked of `broker`.
    fn topic_ids(&self, topics: &[String], broker: i32, timeout: Duration) -> Result<HashMap<String, String>>;
    /// The members of consumer group `group` now: each one's client id and host.
    fn group_members(&self, group: &str, timeout: Duration) -> KafkaResult<Vec<(String, String)>>;
}

/// What the consumer group did to a member.
#[derive(Debug)]
pub enum Change {
    /// This member's whole assignment now (maybe none): under the consumer protocol, what it
    /// held with what was just added.
    Assigned(std::collections::BTreeSet<TopicPartition>),
    /// These partitions are taken back (under the classic protocol, every one it holds): stop
    /// reading them with a final checkpoint, then [`GroupMembership::release`].
    Revoked(std::collections::BTreeSet<TopicPartition>),
    /// The group refused this member for good (say, another process runs as the same static
    /// member): the membership is over.
    Refused(String),
}

/// A boxed future of a membership's next change.
pub type NextChange<'a> = Pin<Box<dyn Future<Output = Option<Change>> + Send + 'a>>;

/// Which of Kafka's group protocols a member speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// KIP-848's: the broker computes the assignment and moves only the partitions that must
    /// move; a member whose assignment stays is not interrupted.
    #[default]
    Consumer,
    /// The classic one, with an eager assignor: every rebalance takes every partition back.
    Classic,
}

impl GroupProtocol {
    /// The protocol `source.properties."group.protocol"` names (librdkafka's values).
    pub fn parse(value: &str) -> Option<GroupProtocol> {
        match value {
            "consumer" => Some(GroupProtocol::Consumer),
            "classic" => Some(GroupProtocol::Classic),
            _ => None,
        }
    }

    /// librdkafka's name of it.
    pub fn name(self) -> &'static str {
        match self {
            GroupProtocol::Consumer => "consumer",
            GroupProtocol::Classic => "classic",
        }
    }
}

/// Where a member's checkpoints take its group metadata, afresh for each transaction: under
/// the consumer protocol its member epoch moves on with every rebalance of the group, even one
/// that leaves its assignment alone, and the broker refuses an older one. Once its assignment
/// is lost, it gives the metadata the assignment came with, which the broker refuses.
#[derive(Clone)]
pub struct GroupMetadataSource(Arc<dyn Fn() -> Option<GroupMetadata> + Send + Sync>);

impl GroupMetadataSource {
    /// A source that asks `current`.
    pub fn new(current: impl Fn() -> Option<GroupMetadata> + Send + Sync + 'static) -> Self {
        GroupMetadataSource(Arc::new(current))
    }

    /// The member's metadata now.
    pub fn current(&self) -> Option<GroupMetadata> {
        (self.0)()
    }
}

impl std::fmt::Debug for GroupMetadataSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupMetadataSource")
    }
}

/// This process's membership of a consumer group that reads nothing itself: its assignment is
/// the set of partitions the job reads. Leaves the group when dropped.
pub trait GroupMembership: Send {
    /// The group's next change; `None` when the membership ended.
    fn next(&mut self) -> NextChange<'_>;
    /// The job stopped reading what was revoked: those partitions may go.
    fn release(&self);
    /// Where the checkpoints' transactions take this member's group metadata (KIP-447).
    fn metadata(&self) -> GroupMetadataSource;
    /// The protocol it speaks now (the classic one where the broker offers no other).
    fn protocol(&self) -> GroupProtocol;
}

/// How a member joins its group.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// The group's id.
    pub group: String,
    /// This member's name (`job.member`), for its client id.
    pub member: String,
    /// Join as a static member of this name (`group.instance.id`: `job.member` when it is set):
    /// a restart within the session keeps the member's partitions.
    pub instance: Option<String>,
    /// The topics it subscribes to.
    pub topics: Vec<String>,
    /// The protocol it asks for (`source.properties."group.protocol"`, else the consumer one).
    pub protocol: GroupProtocol,
    /// The broker's assignor it asks for under the consumer protocol
    /// (`source.properties."group.remote.assignor"`).
    pub assignor: Option<String>,
}

/// A Kafka cluster as tidegate's clients reach it (see the module docs).
pub trait Cluster: Send + Sync {
    /// A producer (transactional when `spec` sets `transactional.id`).
    fn producer(&self, spec: &ClientSpec<'_>) -> Result<Arc<dyn Producer>>;
    /// A consumer (of `spec`'s `group.id`, if any; `isolation.level` as set).
    fn consumer(&self, spec: &ClientSpec<'_>) -> Result<Box<dyn Consumer>>;
    /// Create `topic`; `Ok(Err(code))` when the broker refused it (`TopicAlreadyExists`).
    fn create_topic(
        &self,
        spec: &ClientSpec<'_>,
        topic: &NewTopicSpec,
        timeout: Duration,
    ) -> Result<std::result::Result<(), RDKafkaErrorCode>>;
    /// `topic`'s configs; `Ok(Err(code))` when the broker could not describe it.
    fn topic_configs(
        &self,
        spec: &ClientSpec<'_>,
        topic: &str,
        timeout: Duration,
    ) -> Result<std::result::Result<BTreeMap<String, String>, RDKafkaErrorCode>>;
    /// Join `group`'s consumer group (a member that reads nothing itself).
    fn join_group(&self, spec: &ClientSpec<'_>, group: &GroupSpec) -> Result<Box<dyn GroupMembership>>;
}

/// Whether `code` says another producer took over the transactional id.
pub fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch
    )
}

/// Whether `code` says the consumer group moved on without the member whose metadata a
/// transaction's offsets carried (KIP-447).
pub fn is_stale_member(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::FencedInstanceId
            | RDKafkaErrorCode::RebalanceInProgress
            | RDKafkaErrorCode::StaleMemberEpoch
            | RDKafkaErrorCode::FencedMemberEpoch
    )
}
