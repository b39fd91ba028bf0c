//! Exactly once, end to end: the daemon crashed at every step of the checkpoint protocol (named
//! failpoints) and restarted, the data generator killed ten times, a second process fencing the
//! first. Each check reads the output back (Kafka with `read_committed`) and finds every record
//! once. The binary must be built with the `failpoints` feature (scripts/test does).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::TestKafka;
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// The crash points of the checkpoint protocol, in order (tidegate_core::failpoint::POINTS).
fn points() -> &'static [&'static str] {
    tidegate::core::failpoint::POINTS
}

/// A data generator of `count` records (`seq` = index) at `rate`, checkpointed every `interval`.
fn datagen(name: &str, count: u64, rate: f64, sink: &str, interval: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
parallelism = 2

[source]
type = "datagen"
count = {count}
rate = {rate:.1}

[source.fields]
seq = {{ sequence = {{}} }}

{sink}

[checkpoint]
path = "{{dir}}/job.state"
interval = "{interval}"
"#
    )
}

fn kafka_sink(kafka: &TestKafka, topic: &str) -> String {
    format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{topic}\"\ndelivery = \"exactly_once\"",
        kafka.bootstrap
    )
}

/// How many times each `seq` is in the output.
fn seq_counts(kafka: &TestKafka, sink: &Sink, dir: &JobDir) -> BTreeMap<u64, usize> {
    let values: Vec<serde_json::Value> = match sink {
        Sink::File => read_jsonl(&dir.path("out.jsonl"))
            .into_iter()
            .map(|l| l["value"].clone())
            .collect(),
        Sink::Kafka(topic) => kafka
            .read_all(topic)
            .iter()
            .map(|r| serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON"))
            .collect(),
    };
    let mut counts = BTreeMap::new();
    for v in values {
        *counts.entry(v["seq"].as_u64().expect("a seq field")).or_default() += 1;
    }
    counts
}

fn assert_each_once(counts: &BTreeMap<u64, usize>, count: u64, what: &str) {
    let missing: Vec<u64> = (0..count).filter(|i| !counts.contains_key(i)).take(5).collect();
    let repeated: Vec<(&u64, &usize)> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?}…");
    assert!(repeated.is_empty(), "{what}: repeated {repeated:?}…");
    assert_eq!(counts.len() as u64, count, "{what}: unexpected records");
}

enum Sink {
    File,
    Kafka(String),
}

/// Crash at `point` (the `nth` time it is reached), restart, and check every record is once in
/// the output.
fn crash_at(kafka: &TestKafka, sink: &Sink, point: &str, nth: u32, interval: &str) {
    let dir = JobDir::new();
    let (name, sink_text) = match sink {
        Sink::File => (kafka.unique_topic("fp-file"), FILE_SINK.to_string()),
        Sink::Kafka(topic) => (topic.clone(), kafka_sink(kafka, topic)),
    };
    let count = 10_000;
    let config = dir.config(&datagen(&name, count, 10_000.0, &sink_text, interval));
    let crashed = std::process::Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("TIDEGATE_FAILPOINT", format!("{point}:{nth}"))
        .output()
        .expect("run tidegate");
    let log = String::from_utf8_lossy(&crashed.stderr);
    let what = format!("{point}:{nth} (checkpoint every {interval})");
    assert!(
        log.contains(&format!("failpoint {point} reached")) && crashed.status.code().is_none(),
        "{what}: the daemon did not crash there ({:?}):\n{log}",
        crashed.status
    );
    let (code, restart) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{what}: the restart failed:\n{restart}");
    let what = format!("{what}\n--- the crashed run:\n{log}\n--- the restart:\n{restart}");
    assert_each_once(&seq_counts(kafka, sink, &dir), count, &what);
}

fn crash_everywhere(kafka_sink: bool) {
    if !cfg!(feature = "failpoints") {
        panic!("the crash tests need the failpoints: cargo test --features failpoints");
    }
    let kafka = TestKafka::get();
    let mut cases = 0;
    for point in points() {
        if *point == "checkpoint.after_commit" && !kafka_sink {
            continue; // only a transactional sink commits
        }
        // mid-run (checkpoints every 100 ms; the third time the point is reached), and at the
        // final checkpoint (the only one: the interval is longer than the one-second run)
        let nth_mid = if *point == "sink.after_write" { 5 } else { 3 };
        for (nth, interval) in [(nth_mid, "100ms"), (1, "25s")] {
            let sink = if kafka_sink {
                Sink::Kafka(kafka.create_topic("fp-kafka", 3))
            } else {
                Sink::File
            };
            crash_at(&kafka, &sink, point, nth, interval);
            cases += 1;
        }
    }
    eprintln!(
        "exactly-once: crashed at each of {} failpoints, mid-run and at the final checkpoint ({cases} crashes, {} sink): \
         lost 0, duplicates 0",
        points().len(),
        if kafka_sink { "Kafka exactly_once" } else { "file" }
    );
}

#[test]
fn a_crash_at_every_failpoint_loses_and_repeats_nothing_in_a_file() {
    crash_everywhere(false);
}

#[test]
fn a_crash_at_every_failpoint_loses_and_repeats_nothing_in_kafka() {
    crash_everywhere(true);
}

#[test]
fn a_second_process_on_the_same_job_fences_the_first() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("fence", 1);
    let dir = JobDir::new();
    let config = dir.config(&datagen(&topic, 1_000_000, 500.0, &kafka_sink(&kafka, &topic), "200ms"));
    let first = Daemon::start(&config, &[]);
    first.wait_until("the first process's first commit", MINUTE, || {
        first.log_text().contains("checkpoint complete")
    });
    let second_state = dir.path("second.state").display().to_string();
    let second = Daemon::start(&config, &["--state", &second_state]);
    let started = Instant::now();
    let (status, log) = first.wait(MINUTE);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("fenced") && log.contains(&format!("tidegate-{topic}")),
        "the fenced process says so, naming the transactional id: {log}"
    );
    // one clear line for the cause, not librdkafka's own lines about it before it
    let lines_about = |what: &str| {
        log.lines()
            .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(what))
            .count()
    };
    assert_eq!(lines_about("fenced"), 0, "librdkafka's lines about the fencing: {log}");
    assert_eq!(
        lines_about("load in progress"),
        0,
        "a coordinator still loading is no warning: {log}"
    );
    second.wait_until("the second process's commits", MINUTE, || {
        second.log_text().contains("checkpoint complete")
    });
    second.signal(libc::SIGTERM);
    let (status, log) = second.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    eprintln!(
        "exactly-once: a second process on the same job fenced the first, which exited 1 {:.1} s later",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn datagen_into_kafka_killed_ten_times_writes_every_index_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("eos-datagen", 3);
    let dir = JobDir::new();
    // paced by the generator's own rate: 200,000 records take 10 s, so ten kills placed by
    // progress (a checkpoint since the restart, then up to 5,000 more records) leave work over
    let count = 200_000;
    let config = dir.config(&datagen(&topic, count, 20_000.0, &kafka_sink(&kafka, &topic), "300ms"));
    let state = dir.path("job.state");
    let checkpoint_id = || {
        tidegate::core::state::read_state::<serde_json::Value>(&state)
            .ok()
            .flatten()
            .and_then(|s| s["checkpoint_id"].as_u64())
            .unwrap_or(0)
    };
    let mut seed = 0x5eed_u64;
    let mut kills = 0;
    while kills < 10 {
        let before = checkpoint_id();
        let port = free_port();
        let listen = format!("metrics.listen=127.0.0.1:{port}");
        let mut daemon = Daemon::start(&config, &["--set", &listen]);
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let kill_at = 1 + (seed >> 33) % 5_000;
        let deadline = Instant::now() + MINUTE;
        let mut ended = false;
        loop {
            if daemon.child.try_wait().expect("try_wait").is_some() {
                ended = true;
                break;
            }
            if checkpoint_id() > before && records_written(port).is_some_and(|n| n >= kill_at) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no progress after a restart: {}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(!ended, "the generator ended after {kills} kills: {}", daemon.log_text());
        daemon.kill9();
        kills += 1;
    }
    let (code, log) = run(&config, &[], MINUTE * 2);
    assert_eq!(code, 0, "{log}");
    let counts = seq_counts(&kafka, &Sink::Kafka(topic), &dir);
    assert_each_once(&counts, count, "datagen killed ten times");
    eprintln!("exactly-once: datagen into Kafka killed -9 x{kills}: {count} indices, missing 0, duplicates 0");
}

#[test]
fn a_periodic_source_crashed_mid_run_fires_each_instant_once() {
    if !cfg!(feature = "failpoints") {
        panic!("the crash tests need the failpoints: cargo test --features failpoints");
    }
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("eos-periodic", 1);
    let dir = JobDir::new();
    // two events of 40 fires each, at every 25 ms of the clock; the restart fires the instants it
    // missed (catch_up = "all")
    let config = dir.config(&format!(
        r#"
[job]
name = "{topic}"
[source]
type = "periodic"
catch_up = "all"
events = [
  {{ id = "a", value = "a", schedule = {{ wall_time = true, period = "25ms" }}, count = 40 }},
  {{ id = "b", value = "b", schedule = {{ wall_time = true, period = "25ms" }}, count = 40 }},
]
{}
[checkpoint]
path = "{{dir}}/job.state"
interval = "100ms"
"#,
        kafka_sink(&kafka, &topic)
    ));
    let crashed = std::process::Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("TIDEGATE_FAILPOINT", "checkpoint.after_state:3")
        .output()
        .expect("run tidegate");
    assert!(
        crashed.status.code().is_none(),
        "{}",
        String::from_utf8_lossy(&crashed.stderr)
    );
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let mut fires: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for r in kafka.read_all(&topic) {
        let id = r
            .headers
            .iter()
            .find(|(k, _)| k == "tidegate-event-id")
            .and_then(|(_, v)| v.clone())
            .unwrap();
        *fires.entry((id, r.timestamp.unwrap())).or_default() += 1;
    }
    for id in ["a", "b"] {
        let instants: Vec<i64> = fires.keys().filter(|(e, _)| e == id).map(|(_, t)| *t).collect();
        assert_eq!(instants.len(), 40, "event {id}: {} distinct fires", instants.len());
        assert!(
            instants.windows(2).all(|w| w[1] - w[0] == 25),
            "event {id}: an instant missing: {instants:?}\ncrashed run:\n{}\nrestart:\n{log}",
            String::from_utf8_lossy(&crashed.stderr)
        );
    }
    assert!(fires.values().all(|n| *n == 1), "an instant fired twice: {fires:?}");
}
