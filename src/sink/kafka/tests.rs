//! Broker-free tests of the Kafka sink on librdkafka's mock cluster
//! (`rdkafka::mocking::MockCluster`): errors the broker gives must stay errors, never answers.

use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::mocking::{MockCluster, MockCoordinator};
use rdkafka::types::RDKafkaRespErr;
use serde_json::json;

use super::{KafkaSink, KafkaSinkSettings};
use crate::client::exactly_once::Delivery;
use crate::client::retry::retried;
use crate::core::Sink;
use crate::record::Record;

/// How long the sink retries before it fails (short: the faults below do not clear).
const TIMEOUT: Duration = Duration::from_secs(2);

fn settings(servers: &str, topic: &str) -> KafkaSinkSettings {
    let mut s = KafkaSinkSettings::new(servers, topic);
    s.flush_timeout = TIMEOUT;
    s
}

fn record(value: &str) -> Record {
    Record {
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        ..Record::default()
    }
}

#[test]
fn a_partition_error_reading_the_commit_marker_is_an_error_not_an_abort() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    // the sink's topic is unknown to the cluster: the committed-offsets lookup answers its
    // partition with UNKNOWN_TOPIC_OR_PART (and no metadata), a partition-level error
    let mut settings = settings(&cluster.bootstrap_servers(), "eo-marker-missing");
    settings.delivery = Delivery::ExactlyOnce;
    settings.transactional_id = Some("tidegate-test-recover".into());
    let mut sink = KafkaSink::new(settings, None).expect("sink");
    let state = json!({ "transactional_id": "tidegate-test-recover", "transaction": "a-token" });
    let result = sink.recover(Some((7, Some(&state))));
    let err = match result {
        Ok(committed) => panic!("the lookup failed, yet it answered committed = {committed}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("eo-marker-missing"), "{err}");
    assert!(err.contains("commit marker"), "{err}");
    // retried for the timeout before it gave up
    assert!(err.contains("attempts in 2s"), "{err}");
}

#[test]
fn end_markers_to_a_topic_without_partitions_are_an_error_naming_it() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("markets", 3, 1).expect("topic");
    let mut sink =
        KafkaSink::new(settings(&cluster.bootstrap_servers(), "markets"), Some(record("CLOSE"))).expect("sink");
    sink.write(vec![record("trade-1"), record("trade-2")]).expect("write");
    sink.prepare_commit(1).expect("every trade acknowledged");
    // now the topic's metadata is an error with no partitions
    cluster
        .topic_error("markets", RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        .expect("topic error");
    let err = match sink.end_of_input() {
        Ok(()) => panic!("no partition to write the end markers to, yet the end of input succeeded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("markets"), "{err}");
    assert!(err.contains("end marker"), "{err}");
    assert!(err.contains("attempts in 2s"), "{err}");
}

#[test]
fn end_markers_go_to_every_partition() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("markets-ok", 3, 1).expect("topic");
    let mut sink = KafkaSink::new(
        settings(&cluster.bootstrap_servers(), "markets-ok"),
        Some(record("CLOSE")),
    )
    .expect("sink");
    sink.write(vec![record("trade-1")]).expect("write");
    sink.end_of_input().expect("end markers");
    sink.close().expect("close");
    // read every partition back: one CLOSE each
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "end-markers-check")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset("markets-ok", p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    rdkafka::consumer::Consumer::assign(&consumer, &tpl).expect("assign");
    let mut closes = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while closes.len() < 3 {
        assert!(Instant::now() < deadline, "end markers seen in partitions {closes:?}");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            if rdkafka::Message::payload(&m) == Some(b"CLOSE".as_slice()) {
                closes.insert(rdkafka::Message::partition(&m));
            }
        }
    }
}

#[test]
fn a_failure_that_passes_is_retried_and_one_that_stays_fails_with_the_last_error() {
    let mut calls = 0;
    let value = retried("reading something", TIMEOUT, |_| {
        calls += 1;
        if calls < 3 {
            Err(crate::Error::runtime("reading something", format!("not yet ({calls})")))
        } else {
            Ok(calls)
        }
    })
    .expect("the third attempt succeeds");
    assert_eq!(value, 3);

    let err = retried::<()>("reading something else", Duration::from_millis(500), |_| {
        Err(crate::Error::runtime("reading something else", "no leader"))
    })
    .unwrap_err();
    let text = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(|s| s.to_string())
            .unwrap_or_default()
    );
    assert!(text.contains("reading something else: still failing after"), "{text}");
    assert!(text.contains("no leader"), "{text}");
}

#[test]
fn a_commit_marker_whose_group_coordinator_died_stops_the_job_instead_of_hanging() {
    // librdkafka's send_offsets_to_transaction waits forever when the group coordinator goes
    // down mid-call (confluentinc/librdkafka#5456); the sink must give up after its timeout
    let cluster = MockCluster::new(3).expect("mock cluster");
    let topic = "eo-stuck-marker";
    cluster.create_topic(topic, 1, 3).expect("topic");
    let id = "tidegate-test-stuck";
    cluster
        .coordinator(MockCoordinator::Transaction(id.into()), 1)
        .expect("transaction coordinator");
    cluster
        .coordinator(MockCoordinator::Group(id.into()), 2)
        .expect("group coordinator");
    let mut settings = settings(&cluster.bootstrap_servers(), topic);
    settings.delivery = Delivery::ExactlyOnce;
    settings.transactional_id = Some(id.into());
    let mut sink = KafkaSink::new(settings, None).expect("sink");
    assert!(sink.recover(None).expect("transactions initialised"));
    sink.write(vec![record("a")]).expect("written into the transaction");
    cluster.broker_down(2).expect("group coordinator down");
    let started = Instant::now();
    let err = match sink.prepare_commit(1) {
        Ok(_) => panic!("the commit marker was written without its group coordinator"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("commit marker was not written within"), "{err}");
    assert!(
        started.elapsed() < TIMEOUT * 10,
        "gave up after {:?}",
        started.elapsed()
    );
}

/// The check for a missing sink topic asks as the producer's first send would: a broker that
/// creates topics on demand (librdkafka's mock cluster does) creates it and the sink goes on, as
/// it did before the check; a first look without auto-creation does not create it.
#[test]
fn a_broker_that_creates_topics_on_demand_still_creates_the_sink_s() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let s = settings(&cluster.bootstrap_servers(), "made-on-demand");
    assert!(
        !super::targets::exists(&s, "made-on-demand").unwrap(),
        "a first look creates nothing"
    );
    super::targets::check_exists(&s, "made-on-demand").expect("created on demand, as a send would");
    assert!(super::targets::exists(&s, "made-on-demand").unwrap());
}

/// Reads `partitions` of `topic` at `servers` until `count` records came back, in each
/// partition's order.
fn read_back(servers: &str, topic: &str, partitions: i32, count: usize) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::consumer::Consumer as _;
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", format!("{topic}-check"))
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut read = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read.len() < count {
        assert!(Instant::now() < deadline, "{} of {count} records read back", read.len());
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            read.push(m.expect("a record").detach());
        }
    }
    read
}

#[test]
fn a_write_beyond_the_producer_s_queue_goes_out_whole_in_order_with_headers_and_timestamps() {
    use rdkafka::message::{Headers as _, Message as _};
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("batched", 2, 1).expect("topic");
    let mut settings = settings(&cluster.bootstrap_servers(), "batched");
    // a queue of 50 messages: one write of 3,000 records fills it again and again
    settings
        .properties
        .insert("queue.buffering.max.messages".into(), "50".into());
    settings.preserve_partition = true;
    settings.flush_timeout = Duration::from_secs(30);
    let mut sink = KafkaSink::new(settings, None).expect("sink");
    let records: Vec<Record> = (0..3000i64)
        .map(|i| Record {
            partition: Some((i % 2) as i32),
            key: (i % 3 == 0).then(|| Bytes::from(format!("k{i}"))),
            value: (i % 13 != 0).then(|| Bytes::from(format!("v{i}"))),
            timestamp: (i % 11 == 0).then_some(1_000_000 + i),
            headers: if i % 7 == 0 {
                vec![crate::record::Header {
                    key: "h".into(),
                    value: Some(format!("{i}").into_bytes()),
                }]
            } else {
                Vec::new()
            },
            ..Record::default()
        })
        .collect();
    sink.write(records).expect("write");
    sink.prepare_commit(1).expect("every record acknowledged");
    sink.close().expect("close");
    let read = read_back(&cluster.bootstrap_servers(), "batched", 2, 3000);
    // each partition in the order written, every record once, as it was written
    let mut next = [0i64, 1];
    for m in &read {
        let p = m.partition();
        let i = next[p as usize];
        next[p as usize] += 2;
        let value = (i % 13 != 0).then(|| format!("v{i}"));
        assert_eq!(
            m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
            value,
            "record {i}"
        );
        let key = (i % 3 == 0).then(|| format!("k{i}"));
        assert_eq!(
            m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
            key,
            "record {i}"
        );
        if i % 11 == 0 {
            assert_eq!(m.timestamp().to_millis(), Some(1_000_000 + i), "record {i}");
        }
        let header = m
            .headers()
            .and_then(|h| h.iter().next())
            .and_then(|h| h.value.map(<[u8]>::to_vec));
        assert_eq!(header, (i % 7 == 0).then(|| format!("{i}").into_bytes()), "record {i}");
    }
    assert_eq!(next, [3000, 3001], "every record read back once");
}

#[test]
fn each_write_s_keyless_records_go_together_to_the_next_partition_and_keyed_ones_by_key() {
    use rdkafka::message::Message as _;
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("keyless", 3, 1).expect("topic");
    let mut sink = KafkaSink::new(settings(&cluster.bootstrap_servers(), "keyless"), None).expect("sink");
    for write in 0..3 {
        let records = (0..100)
            .map(|i| Record {
                // every tenth record has a key: "k0".."k9", the same ten in each write
                key: (i % 10 == 0).then(|| Bytes::from(format!("k{}", i / 10))),
                value: Some(Bytes::from(format!("{write}-{i}"))),
                ..Record::default()
            })
            .collect();
        sink.write(records).expect("write");
    }
    sink.prepare_commit(1).expect("every record acknowledged");
    let read = read_back(&cluster.bootstrap_servers(), "keyless", 3, 300);
    let mut keyless_partitions: Vec<std::collections::BTreeSet<i32>> = vec![Default::default(); 3];
    let mut key_partitions: std::collections::BTreeMap<Vec<u8>, std::collections::BTreeSet<i32>> = Default::default();
    for m in &read {
        match m.key() {
            Some(k) => {
                key_partitions.entry(k.to_vec()).or_default().insert(m.partition());
            }
            None => {
                let value = String::from_utf8_lossy(m.payload().expect("a value")).into_owned();
                let write: usize = value
                    .split('-')
                    .next()
                    .and_then(|w| w.parse().ok())
                    .expect("write index");
                keyless_partitions[write].insert(m.partition());
            }
        }
    }
    // one partition per write, a different one each time
    let chosen: Vec<i32> = keyless_partitions
        .iter()
        .map(|p| {
            assert_eq!(p.len(), 1, "a write's keyless records went to partitions {p:?}");
            *p.iter().next().expect("one partition")
        })
        .collect();
    let distinct: std::collections::BTreeSet<_> = chosen.iter().collect();
    assert_eq!(distinct.len(), 3, "the writes' partitions {chosen:?}");
    // a key goes to its one partition, whatever the write
    assert_eq!(key_partitions.len(), 10);
    for (k, p) in &key_partitions {
        assert_eq!(
            p.len(),
            1,
            "key {:?} went to partitions {p:?}",
            String::from_utf8_lossy(k)
        );
    }
}
