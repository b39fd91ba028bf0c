//! Broker-free tests of the enumerator and the split reader on librdkafka's mock cluster
//! (`rdkafka::mocking::MockCluster`), including a broker going down and coming back.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use super::{KafkaSource, StoppingOffsets};

mod faults;
mod partition_errors;
mod restore;
use crate::core::{CollectSink, FinishReason, Job, JobOptions, Sink};
use crate::record::{Record, ValueFormat};

fn produce(servers: &str, topic: &str, partitions: i32, n: usize) {
    produce_values(servers, topic, partitions, n, |i| format!("{{\"i\":{i}}}"));
}

/// `n` records of `value(i)`, round robin over `partitions`.
fn produce_values(servers: &str, topic: &str, partitions: i32, n: usize, value: impl Fn(usize) -> String) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("producer");
    for i in 0..n {
        let value = value(i);
        let partition = (i % partitions as usize) as i32;
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value).partition(partition))
            .expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

#[test]
fn a_bounded_read_on_the_mock_cluster_is_exact() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-trades", 4, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    produce(&servers, "mock-trades", 4, 1_000);
    let source = KafkaSource::builder()
        .bootstrap_servers(&servers)
        .topics(["mock-trades"])
        .format(ValueFormat::Json)
        .bounded(StoppingOffsets::Latest)
        .eof_expression("value.i == 501")
        .unwrap()
        .build()
        .unwrap();
    let (sink, out) = CollectSink::new();
    let report = Job::new(source, JobOptions::new("mock", 3))
        .run_blocking(Box::new(sink))
        .unwrap();
    let mut values: Vec<i64> = out
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.decoded.as_ref().unwrap()["i"].as_i64().unwrap())
        .collect();
    values.sort_unstable();
    // partition 1 holds 1, 5, 9, ...: it ends before 501; the other partitions are read to the end
    let expected: Vec<i64> = (0..1_000).filter(|i| i % 4 != 1 || *i < 501).collect();
    assert_eq!(values, expected);
    let eof = report
        .splits
        .iter()
        .find(|s| s.split.partition == 1)
        .unwrap()
        .finished
        .unwrap();
    assert_eq!(eof.reason, FinishReason::EofRecord);
    assert_eq!(eof.at, Some(125)); // 501 is the 126th record of partition 1
}

#[test]
fn a_missing_topic_fails_discovery_on_the_mock_cluster() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let source = KafkaSource::builder()
        .bootstrap_servers(cluster.bootstrap_servers())
        .topics(["nowhere"])
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let (sink, _) = CollectSink::new();
    let err = Job::new(source, JobOptions::new("mock", 1))
        .run_blocking(Box::new(sink))
        .unwrap_err();
    assert!(err.to_string().contains("topic nowhere does not exist"), "{err}");
}

/// Hands each write to the inner sink, and tells the test once `after` records went through.
struct Signalling {
    inner: CollectSink<Record>,
    seen: usize,
    after: usize,
    tx: Mutex<Option<mpsc::Sender<()>>>,
    resume: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl Sink<Record> for Signalling {
    fn write(&mut self, records: Vec<Record>) -> crate::Result<()> {
        self.seen += records.len();
        self.inner.write(records)?;
        if self.seen >= self.after {
            if let Some(tx) = self.tx.lock().unwrap().take() {
                let _ = tx.send(());
                // hold the pipeline until the broker is down, so the reader meets the outage
                let (lock, cv) = &*self.resume;
                let mut down = lock.lock().unwrap();
                while !*down {
                    down = cv.wait(down).unwrap();
                }
            }
        }
        Ok(())
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> crate::Result<Option<serde_json::Value>> {
        Ok(None)
    }
}

#[test]
fn a_broker_going_down_and_coming_back_loses_nothing() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-outage", 2, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    produce(&servers, "mock-outage", 2, 20_000);
    let mut source = KafkaSource::builder()
        .bootstrap_servers(&servers)
        .topics(["mock-outage"])
        .bounded(StoppingOffsets::Latest)
        // small fetches, so most of the topic is still to be fetched when the broker goes away
        .property("message.max.bytes", "1000")
        .property("fetch.max.bytes", "2000")
        .property("max.partition.fetch.bytes", "1000")
        .property("queued.max.messages.kbytes", "1")
        .build()
        .unwrap();
    source.max_batch_records = 50;
    let (inner, out) = CollectSink::new();
    let (tx, rx) = mpsc::channel();
    let resume = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let sink = Signalling {
        inner,
        seen: 0,
        after: 500,
        tx: Mutex::new(Some(tx)),
        resume: Arc::clone(&resume),
    };
    let job = std::thread::spawn(move || Job::new(source, JobOptions::new("mock", 1)).run_blocking(Box::new(sink)));
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        panic!("the job did not get going: {:?}", job.join().unwrap().err());
    }
    cluster.broker_down(1).expect("broker down");
    {
        let (lock, cv) = &*resume;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    }
    // the reader keeps polling through the outage (librdkafka retries); then the broker returns
    std::thread::sleep(Duration::from_millis(1500));
    let during = out.lock().unwrap().len();
    cluster.broker_up(1).expect("broker up");
    job.join().unwrap().expect("the job completes after the outage");
    let mut seen: Vec<(i32, i64)> = out
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.partition.unwrap(), r.offset.unwrap()))
        .collect();
    seen.sort_unstable();
    let expected: Vec<(i32, i64)> = (0..2).flat_map(|p| (0..10_000).map(move |o| (p, o))).collect();
    assert_eq!(seen, expected, "every record exactly once");
    assert!(
        during < 20_000,
        "the outage happened mid-read ({during} records before the broker returned)"
    );
}

#[test]
fn a_fetch_batch_is_bounded_in_bytes_as_well_as_records() {
    use super::batch_queue::BatchLimit;
    use super::split::KafkaPartitionSplit;
    use super::split_reader::KafkaPartitionSplitReader;
    use crate::core::{SplitReader, SplitsChange};
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-large", 1, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    produce_values(&servers, "mock-large", 1, 3_000, |_| "x".repeat(1000));
    let settings = super::KafkaSourceSettings::new(&servers, super::Subscription::Topics(vec!["mock-large".into()]));
    let limit = BatchLimit {
        records: 4096,
        bytes: 500_000,
    };
    let mut reader = KafkaPartitionSplitReader::new(&settings, (0, 1), 1, limit, crate::metrics::KafkaMetrics::noop())
        .expect("reader");
    reader
        .handle_splits_changes(SplitsChange::Add(vec![KafkaPartitionSplit::new(
            "mock-large",
            0,
            0,
            Some(3_000),
        )]))
        .expect("assign");
    let (mut total, mut largest) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while total < 3_000 && std::time::Instant::now() < deadline {
        let batch = reader.fetch().expect("fetch");
        let n: usize = batch.records.iter().map(|(_, r)| r.len()).sum();
        total += n;
        largest = largest.max(n);
    }
    assert_eq!(total, 3_000);
    // a record costs its 1,000 bytes (twice: lent) and a Record: the batch stops at 500 KB (the
    // first read takes 256 records, later ones what fits at the sizes seen), overshooting by one
    // record at most
    let per_record = BatchLimit::cost(0, 1_000);
    assert_eq!(per_record, 2 * 1_000 + std::mem::size_of::<Record>());
    assert!(
        largest > 100,
        "batches of {largest} records: too small to mean anything"
    );
    assert!(
        largest * per_record <= 500_000 + per_record,
        "a batch of {largest} records ({} bytes)",
        largest * per_record
    );
    assert_eq!(limit.read_size(0, 0), 256);
    assert_eq!(limit.read_size(100, 100 * 6_000), 1);
    assert_eq!(limit.read_size(10, 10 * 1_000), 490);
}

#[test]
fn a_read_whose_callback_panics_leaves_no_message_to_hang_the_consumer_s_destroy() {
    use super::batch_queue::{ConsumerQueue, Event};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-panic", 1, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    produce(&servers, "mock-panic", 1, 50);
    let consumer: BaseConsumer<crate::client::TracingContext> = ClientConfig::new()
        .set("bootstrap.servers", &servers)
        .set("group.id", "mock-panic")
        .set("enable.auto.commit", "false")
        .create_with_context(crate::client::TracingContext::new("panic"))
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("mock-panic", 0, rdkafka::Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let consumer = Arc::new(consumer);
    let mut queue = ConsumerQueue::new(&consumer, 100, true).expect("consumer queue");
    // a callback with a bug: it panics on the second message of a read (the fetcher's panic is
    // caught, and the job's teardown goes on to destroy the consumer)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut panicked = false;
    while !panicked && std::time::Instant::now() < deadline {
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut seen = 0;
            queue.read(Duration::from_millis(100), 100, |event| {
                if let Event::Message(_) = event {
                    seen += 1;
                    assert!(seen < 2, "a bug in the callback");
                }
            })
        }));
        panicked = read.is_err();
    }
    assert!(panicked, "no read of two messages or more within a minute");
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        drop(queue);
        drop(consumer);
        let _ = done_tx.send(());
    });
    done.recv_timeout(Duration::from_secs(30))
        .expect("the consumer's destroy hung on messages the panicking read left undestroyed");
}

#[test]
fn values_lent_from_librdkafka_outlive_their_reader_and_free_its_consumer_last() {
    use super::batch_queue::BatchLimit;
    use super::split::KafkaPartitionSplit;
    use super::split_reader::KafkaPartitionSplitReader;
    use crate::core::{SplitReader, SplitsChange};
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-lent", 1, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    let value = |i: usize| {
        format!(
            "{{\"i\":{i},\"pad\":\"{}\"}}",
            "x".repeat(super::batch_queue::LEND_FROM)
        )
    };
    produce_values(&servers, "mock-lent", 1, 500, value);
    let settings = super::KafkaSourceSettings::new(&servers, super::Subscription::Topics(vec!["mock-lent".into()]));
    let limit = BatchLimit {
        records: 4096,
        bytes: 1 << 20,
    };
    let mut reader = KafkaPartitionSplitReader::new(&settings, (0, 1), 1, limit, crate::metrics::KafkaMetrics::noop())
        .expect("reader");
    reader
        .handle_splits_changes(SplitsChange::Add(vec![KafkaPartitionSplit::new(
            "mock-lent",
            0,
            0,
            None,
        )]))
        .expect("assign");
    let mut records = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while records.len() < 500 && std::time::Instant::now() < deadline {
        let batch = reader.fetch().expect("fetch");
        records.extend(batch.records.into_iter().flat_map(|(_, r)| r));
    }
    assert_eq!(records.len(), 500);
    // the reader goes first (its consumer stays, held by the values); the values still read what
    // was produced, and dropping the last of them destroys the consumer, on another thread, without
    // hanging (librdkafka's destroy waits for its messages)
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        drop(reader);
        let values: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
        drop(records);
        let _ = done_tx.send(values);
    });
    let values = done
        .recv_timeout(Duration::from_secs(30))
        .expect("dropping the reader, or the lent values and with the last one the consumer, hung");
    let expected: Vec<String> = (0..500).map(value).collect();
    assert_eq!(values, expected);
}

#[test]
fn every_partition_moves_to_the_instance_discovery_deals_it_to_with_its_offset() {
    use super::enumerator::{KafkaEnumeratorState, KnownSplit};
    use super::split::{instance_owns, KafkaPartitionSplit};
    use crate::core::{Instance, Source, SplitSnapshot};
    use std::collections::BTreeMap;

    let source_of = |instance: Instance| {
        let mut source = KafkaSource::builder()
            .bootstrap_servers("127.0.0.1:1")
            .topics(["t"])
            .build()
            .unwrap();
        Arc::get_mut(&mut source.settings).expect("one owner").instance = instance;
        source
    };
    let (partitions, parallelism) = (12, 2);
    for was in 1..=4 {
        // each old instance knows its partitions; the even ones are with a reader, at an offset
        let parts: Vec<_> = (0..was)
            .map(|index| {
                let owned: Vec<i32> = (0..partitions)
                    .filter(|p| instance_owns("t", *p, parallelism, Instance { index, count: was }))
                    .collect();
                let known = owned
                    .iter()
                    .map(|p| KnownSplit {
                        split: KafkaPartitionSplit::new("t", *p, 0, None),
                        assigned: p % 2 == 0,
                        removed: false,
                    })
                    .collect();
                let held = owned
                    .iter()
                    .filter(|p| *p % 2 == 0)
                    .map(|p| SplitSnapshot {
                        split: KafkaPartitionSplit::new("t", *p, i64::from(*p) * 10, None),
                        finished: None,
                    })
                    .collect();
                let state = KafkaEnumeratorState {
                    initial_discovery_done: true,
                    splits: known,
                    ..Default::default()
                };
                (state, held)
            })
            .collect();
        for now in 1..=4 {
            let mut known = BTreeMap::new();
            let mut held = BTreeMap::new();
            for index in 0..now {
                let instance = Instance { index, count: now };
                let (state, snapshots) = source_of(instance).reshare(parts.clone(), parallelism).unwrap();
                assert!(state.initial_discovery_done);
                for k in state.splits {
                    assert!(instance_owns("t", k.split.partition, parallelism, instance));
                    assert!(
                        known.insert(k.split.partition, index).is_none(),
                        "{was} → {now}: known twice"
                    );
                }
                for s in snapshots {
                    assert!(instance_owns("t", s.split.partition, parallelism, instance));
                    assert_eq!(s.split.next_offset, i64::from(s.split.partition) * 10);
                    assert!(
                        held.insert(s.split.partition, index).is_none(),
                        "{was} → {now}: held twice"
                    );
                }
            }
            assert_eq!(
                known.len(),
                partitions as usize,
                "{was} → {now}: every partition known once"
            );
            assert_eq!(
                held.len(),
                partitions as usize / 2,
                "{was} → {now}: every reader's split once"
            );
        }
    }
}

/// A group member's job after its first discovery: a partition no run mentions that the first
/// discovery saw (dealt to a member that never checkpointed) starts at the configured starting
/// offsets; one added since, at its start. The parts' counts merge to the least.
#[test]
fn a_group_member_starts_unread_first_partitions_at_the_starting_offsets_and_added_ones_at_earliest() {
    use super::discovery::{admin_consumer, discover, DiscoveryRequest};
    use super::enumerator::KafkaEnumeratorState;
    use super::offsets::StartingOffsets;
    use crate::core::Source;

    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-group", 6, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    produce(&servers, "mock-group", 6, 600);
    let mut source = KafkaSource::builder()
        .bootstrap_servers(&servers)
        .topics(["mock-group"])
        .starting_offsets(StartingOffsets::Latest)
        .build()
        .unwrap();
    let all: std::collections::BTreeSet<_> = (0..6).map(|p| ("mock-group".to_string(), p)).collect();
    Arc::get_mut(&mut source.settings).expect("one owner").assignment = Some(Arc::new(all));
    // two members' first discoveries saw 4 and 5 partitions; neither read any
    let part = |count: i32| {
        let state = KafkaEnumeratorState {
            initial_discovery_done: true,
            initial_partitions: [("mock-group".to_string(), count)].into(),
            ..Default::default()
        };
        (state, Vec::new())
    };
    let (state, _) = source.reshare(vec![part(5), part(4)], 1).unwrap();
    assert_eq!(state.initial_partitions["mock-group"], 4);
    let request = DiscoveryRequest {
        initial_done: state.initial_discovery_done,
        initial_partitions: state.initial_partitions.clone(),
        ..Default::default()
    };
    let consumer = admin_consumer(&source.settings).unwrap();
    let found = discover(&source.settings, consumer.as_ref(), &request, 1).unwrap();
    assert_eq!(found.partition_counts["mock-group"], 6);
    let starts: std::collections::BTreeMap<i32, i64> =
        found.new_splits.iter().map(|s| (s.partition, s.next_offset)).collect();
    // 100 records in each partition: latest is 100
    let expected: std::collections::BTreeMap<i32, i64> = (0..6).map(|p| (p, if p < 4 { 100 } else { 0 })).collect();
    assert_eq!(starts, expected);
}

/// A group member's revoked splits are released in place only once its enumerator assigned them
/// to readers: before the first discovery (which would find every split of the assignment,
/// released or not) and for a split it never had, it says no, and the member stops its job
/// instead. (A real broker's member, dealt partitions away while its job was still starting,
/// wrote them twice when this said yes.)
#[test]
fn splits_are_released_in_place_only_once_the_enumerator_assigned_them() {
    use super::discovery::{admin_consumer, discover, DiscoveryRequest};
    use crate::core::{EnumeratorContext, Source, SplitEnumerator, SplitId};

    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-release", 2, 1).expect("topic");
    let servers = cluster.bootstrap_servers();
    let source = KafkaSource::builder()
        .bootstrap_servers(&servers)
        .topics(["mock-release"])
        .build()
        .unwrap();
    let mut enumerator = source.create_enumerator().unwrap();
    let (mut ctx, _readers) = EnumeratorContext::detached(1);
    let id: SplitId = Arc::from("mock-release-0");
    assert!(
        !enumerator.release_splits(&mut ctx, std::slice::from_ref(&id)).unwrap(),
        "released before the first discovery"
    );
    ctx.register_reader(0);
    enumerator.add_reader(&mut ctx, 0).unwrap();
    let consumer = admin_consumer(&source.settings).unwrap();
    let found = discover(&source.settings, consumer.as_ref(), &DiscoveryRequest::default(), 1).unwrap();
    enumerator.handle_call_result(&mut ctx, Ok(found)).unwrap();
    assert!(
        enumerator.release_splits(&mut ctx, &[id]).unwrap(),
        "a split assigned to a reader is released in place"
    );
    assert!(
        !enumerator
            .release_splits(&mut ctx, &[Arc::from("mock-release-9")])
            .unwrap(),
        "released a split it never had"
    );
}
