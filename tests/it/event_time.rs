//! Event time against the real broker: a paced replay's emit instants against its schedule, the
//! source-wide stop on skewed partitions (a historical topic and a live tail) exact to the
//! record, and a kill -9 in the middle of either, resumed without loss.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);
/// 2026-11-27T14:30:00Z, the synthetic trading day's open.
const OPEN: i64 = 1_795_789_800_000;

/// A replay of `topic` as strings into `sink` at parallelism `parallelism`, with `extra` source
/// lines, checkpointed every 500 ms.
fn config(kafka: &TestKafka, topic: &str, parallelism: usize, extra: &str, sink: &str) -> String {
    format!(
        r#"
[job]
parallelism = {parallelism}

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
format = "json"
{extra}

{sink}

[checkpoint]
path = "{{dir}}/job.state"
interval = "500ms"
"#,
        kafka.bootstrap
    )
}

/// A trade record: `{"id": id, "type": kind}` at `timestamp`.
fn trade(partition: i32, id: u64, kind: &str, timestamp: i64) -> TestRecord {
    TestRecord::to(partition, format!(r#"{{"id":{id},"type":"{kind}"}}"#)).at(timestamp)
}

/// The ids of a file sink's output, each with how often it was written.
fn written_ids(dir: &JobDir) -> BTreeMap<u64, usize> {
    let mut ids = BTreeMap::new();
    for line in read_jsonl(&dir.path("out.jsonl")) {
        let value: serde_json::Value = match &line["value"] {
            serde_json::Value::String(s) => serde_json::from_str(s).unwrap(),
            v => v.clone(),
        };
        *ids.entry(value["id"].as_u64().unwrap()).or_default() += 1;
    }
    ids
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Three skewed partitions: 0 every 10 ms, 1 every 50 ms, 2 every 500 ms, over 30 s of event
/// time, with the market close in partition 2 only, and a record of partition 0 at the very
/// millisecond of the close. Returns the records and the close's timestamp.
fn skewed_day() -> (Vec<TestRecord>, i64) {
    let close = OPEN + 20_000;
    let mut records = Vec::new();
    let mut id = 0u64;
    for (partition, every) in [(0, 10), (1, 50), (2, 500)] {
        let mut t = OPEN + partition as i64;
        while t < OPEN + 30_000 {
            records.push(trade(partition, id, "TRADE", t));
            id += 1;
            if partition == 0 && t < close && t + every >= close {
                records.push(trade(0, id, "TRADE", close));
                id += 1;
            }
            if partition == 2 && t < close && t + every >= close {
                records.push(trade(2, 1_000_000, "MARKET_CLOSE", close));
            }
            t += every;
        }
    }
    (records, close)
}

/// The ids a source-wide stop at `close` must emit: every trade before it, none at or after.
fn before(records: &[TestRecord], close: i64) -> BTreeSet<u64> {
    records
        .iter()
        .filter(|r| r.timestamp.unwrap() < close && !r.value.contains("MARKET_CLOSE"))
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r.value).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

const SOURCE_STOP: &str = "eof = 'value.type == \"MARKET_CLOSE\"'\neof_scope = \"source\"";

#[test]
fn a_source_wide_stop_on_a_skewed_historical_topic_is_exact_to_the_record() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("source-stop", 3);
    let (records, close) = skewed_day();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let cfg = dir.config(&config(
        &kafka,
        &topic,
        3,
        &format!("stopping_offsets = \"latest\"\n{SOURCE_STOP}"),
        FILE_SINK,
    ));
    let (code, log) = run(&cfg, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let written = written_ids(&dir);
    let expected = before(&records, close);
    assert!(written.values().all(|n| *n == 1), "a record written twice");
    let written: BTreeSet<u64> = written.into_keys().collect();
    assert_eq!(
        written.len(),
        expected.len(),
        "{} written, {} before the close",
        written.len(),
        expected.len()
    );
    assert_eq!(written, expected);
    assert!(log.contains("source-wide stop"), "{log}");
}

#[test]
fn a_source_wide_stop_on_a_live_tail_is_exact_to_the_record() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("source-stop-live", 3);
    let dir = JobDir::new();
    // unbounded: only the close ends it; a grace well above this machine's produce-to-fetch time
    // even when CI loads it
    let cfg = dir.config(&config(
        &kafka,
        &topic,
        3,
        &format!("{SOURCE_STOP}\ncaught_up_grace = \"5s\""),
        FILE_SINK,
    ));
    let daemon = Daemon::start(&cfg, &[]);
    daemon.wait_until("the readers to start", MINUTE, || {
        daemon.log_text().contains("splits assigned")
    });

    // produce as it happens: partition 0 every 5 ms, 1 every 25 ms, 2 every 250 ms; the close
    // in partition 2 after 2 s, trades going on for 2 s after it
    let producer = kafka.live_producer();
    let start = Instant::now();
    let mut records = Vec::new();
    let mut id = 0u64;
    let mut close = None;
    let mut next = [Duration::ZERO; 3];
    let every = [
        Duration::from_millis(5),
        Duration::from_millis(25),
        Duration::from_millis(250),
    ];
    while start.elapsed() < Duration::from_secs(4) {
        for partition in 0..3 {
            if start.elapsed() >= next[partition] {
                let now = crate::common::now_millis();
                let record = trade(partition as i32, id, "TRADE", now);
                producer.send(&topic, &record);
                records.push(record);
                id += 1;
                next[partition] += every[partition];
            }
        }
        if close.is_none() && start.elapsed() >= Duration::from_secs(2) {
            let now = crate::common::now_millis();
            producer.send(&topic, &trade(2, 1_000_000, "MARKET_CLOSE", now));
            close = Some(now);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    producer.flush();
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let close = close.unwrap();
    let written = written_ids(&dir);
    assert!(written.values().all(|n| *n == 1), "a record written twice");
    let written: BTreeSet<u64> = written.into_keys().collect();
    let expected = before(&records, close);
    let late: Vec<&u64> = written.difference(&expected).collect();
    let missing: Vec<&u64> = expected.difference(&written).collect();
    assert!(
        late.is_empty() && missing.is_empty(),
        "written at or after the close: {late:?}; missing: {missing:?}"
    );
    println!(
        "live source-wide stop: {} records before the close written, none after",
        written.len()
    );
}

/// `tidegate state show` of the job's state file.
fn state(dir: &JobDir) -> serde_json::Value {
    let out = Command::new(binary())
        .args(["state", "show", "--json"])
        .arg(dir.path("job.state"))
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_killed_paced_replay_resumes_its_pacing_and_its_source_wide_stop_without_loss() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("paced-kill", 3);
    let (records, close) = skewed_day();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    // 20 s of event time to the close at 4x: 5 s
    let cfg = dir.config(&config(
        &kafka,
        &topic,
        3,
        &format!("stopping_offsets = \"latest\"\nreplay_speed = 4.0\n{SOURCE_STOP}"),
        FILE_SINK,
    ));
    let daemon = Daemon::start(&cfg, &[]);
    // the close is found ahead of the pacing; wait until a checkpoint holds it
    daemon.wait_until("a checkpoint with the source-wide stop", MINUTE, || {
        state(&dir)["stop_timestamp"].as_i64() == Some(close)
    });
    let log = daemon.kill9();
    let first_run = read_jsonl(&dir.path("out.jsonl"));
    assert!(
        first_run.len() < 1000,
        "the kill came late: {} records written\n{log}",
        first_run.len()
    );
    // the restart resumes at or before the last record written
    let reached = first_run
        .iter()
        .filter_map(|l| l["timestamp"].as_i64())
        .max()
        .unwrap_or(OPEN);

    let restarted = Instant::now();
    let (code, log) = run(&cfg, &[], MINUTE);
    let took = restarted.elapsed();
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("restored the source-wide stop"), "{log}");
    let written = written_ids(&dir);
    assert!(written.values().all(|n| *n == 1), "a record written twice");
    assert_eq!(written.into_keys().collect::<BTreeSet<u64>>(), before(&records, close));
    // paced again from where it stood: the rest took its event time / 4, not a rush
    let rest = Duration::from_millis(((close - reached) / 4) as u64);
    println!(
        "paced replay killed after {} records; the rest ({rest:?} of event time at 4x) took {took:?}",
        first_run.len()
    );
    assert!(
        took + Duration::from_millis(500) >= rest,
        "the resumed replay rushed: {took:?} for {rest:?}"
    );
}

/// Timing measured in milliseconds: run alone (`scripts/test` runs `punctual::` serially).
mod punctual {
    use super::*;

    #[test]
    fn a_paced_replay_emits_each_record_within_20ms_of_its_schedule() {
        let kafka = TestKafka::get();
        let topic = kafka.create_topic("paced", 3);
        let out_topic = kafka.create_topic("paced-out", 1);
        // ten minutes of a trading day, one trade every 250 ms over three partitions, at 60x: 10 s
        let records: Vec<TestRecord> = (0..2400u64)
            .map(|i| trade((i % 3) as i32, i, "TRADE", OPEN + i as i64 * 250))
            .collect();
        kafka.produce(&topic, &records);
        let dir = JobDir::new();
        let sink = format!(
            "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{out_topic}\"\ntimestamps = \"now\"",
            kafka.bootstrap
        );
        let cfg = dir.config(&config(
            &kafka,
            &topic,
            3,
            "stopping_offsets = \"latest\"\nreplay_speed = 60.0",
            &sink,
        ));
        let started = Instant::now();
        let (code, log) = run(&cfg, &[], MINUTE);
        let took = started.elapsed();
        assert_eq!(code, 0, "{log}");
        assert!(took >= Duration::from_secs(9), "10 minutes at 60x took only {took:?}");

        // each output record: its emit instant (the `now` timestamp) against its source timestamp
        let out = kafka.read_all(&out_topic);
        assert_eq!(out.len(), records.len(), "every record once");
        let mut pairs: Vec<(i64, i64)> = out
            .iter()
            .map(|r| {
                let value: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
                let id = value["id"].as_i64().unwrap();
                (OPEN + id * 250, r.timestamp.unwrap())
            })
            .collect();
        pairs.sort_unstable();
        let (source0, emit0) = pairs[0];
        let mut errors: Vec<f64> = pairs
            .iter()
            .map(|(source, emit)| ((emit - emit0) as f64 - (source - source0) as f64 / 60.0).abs())
            .collect();
        errors.sort_by(f64::total_cmp);
        let (p99, max) = (percentile(&errors, 0.99), errors[errors.len() - 1]);
        println!(
            "pacing at 60x: {} records, emit error p50 {:.1} ms, p99 {p99:.1} ms, max {max:.1} ms",
            errors.len(),
            percentile(&errors, 0.5)
        );
        assert!(p99 <= 20.0, "p99 emit error {p99:.1} ms (max {max:.1} ms)");
    }
}
