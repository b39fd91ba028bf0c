//! A simulated Kafka cluster for the deterministic simulation: topics of partitioned logs
//! (`log`), idempotent and transactional producers with epochs that fence a zombie and a
//! transaction timeout, `read_committed` reads bounded by the last stable offset, compacted
//! topics, consumer groups with generations, session timeouts and offsets committed inside
//! transactions (refused for a member the group dropped, KIP-447) (`group`), and injected request
//! errors. It answers every call at once, on the simulation's one thread and virtual clock;
//! [`clients`] puts tidegate's client seam ([`crate::client::cluster`]) over it.
//!
//! Calls of a process the simulation killed change nothing and fail, so what a killed process
//! would still do when its tasks are dropped (leave its group, abort) never reaches the cluster.

pub(crate) mod clients;
mod group;
mod incremental;
mod log;
mod membership;
mod reader;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

pub(crate) use clients::SimCluster;
use group::Group;
use log::{Kind, Log};

use crate::core::sim::{self, SplitMix64};
use crate::record::Header;

/// How often a request fails with an injected, retriable error (out of 1,000), by kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    /// Metadata and offset lookups.
    pub(crate) lookups: u64,
    /// A transaction's commit or abort, the outcome then unknown to the caller (committed or
    /// not, by a second draw).
    pub(crate) commits: u64,
    /// Offsets sent to a transaction.
    pub(crate) offsets: u64,
}

/// A simulated cluster (see the module docs).
pub(crate) struct SimKafka {
    broker: Mutex<Broker>,
}

/// A topic.
struct Topic {
    id: String,
    configs: BTreeMap<String, String>,
    logs: Vec<Log>,
}

/// A transactional id's producer and its transaction.
struct Transactional {
    pid: i64,
    epoch: i16,
    timeout: Duration,
    open: Option<OpenTransaction>,
}

/// A transaction with something in it.
#[derive(Default)]
struct OpenTransaction {
    /// When its first partition (or offsets) joined it: the timeout counts from there.
    since: Option<tokio::time::Instant>,
    partitions: BTreeSet<(String, i32)>,
    /// Offsets to commit to consumer groups with it.
    offsets: Vec<(String, String, i32, i64, String)>,
}

pub(crate) struct Broker {
    topics: BTreeMap<String, Topic>,
    topic_ids: u64,
    transactional: BTreeMap<String, Transactional>,
    producer_ids: i64,
    groups: BTreeMap<String, Group>,
    faults: Faults,
    rng: SplitMix64,
    /// What the cluster did, for a failure's report.
    pub(crate) events: Vec<String>,
    /// The timestamp of the last input record written.
    input_clock: i64,
    /// The largest record produced to each topic (refused ones too).
    pub(crate) largest: BTreeMap<String, usize>,
    /// The session timeout of consumer-protocol members (the broker's
    /// `group.consumer.session.timeout.ms`).
    pub(crate) group_session_timeout: std::time::Duration,
}

impl SimKafka {
    /// An empty cluster whose injected errors are drawn from `seed`.
    pub(crate) fn new(seed: u64, faults: Faults) -> Arc<SimKafka> {
        Arc::new(SimKafka {
            broker: Mutex::new(Broker {
                topics: BTreeMap::new(),
                topic_ids: 0,
                transactional: BTreeMap::new(),
                producer_ids: 0,
                groups: BTreeMap::new(),
                faults,
                rng: SplitMix64(seed),
                events: Vec::new(),
                input_clock: 1_767_225_600_000,
                largest: BTreeMap::new(),
                group_session_timeout: std::time::Duration::from_secs(45),
            }),
        })
    }

    /// The broker, its timed-out transactions aborted and its groups' expired members gone.
    pub(crate) fn broker(&self) -> MutexGuard<'_, Broker> {
        let mut b = self.broker.lock().unwrap_or_else(|p| p.into_inner());
        b.expire();
        b
    }
}

/// The split reader of a Kafka source of `settings` reading the simulated cluster.
pub(crate) fn split_reader(
    kafka: &Arc<SimKafka>,
    settings: &crate::kafka::KafkaSourceSettings,
) -> Box<dyn crate::core::SplitReader<Element = crate::record::Record, Split = crate::kafka::KafkaPartitionSplit>> {
    let committed = settings.properties.get("isolation.level").map(String::as_str) != Some("read_uncommitted");
    Box::new(reader::SimSplitReader::new(Arc::clone(kafka), committed))
}

/// An error as librdkafka reports a broker's answer.
pub(super) fn error(code: RDKafkaErrorCode) -> KafkaError {
    KafkaError::MessageProduction(code)
}

impl Broker {
    fn now() -> tokio::time::Instant {
        sim::now()
    }

    pub(super) fn note(&mut self, event: String) {
        tracing::debug!(target: "tidegate::simulation::kafka", "{event}");
        self.events.push(event);
    }

    /// Whether an injected error hits this request (`per_mille` of them).
    fn fault(&mut self, per_mille: u64) -> bool {
        per_mille > 0 && self.rng.chance(per_mille)
    }

    /// Whether an injected error hits this metadata or offset lookup.
    pub(super) fn lookup_fault(&mut self) -> bool {
        let per_mille = self.faults.lookups;
        self.fault(per_mille)
    }

    /// Abort every transaction older than its timeout, its producer fenced (its epoch bumped),
    /// and drop the groups' members whose session expired.
    fn expire(&mut self) {
        let now = Self::now();
        let expired: Vec<String> = self
            .transactional
            .iter()
            .filter(|(_, t)| {
                t.open
                    .as_ref()
                    .and_then(|o| o.since)
                    .is_some_and(|since| now.saturating_duration_since(since) > t.timeout)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.end_transaction(&id, false);
            if let Some(t) = self.transactional.get_mut(&id) {
                t.epoch += 1;
            }
            self.note(format!("transaction of {id} timed out: aborted, its producer fenced"));
        }
        let names: Vec<String> = self.groups.keys().cloned().collect();
        for name in names {
            let Some(group) = self.groups.get_mut(&name) else {
                continue;
            };
            let generation = group.generation;
            let events = group.maintain(now);
            let incremental = group.protocol == crate::client::cluster::GroupProtocol::Consumer;
            if (!incremental && group.generation != generation) || (incremental && group.targeted != group.generation) {
                // the rebalance completed: every partition of the members' topics, dealt
                let topics: BTreeSet<String> = group.members.values().flat_map(|m| m.topics.clone()).collect();
                let partitions: BTreeSet<crate::kafka::TopicPartition> = topics
                    .iter()
                    .flat_map(|t| {
                        let count = self.topics.get(t).map_or(0, |t| t.logs.len() as i32);
                        (0..count).map(move |p| (t.clone(), p))
                    })
                    .collect();
                if let Some(group) = self.groups.get_mut(&name) {
                    if incremental {
                        group.retarget(&partitions);
                    } else {
                        group.assign(&partitions);
                    }
                }
            }
            for e in events {
                self.note(format!("group {name}: {e}"));
            }
        }
    }

    /// Create a topic; false if it exists.
    pub(crate) fn create_topic(&mut self, name: &str, partitions: i32, configs: BTreeMap<String, String>) -> bool {
        if self.topics.contains_key(name) {
            return false;
        }
        self.topic_ids += 1;
        let id = format!("simulated-topic-{}", self.topic_ids);
        self.topics.insert(
            name.to_string(),
            Topic {
                id,
                configs,
                logs: vec![Log::default(); partitions.max(1) as usize],
            },
        );
        self.note(format!("topic {name} created with {partitions} partitions"));
        true
    }

    /// Delete a topic (its consumer groups' committed offsets stay, as Kafka's do).
    pub(crate) fn delete_topic(&mut self, name: &str) {
        if self.topics.remove(name).is_some() {
            self.note(format!("topic {name} deleted"));
        }
    }

    fn log(&self, topic: &str, partition: i32) -> Option<&Log> {
        self.topics.get(topic)?.logs.get(usize::try_from(partition).ok()?)
    }

    fn log_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Log> {
        self.topics
            .get_mut(topic)?
            .logs
            .get_mut(usize::try_from(partition).ok()?)
    }

    /// A topic's partition count.
    pub(crate) fn partitions(&self, topic: &str) -> Option<i32> {
        self.topics.get(topic).map(|t| t.logs.len() as i32)
    }

    /// The values of a partition's committed records (and its records outside transactions), in
    /// order: what a `read_committed` consumer reads once every open transaction has ended (a
    /// killed producer's is aborted when it times out).
    pub(crate) fn committed_values(&self, topic: &str, partition: i32) -> Vec<Option<Vec<u8>>> {
        self.log(topic, partition)
            .map(|log| log.committed().map(|e| e.value.clone()).collect())
            .unwrap_or_default()
    }

    /// Write the simulation's input records (their values) to `topic`'s `partition`: as they
    /// are, or in one transaction, committed or aborted. Their timestamps.
    pub(crate) fn write_input(
        &mut self,
        topic: &str,
        partition: i32,
        values: Vec<Vec<u8>>,
        transactional: bool,
        commit: bool,
    ) -> Vec<i64> {
        const WRITER: &str = "simulation-input";
        let producer = transactional.then(|| self.init_transactions(WRITER, Duration::from_secs(3600)));
        let mut stamps = Vec::new();
        for value in values {
            self.input_clock += 1;
            stamps.push(self.input_clock);
            let record = Append {
                topic,
                partition: Some(partition),
                key: None,
                value: Some(&value),
                headers: &[],
                timestamp: Some(self.input_clock),
            };
            let transaction = producer.map(|(pid, epoch)| (WRITER, pid, epoch));
            let _ = self.produce(&record, transaction, &mut 0);
        }
        if transactional {
            self.end_transaction(WRITER, commit);
        }
        stamps
    }

    /// A topic's log, a line per entry, for a failure's report.
    pub(crate) fn dump(&self, topic: &str) -> Vec<String> {
        let Some(t) = self.topics.get(topic) else {
            return Vec::new();
        };
        let pids: BTreeMap<i64, &String> = self.transactional.iter().map(|(id, t)| (t.pid, id)).collect();
        let mut lines = Vec::new();
        for (p, log) in t.logs.iter().enumerate() {
            for e in &log.entries {
                let kind = match e.kind {
                    Kind::Pending { pid } => format!("pending ({})", pids.get(&pid).map_or("?", |s| s.as_str())),
                    other => format!("{other:?}").to_lowercase(),
                };
                let key = e.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                lines.push(format!("{topic}:{p}@{} {kind} {key}", e.offset));
            }
        }
        lines
    }

    /// Compact every compacted topic below its last stable offsets.
    pub(crate) fn compact(&mut self) {
        for (name, topic) in self.topics.iter_mut() {
            if topic
                .configs
                .get("cleanup.policy")
                .is_some_and(|p| p.contains("compact"))
            {
                for log in &mut topic.logs {
                    log.compact(i64::MAX);
                }
                tracing::debug!(target: "tidegate::simulation::kafka", "topic {name} compacted");
            }
        }
    }

    /// End `id`'s open transaction: its records committed (and its offsets with them) or
    /// aborted, a marker in each of its partitions.
    fn end_transaction(&mut self, id: &str, commit: bool) {
        let Some(t) = self.transactional.get_mut(id) else {
            return;
        };
        let (pid, Some(open)) = (t.pid, t.open.take()) else {
            return;
        };
        let now = crate::core::sim::wall_millis();
        for (topic, partition) in &open.partitions {
            if let Some(log) = self.log_mut(topic, *partition) {
                log.end_transaction(pid, commit, now);
            }
        }
        if commit {
            for (group, topic, partition, offset, metadata) in open.offsets {
                self.groups
                    .entry(group)
                    .or_default()
                    .committed
                    .insert((topic, partition), (offset, metadata));
            }
        }
    }

    /// The current producer of `id`: `Err` when `(pid, epoch)` is not it (fenced).
    fn current(&self, id: &str, pid: i64, epoch: i16) -> Result<(), KafkaError> {
        match self.transactional.get(id) {
            Some(t) if t.pid == pid && t.epoch == epoch => Ok(()),
            _ => Err(error(RDKafkaErrorCode::ProducerFenced)),
        }
    }
}

/// A record to append.
pub(super) struct Append<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: Option<i32>,
    pub(super) key: Option<&'a [u8]>,
    pub(super) value: Option<&'a [u8]>,
    pub(super) headers: &'a [Header],
    pub(super) timestamp: Option<i64>,
}

impl Broker {
    /// Produce a record, into transaction `transaction` (`(id, pid, epoch)`) if given.
    pub(super) fn produce(
        &mut self,
        record: &Append<'_>,
        transaction: Option<(&str, i64, i16)>,
        round_robin: &mut u32,
    ) -> Result<(i32, i64), KafkaError> {
        let count = self
            .partitions(record.topic)
            .ok_or_else(|| error(RDKafkaErrorCode::UnknownTopicOrPartition))?;
        // librdkafka's default message.max.bytes, which a producer meets before the broker's
        // 1,048,588 (a topic may set a lower max.message.bytes)
        let limit = self
            .topics
            .get(record.topic)
            .and_then(|t| t.configs.get("max.message.bytes"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000usize);
        let size = record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len);
        let largest = self.largest.entry(record.topic.to_string()).or_default();
        *largest = (*largest).max(size);
        if size > limit {
            self.note(format!(
                "a record of {size} bytes refused by {} (max.message.bytes {limit})",
                record.topic
            ));
            return Err(error(RDKafkaErrorCode::MessageSizeTooLarge));
        }
        let partition = match (record.partition, record.key) {
            (Some(p), _) => p,
            (None, Some(k)) => {
                (crate::kafka::split::java_string_hash(&String::from_utf8_lossy(k)) & 0x7fff_ffff) % count
            }
            (None, None) => {
                *round_robin = round_robin.wrapping_add(1);
                (*round_robin % count as u32) as i32
            }
        };
        if partition < 0 || partition >= count {
            return Err(error(RDKafkaErrorCode::UnknownPartition));
        }
        let timestamp = record.timestamp.unwrap_or_else(crate::core::sim::wall_millis);
        let kind = match transaction {
            Some((id, pid, epoch)) => {
                self.current(id, pid, epoch)?;
                let now = Self::now();
                let t = self
                    .transactional
                    .get_mut(id)
                    .ok_or_else(|| error(RDKafkaErrorCode::ProducerFenced))?;
                let open = t.open.get_or_insert_with(OpenTransaction::default);
                open.since.get_or_insert(now);
                open.partitions.insert((record.topic.to_string(), partition));
                Kind::Pending { pid }
            }
            None => Kind::Plain,
        };
        let log = self
            .log_mut(record.topic, partition)
            .ok_or_else(|| error(RDKafkaErrorCode::UnknownPartition))?;
        let offset = log.append(
            timestamp,
            record.key.map(<[u8]>::to_vec),
            record.value.map(<[u8]>::to_vec),
            record.headers.to_vec(),
            kind,
        );
        Ok((partition, offset))
    }

    /// `init_transactions`: a transaction `id` left open is aborted, and its producer fenced.
    fn init_transactions(&mut self, id: &str, timeout: Duration) -> (i64, i16) {
        if self.transactional.get(id).is_some_and(|t| t.open.is_some()) {
            self.end_transaction(id, false);
            self.note(format!("init_transactions of {id}: the transaction left open aborted"));
        }
        let next_pid = self.producer_ids + 1;
        let t = self.transactional.entry(id.to_string()).or_insert(Transactional {
            pid: next_pid,
            epoch: -1,
            timeout,
            open: None,
        });
        if t.pid == next_pid {
            self.producer_ids = next_pid;
        }
        t.epoch += 1;
        t.timeout = timeout;
        (t.pid, t.epoch)
    }

    /// Offsets committed to `group` with the transaction of `id`, for a member described by
    /// `member` (`(generation, member id)`, KIP-447) or a plain group (the sink's commit marker).
    fn send_offsets(
        &mut self,
        (id, pid, epoch): (&str, i64, i16),
        group: &str,
        member: Option<(i32, &str)>,
        offsets: &[crate::client::cluster::GroupOffset],
    ) -> Result<(), KafkaError> {
        self.current(id, pid, epoch)?;
        let per_mille = self.faults.offsets;
        if self.fault(per_mille) {
            return Err(error(RDKafkaErrorCode::CoordinatorLoadInProgress));
        }
        if let Some((generation, member_id)) = member {
            let g = self.groups.get(group);
            match g {
                Some(g) if !g.members.contains_key(member_id) => return Err(error(RDKafkaErrorCode::UnknownMemberId)),
                // the consumer protocol: the member's epoch exactly (Kafka answers a stale one
                // of a transactional commit with ILLEGAL_GENERATION)
                Some(g) if g.protocol == crate::client::cluster::GroupProtocol::Consumer => {
                    if g.members[member_id].epoch != generation {
                        return Err(error(RDKafkaErrorCode::IllegalGeneration));
                    }
                }
                Some(g) if g.generation != generation => return Err(error(RDKafkaErrorCode::IllegalGeneration)),
                None => return Err(error(RDKafkaErrorCode::UnknownMemberId)),
                Some(_) => {}
            }
        }
        let now = Self::now();
        let t = self
            .transactional
            .get_mut(id)
            .ok_or_else(|| error(RDKafkaErrorCode::ProducerFenced))?;
        let open = t.open.get_or_insert_with(OpenTransaction::default);
        open.since.get_or_insert(now);
        for o in offsets {
            open.offsets.push((
                group.to_string(),
                o.topic.clone(),
                o.partition,
                o.offset,
                o.metadata.clone().unwrap_or_default(),
            ));
        }
        Ok(())
    }

    /// Commit or abort `id`'s transaction. An injected fault fails the call after the outcome
    /// was decided (committed or not): the caller cannot tell which.
    fn finish(&mut self, (id, pid, epoch): (&str, i64, i16), commit: bool) -> Result<(), KafkaError> {
        self.current(id, pid, epoch)?;
        let per_mille = self.faults.commits;
        let failed = self.fault(per_mille);
        let commit = commit && !(failed && self.rng.chance(500));
        self.end_transaction(id, commit);
        if failed {
            self.note(format!(
                "{} of {id}'s transaction answered with an error (it was {})",
                if commit { "the commit" } else { "the end" },
                if commit { "committed" } else { "aborted" }
            ));
            // the outcome unknown to the caller; a commit that failed this way leaves the
            // producer needing an abort, which finds nothing open
            return Err(error(RDKafkaErrorCode::RequestTimedOut));
        }
        Ok(())
    }
}
