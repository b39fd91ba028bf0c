//! `tidegate::testing` as another crate's tests use it: a replay until a marker that is written
//! after the replay started, one whose marker never comes, and every call from within
//! `#[tokio::test]`, blocking and awaited.

use std::time::Duration;

use tidegate::testing::{run_job, run_job_async, Kafka, Replay};

use crate::common::{wait_until, TestKafka, TestRecord};

const MINUTE: Duration = Duration::from_secs(60);
const CLOSE: &str = r#"value.type == "CLOSE""#;

fn trades(partitions: i32, from: usize, n: usize) -> Vec<TestRecord> {
    (from..from + n)
        .map(|i| TestRecord::to(i as i32 % partitions, format!(r#"{{"type":"TRADE","i":{i}}}"#)))
        .collect()
}

fn closes(partitions: i32) -> Vec<TestRecord> {
    (0..partitions)
        .map(|p| TestRecord::to(p, r#"{"type":"CLOSE"}"#))
        .collect()
}

#[test]
fn a_replay_until_a_marker_waits_for_a_marker_written_after_it_started() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("testing-late-marker", 2);
    kafka.produce(&topic, &trades(2, 0, 20));
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("replay.state");
    let replay = Replay::topic(&kafka.bootstrap, &topic)
        .json()
        .parallelism(2)
        .state_file(&state)
        .checkpoint_interval(Duration::from_millis(100))
        .timeout(MINUTE)
        .until_eof(CLOSE)
        .expect("expression");
    let running = std::thread::spawn(move || replay.collect());
    // both partitions checkpointed: the replay runs (and has resolved where it starts and stops)
    wait_until("the replay's first checkpoint of both partitions", MINUTE, || {
        tidegate::core::state::read_state::<serde_json::Value>(&state)
            .ok()
            .flatten()
            .and_then(|s| s["splits"].as_array().map(|a| a.len()))
            == Some(2)
    });
    // the rest of the day, the close in each partition, then records after it
    kafka.produce(&topic, &trades(2, 20, 10));
    kafka.produce(&topic, &closes(2));
    kafka.produce(&topic, &trades(2, 30, 6));
    let records = running.join().expect("the replay's thread").expect("the replay");
    let mut seen: Vec<i64> = records
        .iter()
        .map(|r| {
            let v = r.decoded.as_ref().expect("a JSON value");
            assert_eq!(v["type"], "TRADE", "only trades before the close: {v}");
            v["i"].as_i64().expect("i")
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..30).collect::<Vec<i64>>(),
        "every trade before the close, none after"
    );
}

#[test]
fn a_replay_until_a_marker_that_never_comes_fails_after_its_timeout() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("testing-no-marker", 2);
    kafka.produce(&topic, &trades(2, 0, 10));
    // the close only in partition 1
    kafka.produce(&topic, &[TestRecord::to(1, r#"{"type":"CLOSE"}"#)]);
    let result = Replay::topic(&kafka.bootstrap, &topic)
        .json()
        .timeout(Duration::from_secs(3))
        .until_eof(CLOSE)
        .expect("expression")
        .collect();
    let err = match result {
        Ok(records) => panic!(
            "no close in partition 0, yet the replay ended with {} records",
            records.len()
        ),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("no end-of-stream record within 3s"), "{err}");
    assert!(
        err.contains(&format!("{topic}-0")),
        "names the partition still waiting: {err}"
    );
    assert!(
        !err.contains(&format!("{topic}-1")),
        "not the partition that ended: {err}"
    );
}

/// A datagen job seeding `topic` (`count` records, then a CLOSE in each partition).
fn seed(kafka: &str, topic: &str, count: u64) -> String {
    format!(
        r#"
        [job]
        name = "{topic}-seed"
        [source]
        type = "datagen"
        count = {count}
        format = "json"
        [source.fields]
        type = {{ value = "TRADE" }}
        [source.end_marker]
        value = {{ type = "CLOSE" }}
        [sink]
        type = "kafka"
        bootstrap_servers = "{kafka}"
        topic = "{topic}"
        "#
    )
}

#[tokio::test]
async fn the_blocking_calls_work_inside_a_tokio_test() {
    let broker = TestKafka::get();
    let kafka = Kafka::at(&broker.bootstrap);
    let topic = broker.unique_topic("testing-in-tokio");
    kafka.create_topic(&topic, 2).expect("create the topic");
    let seeded = run_job(&seed(kafka.bootstrap(), &topic, 50)).expect("seed");
    assert_eq!(seeded.records_written, 50);
    let records = Replay::topic(kafka.bootstrap(), &topic)
        .json()
        .until_eof(CLOSE)
        .expect("expression")
        .collect()
        .expect("replay");
    assert_eq!(records.len(), 50);
}

#[tokio::test]
async fn the_async_calls_await_inside_a_tokio_test() {
    let broker = TestKafka::get();
    let kafka = Kafka::at(&broker.bootstrap);
    let topic = broker.unique_topic("testing-async");
    kafka.create_topic_async(&topic, 3).await.expect("create the topic");
    let seeded = run_job_async(&seed(kafka.bootstrap(), &topic, 60)).await.expect("seed");
    assert_eq!(seeded.records_written, 60);
    let (records, summary) = Replay::topic(kafka.bootstrap(), &topic)
        .json()
        .parallelism(2)
        .until_eof(CLOSE)
        .expect("expression")
        .run_async()
        .await
        .expect("replay");
    assert_eq!(records.len(), 60);
    assert_eq!(summary.splits.len(), 3);
    assert!(
        summary.splits.iter().all(|s| s.contains("eof_record")),
        "{:?}",
        summary.splits
    );
}
