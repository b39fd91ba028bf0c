//! tidegate's client seam ([`crate::client::cluster`]) over the simulated cluster: producers,
//! consumers, topic administration and group memberships, each belonging to the simulated
//! process that made it (a killed process's calls fail and change nothing).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use super::{error, group, incremental, Append, Broker, SimKafka};
use crate::client::cluster::{
    Change, ClientSpec, Cluster, Consumer, Deliveries, GroupMembership, GroupMetadata, GroupMetadataSource,
    GroupOffset, GroupProtocol, GroupSpec, KafkaResult, Metadata, NewTopicSpec, NextChange, Producer, Received,
    TopicMetadata,
};
use crate::core::sim;
use crate::error::{Error, Result};
use crate::kafka::TopicPartition;

/// A simulated member's group metadata: its group, and (for a member) its generation and id.
#[derive(Debug, Clone)]
pub(crate) struct SimGroupMetadata {
    pub(crate) group: String,
    pub(crate) member: Option<(i32, String)>,
}

/// The simulated cluster as tidegate's clients reach it.
pub(crate) struct SimCluster(pub(crate) Arc<SimKafka>);

/// The calls of a killed process fail and change nothing.
fn alive(process: usize) -> KafkaResult<()> {
    if sim::alive(process) {
        Ok(())
    } else {
        Err(error(RDKafkaErrorCode::AllBrokersDown))
    }
}

fn millis(spec: &ClientSpec<'_>, key: &str, default: u64) -> Duration {
    Duration::from_millis(spec.get(key).and_then(|v| v.parse().ok()).unwrap_or(default))
}

impl Cluster for SimCluster {
    fn producer(&self, spec: &ClientSpec<'_>) -> Result<Arc<dyn Producer>> {
        Ok(Arc::new(SimProducer {
            kafka: Arc::clone(&self.0),
            process: sim::current_process(),
            transactional_id: spec.get("transactional.id").map(str::to_string),
            timeout: millis(spec, "transaction.timeout.ms", 60_000),
            state: Mutex::new(ProducerState::default()),
            deliveries: Deliveries::default(),
        }))
    }

    fn consumer(&self, spec: &ClientSpec<'_>) -> Result<Box<dyn Consumer>> {
        Ok(Box::new(SimConsumer {
            kafka: Arc::clone(&self.0),
            process: sim::current_process(),
            group: spec.get("group.id").map(str::to_string),
            committed: spec.get("isolation.level") != Some("read_uncommitted"),
            eof: spec.get("enable.partition.eof") == Some("true"),
            assigned: Mutex::new(Vec::new()),
        }))
    }

    fn create_topic(
        &self,
        _spec: &ClientSpec<'_>,
        topic: &NewTopicSpec,
        _timeout: Duration,
    ) -> Result<std::result::Result<(), RDKafkaErrorCode>> {
        alive(sim::current_process()).map_err(|e| crate::error::kafka("creating a topic", e))?;
        let configs = topic.configs.iter().cloned().collect();
        Ok(
            if self.0.broker().create_topic(&topic.name, topic.partitions, configs) {
                Ok(())
            } else {
                Err(RDKafkaErrorCode::TopicAlreadyExists)
            },
        )
    }

    fn topic_configs(
        &self,
        _spec: &ClientSpec<'_>,
        topic: &str,
        _timeout: Duration,
    ) -> Result<std::result::Result<BTreeMap<String, String>, RDKafkaErrorCode>> {
        alive(sim::current_process()).map_err(|e| crate::error::kafka("describing a topic", e))?;
        let broker = self.0.broker();
        Ok(match broker.topics.get(topic) {
            Some(t) => {
                let mut configs = t.configs.clone();
                configs
                    .entry("cleanup.policy".into())
                    .or_insert_with(|| "delete".into());
                Ok(configs)
            }
            None => Err(RDKafkaErrorCode::UnknownTopicOrPartition),
        })
    }

    fn join_group(&self, spec: &ClientSpec<'_>, group: &GroupSpec) -> Result<Box<dyn GroupMembership>> {
        let process = sim::current_process();
        alive(process).map_err(|e| crate::error::kafka("joining a group", e))?;
        let membership = SimMembership {
            kafka: Arc::clone(&self.0),
            process,
            group: group.group.clone(),
            client: format!("{}@{}", group.group, group.member),
            topics: group.topics.clone(),
            protocol: group.protocol,
            session_timeout: match group.protocol {
                // the broker's setting (group.consumer.session.timeout.ms)
                GroupProtocol::Consumer => self.0.broker().group_session_timeout,
                GroupProtocol::Classic => millis(spec, "session.timeout.ms", 45_000),
            },
            rebalance_timeout: millis(spec, "max.poll.interval.ms", 300_000),
            state: Arc::new(Mutex::new(MemberState::default())),
            heartbeats: None,
        };
        Ok(Box::new(membership.started()))
    }
}

#[derive(Default)]
struct ProducerState {
    /// `(pid, epoch)` once transactions are initialised.
    producer: Option<(i64, i16)>,
    /// A transaction was begun and not ended.
    in_transaction: bool,
    fatal: Option<(RDKafkaErrorCode, String)>,
    round_robin: u32,
}

struct SimProducer {
    kafka: Arc<SimKafka>,
    process: usize,
    transactional_id: Option<String>,
    timeout: Duration,
    state: Mutex<ProducerState>,
    deliveries: Deliveries,
}

impl SimProducer {
    fn state(&self) -> std::sync::MutexGuard<'_, ProducerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transaction's `(id, pid, epoch)`, or why there is none; a fencing is fatal.
    fn transaction(&self, state: &mut ProducerState, broker: &Broker) -> KafkaResult<(String, i64, i16)> {
        if state.fatal.is_some() {
            return Err(error(RDKafkaErrorCode::Fatal));
        }
        let (Some(id), Some((pid, epoch))) = (&self.transactional_id, state.producer) else {
            return Err(error(RDKafkaErrorCode::State));
        };
        if let Err(e) = broker.current(id, pid, epoch) {
            state.fatal = Some((RDKafkaErrorCode::ProducerFenced, format!("producer of {id} fenced")));
            return Err(e);
        }
        Ok((id.clone(), pid, epoch))
    }

    /// A broker error of a call: a fencing becomes the producer's fatal error.
    fn failed(&self, state: &mut ProducerState, e: KafkaError) -> KafkaError {
        if e.rdkafka_error_code().is_some_and(crate::client::cluster::is_fencing) {
            state.fatal = Some((RDKafkaErrorCode::ProducerFenced, "fenced by a newer producer".into()));
        }
        e
    }
}

impl Producer for SimProducer {
    fn send(&self, record: &crate::client::cluster::Outgoing<'_>) -> KafkaResult<()> {
        alive(self.process)?;
        let mut broker = self.kafka.broker();
        let mut state = self.state();
        let transaction = match &self.transactional_id {
            Some(_) => {
                let t = self.transaction(&mut state, &broker)?;
                if !state.in_transaction {
                    return Err(error(RDKafkaErrorCode::State));
                }
                Some(t)
            }
            None => None,
        };
        let append = Append {
            topic: record.topic,
            partition: record.partition,
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp: record.timestamp,
        };
        let mut round_robin = state.round_robin;
        let result = broker.produce(
            &append,
            transaction.as_ref().map(|(id, p, e)| (id.as_str(), *p, *e)),
            &mut round_robin,
        );
        state.round_robin = round_robin;
        match result {
            Ok((partition, _)) => {
                self.deliveries.record(record.topic, partition, Ok(()));
                Ok(())
            }
            Err(e) => {
                let e = self.failed(&mut state, e);
                self.deliveries
                    .record(record.topic, record.partition.unwrap_or(-1), Err(&e));
                if state.fatal.is_some() {
                    return Err(error(RDKafkaErrorCode::Fatal));
                }
                // as librdkafka: the send is taken, its delivery fails
                Ok(())
            }
        }
    }

    fn flush(&self, _timeout: Duration) -> KafkaResult<()> {
        alive(self.process)
    }

    fn deliveries(&self) -> &Deliveries {
        &self.deliveries
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.state().fatal.clone()
    }

    fn refusal(&self, _properties: &BTreeMap<String, String>) -> Option<Error> {
        None
    }

    fn metadata(
        &self,
        topic: Option<&str>,
        _timeout: Duration,
        _properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata> {
        metadata(&self.kafka, self.process, topic, what)
    }

    fn init_transactions(&self, _timeout: Duration) -> KafkaResult<()> {
        alive(self.process)?;
        let Some(id) = &self.transactional_id else {
            return Err(error(RDKafkaErrorCode::State));
        };
        let producer = self.kafka.broker().init_transactions(id, self.timeout);
        let mut state = self.state();
        state.producer = Some(producer);
        state.in_transaction = false;
        Ok(())
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        alive(self.process)?;
        let broker = self.kafka.broker();
        let mut state = self.state();
        self.transaction(&mut state, &broker)?;
        if state.in_transaction {
            return Err(error(RDKafkaErrorCode::State));
        }
        state.in_transaction = true;
        Ok(())
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &[GroupOffset],
        group: &GroupMetadata,
        _timeout: Duration,
    ) -> KafkaResult<()> {
        alive(self.process)?;
        let Some(group) = group.get::<SimGroupMetadata>() else {
            return Err(error(RDKafkaErrorCode::InvalidArgument));
        };
        let mut broker = self.kafka.broker();
        let mut state = self.state();
        let (id, pid, epoch) = self.transaction(&mut state, &broker)?;
        if !state.in_transaction {
            return Err(error(RDKafkaErrorCode::State));
        }
        let member = group.member.as_ref().map(|(g, m)| (*g, m.as_str()));
        broker
            .send_offsets((&id, pid, epoch), &group.group, member, offsets)
            .map_err(|e| self.failed(&mut state, e))
    }

    fn commit_transaction(&self, _timeout: Duration) -> KafkaResult<()> {
        self.end(true)
    }

    fn abort_transaction(&self, _timeout: Duration) -> KafkaResult<()> {
        self.end(false)
    }
}

impl SimProducer {
    fn end(&self, commit: bool) -> KafkaResult<()> {
        alive(self.process)?;
        let mut broker = self.kafka.broker();
        let mut state = self.state();
        let (id, pid, epoch) = self.transaction(&mut state, &broker)?;
        if !state.in_transaction {
            return Err(error(RDKafkaErrorCode::State));
        }
        let result = broker.finish((&id, pid, epoch), commit);
        // (an unknown outcome leaves no transaction open: the broker settled it)
        state.in_transaction = false;
        result.map_err(|e| self.failed(&mut state, e))
    }
}

/// The cluster's metadata, as a consumer or producer of `process` asks for it.
fn metadata(kafka: &SimKafka, process: usize, topic: Option<&str>, what: &str) -> Result<Metadata> {
    alive(process).map_err(|e| crate::error::kafka(what, e))?;
    let mut broker = kafka.broker();
    if broker.lookup_fault() {
        return Err(crate::error::kafka(what, error(RDKafkaErrorCode::RequestTimedOut)));
    }
    let describe = |name: &str, broker: &Broker| match broker.topics.get(name) {
        Some(t) => TopicMetadata {
            name: name.to_string(),
            error: None,
            partitions: (0..t.logs.len() as i32).collect(),
        },
        None => TopicMetadata {
            name: name.to_string(),
            error: Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART),
            partitions: Vec::new(),
        },
    };
    let topics = match topic {
        Some(name) => vec![describe(name, &broker)],
        None => broker.topics.keys().map(|n| describe(n, &broker)).collect(),
    };
    Ok(Metadata {
        orig_broker_id: 1,
        brokers: vec![1],
        topics,
    })
}

/// A partition a consumer reads, and where it stands.
struct Assigned {
    topic: String,
    partition: i32,
    position: i64,
    /// Its end was reported at this position.
    eof_at: Option<i64>,
}

struct SimConsumer {
    kafka: Arc<SimKafka>,
    process: usize,
    group: Option<String>,
    /// `read_committed`.
    committed: bool,
    /// `enable.partition.eof`.
    eof: bool,
    assigned: Mutex<Vec<Assigned>>,
}

impl SimConsumer {
    fn assigned(&self) -> std::sync::MutexGuard<'_, Vec<Assigned>> {
        self.assigned.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Consumer for SimConsumer {
    fn assign(&self, partitions: &[(&str, i32, Offset)]) -> KafkaResult<()> {
        alive(self.process)?;
        let broker = self.kafka.broker();
        let mut assigned = Vec::new();
        for (topic, partition, offset) in partitions {
            let log = broker
                .log(topic, *partition)
                .ok_or_else(|| error(RDKafkaErrorCode::UnknownPartition))?;
            let position = match offset {
                Offset::Beginning => log.start,
                Offset::End => log.readable_end(self.committed),
                Offset::Offset(o) => *o,
                _ => log.start,
            };
            assigned.push(Assigned {
                topic: topic.to_string(),
                partition: *partition,
                position,
                eof_at: None,
            });
        }
        *self.assigned() = assigned;
        Ok(())
    }

    fn poll(&self, _timeout: Duration) -> Option<KafkaResult<Received>> {
        if let Err(e) = alive(self.process) {
            return Some(Err(e));
        }
        let broker = self.kafka.broker();
        let mut assigned = self.assigned();
        for a in assigned.iter_mut() {
            let Some(log) = broker.log(&a.topic, a.partition) else {
                continue;
            };
            let (entry, next) = log.next(a.position, self.committed);
            a.position = next;
            if let Some(e) = entry {
                a.eof_at = None;
                return Some(Ok(Received {
                    topic: a.topic.clone(),
                    partition: a.partition,
                    offset: e.offset,
                    timestamp: Some(e.timestamp),
                    key: e.key.clone(),
                    payload: e.value.clone(),
                    headers: e.headers.clone(),
                }));
            }
        }
        if self.eof {
            if let Some(a) = assigned.iter_mut().find(|a| a.eof_at != Some(a.position)) {
                a.eof_at = Some(a.position);
                return Some(Err(KafkaError::PartitionEOF(a.partition)));
            }
        }
        None
    }

    fn position(&self, topic: &str, partition: i32) -> KafkaResult<Option<i64>> {
        alive(self.process)?;
        Ok(self
            .assigned()
            .iter()
            .find(|a| a.topic == topic && a.partition == partition)
            .map(|a| a.position))
    }

    fn fetch_watermarks(&self, topic: &str, partition: i32, _timeout: Duration) -> KafkaResult<(i64, i64)> {
        alive(self.process)?;
        let mut broker = self.kafka.broker();
        if broker.lookup_fault() {
            return Err(error(RDKafkaErrorCode::RequestTimedOut));
        }
        let log = broker
            .log(topic, partition)
            .ok_or_else(|| error(RDKafkaErrorCode::UnknownPartition))?;
        Ok((log.start, log.readable_end(self.committed)))
    }

    fn offsets_for_times(&self, partitions: TopicPartitionList, _timeout: Duration) -> KafkaResult<TopicPartitionList> {
        alive(self.process)?;
        let mut broker = self.kafka.broker();
        if broker.lookup_fault() {
            return Err(error(RDKafkaErrorCode::RequestTimedOut));
        }
        let mut out = TopicPartitionList::new();
        for elem in partitions.elements() {
            let log = broker
                .log(elem.topic(), elem.partition())
                .ok_or_else(|| error(RDKafkaErrorCode::UnknownPartition))?;
            let offset = match elem.offset() {
                Offset::Beginning => Offset::Offset(log.start),
                Offset::End => Offset::Offset(log.readable_end(self.committed)),
                Offset::Offset(ts) => log
                    .offset_for_time(ts, self.committed)
                    .map_or(Offset::End, Offset::Offset),
                other => other,
            };
            out.add_partition_offset(elem.topic(), elem.partition(), offset)?;
        }
        Ok(out)
    }

    fn committed_offsets(&self, partitions: TopicPartitionList, _timeout: Duration) -> KafkaResult<TopicPartitionList> {
        alive(self.process)?;
        let mut broker = self.kafka.broker();
        if broker.lookup_fault() {
            // as librdkafka answers while the group's coordinator moves or loads (a new group on
            // a cluster): passing, never an answer
            return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::NotCoordinator));
        }
        let group = self.group.as_ref().and_then(|g| broker.groups.get(g));
        let mut out = TopicPartitionList::new();
        for elem in partitions.elements() {
            let committed = group.and_then(|g| g.committed.get(&(elem.topic().to_string(), elem.partition())));
            match committed {
                Some((offset, metadata)) => {
                    out.add_partition_offset(elem.topic(), elem.partition(), Offset::Offset(*offset))?;
                    if let Some(mut e) = out.find_partition(elem.topic(), elem.partition()) {
                        e.set_metadata(metadata);
                    }
                }
                None => {
                    out.add_partition_offset(elem.topic(), elem.partition(), Offset::Invalid)?;
                }
            }
        }
        Ok(out)
    }

    fn group_metadata(&self) -> Option<GroupMetadata> {
        self.group.as_ref().map(|g| {
            GroupMetadata::new(SimGroupMetadata {
                group: g.clone(),
                member: None,
            })
        })
    }

    fn metadata(
        &self,
        topic: Option<&str>,
        _timeout: Duration,
        _properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata> {
        metadata(&self.kafka, self.process, topic, what)
    }

    fn group_members(&self, group: &str, _timeout: Duration) -> KafkaResult<Vec<(String, String)>> {
        alive(self.process)?;
        let broker = self.kafka.broker();
        Ok(broker
            .groups
            .get(group)
            .map(|g| {
                g.members
                    .values()
                    .map(|m| (m.client.clone(), "simulated-host".to_string()))
                    .collect()
            })
            .unwrap_or_default())
    }

    fn topic_ids(&self, topics: &[String], _broker: i32, _timeout: Duration) -> Result<HashMap<String, String>> {
        alive(self.process).map_err(|e| crate::error::kafka("describing topics", e))?;
        let broker = self.kafka.broker();
        Ok(topics
            .iter()
            .filter_map(|t| Some((t.clone(), broker.topics.get(t)?.id.clone())))
            .collect())
    }
}

/// What a membership knows of itself.
#[derive(Debug, Default)]
struct MemberState {
    /// Its id in the group (`None`: to join).
    id: Option<String>,
    /// The classic protocol: the generation whose partitions it holds, handed to the job.
    holding: Option<i32>,
    /// The consumer protocol: the partitions handed to the job, and its member epoch now.
    owned: Option<BTreeSet<TopicPartition>>,
    epoch: i32,
    /// A revocation was handed to the job, not yet released: of these partitions.
    revoking: Option<BTreeSet<TopicPartition>>,
    /// The metadata as of the last assignment; whether the assignment was lost since.
    fence: Option<(i32, String)>,
    lost: bool,
    /// When it joined (the consumer protocol tells a member dealt nothing only a while after,
    /// and once: not again after it was dropped and rejoined).
    joined_at: Option<tokio::time::Instant>,
    told_nothing: bool,
    /// The member epoch the coordinator answered the last look with: the member takes it at the
    /// next look, as a heartbeat's answer is in flight a while (a checkpoint meanwhile carries
    /// the old one, and is refused).
    answered_epoch: Option<i32>,
}

/// A group membership of a simulated process: its heartbeats are a task of that process (they
/// stop when it is killed or paused), and its changes come from polling the coordinator.
struct SimMembership {
    kafka: Arc<SimKafka>,
    process: usize,
    group: String,
    client: String,
    topics: Vec<String>,
    protocol: GroupProtocol,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    state: Arc<Mutex<MemberState>>,
    heartbeats: Option<tokio::task::JoinHandle<()>>,
}

/// How often a simulated member heartbeats, and looks at its group.
const HEARTBEAT: Duration = Duration::from_millis(1000);
const LOOK: Duration = Duration::from_millis(50);
/// How long after joining a consumer-protocol member dealt nothing is told so (as the native
/// membership's `NOTHING_DEALT_AFTER`).
const NOTHING_DEALT_AFTER: Duration = Duration::from_secs(3);

impl SimMembership {
    fn started(mut self) -> Self {
        let (kafka, process, group, state) = (
            Arc::clone(&self.kafka),
            self.process,
            self.group.clone(),
            Arc::clone(&self.state),
        );
        self.heartbeats = Some(crate::core::spawn(async move {
            loop {
                if sim::alive(process) {
                    let id = state.lock().unwrap_or_else(|p| p.into_inner()).id.clone();
                    if let Some(id) = id {
                        let now = sim::now();
                        kafka
                            .broker()
                            .groups
                            .entry(group.clone())
                            .or_default()
                            .heartbeat(&id, now);
                    }
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        }));
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One look at the coordinator: the change to hand to the job, if any.
    fn look(&self) -> Option<Change> {
        if !sim::alive(self.process) {
            return None;
        }
        let mut broker = self.kafka.broker();
        let now = sim::now();
        let mut state = self.state();
        if state.revoking.is_some() {
            return None;
        }
        let group = broker.groups.entry(self.group.clone()).or_default();
        let id = match &state.id {
            Some(id) => id.clone(),
            None => {
                if group.members.is_empty() {
                    group.protocol = self.protocol;
                }
                let id = group.join(
                    self.client.clone(),
                    self.topics.clone(),
                    self.session_timeout,
                    self.rebalance_timeout,
                    now,
                );
                state.id = Some(id.clone());
                state.joined_at = Some(now);
                if self.protocol == GroupProtocol::Consumer {
                    // the coordinator computes the targets of the new group epoch before it
                    // answers the next heartbeat (Broker::expire)
                    return None;
                }
                id
            }
        };
        if self.protocol == GroupProtocol::Consumer {
            return Self::reconcile(&mut state, group, &id, now);
        }
        match group.duty(&id, state.holding) {
            group::Duty::Unknown => {
                // dropped (its session expired): its partitions are lost; it joins again
                state.id = None;
                state.lost = true;
                if state.holding.take().is_some() {
                    let lost = state.owned.take().unwrap_or_default();
                    state.revoking = Some(lost.clone());
                    return Some(Change::Revoked(lost));
                }
                None
            }
            group::Duty::Revoke => {
                state.holding = None;
                let all = state.owned.take().unwrap_or_default();
                state.revoking = Some(all.clone());
                Some(Change::Revoked(all))
            }
            group::Duty::Rejoin => {
                group.rejoin(&id);
                None
            }
            group::Duty::Wait => None,
            group::Duty::Assigned(generation, partitions) => {
                state.holding = Some(generation);
                state.epoch = generation;
                state.fence = Some((generation, id));
                state.lost = false;
                state.owned = Some(partitions.clone());
                Some(Change::Assigned(partitions))
            }
        }
    }

    /// One heartbeat of a consumer-protocol member: what changed for it.
    fn reconcile(
        state: &mut MemberState,
        group: &mut group::Group,
        id: &str,
        now: tokio::time::Instant,
    ) -> Option<Change> {
        match group.reconcile(id, now) {
            incremental::Reconciled::Unknown => {
                // dropped (its session or rebalance timeout): what it held is lost; it joins again
                state.id = None;
                state.lost = true;
                match state.owned.take() {
                    Some(lost) if !lost.is_empty() => {
                        state.revoking = Some(lost.clone());
                        Some(Change::Revoked(lost))
                    }
                    _ => None,
                }
            }
            incremental::Reconciled::Revoke(partitions) => {
                if let Some(owned) = &mut state.owned {
                    owned.retain(|tp| !partitions.contains(tp));
                }
                state.revoking = Some(partitions.clone());
                Some(Change::Revoked(partitions))
            }
            incremental::Reconciled::Wait => None,
            incremental::Reconciled::Owns(epoch, partitions) => {
                if state.owned.as_ref() == Some(&partitions) {
                    // the new epoch of a rebalance that leaves it alone reaches it a look later
                    if let Some(answered) = state.answered_epoch.replace(epoch) {
                        state.epoch = answered;
                    }
                    return None;
                }
                state.epoch = epoch;
                state.answered_epoch = Some(epoch);
                // as the native membership: nothing dealt is said after a while, not at once
                // (librdkafka calls no rebalance callback for an empty assignment), and not
                // again after a revocation of everything
                if partitions.is_empty()
                    && (state.owned.is_some()
                        || state.told_nothing
                        || state
                            .joined_at
                            .is_some_and(|j| now.saturating_duration_since(j) < NOTHING_DEALT_AFTER))
                {
                    return None;
                }
                state.told_nothing |= partitions.is_empty();
                state.owned = Some(partitions.clone());
                state.fence = Some((epoch, id.to_string()));
                state.lost = false;
                Some(Change::Assigned(partitions))
            }
        }
    }
}

impl GroupMembership for SimMembership {
    fn next(&mut self) -> NextChange<'_> {
        Box::pin(async move {
            loop {
                if let Some(change) = self.look() {
                    return Some(change);
                }
                tokio::time::sleep(LOOK).await;
            }
        })
    }

    fn release(&self) {
        let mut state = self.state();
        let Some(revoked) = state.revoking.take() else {
            return;
        };
        if let Some(id) = state.id.clone() {
            drop(state);
            if sim::alive(self.process) {
                let mut broker = self.kafka.broker();
                let group = broker.groups.entry(self.group.clone()).or_default();
                match self.protocol {
                    GroupProtocol::Consumer => group.released(&id, &revoked),
                    GroupProtocol::Classic => group.rejoin(&id),
                }
            }
        }
    }

    fn metadata(&self) -> GroupMetadataSource {
        let (state, group) = (Arc::clone(&self.state), self.group.clone());
        GroupMetadataSource::new(move || {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            let (assigned_epoch, id) = state.fence.clone()?;
            // the member's epoch now, while it is the member the assignment was made to
            let epoch = if state.lost || state.id.as_deref() != Some(id.as_str()) {
                assigned_epoch
            } else {
                state.epoch
            };
            Some(GroupMetadata::new(SimGroupMetadata {
                group: group.clone(),
                member: Some((epoch, id)),
            }))
        })
    }

    fn protocol(&self) -> GroupProtocol {
        self.protocol
    }
}

impl Drop for SimMembership {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeats.take() {
            h.abort();
        }
        // a process that ends leaves its group at once (a killed one never gets here alive)
        let id = self.state().id.take();
        if let (Some(id), true) = (id, sim::alive(self.process)) {
            let now = sim::now();
            let mut broker = self.kafka.broker();
            broker.note(format!("group {}: {id} leaves (process {})", self.group, self.process));
            broker.groups.entry(self.group.clone()).or_default().leave(&id, now);
        }
    }
}
