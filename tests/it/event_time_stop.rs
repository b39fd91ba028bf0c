//! Event time's edges against the real broker: records without a timestamp in a paced replay, and
//! the source-wide stop with an idle partition on a live topic (the job ends at once, not at the
//! next checkpoint).

use std::time::{Duration, Instant};

use crate::common::{now_millis, wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A replay of `topic` (JSON) into `out.jsonl` at parallelism `parallelism`, checkpointed every
/// `interval`, with `extra` source lines.
fn config(kafka: &TestKafka, topic: &str, parallelism: usize, interval: &str, extra: &str) -> String {
    format!(
        r#"
[job]
parallelism = {parallelism}

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
format = "json"
eof = 'value.type == "MARKET_CLOSE"'
eof_scope = "source"
{extra}

{FILE_SINK}

[checkpoint]
path = "{{dir}}/job.state"
interval = "{interval}"
"#,
        kafka.bootstrap
    )
}

/// A record `{"id": id, "type": kind}` at `timestamp`.
fn record(partition: i32, id: u64, kind: &str, timestamp: i64) -> TestRecord {
    TestRecord::to(partition, format!(r#"{{"id":{id},"type":"{kind}"}}"#)).at(timestamp)
}

/// The ids written to `out.jsonl`, in file order.
fn written_ids(dir: &JobDir) -> Vec<u64> {
    read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|line| match &line["value"] {
            serde_json::Value::String(s) => serde_json::from_str::<serde_json::Value>(s).unwrap()["id"].as_u64(),
            v => v["id"].as_u64(),
        })
        .map(|id| id.expect("an id"))
        .collect()
}

#[test]
fn a_source_wide_stop_on_a_live_topic_with_an_idle_partition_ends_before_the_next_checkpoint() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("stop-idle", 2);
    let dir = JobDir::new();
    // a checkpoint interval far above the grace: the job must not wait for its next tick
    let interval = Duration::from_secs(20);
    let cfg = dir.config(&config(&kafka, &topic, 2, "20s", ""));
    let daemon = Daemon::start(&cfg, &[]);
    daemon.wait_until("the readers to start", MINUTE, || {
        daemon.log_text().contains("splits assigned")
    });
    // partition 1 stays idle; partition 0 gets two trades and the close, as it happens
    let producer = kafka.live_producer();
    let now = now_millis();
    producer.send(&topic, &record(0, 1, "TRADE", now - 2));
    producer.send(&topic, &record(0, 2, "TRADE", now - 1));
    producer.send(&topic, &record(0, 3, "MARKET_CLOSE", now));
    producer.flush();
    let closed = Instant::now();
    let (status, log) = daemon.wait(MINUTE);
    let took = closed.elapsed();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(written_ids(&dir), vec![1, 2]);
    println!("live source-wide stop with an idle partition: the job ended {took:?} after the close");
    assert!(
        took < interval / 2,
        "the job ended {took:?} after the close, waiting for a checkpoint every {interval:?}\n{log}"
    );
}

#[test]
fn a_paced_replay_of_records_without_a_timestamp_keeps_their_place_and_its_pace() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("paced-untimed", 2);
    // Kafka stamps -1 when a producer gives no time (RecordBatch.NO_TIMESTAMP): librdkafka hands
    // it over as no timestamp. Partition 0 starts with three such records and has one after
    // each timed record; partition 1 is timed throughout. 4 s of event time at 4x: 1 s.
    const OPEN: i64 = 1_795_789_800_000;
    let mut records = Vec::new();
    let mut id = 0u64;
    for _ in 0..3 {
        records.push(record(0, id, "TRADE", -1));
        id += 1;
    }
    for s in 0..=4i64 {
        records.push(record(0, id, "TRADE", OPEN + s * 1000));
        records.push(record(0, id + 1, "TRADE", -1));
        records.push(record(1, id + 2, "TRADE", OPEN + s * 1000 + 500));
        id += 3;
    }
    kafka.produce(&topic, &records);
    let stored = kafka.read_all(&topic);
    assert_eq!(
        stored.iter().filter(|r| r.timestamp.is_none()).count(),
        8,
        "the broker kept the records without a timestamp: {stored:?}"
    );
    let dir = JobDir::new();
    let cfg = dir.config(
        &config(
            &kafka,
            &topic,
            2,
            "500ms",
            "stopping_offsets = \"latest\"\nreplay_speed = 4.0",
        )
        .replace("eof_scope = \"source\"", ""),
    );
    let started = Instant::now();
    let (code, log) = run(&cfg, &[], MINUTE);
    let took = started.elapsed();
    assert_eq!(code, 0, "{log}");
    let lines = read_jsonl(&dir.path("out.jsonl"));
    let of = |partition: i64| -> Vec<u64> {
        let ids = written_ids(&dir);
        ids.into_iter()
            .zip(&lines)
            .filter(|(_, l)| l["partition"].as_i64() == Some(partition))
            .map(|(id, _)| id)
            .collect()
    };
    let expected_0: Vec<u64> = (0..3).chain((0..5).flat_map(|s| [3 + s * 3, 4 + s * 3])).collect();
    assert_eq!(of(0), expected_0, "partition 0 in its order, every record once");
    assert_eq!(of(1).len(), 5);
    // the timed records are paced: 4 s of event time at 4x
    assert!(
        took >= Duration::from_secs(1),
        "4 s of event time at 4x took only {took:?}"
    );
    println!("paced replay with records without a timestamp: {took:?}");
}

#[test]
fn a_source_wide_stop_is_exact_on_a_partition_out_of_timestamp_order() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("stop-disorder", 2);
    const OPEN: i64 = 1_795_789_800_000;
    let close = OPEN + 10_000;
    // partition 0: in order, a trade every 100 ms and its close at `close`; partition 1: in order
    // up to a second before, then out of order by up to 650 ms around it, with a close 300 ms
    // before partition 0's placed after a later record: that one is the stop
    let stop = close - 300;
    let mut records = Vec::new();
    let mut id = 0u64;
    let mut push = |records: &mut Vec<TestRecord>, partition: i32, t: i64| {
        records.push(record(partition, id, "TRADE", t));
        id += 1;
    };
    for t in (OPEN..OPEN + 20_000).step_by(100) {
        if t == close {
            records.push(record(0, 1_000_000, "MARKET_CLOSE", close));
        }
        push(&mut records, 0, t);
    }
    for t in (OPEN..close - 1000).step_by(250) {
        push(&mut records, 1, t);
    }
    for offset in [-400, 300, -300, -350, -301, 200, -299, 900, 1200] {
        if offset == -300 {
            records.push(record(1, 1_000_001, "MARKET_CLOSE", close - 300));
        } else {
            push(&mut records, 1, close + offset);
        }
    }
    for t in (close + 2000..OPEN + 20_000).step_by(250) {
        push(&mut records, 1, t);
    }
    kafka.produce(&topic, &records);
    let expected: std::collections::BTreeSet<u64> = records
        .iter()
        .filter(|r| r.timestamp.unwrap() < stop && !r.value.contains("MARKET_CLOSE"))
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r.value).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();

    let dir = JobDir::new();
    let cfg = dir.config(&config(
        &kafka,
        &topic,
        2,
        "500ms",
        "stopping_offsets = \"latest\"\nmax_out_of_orderness = \"1s\"",
    ));
    let (code, log) = run(&cfg, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let written = written_ids(&dir);
    let unique: std::collections::BTreeSet<u64> = written.iter().copied().collect();
    assert_eq!(unique.len(), written.len(), "a record written twice");
    let late: Vec<&u64> = unique.difference(&expected).collect();
    let missing: Vec<&u64> = expected.difference(&unique).collect();
    assert!(
        late.is_empty() && missing.is_empty(),
        "written at or after the stop: {late:?}; missing before it: {missing:?}\n{log}"
    );
}

#[test]
fn a_source_wide_stop_waits_for_an_open_transaction_holding_records_before_it() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("stop-open-tx", 2);
    let dir = JobDir::new();
    let grace = Duration::from_secs(1);
    let cfg = dir.config(&config(&kafka, &topic, 2, "500ms", "caught_up_grace = \"1s\""));
    let mut daemon = Daemon::start(&cfg, &[]);
    daemon.wait_until("the readers to start", MINUTE, || {
        daemon.log_text().contains("splits assigned")
    });
    // partition 1: a transaction with three trades, open; then partition 0: two trades and the
    // close, all after the transaction's trades
    let tx = kafka.transactional_producer();
    tx.begin();
    let opened = now_millis();
    tx.send_and_flush(
        &topic,
        &[
            record(1, 10, "TRADE", opened),
            record(1, 11, "TRADE", opened + 1),
            record(1, 12, "TRADE", opened + 2),
        ],
    );
    let producer = kafka.live_producer();
    let close = now_millis().max(opened + 10);
    producer.send(&topic, &record(0, 1, "TRADE", close - 2));
    producer.send(&topic, &record(0, 2, "TRADE", close - 1));
    producer.send(&topic, &record(0, 3, "MARKET_CLOSE", close));
    producer.flush();
    daemon.wait_until("the close found", MINUTE, || {
        daemon.log_text().contains("end-of-stream record found")
    });
    // give the job every chance to take partition 1 as caught up: past the close by the grace,
    // then two more checkpoints (each wakes every reader), or the end of the job
    let checkpoints = |log: &str| log.matches("checkpoint complete").count();
    let mut after_grace = None;
    wait_until(
        "the grace and two checkpoints after it, or the job's end",
        MINUTE,
        || {
            if daemon.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            if now_millis() < close + grace.as_millis() as i64 {
                return false;
            }
            let done = checkpoints(&daemon.log_text());
            done >= *after_grace.get_or_insert(done) + 2
        },
    );
    tx.commit();
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let mut written = written_ids(&dir);
    written.sort_unstable();
    assert_eq!(
        written,
        vec![1, 2, 10, 11, 12],
        "the open transaction's records are before the close\n{log}"
    );
}

/// What ended each split under a source-wide stop, and where, is the same in every run however
/// far each fetch read: the split whose marker is the stop reports `eof_record` at it; one whose
/// own marker comes later, or that has none, reports `source_stop` at its first record at or
/// after the stop, its position there. The stop is logged once, when final.
#[test]
fn each_split_reports_what_ended_it_at_the_same_position_in_every_run() {
    const OPEN: i64 = 1_795_789_800_000;
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("stop-report", 3);
    let close = OPEN + 20_000;
    let mut records = Vec::new();
    // partition 0: a trade every 100 ms, its own close later, at +25 s
    for i in 0..300u64 {
        let t = OPEN + i as i64 * 100;
        if t == OPEN + 25_000 {
            records.push(record(0, 9_000_000, "MARKET_CLOSE", t));
        }
        records.push(record(0, i, "TRADE", t));
    }
    // partition 1: a trade every 100 ms, the close (the stop) at +20 s, trades after it
    for i in 0..300u64 {
        let t = OPEN + i as i64 * 100;
        if t == close {
            records.push(record(1, 9_000_001, "MARKET_CLOSE", t));
        }
        records.push(record(1, 1_000 + i, "TRADE", t + 1));
    }
    // partition 2: no close, a trade every 250 ms, one at the very millisecond of the stop
    for i in 0..120u64 {
        records.push(record(2, 2_000 + i, "TRADE", OPEN + i as i64 * 250));
    }
    kafka.produce(&topic, &records);
    let mut reports = Vec::new();
    for parallelism in [3, 1] {
        let dir = JobDir::new();
        let cfg = dir.config(&config(
            &kafka,
            &topic,
            parallelism,
            "1s",
            "stopping_offsets = \"latest\"\nreplay_speed = 1000.0",
        ));
        let (code, log) = run(&cfg, &[], MINUTE);
        assert_eq!(code, 0, "{log}");
        assert_eq!(
            log.matches("source-wide stop: every partition ends").count(),
            1,
            "the stop logged once, when final:\n{log}"
        );
        assert!(log.contains("2026-11-27T14:30:20.000Z"), "{log}");
        let out = std::process::Command::new(binary())
            .args(["state", "show", "--json"])
            .arg(dir.path("job.state"))
            .output()
            .unwrap();
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut ended: Vec<(i64, String, i64, i64)> = state["splits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["split"]["partition"].as_i64().unwrap(),
                    s["finished"]["reason"].as_str().unwrap_or("-").to_string(),
                    s["finished"]["at"].as_i64().unwrap_or(-1),
                    s["split"]["next_offset"].as_i64().unwrap(),
                )
            })
            .collect();
        ended.sort();
        reports.push(ended);
    }
    let expected = vec![
        // its first trade at or after +20 s is offset 200 (its own close at offset 250)
        (0, "source_stop".to_string(), 200, 200),
        // the close at offset 200 is the stop
        (1, "eof_record".to_string(), 200, 201),
        // the trade at +20 s is offset 80
        (2, "source_stop".to_string(), 80, 80),
    ];
    assert_eq!(reports[0], expected, "at parallelism 3");
    assert_eq!(reports[1], expected, "at parallelism 1");
}
