//! A topic deleted and recreated under a replay's state file: a restart says so (naming the
//! partition, the stored offset and the new log's range) and exits 1, or with `offset_reset`
//! reads the new log and ends; whether the new log is shorter than the stored offset (told by
//! the offsets) or longer (told by the topic id).

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::common::{block_on, now_millis, wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Delete `topic` and create it again, empty, with one partition.
fn recreate(kafka: &TestKafka, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .create()
        .expect("admin client");
    kafka.delete_topic(topic);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .create()
        .expect("consumer");
    wait_until("the topic to be deleted", MINUTE, || {
        consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .is_ok_and(|md| md.topics().first().is_none_or(|t| t.error().is_some()))
    });
    // deletion finishes in the background: the name may still be taken for a moment
    let deadline = Instant::now() + MINUTE;
    loop {
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("retention.ms", "-1");
        let result = block_on(admin.create_topics([&new], &AdminOptions::new()));
        match result.as_ref().map(|r| r.first().map(|x| x.is_ok())) {
            Ok(Some(true)) => break,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            _ => panic!("recreating {topic}: {result:?}"),
        }
    }
    kafka.wait_for_partitions(topic, 1);
}

/// The state file's next offset of partition 0.
fn stored_offset(dir: &JobDir) -> i64 {
    let state = tidegate::core::state::read_state::<serde_json::Value>(&dir.path("job.state"))
        .expect("state file")
        .expect("a checkpoint");
    state["splits"]
        .as_array()
        .expect("splits")
        .iter()
        .find(|s| s["split"]["partition"] == 0)
        .and_then(|s| s["split"]["next_offset"].as_i64())
        .expect("partition 0's offset")
}

fn values(dir: &JobDir) -> Vec<String> {
    read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["value"].as_str().expect("a string value").to_string())
        .collect()
}

fn produce(kafka: &TestKafka, topic: &str, prefix: &str, n: usize, step_ms: i64) {
    produce_from(kafka, topic, prefix, n, now_millis() - 3_600_000, step_ms);
}

fn produce_from(kafka: &TestKafka, topic: &str, prefix: &str, n: usize, t0: i64, step_ms: i64) {
    let records: Vec<TestRecord> = (0..n)
        .map(|i| TestRecord::to(0, format!("{prefix}-{i}")).at(t0 + i as i64 * step_ms))
        .collect();
    kafka.produce(topic, &records);
}

/// Remove the topic ids from the state file, as a state written before they were kept.
fn forget_topic_ids(dir: &JobDir) {
    let path = dir.path("job.state");
    let mut state = tidegate::core::state::read_state::<serde_json::Value>(&path)
        .expect("state file")
        .expect("a checkpoint");
    let mut forgot = 0;
    let mut strip = |split: &mut serde_json::Value| {
        if split.as_object_mut().and_then(|o| o.remove("topic_id")).is_some() {
            forgot += 1;
        }
    };
    for s in state["splits"].as_array_mut().expect("splits") {
        strip(&mut s["split"]);
    }
    for s in state["enumerator"]["splits"].as_array_mut().expect("enumerator splits") {
        strip(&mut s["split"]);
    }
    assert!(forgot > 0, "the state had topic ids to forget: {state:#}");
    tidegate::core::StateStore::open(&path)
        .and_then(|store| store.write(&state))
        .expect("rewriting the state");
}

/// The scenario of #24: a bounded replay killed half way, its topic deleted and recreated with
/// fewer records than the replay had read. Resuming says what happened by default, and with
/// `offset_reset = "earliest"` reads the new records and ends.
#[test]
fn a_replay_resumed_after_its_topic_was_recreated_shorter_says_so_or_resets() {
    resumed_after_a_shorter_recreation(false);
}

/// The same with a state file that has no topic ids (written before they were kept): the log
/// ending below the stored offset tells.
#[test]
fn without_topic_ids_a_log_ending_below_the_stored_offset_tells() {
    resumed_after_a_shorter_recreation(true);
}

fn resumed_after_a_shorter_recreation(without_ids: bool) {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("recreated-short", 1);
    // 100 ms apart in event time: replayed at real speed, the replay takes 10 s
    produce(&kafka, &topic, "old", 100, 100);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"\nreplay_speed = 1.0",
        "200ms",
    ));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("a third of the replay", MINUTE, || {
        line_count(&dir.path("out.jsonl")) >= 30
    });
    daemon.kill9();
    let stored = stored_offset(&dir);
    assert!((10..100).contains(&stored), "killed half way: stored offset {stored}");
    recreate(&kafka, &topic);
    produce(&kafka, &topic, "new", 10, 1);
    if without_ids {
        forget_topic_ids(&dir);
    }
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    let said = error_saying(
        &log,
        &[
            format!("{topic}:0"),
            format!("stored offset {stored}"),
            "holds offsets 0 to 10".to_string(),
            "recreated".to_string(),
            "source.offset_reset".to_string(),
        ],
    );
    let (code, log) = run(&config, &["--set", "source.offset_reset=\"earliest\""], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("source.offset_reset starts it again"),
        "the decision is logged: {log}"
    );
    let expected: Vec<String> = (0..stored)
        .map(|i| format!("old-{i}"))
        .chain((0..10).map(|i| format!("new-{i}")))
        .collect();
    assert_eq!(values(&dir), expected);
    eprintln!(
        "recreated: shorter log{}, default: exit 1, {said}; offset_reset = earliest: exit 0 with the new records",
        if without_ids { " (no topic ids)" } else { "" }
    );
}

/// A topic recreated with more records than the replay had read: the offsets alone cannot tell,
/// the topic id does.
#[test]
fn a_topic_recreated_longer_is_told_by_its_id() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("recreated-long", 1);
    produce(&kafka, &topic, "old", 20, 1);
    let dir = JobDir::new();
    // unbounded: the split stays open at 20 in the state file
    let config = dir.config(&replay_config(&kafka, &topic, FILE_SINK, "", "200ms"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the records", MINUTE, || line_count(&dir.path("out.jsonl")) >= 20);
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(stored_offset(&dir), 20);
    recreate(&kafka, &topic);
    produce(&kafka, &topic, "new", 50, 1);
    let bounded = ["--set", "source.stopping_offsets=\"latest\""];
    let (code, log) = run(&config, &bounded, MINUTE);
    assert_eq!(code, 1, "{log}");
    let said = error_saying(
        &log,
        &[
            format!("{topic}:0"),
            "was deleted and recreated since the last checkpoint was written (its id was".to_string(),
            "stored offset 20".to_string(),
            "holds offsets 0 to 50".to_string(),
        ],
    );
    let (code, log) = run(
        &config,
        &[bounded[0], bounded[1], "--set", "source.offset_reset=\"earliest\""],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    let expected: Vec<String> = (0..20)
        .map(|i| format!("old-{i}"))
        .chain((0..50).map(|i| format!("new-{i}")))
        .collect();
    assert_eq!(values(&dir), expected);
    eprintln!("recreated: longer log, default: exit 1, {said}; offset_reset = earliest: exit 0 with the new records");
}

/// A bounded replay running (with `offset_reset = "earliest"`) while its topic is deleted and
/// recreated with fewer records: the reader's position is reset to the new log's start, its
/// stop resolved again in the new log, and the replay ends with the new records after the old.
#[test]
fn a_replay_whose_topic_is_recreated_shorter_while_it_runs_ends() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("recreated-live", 1);
    // 30 000 records 1 ms apart, replayed at 3 times their pace (10 s): the reader holds at most
    // 8192 of them, and librdkafka prefetches about 1000, so most are still to fetch
    let (n, t0) = (30_000, now_millis() - 3_600_000);
    produce_from(&kafka, &topic, "old", n, t0, 1);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"\nreplay_speed = 3.0\noffset_reset = \"earliest\"\n\
         [source.properties]\n\"queued.min.messages\" = \"1000\"",
        "500ms",
    ));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("a quarter of the replay", MINUTE, || {
        line_count(&dir.path("out.jsonl")) >= n / 4
    });
    recreate(&kafka, &topic);
    // later than every old record, so they follow them in event time
    produce_from(&kafka, &topic, "new", 10, t0 + n as i64, 1);
    let (status, log) = daemon.wait(2 * MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("source.offset_reset moved it"),
        "the decision is logged: {log}"
    );
    let values = values(&dir);
    let old = values.iter().take_while(|v| v.starts_with("old-")).count();
    assert!(old < n, "the recreation came while the old log was still being fetched");
    let expected: Vec<String> = (0..old)
        .map(|i| format!("old-{i}"))
        .chain((0..10).map(|i| format!("new-{i}")))
        .collect();
    assert_eq!(values, expected);
    eprintln!(
        "recreated: shorter while running, offset_reset = earliest: {old} old records, then the 10 new ones, exit 0"
    );
}

/// An unbounded job with discovery on, whose topic is deleted and recreated while it runs:
/// discovery sees the new topic id and fails the job, naming the topic, unless `offset_reset`.
#[test]
fn a_topic_recreated_while_read_with_discovery_on_is_an_error() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("recreated-discovered", 1);
    produce(&kafka, &topic, "old", 20, 1);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "partition_discovery_interval = \"500ms\"",
        "200ms",
    ));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the records", MINUTE, || line_count(&dir.path("out.jsonl")) >= 20);
    recreate(&kafka, &topic);
    produce(&kafka, &topic, "new", 50, 1);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(1), "{log}");
    // discovery sees the new topic id, or the fetch sees its stored offset beyond the new, empty
    // log first (a CI run saw the second): either names the topic and the recreation
    let by_discovery = format!("topic {topic} was deleted and recreated while it was read (its id was");
    let by_fetch = format!("{topic}:0: the stored offset 20 is beyond the end of the log");
    assert!(
        log.contains(&by_discovery)
            || (log.contains(&by_fetch) && log.contains("the topic was likely deleted and recreated")),
        "{log}"
    );
}

/// The daemon's error line, which must say each of `expected` (the log is shown otherwise).
fn error_saying(log: &str, expected: &[String]) -> String {
    for e in expected {
        assert!(log.contains(e.as_str()), "the error says {e:?}: {log}");
    }
    log.lines()
        .find(|l| l.starts_with("tidegate: error"))
        .unwrap_or_default()
        .to_string()
}
