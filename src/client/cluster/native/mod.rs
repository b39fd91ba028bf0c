//! The clients of a real cluster, over librdkafka: the [`super::Cluster`] calls as rust-rdkafka
//! makes them, with librdkafka's logs and refusals kept by a [`TracingContext`].

mod batch;
mod described;
mod group;

pub use group::{membership_config, protocol_of};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header as KafkaHeader, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::seam::{
    ClientSpec, Cluster, Consumer, Deliveries, GroupMembership, GroupMetadata, GroupOffset, GroupSpec, KafkaResult,
    Metadata, NewTopicSpec, Outgoing, Producer, Received, TopicMetadata,
};
use crate::client::{client_context_through, TracingContext};
use crate::error::{kafka, Error, Result};
use crate::record::Header;

/// librdkafka's clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct Native;

impl Cluster for Native {
    fn producer(&self, spec: &ClientSpec<'_>) -> Result<Arc<dyn Producer>> {
        let producer: ThreadedProducer<ProducerLog> = spec
            .client_config()
            .create_with_context(ProducerLog {
                tracing: TracingContext::new(spec.name),
                deliveries: Deliveries::default(),
            })
            .map_err(|e| kafka(format!("creating the {} producer", spec.name), e))?;
        Ok(Arc::new(NativeProducer {
            topics: batch::Topics::default(),
            producer,
        }))
    }

    fn consumer(&self, spec: &ClientSpec<'_>) -> Result<Box<dyn Consumer>> {
        let consumer: BaseConsumer<TracingContext> = spec
            .consumer_config()
            .create_with_context(TracingContext::new(spec.name))
            .map_err(|e| kafka(format!("creating the {} client", spec.name), e))?;
        Ok(Box::new(NativeConsumer(consumer)))
    }

    fn create_topic(
        &self,
        spec: &ClientSpec<'_>,
        topic: &NewTopicSpec,
        timeout: Duration,
    ) -> Result<std::result::Result<(), RDKafkaErrorCode>> {
        let (admin, options, runtime) = admin(spec, timeout)?;
        let mut new_topic = NewTopic::new(
            &topic.name,
            topic.partitions,
            TopicReplication::Fixed(topic.replication),
        );
        for (k, v) in &topic.configs {
            new_topic = new_topic.set(k, v);
        }
        let results = runtime
            .block_on(admin.create_topics([&new_topic], &options))
            .map_err(|e| {
                kafka(
                    format!("creating topic {} at {}", topic.name, spec.bootstrap_servers),
                    e,
                )
            })?;
        Ok(match results.into_iter().next() {
            Some(Err((_, code))) => Err(code),
            _ => Ok(()),
        })
    }

    fn topic_configs(
        &self,
        spec: &ClientSpec<'_>,
        topic: &str,
        timeout: Duration,
    ) -> Result<std::result::Result<BTreeMap<String, String>, RDKafkaErrorCode>> {
        let (admin, options, runtime) = admin(spec, timeout)?;
        let described = runtime
            .block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options))
            .map_err(|e| kafka(format!("describing topic {topic} at {}", spec.bootstrap_servers), e))?;
        Ok(match described.into_iter().next() {
            Some(Ok(resource)) => Ok(resource
                .entries
                .into_iter()
                .filter_map(|e| Some((e.name, e.value?)))
                .collect()),
            Some(Err(code)) => Err(code),
            None => Ok(BTreeMap::new()),
        })
    }

    fn join_group(&self, spec: &ClientSpec<'_>, group: &GroupSpec) -> Result<Box<dyn GroupMembership>> {
        group::Membership::join(&spec.consumer_config(), &spec.client_config(), group)
            .map(|m| Box::new(m) as Box<dyn GroupMembership>)
    }
}

/// An admin client, its call options, and a runtime to wait for its answers on (rust-rdkafka's
/// admin calls are futures; these calls run outside the job's runtime, or on a blocking thread).
fn admin(
    spec: &ClientSpec<'_>,
    timeout: Duration,
) -> Result<(AdminClient<TracingContext>, AdminOptions, tokio::runtime::Runtime)> {
    let admin: AdminClient<TracingContext> = spec
        .client_config()
        .create_with_context(TracingContext::new(spec.name))
        .map_err(|e| kafka(format!("creating the {} admin client", spec.name), e))?;
    let options = AdminOptions::new()
        .operation_timeout(Some(timeout))
        .request_timeout(Some(timeout));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting a runtime for the admin client", e))?;
    Ok((admin, options, runtime))
}

/// A producer's context: librdkafka's logs through [`TracingContext`], deliveries recorded.
struct ProducerLog {
    tracing: TracingContext,
    deliveries: Deliveries,
}

client_context_through!(ProducerLog, tracing);

impl ProducerContext for ProducerLog {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => self.deliveries.record(m.topic(), m.partition(), Ok(())),
            Err((e, m)) => self.deliveries.record(m.topic(), m.partition(), Err(e)),
        }
    }
}

/// A producer polled by its own thread (rust-rdkafka's `ThreadedProducer`).
struct NativeProducer {
    /// The batches' topic handles: declared first, so released before the producer.
    topics: batch::Topics,
    producer: ThreadedProducer<ProducerLog>,
}

impl Producer for NativeProducer {
    fn send(&self, record: &Outgoing<'_>) -> KafkaResult<()> {
        let mut message: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(record.topic);
        // no header list at all for a record without headers (the same record on the wire: an
        // allocation and a free less per record)
        if !record.headers.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
            for h in record.headers {
                headers = headers.insert(KafkaHeader {
                    key: &h.key,
                    value: h.value.as_deref(),
                });
            }
            message = message.headers(headers);
        }
        if let Some(k) = record.key {
            message = message.key(k);
        }
        if let Some(v) = record.value {
            message = message.payload(v);
        }
        if let Some(ts) = record.timestamp {
            message = message.timestamp(ts);
        }
        if let Some(p) = record.partition {
            message = message.partition(p);
        }
        self.producer.send(message).map_err(|(e, _)| e)
    }

    /// Runs of [`batch::batchable`] records of one topic in librdkafka's batch call; the others
    /// one by one.
    fn send_batch(&self, records: &[Outgoing<'_>]) -> (usize, Option<KafkaError>) {
        let mut done = 0;
        while let Some(first) = records.get(done) {
            if !batch::batchable(first) {
                if let Err(e) = self.send(first) {
                    return (done, Some(e));
                }
                done += 1;
                continue;
            }
            let run = records[done..]
                .iter()
                .take_while(|r| r.topic == first.topic && batch::batchable(r))
                .count();
            let rk = self.producer.client().native_ptr();
            let (queued, error) = self.topics.produce(rk, first.topic, &records[done..done + run]);
            done += queued;
            if error.is_some() {
                return (done, error);
            }
        }
        (done, None)
    }

    /// librdkafka's `rd_kafka_flush` with the whole timeout: it sends lingering messages at once
    /// and returns within 10 ms of the last acknowledgement. rust-rdkafka's `flush` calls it with
    /// no timeout and then polls the main queue for up to 100 ms; the `ThreadedProducer`'s own
    /// thread takes the delivery reports from that queue first, so every flush (every checkpoint)
    /// lasted 100 ms, and a paced replay stalled that long at each checkpoint.
    fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the producer's handle is valid for as long as `self` lives; rd_kafka_flush is
        // thread-safe (the poll thread may serve delivery reports meanwhile).
        let code = unsafe { rdkafka::bindings::rd_kafka_flush(self.producer.client().native_ptr(), ms) };
        match code {
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
            code => Err(KafkaError::Flush(code.into())),
        }
    }

    fn deliveries(&self) -> &Deliveries {
        &self.producer.context().deliveries
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.producer.client().fatal_error()
    }

    fn refusal(&self, properties: &BTreeMap<String, String>) -> Option<Error> {
        self.producer.context().tracing.authentication_failure(properties)
    }

    fn metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
        properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata> {
        crate::client::metadata_unless_refused(self.producer.client(), topic, timeout, what, || {
            self.producer.context().tracing.authentication_failure(properties)
        })
        .map(|m| convert(&m))
    }

    /// librdkafka's, once a broker is up: a fresh producer asks for its transaction coordinator
    /// at once, before it has a connection, and then only after a 500 ms timer
    /// (rdkafka_txnmgr.c); asked when a broker is up, the coordinator is found at once.
    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()> {
        let deadline = std::time::Instant::now() + timeout;
        await_a_broker(self.producer.client().native_ptr(), timeout);
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        self.producer.init_transactions(left)
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        self.producer.begin_transaction()
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &[GroupOffset],
        group: &GroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()> {
        let Some(group) = group.get::<ConsumerGroupMetadata>() else {
            // another cluster's metadata: a caller's mistake, refused as librdkafka would
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::InvalidArgument));
        };
        self.producer
            .send_offsets_to_transaction(&tpl_of(offsets)?, group, timeout)
    }

    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        self.producer.commit_transaction(timeout)
    }

    fn abort_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        self.producer.abort_transaction(timeout)
    }
}

/// The offsets as librdkafka's list, each with its metadata.
fn tpl_of(offsets: &[GroupOffset]) -> KafkaResult<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for o in offsets {
        tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset))?;
        if let (Some(metadata), Some(mut elem)) = (&o.metadata, tpl.find_partition(&o.topic, o.partition)) {
            elem.set_metadata(metadata);
        }
    }
    Ok(tpl)
}

/// rust-rdkafka's metadata (a view of librdkafka's), as the seam's.
pub(crate) fn convert(m: &rdkafka::metadata::Metadata) -> Metadata {
    Metadata {
        orig_broker_id: m.orig_broker_id(),
        brokers: m.brokers().iter().map(|b| b.id()).collect(),
        topics: m
            .topics()
            .iter()
            .map(|t| TopicMetadata {
                name: t.name().to_string(),
                error: t.error(),
                partitions: t.partitions().iter().map(|p| p.id()).collect(),
            })
            .collect(),
    }
}

/// A consumer polled by its caller.
struct NativeConsumer(BaseConsumer<TracingContext>);

impl Consumer for NativeConsumer {
    fn assign(&self, partitions: &[(&str, i32, Offset)]) -> KafkaResult<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset) in partitions {
            tpl.add_partition_offset(topic, *partition, *offset)?;
        }
        self.0.assign(&tpl)
    }

    fn poll(&self, timeout: Duration) -> Option<KafkaResult<Received>> {
        self.0.poll(timeout).map(|result| {
            result.map(|m| Received {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                timestamp: m.timestamp().to_millis(),
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| Header {
                                key: h.key.to_string(),
                                value: h.value.map(<[u8]>::to_vec),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
    }

    fn position(&self, topic: &str, partition: i32) -> KafkaResult<Option<i64>> {
        Ok(self
            .0
            .position()?
            .find_partition(topic, partition)
            .and_then(|p| match p.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }))
    }

    fn fetch_watermarks(&self, topic: &str, partition: i32, timeout: Duration) -> KafkaResult<(i64, i64)> {
        self.0.fetch_watermarks(topic, partition, timeout)
    }

    fn offsets_for_times(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        self.0.offsets_for_times(partitions, timeout)
    }

    fn committed_offsets(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        self.0.committed_offsets(partitions, timeout)
    }

    fn group_metadata(&self) -> Option<GroupMetadata> {
        self.0.group_metadata().map(GroupMetadata::new)
    }

    fn metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
        properties: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<Metadata> {
        crate::client::fetch_metadata(&self.0, topic, timeout, properties, what).map(|m| convert(&m))
    }

    fn topic_ids(&self, topics: &[String], broker: i32, timeout: Duration) -> Result<HashMap<String, String>> {
        crate::client::topic_ids::topic_ids(&self.0, topics, broker, timeout)
    }

    fn group_members(&self, group: &str, timeout: Duration) -> KafkaResult<Vec<(String, String)>> {
        described::group_members(self.0.client().native_ptr(), group, timeout)
    }
}

/// Wait up to `timeout` for a broker of `rk`'s to answer a metadata request for the topics it
/// knows (none, for a fresh client: the cheapest request that needs a connection). A failure
/// is left to the call that follows, which says what it needed the broker for.
fn await_a_broker(rk: *mut rdkafka::bindings::rd_kafka_t, timeout: Duration) {
    use rdkafka::bindings as rd;
    let mut metadata: *const rd::rd_kafka_metadata = std::ptr::null();
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `rk` is a live client; the metadata it answers is released below
    let err = unsafe { rd::rd_kafka_metadata(rk, 0, std::ptr::null_mut(), &mut metadata, ms) };
    if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !metadata.is_null() {
        // SAFETY: answered by rd_kafka_metadata above, released once
        unsafe { rd::rd_kafka_metadata_destroy(metadata) };
    }
}
