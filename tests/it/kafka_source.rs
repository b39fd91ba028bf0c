//! The Kafka source against the real broker: stopping offsets, end-of-stream expressions,
//! transactions, empty and sparse topics, committed offsets, discovery and restarts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tidegate::core::{CollectSink, FinishReason, Job, JobOptions, JobReport, StateStore};
use tidegate::kafka::{CommittedReset, KafkaPartitionSplit, KafkaSource, StartingOffsets, StoppingOffsets};
use tidegate::record::{Record, ValueFormat};

use crate::common::{block_on, TestKafka, TestRecord};

fn run(source: KafkaSource, parallelism: usize) -> (Vec<Record>, JobReport<KafkaPartitionSplit>) {
    run_with(source, parallelism, None).expect("the job runs")
}

fn run_with(
    source: KafkaSource,
    parallelism: usize,
    state: Option<&std::path::Path>,
) -> tidegate::Result<(Vec<Record>, JobReport<KafkaPartitionSplit>)> {
    let (sink, out) = CollectSink::new();
    let mut job = Job::new(source, JobOptions::new("it", parallelism));
    if let Some(path) = state {
        job = job.with_state(StateStore::open(path)?);
    }
    let report = block_on(job.run(Box::new(sink)))?;
    let records = out.lock().unwrap().clone();
    Ok((records, report))
}

/// (partition, offset) of each record, sorted.
fn coordinates(records: &[Record]) -> Vec<(i32, i64)> {
    let mut c: Vec<(i32, i64)> = records
        .iter()
        .map(|r| (r.partition.unwrap(), r.offset.unwrap()))
        .collect();
    c.sort_unstable();
    c
}

fn json(kind: &str, i: usize) -> String {
    format!(r#"{{"type":"{kind}","seq":{i}}}"#)
}

fn reasons(report: &JobReport<KafkaPartitionSplit>) -> BTreeMap<i32, (FinishReason, Option<i64>)> {
    report
        .splits
        .iter()
        .map(|s| {
            (
                s.split.partition,
                s.finished.map(|f| (f.reason, f.at)).expect("every split finished"),
            )
        })
        .collect()
}

fn source(kafka: &TestKafka, topic: &str) -> tidegate::kafka::KafkaSourceBuilder {
    KafkaSource::builder()
        .bootstrap_servers(&kafka.bootstrap)
        .topics([topic])
}

#[test]
fn markers_stop_their_partitions_and_the_rest_reads_to_latest() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("markers", 3);
    let mut records = Vec::new();
    for i in 0..20 {
        records.push(TestRecord::to(
            0,
            json(if i == 7 { "MARKET_CLOSE" } else { "TRADE" }, i),
        ));
        records.push(TestRecord::to(
            1,
            json(if i == 13 { "MARKET_CLOSE" } else { "TRADE" }, i),
        ));
        records.push(TestRecord::to(2, json("TRADE", i)));
    }
    kafka.produce(&topic, &records);
    let src = source(&kafka, &topic)
        .format(ValueFormat::Json)
        .bounded(StoppingOffsets::Latest)
        .eof_expression(r#"value.type == "MARKET_CLOSE""#)
        .unwrap()
        .build()
        .unwrap();
    let (out, report) = run(src, 2);
    let expected: Vec<(i32, i64)> = (0..7)
        .map(|o| (0, o))
        .chain((0..13).map(|o| (1, o)))
        .chain((0..20).map(|o| (2, o)))
        .collect();
    assert_eq!(coordinates(&out), expected);
    assert!(out.iter().all(|r| r.decoded.as_ref().unwrap()["type"] == "TRADE"));
    let reasons = reasons(&report);
    assert_eq!(reasons[&0], (FinishReason::EofRecord, Some(7)));
    assert_eq!(reasons[&1], (FinishReason::EofRecord, Some(13)));
    assert_eq!(reasons[&2].0, FinishReason::StoppingOffset);
}

#[test]
fn an_empty_topic_ends_at_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("empty", 3);
    let src = source(&kafka, &topic).bounded(StoppingOffsets::Latest).build().unwrap();
    let (out, report) = run(src, 2);
    assert!(out.is_empty());
    assert_eq!(report.splits.len(), 3);
    assert!(reasons(&report).values().all(|(r, _)| *r == FinishReason::Empty));
}

#[test]
fn one_of_ten_partitions_with_data_and_more_readers_than_partitions() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("sparse", 10);
    kafka.produce(
        &topic,
        &(0..50).map(|i| TestRecord::to(6, format!("r{i}"))).collect::<Vec<_>>(),
    );
    let (out, report) = run(
        source(&kafka, &topic).bounded(StoppingOffsets::Latest).build().unwrap(),
        3,
    );
    assert_eq!(coordinates(&out), (0..50).map(|o| (6, o)).collect::<Vec<_>>());
    assert_eq!(report.splits.len(), 10);

    let small = kafka.create_topic("few", 2);
    kafka.produce(&small, &[TestRecord::to(0, "a"), TestRecord::to(1, "b")]);
    let (out, _) = run(
        source(&kafka, &small).bounded(StoppingOffsets::Latest).build().unwrap(),
        5,
    );
    assert_eq!(coordinates(&out), vec![(0, 0), (1, 0)]);
}

#[test]
fn transactions_end_and_only_committed_records_are_emitted() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("tx", 1);
    let batch = |tag: &str, n: usize| {
        (0..n)
            .map(|i| TestRecord::to(0, format!("{tag}{i}")))
            .collect::<Vec<_>>()
    };
    kafka.produce_transactions(
        &topic,
        &[
            (batch("c", 5), true),
            (batch("a", 4), false),
            (batch("d", 3), true),
            (batch("z", 2), false),
        ],
    );
    // the log ends with an abort marker: only the position can tell the split is done
    let src = source(&kafka, &topic)
        .format(ValueFormat::String)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let (out, report) = run(src, 1);
    let values: Vec<String> = out
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, ["c0", "c1", "c2", "c3", "c4", "d0", "d1", "d2"]);
    assert_eq!(reasons(&report)[&0].0, FinishReason::StoppingOffset);
}

#[test]
fn stop_offset_is_exclusive_and_start_at_stop_is_empty() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("stop", 2);
    kafka.produce(
        &topic,
        &(0..100)
            .map(|i| TestRecord::to(i % 2, format!("{i}")))
            .collect::<Vec<_>>(),
    );
    let stops = BTreeMap::from([((topic.clone(), 0), 50), ((topic.clone(), 1), 10)]);
    let starts = BTreeMap::from([((topic.clone(), 1), 10)]);
    let src = source(&kafka, &topic)
        .starting_offsets(StartingOffsets::Specific(starts))
        .bounded(StoppingOffsets::Specific(stops))
        .build()
        .unwrap();
    let (out, report) = run(src, 1);
    assert_eq!(coordinates(&out), (0..50).map(|o| (0, o)).collect::<Vec<_>>());
    let reasons = reasons(&report);
    assert_eq!(reasons[&0].0, FinishReason::StoppingOffset);
    assert_eq!(reasons[&1].0, FinishReason::Empty);
}

#[test]
fn stop_at_a_timestamp_per_partition() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("ts", 2);
    let base = 1_750_000_000_000i64;
    // partition 0: one record per second from base; partition 1: one per 2 seconds
    let mut records = Vec::new();
    for i in 0..20 {
        records.push(TestRecord::to(0, format!("a{i}")).at(base + i * 1000));
        records.push(TestRecord::to(1, format!("b{i}")).at(base + i * 2000));
    }
    kafka.produce(&topic, &records);
    let src = source(&kafka, &topic)
        .starting_offsets(StartingOffsets::Timestamp(base + 3000))
        .bounded(StoppingOffsets::Timestamp(base + 10_000))
        .build()
        .unwrap();
    let (out, _) = run(src, 2);
    // p0: ts 3000..=9000 -> offsets 3..10; p1: ts 4000..=8000 -> offsets 2..5
    let expected: Vec<(i32, i64)> = (3..10).map(|o| (0, o)).chain((2..5).map(|o| (1, o))).collect();
    assert_eq!(coordinates(&out), expected);
    assert!(out
        .iter()
        .all(|r| r.timestamp.unwrap() >= base + 3000 && r.timestamp.unwrap() < base + 10_000));
}

#[test]
fn committed_start_without_offsets_errors_or_resets() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("committed", 2);
    kafka.produce(
        &topic,
        &(0..10)
            .map(|i| TestRecord::to(i % 2, format!("{i}")))
            .collect::<Vec<_>>(),
    );
    let group = kafka.unique_topic("group");
    // each run commits its final offsets, so each reset gets a group of its own
    let with_reset = |reset| {
        source(&kafka, &topic)
            .group_id(format!("{group}-{reset:?}"))
            .starting_offsets(StartingOffsets::Committed { reset })
            .bounded(StoppingOffsets::Latest)
            .build()
            .unwrap()
    };
    let err = run_with(with_reset(CommittedReset::None), 1, None).expect_err("no committed offsets");
    let message = err.to_string();
    assert!(
        message.contains(&format!("{topic}:0")) && message.contains(&format!("{topic}:1")),
        "{message}"
    );
    assert!(message.contains(&format!("{group}-None")), "{message}");

    let (out, _) = run(with_reset(CommittedReset::Latest), 1);
    assert!(out.is_empty());
    let (out, _) = run(with_reset(CommittedReset::Earliest), 1);
    assert_eq!(out.len(), 10);
}

#[test]
fn committed_offsets_of_a_finished_run_are_the_next_start() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("commit", 1);
    kafka.produce(
        &topic,
        &(0..10).map(|i| TestRecord::to(0, format!("{i}"))).collect::<Vec<_>>(),
    );
    let group = kafka.unique_topic("group");
    let stops = BTreeMap::from([((topic.clone(), 0), 6)]);
    let first = source(&kafka, &topic)
        .group_id(&group)
        .bounded(StoppingOffsets::Specific(stops))
        .build()
        .unwrap();
    let (out, _) = run(first, 1);
    assert_eq!(out.len(), 6);
    // the final checkpoint's commit is asynchronous: wait for it to be visible
    let mut next = Vec::new();
    crate::common::wait_until("the committed offset", Duration::from_secs(20), || {
        let again = source(&kafka, &topic)
            .group_id(&group)
            .starting_offsets(StartingOffsets::Committed {
                reset: CommittedReset::None,
            })
            .bounded(StoppingOffsets::Latest)
            .build()
            .unwrap();
        match run_with(again, 1, None) {
            Ok((out, _)) => {
                next = coordinates(&out);
                true
            }
            Err(_) => false,
        }
    });
    assert_eq!(next, (6..10).map(|o| (0, o)).collect::<Vec<_>>());
}

#[test]
fn a_missing_topic_is_a_clear_error() {
    let kafka = TestKafka::get();
    let topic = kafka.unique_topic("missing");
    let err = run_with(
        source(&kafka, &topic).bounded(StoppingOffsets::Latest).build().unwrap(),
        1,
        None,
    )
    .expect_err("missing topic");
    assert!(
        err.to_string().contains(&topic) && err.to_string().contains("does not exist"),
        "{err}"
    );
}

#[test]
fn a_marker_at_or_beyond_the_stopping_offset_does_not_matter() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("beyond", 2);
    let mut records = Vec::new();
    for i in 0..10 {
        records.push(TestRecord::to(
            0,
            json(if i == 5 { "MARKET_CLOSE" } else { "TRADE" }, i),
        ));
        records.push(TestRecord::to(
            1,
            json(if i == 8 { "MARKET_CLOSE" } else { "TRADE" }, i),
        ));
    }
    kafka.produce(&topic, &records);
    let stops = BTreeMap::from([((topic.clone(), 0), 5), ((topic.clone(), 1), 6)]);
    let src = source(&kafka, &topic)
        .format(ValueFormat::Json)
        .bounded(StoppingOffsets::Specific(stops))
        .eof_expression(r#"value.type == "MARKET_CLOSE""#)
        .unwrap()
        .build()
        .unwrap();
    let (out, report) = run(src, 1);
    let expected: Vec<(i32, i64)> = (0..5).map(|o| (0, o)).chain((0..6).map(|o| (1, o))).collect();
    assert_eq!(coordinates(&out), expected);
    assert!(reasons(&report)
        .values()
        .all(|(r, _)| *r == FinishReason::StoppingOffset));
}

#[test]
fn a_restart_after_a_marker_emits_nothing_after_it() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("restart-marker", 1);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("replay.state");
    let records: Vec<TestRecord> = (0..10)
        .map(|i| TestRecord::to(0, json(if i == 4 { "MARKET_CLOSE" } else { "TRADE" }, i)))
        .collect();
    kafka.produce(&topic, &records);
    let make = || {
        source(&kafka, &topic)
            .format(ValueFormat::Json)
            .eof_expression(r#"value.type == "MARKET_CLOSE""#)
            .unwrap()
            .build()
            .unwrap()
    };
    // unbounded with an EOF expression: the job ends at the marker
    let (out, _) = run_with(make(), 1, Some(&state)).unwrap();
    assert_eq!(coordinates(&out), (0..4).map(|o| (0, o)).collect::<Vec<_>>());
    // more records arrive after the marker, then the job restarts from its state
    kafka.produce(
        &topic,
        &(10..15)
            .map(|i| TestRecord::to(0, json("TRADE", i)))
            .collect::<Vec<_>>(),
    );
    let (out, report) = run_with(make(), 1, Some(&state)).unwrap();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(reasons(&report)[&0], (FinishReason::EofRecord, Some(4)));
}

#[test]
fn a_partition_added_while_running_is_read_from_earliest() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("discover", 1);
    kafka.produce(&topic, &[TestRecord::to(0, "first")]);
    let src = source(&kafka, &topic)
        .format(ValueFormat::String)
        .partition_discovery_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (sink, out) = CollectSink::new();
    let job = Job::new(src, JobOptions::new("discover", 2)).with_stop_signal(rx);
    let runner = std::thread::spawn(move || block_on(job.run(Box::new(sink))));
    crate::common::wait_until("the first record", Duration::from_secs(30), || {
        out.lock().unwrap().len() == 1
    });
    kafka.add_partitions(&topic, 2);
    kafka.produce(&topic, &[TestRecord::to(1, "p1-a"), TestRecord::to(1, "p1-b")]);
    crate::common::wait_until("records of the new partition", Duration::from_secs(30), || {
        out.lock().unwrap().len() == 3
    });
    tx.send(true).unwrap();
    let report = runner.join().unwrap().expect("stops cleanly");
    assert!(report.stopped);
    let out = out.lock().unwrap().clone();
    assert_eq!(coordinates(&out), vec![(0, 0), (1, 0), (1, 1)]);
}

#[test]
fn an_evaluator_closure_works_from_rust() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("closure", 1);
    kafka.produce(
        &topic,
        &(0..10).map(|i| TestRecord::to(0, format!("{i}"))).collect::<Vec<_>>(),
    );
    let eof = Arc::new(|r: &Record| r.value.as_deref() == Some(b"6".as_slice()));
    let src = source(&kafka, &topic)
        .bounded(StoppingOffsets::Latest)
        .eof_evaluator(eof)
        .build()
        .unwrap();
    let (out, _) = run(src, 1);
    assert_eq!(coordinates(&out), (0..6).map(|o| (0, o)).collect::<Vec<_>>());
}

/// Topics written with every codec Kafka producers use are read back whole: librdkafka is built
/// with zstd from the system's libzstd (`zstd-pkg-config`), gzip from zlib, lz4 and snappy
/// from its own sources.
#[test]
fn every_compression_codec_is_read() {
    let kafka = TestKafka::get();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = kafka.create_topic(&format!("codec-{codec}"), 2);
        let records: Vec<TestRecord> = (0..200)
            .map(|i| TestRecord::to(i % 2, json("TRADE", i as usize).repeat(4)))
            .collect();
        kafka
            .with_properties(&[("compression.type", codec)])
            .produce(&topic, &records);
        let src = source(&kafka, &topic).bounded(StoppingOffsets::Latest).build().unwrap();
        let (out, _) = run(src, 2);
        let mut values: Vec<String> = out
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        values.sort();
        let mut expected: Vec<String> = (0..200).map(|i| json("TRADE", i).repeat(4)).collect();
        expected.sort();
        assert_eq!(values, expected, "{codec}");
    }
}

/// A reader's fetches ask for 256 KiB per answer and 64 KiB per partition (to bound what a well
/// compressed answer unpacks to); a record larger than both still comes whole, since a broker
/// always answers with the first batch of a partition, however large.
#[test]
fn records_larger_than_a_readers_fetch_are_read_whole() {
    let kafka = TestKafka::get();
    let topic = kafka.unique_topic("large");
    kafka.create_named_topic_with(&topic, 2, 1, &[("max.message.bytes", "4194304")]);
    let sizes = [10, 70 * 1024, 300 * 1024, 2 * 1024 * 1024, 20];
    let value = |i: usize, size: usize| -> String {
        (0..size)
            .map(|j| char::from(b'a' + ((i * 7 + j * 13) % 26) as u8))
            .collect()
    };
    let records: Vec<TestRecord> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| TestRecord::to((i % 2) as i32, value(i, size)))
        .collect();
    kafka
        .with_properties(&[("message.max.bytes", "4194304")])
        .produce(&topic, &records);
    let src = source(&kafka, &topic).bounded(StoppingOffsets::Latest).build().unwrap();
    let (out, _) = run(src, 2);
    // record i went to partition i % 2, at offset i / 2
    let mut got: Vec<(i32, i64, usize)> = out
        .iter()
        .map(|r| {
            (
                r.partition.unwrap(),
                r.offset.unwrap(),
                r.value.as_ref().map_or(0, |v| v.len()),
            )
        })
        .collect();
    got.sort();
    let mut expected: Vec<(i32, i64, usize)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| ((i % 2) as i32, (i / 2) as i64, size))
        .collect();
    expected.sort();
    assert_eq!(got, expected, "(partition, offset, value size)");
    for r in &out {
        let i = r.offset.unwrap() as usize * 2 + r.partition.unwrap() as usize;
        assert!(
            r.value.as_deref() == Some(value(i, sizes[i]).as_bytes()),
            "record {i}'s value differs"
        );
    }
}
