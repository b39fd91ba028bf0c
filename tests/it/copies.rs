//! Exact copies through the Kafka sink: a replay into a topic keeps key, value, headers (order,
//! repeated names, null and binary values), timestamp and, with `preserve_partition`, the
//! partition, byte for byte, at least once and exactly once; a target with too few partitions is
//! refused by name.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::TestKafka;
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A record exactly as Kafka holds it (headers as raw bytes, in order).
#[derive(Debug, Clone, PartialEq)]
pub struct RawRecord {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Produce `records` as they are (partition, null/empty key and value, headers, timestamp).
pub fn produce_raw(kafka: &TestKafka, topic: &str, records: &[RawRecord]) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        let mut m: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(r.partition).headers(headers);
        if let Some(k) = r.key.as_deref() {
            m = m.key(k);
        }
        if let Some(v) = r.value.as_deref() {
            m = m.payload(v);
        }
        if let Some(ts) = r.timestamp {
            m = m.timestamp(ts);
        }
        producer.send(m).map_err(|(e, _)| e).expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Every committed record of `topic` (read_committed), per partition in offset order.
pub fn read_raw(kafka: &TestKafka, topic: &str) -> Vec<RawRecord> {
    let ends = kafka.end_offsets(topic);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("group.id", "tidegate-test-raw-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + MINUTE;
    let reached = |consumer: &BaseConsumer| {
        consumer.position().is_ok_and(|positions| {
            ends.iter().all(|(p, end)| {
                *end == 0
                    || positions
                        .find_partition(topic, *p)
                        .is_some_and(|e| matches!(e.offset(), Offset::Offset(o) if o >= *end))
            })
        })
    };
    while !reached(&consumer) {
        assert!(std::time::Instant::now() < deadline, "reading {topic} back timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                m.offset(),
                RawRecord {
                    partition: m.partition(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    timestamp: m.timestamp().to_millis(),
                    headers: m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                },
            )),
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out.sort_by_key(|(offset, r)| (r.partition, *offset));
    out.into_iter().map(|(_, r)| r).collect()
}

/// The records of the test: every corner of what a Kafka record can hold, over 3 partitions.
fn corner_cases() -> Vec<RawRecord> {
    let binary: Vec<u8> = vec![0xff, 0x00, 0xfe, 0x80, b'\n', 0xc3];
    let mut records = vec![
        // tombstone: a key and a null value
        RawRecord {
            partition: 0,
            key: Some(b"k-tombstone".to_vec()),
            value: None,
            timestamp: Some(1_600_000_000_000),
            headers: vec![],
        },
        // null key, empty value
        RawRecord {
            partition: 0,
            key: None,
            value: Some(Vec::new()),
            timestamp: Some(1_600_000_000_001),
            headers: vec![],
        },
        // empty key, null value
        RawRecord {
            partition: 1,
            key: Some(Vec::new()),
            value: None,
            timestamp: Some(1_600_000_000_002),
            headers: vec![],
        },
        // empty key and value
        RawRecord {
            partition: 1,
            key: Some(Vec::new()),
            value: Some(Vec::new()),
            timestamp: Some(1_600_000_000_003),
            headers: vec![("empty".into(), Some(Vec::new()))],
        },
        // binary everything; headers repeated, null, binary, empty, in an order that is not sorted
        RawRecord {
            partition: 2,
            key: Some(binary.clone()),
            value: Some(binary.iter().rev().copied().collect()),
            timestamp: Some(1_000),
            headers: vec![
                ("z".into(), Some(b"first".to_vec())),
                ("a".into(), None),
                ("z".into(), Some(binary.clone())),
                ("a".into(), Some(Vec::new())),
                ("z".into(), Some(b"third".to_vec())),
                ("x-replicator-hop".into(), Some(b"1".to_vec())),
            ],
        },
        // an old timestamp, before 2001
        RawRecord {
            partition: 2,
            key: Some(b"old".to_vec()),
            value: Some(b"v".to_vec()),
            timestamp: Some(1),
            headers: vec![("n".into(), None)],
        },
    ];
    // and a run of ordinary records on each partition, to keep the order in view
    for i in 0..60i64 {
        records.push(RawRecord {
            partition: (i % 3) as i32,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![(i % 256) as u8, 0xff, (i / 3) as u8]),
            timestamp: Some(1_700_000_000_000 + i * 7),
            headers: vec![("seq".into(), Some(i.to_be_bytes().to_vec()))],
        });
    }
    records
}

/// Per partition, in order: what `read_raw` gives back.
fn by_partition(mut records: Vec<RawRecord>) -> Vec<RawRecord> {
    records.sort_by_key(|r| r.partition); // stable: keeps each partition's order
    records
}

/// A bounded bytes replay of `source` into `target` with `sink_extra` lines in `[sink]`.
fn copy_config(kafka: &TestKafka, name: &str, source: &str, target: &str, sink_extra: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
parallelism = 2

[source]
type = "kafka"
bootstrap_servers = "{bs}"
topics = ["{source}"]
format = "bytes"
stopping_offsets = "latest"

[sink]
type = "kafka"
bootstrap_servers = "{bs}"
topic = "{target}"
{sink_extra}

[checkpoint]
path = "{{dir}}/job.state"
interval = "1s"
"#,
        bs = kafka.bootstrap
    )
}

fn exact_copy(delivery: &str) {
    let kafka = TestKafka::get();
    let source = kafka.create_topic("copies-src", 3);
    let target = kafka.create_topic("copies-dst", 3);
    let records = corner_cases();
    produce_raw(&kafka, &source, &records);
    let expected = by_partition(records);
    assert_eq!(
        read_raw(&kafka, &source),
        expected,
        "the source topic holds what was produced"
    );

    let dir = JobDir::new();
    let name = kafka.unique_topic("copies");
    let extra = format!("preserve_partition = true\ndelivery = \"{delivery}\"");
    let config = dir.config(&copy_config(&kafka, &name, &source, &target, &extra));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let copied = read_raw(&kafka, &target);
    assert_eq!(copied.len(), expected.len(), "record count ({delivery})");
    for (i, (got, want)) in copied.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "record {i} of the copy ({delivery})");
    }
}

#[test]
fn copies_byte_for_byte_at_least_once() {
    exact_copy("at_least_once");
}

#[test]
fn copies_byte_for_byte_exactly_once() {
    exact_copy("exactly_once");
}

/// `preserve_partition` into a topic with fewer partitions than the record's: an error naming
/// the target topic, the partition and how many it has; nothing silently lands elsewhere.
#[test]
fn preserve_partition_into_fewer_partitions_is_refused() {
    let kafka = TestKafka::get();
    let source = kafka.create_topic("copies-wide", 3);
    let target = kafka.create_topic("copies-narrow", 2);
    let records: Vec<RawRecord> = (0..9)
        .map(|i| RawRecord {
            partition: i % 3,
            key: Some(vec![i as u8]),
            value: Some(vec![i as u8]),
            timestamp: Some(1_000 + i as i64),
            headers: vec![],
        })
        .collect();
    produce_raw(&kafka, &source, &records);
    let dir = JobDir::new();
    let name = kafka.unique_topic("copies-narrow");
    let config = dir.config(&copy_config(
        &kafka,
        &name,
        &source,
        &target,
        "preserve_partition = true",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("sink.preserve_partition") && log.contains(&format!("{target} has 2 partitions")),
        "the error names the key, the topic and its partitions:\n{log}"
    );
}

/// `tidegate replay SRC --to-topic NEW --preserve-partition --exactly-once` into a topic that does
/// not exist: without `--create-topic` it fails within seconds naming the topic and the flag, and
/// writes nothing; with it, the topic is created with the source's partitions and configs, and
/// the copy comes out byte for byte, partition for partition.
#[test]
fn a_copy_into_a_missing_topic_fails_fast_or_creates_it_like_the_source() {
    let kafka = TestKafka::get();
    let source = kafka.unique_topic("copies-like");
    kafka.create_named_topic_with(
        &source,
        3,
        1,
        // (not compacted: the corner cases hold records without a key)
        &[("retention.bytes", "1073741824"), ("max.message.bytes", "2000000")],
    );
    let records = corner_cases();
    produce_raw(&kafka, &source, &records);
    let expected = by_partition(records);
    assert_eq!(
        read_raw(&kafka, &source),
        expected,
        "the source topic holds what was produced"
    );
    let target = kafka.unique_topic("copies-new");
    let dir = JobDir::new();
    let args = [
        "replay",
        source.as_str(),
        "--bootstrap-servers",
        kafka.bootstrap.as_str(),
        "--to-topic",
        target.as_str(),
        "--preserve-partition",
        "--exactly-once",
        "--no-progress",
    ];
    let started = std::time::Instant::now();
    let ran = crate::oneliner::tidegate(&dir.path("."), &args, &[]);
    let took = started.elapsed();
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains(&format!("sink.topic: the topic {target} does not exist"))
            && ran.stderr.contains("--create-topic"),
        "{}",
        ran.stderr
    );
    assert!(took < Duration::from_secs(30), "failed only after {took:?}");

    let ran = crate::oneliner::ok(&dir.path("."), &[&args[..], &["--create-topic"]].concat(), &[]);
    assert!(ran.stderr.contains("topic created"), "{}", ran.stderr);
    let configs = kafka.topic_configs(&target);
    assert_eq!(
        configs.get("retention.bytes").map(String::as_str),
        Some("1073741824"),
        "{configs:?}"
    );
    assert_eq!(
        configs.get("max.message.bytes").map(String::as_str),
        Some("2000000"),
        "{configs:?}"
    );
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("-1"),
        "{configs:?}"
    );
    assert_eq!(kafka.end_offsets(&target).len(), 3, "the source's partitions");
    let copied = read_raw(&kafka, &target);
    assert_eq!(copied.len(), expected.len(), "record count");
    for (i, (got, want)) in copied.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "record {i} of the copy");
    }
}
