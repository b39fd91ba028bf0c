//! tidegate's client seam ([`crate::client::cluster`]) over the simulated cluster: producers,
//! consumers, topic administration and group memberships, each belonging to the simulated
//! process that made it (a killed process's calls fail and change nothing).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use super::membership::SimMembership;
use super::{error, Append, Broker, SimKafka};
use crate::client::cluster::{
    ClientSpec, Cluster, Consumer, Deliveries, GroupMembership, GroupMetadata, GroupOffset, GroupProtocol, GroupSpec,
    KafkaResult, Metadata, NewTopicSpec, Producer, Received, TopicMetadata,
};
use crate::core::sim;
use crate::error::{Error, Result};

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
            state: Default::default(),
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
