//! The daemon as a user runs it: `tidegate run` as a subprocess against the real broker.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::{wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

fn produce_numbered(kafka: &TestKafka, topic: &str, partitions: i32, n: usize) {
    let records: Vec<TestRecord> = (0..n)
        .map(|i| {
            TestRecord::to((i % partitions as usize) as i32, format!("value-{i}"))
                .key(format!("key-{i}"))
                .at(1_790_000_000_000 + i as i64)
                .header("n", &i.to_string())
        })
        .collect();
    kafka.produce(topic, &records);
}

fn replay_config(kafka: &TestKafka, topic: &str, sink: &str, extra_source: &str) -> String {
    crate::daemon_util::replay_config(kafka, topic, sink, extra_source, "200ms")
}

#[test]
fn a_topic_is_copied_to_a_file_record_by_record() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("copy-file", 3);
    produce_numbered(&kafka, &topic, 3, 300);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let mut lines = read_jsonl(&dir.path("out.jsonl"));
    lines.sort_by_key(|l| (l["partition"].as_i64(), l["offset"].as_i64()));
    let expected = kafka.read_all(&topic);
    assert_eq!(lines.len(), expected.len());
    for (line, want) in lines.iter().zip(&expected) {
        assert_eq!(line["topic"], topic.as_str());
        assert_eq!(line["partition"].as_i64(), Some(want.partition as i64));
        assert_eq!(line["offset"].as_i64(), Some(want.offset));
        assert_eq!(line["timestamp"].as_i64(), want.timestamp);
        assert_eq!(line["key"].as_str().map(str::as_bytes), want.key.as_deref());
        assert_eq!(line["value"].as_str().map(str::as_bytes), want.value.as_deref());
        let n = &want.headers[0];
        assert_eq!(line["headers"][&n.0].as_str(), n.1.as_deref());
    }
}

#[test]
fn a_topic_is_copied_to_another_topic() {
    let kafka = TestKafka::get();
    let from = kafka.create_topic("copy-from", 3);
    let to = kafka.create_topic("copy-to", 3);
    produce_numbered(&kafka, &from, 3, 500);
    let dir = JobDir::new();
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{to}\"\npreserve_partition = true",
        kafka.bootstrap
    );
    let config = dir.config(&replay_config(&kafka, &from, &sink, "stopping_offsets = \"latest\""));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let strip = |r: crate::common::ReadRecord| (r.partition, r.key, r.value, r.timestamp, r.headers);
    let mut copied: Vec<_> = kafka.read_all(&to).into_iter().map(strip).collect();
    let mut original: Vec<_> = kafka.read_all(&from).into_iter().map(strip).collect();
    // per partition, in order: the copy is the original
    copied.sort_by_key(|r| r.0);
    original.sort_by_key(|r| r.0);
    assert_eq!(copied, original);
}

/// (partition, offset) of a line.
fn coord(l: &serde_json::Value) -> (i64, i64) {
    (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap())
}

#[test]
fn kill_9_and_restart_loses_nothing_and_duplicates_at_most_one_interval() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("kill9", 2);
    let total = 400_000;
    let records: Vec<TestRecord> = (0..total)
        .map(|i| TestRecord::to((i % 2) as i32, format!("{i:0>90}")))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
    ));
    let out = dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("a checkpoint and some output", MINUTE, || {
        dir.path("job.state").exists() && line_count(&out) > 20_000
    });
    let log = daemon.kill9();
    // what the state file says was durable when the process died
    let state: serde_json::Value = tidegate::core::state::read_state(&dir.path("job.state"))
        .unwrap()
        .unwrap();
    let checkpointed: BTreeMap<i64, i64> = state["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["split"]["partition"].as_i64().unwrap(),
                s["split"]["next_offset"].as_i64().unwrap(),
            )
        })
        .collect();
    let before = read_jsonl_lenient(&out);
    assert!(before.len() < total, "the job finished before the kill; {log}");

    // the rest of 400,000 records: a CI run read them at 6,363/s beside the other lanes (60.2 s);
    // the deadline is against a hang, not a speed
    let (code, log) = run(&config, &[], MINUTE * 3);
    assert_eq!(code, 0, "{log}");
    let after = read_jsonl(&out);
    let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for l in &after {
        *seen.entry(coord(l)).or_default() += 1;
    }
    assert_eq!(seen.len(), total, "records lost");
    let duplicates: Vec<(i64, i64)> = seen.iter().filter(|(_, n)| **n > 1).map(|(c, _)| *c).collect();
    // a duplicate is a record after its partition's checkpointed position, written by the first run
    for (p, o) in &duplicates {
        assert_eq!(seen[&(*p, *o)], 2);
        assert!(
            *o >= checkpointed.get(p).copied().unwrap_or(0),
            "({p},{o}) was before the checkpoint"
        );
    }
    let after_checkpoint = before
        .iter()
        .filter(|l| {
            let (p, o) = coord(l);
            o >= checkpointed.get(&p).copied().unwrap_or(0)
        })
        .count();
    assert!(duplicates.len() <= after_checkpoint);
    // order within each partition is kept after the restart point
    for p in 0..2 {
        let offsets: Vec<i64> = after
            .iter()
            .filter(|l| l["partition"] == p)
            .map(|l| l["offset"].as_i64().unwrap())
            .collect();
        let restart = offsets.windows(2).filter(|w| w[1] <= w[0]).count();
        assert!(restart <= 1, "partition {p} went back more than once");
    }
    eprintln!(
        "kill -9: {} lines before the kill, {} duplicates after the restart (bound {after_checkpoint}), 0 lost",
        before.len(),
        duplicates.len()
    );
}

/// Lines of a file a killed writer may have cut mid-line: the last, torn one is ignored.
fn read_jsonl_lenient(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn sigterm_stops_gracefully_and_a_rerun_continues() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("sigterm", 2);
    produce_numbered(&kafka, &topic, 2, 200);
    let dir = JobDir::new();
    // unbounded: only a signal ends it
    let config = dir.config(&replay_config(&kafka, &topic, FILE_SINK, ""));
    let out = dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the first records", MINUTE, || line_count(&out) == 200);
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("stopped"), "{log}");

    produce_numbered(&kafka, &topic, 2, 100);
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the new records", MINUTE, || line_count(&out) >= 300);
    daemon.signal(libc::SIGINT);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let lines = read_jsonl(&out);
    let coords: BTreeSet<(i64, i64)> = lines.iter().map(coord).collect();
    assert_eq!(lines.len(), 300, "a graceful stop leaves no duplicate");
    assert_eq!(coords.len(), 300);
}

#[test]
fn metrics_are_served_and_count_exactly() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("metrics", 2);
    produce_numbered(&kafka, &topic, 2, 250);
    let dir = JobDir::new();
    let port = free_port();
    let config = dir.config(&format!(
        "{}\n[metrics]\nlisten = \"{port}\"\n",
        replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", "")
    ));
    let addr = format!("127.0.0.1:{port}");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("/healthz", MINUTE, || {
        http_get(&addr, "/healthz").as_deref() == Some("ok\n")
    });
    let mut text = String::new();
    daemon.wait_until("every record counted", MINUTE, || {
        text = http_get(&addr, "/metrics").unwrap_or_default();
        metric(&text, "tidegate_records_written_total") == Some(250.0)
    });
    assert_eq!(metric(&text, "tidegate_records_emitted_total"), Some(250.0));
    assert_eq!(metric(&text, "tidegate_up"), Some(1.0));
    let per_partition: f64 = text
        .lines()
        .filter(|l| l.starts_with("tidegate_kafka_records_in_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(per_partition, 250.0, "{text}");
    // an unbounded replay: no "remaining" gauge (a 0 there would read as "done")
    assert!(!text.contains("tidegate_kafka_records_remaining"), "{text}");
    // counters that have not moved are there at 0 from the start, and every metric has its help
    for name in [
        "tidegate_kafka_consumer_errors_total",
        "tidegate_kafka_discovery_failures_total",
        "tidegate_eof_evaluation_errors_total",
        "tidegate_splits_finished_total",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing: {text}");
    }
    for line in text.lines().filter(|l| l.starts_with("tidegate_")) {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no # HELP for {name}: {text}"
        );
    }
    assert!(http_get(&addr, "/nope").is_none());
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
}

#[test]
fn config_mistakes_exit_2_naming_the_key() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let good = replay_config(&kafka, "t", "[sink]\ntype = \"null\"", "");
    let cases: Vec<(String, &str)> = vec![
        ("[job\n".to_string(), "line"),
        (
            good.replace("parallelism = 2", "parallelism = 2\nparalelism = 3"),
            "job.paralelism",
        ),
        (
            good.replace("parallelism = 2", "parallelism = \"2x\""),
            "job.parallelism",
        ),
        (
            good.replace("interval = \"200ms\"", "interval = \"-1s\""),
            "checkpoint.interval",
        ),
        (good.replace("type = \"kafka\"", "type = \"kinesis\""), "source.type"),
        (
            good.replace("format = \"string\"", "format = \"string\"\neof = 'value.type =='"),
            "source.eof",
        ),
    ];
    for (text, key) in cases {
        let config = dir.config(&text);
        let (code, log) = run(&config, &[], MINUTE);
        assert_eq!(code, 2, "{text}\n{log}");
        assert!(log.contains(key), "expected {key:?} in: {log}");
    }
    let (code, log) = run(&dir.path("missing.toml"), &[], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("--config"), "{log}");
}

#[test]
fn each_corrupt_state_file_exits_3_and_stays_byte_identical() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("corrupt", 1);
    produce_numbered(&kafka, &topic, 1, 10);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        "[sink]\ntype = \"null\"",
        "stopping_offsets = \"latest\"",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let good = std::fs::read(dir.path("job.state")).unwrap();
    let text = String::from_utf8(good.clone()).unwrap();
    let newline = text.find('\n').unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", good[..good.len() - 10].to_vec()),
        (
            "random bytes",
            (0..512u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        (
            "unknown version",
            text.replacen("\"version\":1", "\"version\":2", 1).into_bytes(),
        ),
        (
            "checksum mismatch",
            format!(
                "{}{}",
                &text[..=newline],
                text[newline + 1..].replacen("kafka", "kafkb", 1)
            )
            .into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        std::fs::write(dir.path("job.state"), &bytes).unwrap();
        let (code, log) = run(&config, &[], MINUTE);
        assert_eq!(code, 3, "{what}: {log}");
        assert_eq!(
            std::fs::read(dir.path("job.state")).unwrap(),
            bytes,
            "{what}: the file changed"
        );
        assert!(log.contains("state file"), "{what}: {log}");
    }
    // --reset-state is the way past it, and keeps the damaged file aside
    let (code, log) = run(&config, &["--reset-state"], MINUTE);
    assert_eq!(code, 0, "{log}");
    let aside = std::fs::read_dir(dir.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("job.state.reset-"));
    assert!(aside, "the old state file was kept aside");
}

/// A first run that cannot start (its source topic is missing) changes nothing: no sink topic
/// created, no output file started, and `--reset-state` leaves the old state where it was.
#[test]
fn a_run_that_cannot_start_leaves_nothing_behind() {
    let kafka = TestKafka::get();
    let missing = kafka.unique_topic("never-made");
    let target = kafka.unique_topic("not-created");
    let kafka_sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{target}\"\ncreate_topic = {{ partitions = 1 }}",
        kafka.bootstrap
    );
    for sink in [FILE_SINK, kafka_sink.as_str()] {
        let dir = JobDir::new();
        let config = dir.config(&replay_config(&kafka, &missing, sink, "stopping_offsets = \"latest\""));
        // a state file of an earlier job, which --reset-state would move aside
        let old = b"an earlier job's state".to_vec();
        std::fs::write(dir.path("job.state"), &old).unwrap();
        let (code, log) = run(&config, &["--reset-state"], MINUTE);
        assert_eq!(code, 1, "{log}");
        assert!(log.contains(&format!("topic {missing} does not exist")), "{log}");
        assert_eq!(
            std::fs::read(dir.path("job.state")).unwrap(),
            old,
            "the state file moved or changed"
        );
        assert!(!dir.path("out.jsonl").exists(), "the file sink started its file: {log}");
        use rdkafka::consumer::Consumer;
        let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &kafka.bootstrap)
            .create()
            .unwrap();
        let md = consumer.fetch_metadata(Some(&target), Duration::from_secs(10)).unwrap();
        let created = md
            .topics()
            .first()
            .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty());
        assert!(!created, "the Kafka sink created {target}: {log}");
    }
}

#[test]
fn validate_and_state_show() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("show", 1);
    produce_numbered(&kafka, &topic, 1, 5);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        "[sink]\ntype = \"null\"",
        "stopping_offsets = \"latest\"\n[source.properties]\n\"sasl.password\" = \"hunter2\"",
    ));
    let out = std::process::Command::new(binary())
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("is valid") && !text.contains("hunter2"), "{text}");
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains("hunter2"));
    let out = std::process::Command::new(binary())
        .args(["state", "show", "--json"])
        .arg(dir.path("job.state"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["splits"][0]["split"]["next_offset"], 5);
}

#[test]
fn a_second_signal_exits_at_once_and_leaves_the_last_state() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("second-signal", 1);
    produce_numbered(&kafka, &topic, 1, 100);
    let dir = JobDir::new();
    let port = free_port();
    // stdout into a pipe nobody reads: once the pipe is full the sink blocks, so the graceful
    // stop the first signal starts cannot finish, and the second signal lands during it
    let config = dir.config(&format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
        replay_config(&kafka, &topic, "[sink]\ntype = \"stdout\"", "")
    ));
    let log_path = dir.path("daemon.log");
    let mut child = std::process::Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_until("a checkpoint of the first 100 records", MINUTE, || {
        log().contains("checkpoint complete")
    });
    // far more than a pipe holds (64 KiB): the sink blocks writing them
    produce_numbered(&kafka, &topic, 1, 5_000);
    let counters = || {
        let text = http_get(&format!("127.0.0.1:{port}"), "/metrics").unwrap_or_default();
        (
            metric(&text, "tidegate_records_emitted_total").unwrap_or(0.0),
            metric(&text, "tidegate_records_written_total").unwrap_or(0.0),
        )
    };
    wait_until("the sink blocked on the full pipe", MINUTE, || {
        let (emitted, written) = counters();
        emitted > written + 1_000.0
    });
    let pid = child.id() as i32;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until("the first signal handled", MINUTE, || {
        log().contains("stopping: final checkpoint")
    });
    let before = std::fs::read(dir.path("job.state")).unwrap();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let deadline = started + MINUTE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit after the second signal: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1), "{}", log());
    assert!(log().contains("second signal"), "{}", log());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // the state file is the last completed checkpoint, untouched by the interrupted stop
    assert_eq!(std::fs::read(dir.path("job.state")).unwrap(), before);
    let state: serde_json::Value = tidegate::core::state::read_state(&dir.path("job.state"))
        .unwrap()
        .unwrap();
    assert!(state["splits"][0]["split"]["next_offset"].as_i64().unwrap() < 5_000);
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("pipe", 1);
    produce_numbered(&kafka, &topic, 1, 20_000);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        "[sink]\ntype = \"stdout\"",
        "stopping_offsets = \"latest\"",
    ));
    // `tidegate run … | head -1`, and `tidegate validate … | head -1`
    for args in [vec!["run", "--no-progress"], vec!["validate"]] {
        let mut child = std::process::Command::new(binary())
            .args(&args)
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
        assert!(!first.is_empty());
        // the reader is gone (the pipe's read end dropped above)
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("error"),
            "{args:?}: {stderr}"
        );
    }
}

/// `tidegate run --config config/datagen-stdout.toml | head -3`: the generator notices the reader
/// went away at its next record and ends quietly, instead of writing all ten into the pipe's
/// buffer and reporting "10 written".
#[test]
fn a_reader_that_goes_away_is_noticed_at_the_next_record() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = JobDir::new();
    let mut child = std::process::Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(root.join("config/datagen-stdout.toml"))
        .arg("--state")
        .arg(dir.path("state"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    for _ in 0..3 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert!(line.starts_with('{'), "{line:?}");
    }
    drop(reader); // `head -3` exits: the pipe's read end is gone, seven records before the end
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("10 written"),
        "the job did not notice its reader went away: {stderr}"
    );
}

/// Stop latency measured in milliseconds: run alone (`scripts/test` runs `punctual::` serially).
mod punctual {
    use super::*;

    /// From the market-close record acknowledged by the broker to the daemon's exit, on a live
    /// tail: the split finishing, the final checkpoint (state file and sink) and the exit.
    #[test]
    fn a_live_tail_exits_within_150ms_of_its_marker() {
        let kafka = TestKafka::get();
        let topic = kafka.create_topic("stop-latency", 1);
        let mut latencies = Vec::new();
        for round in 0..5 {
            let dir = JobDir::new();
            let config = dir.config(&super::replay_config(
                &kafka,
                &topic,
                FILE_SINK,
                "eof = 'value == \"CLOSE\"'\nstarting_offsets = \"latest\"",
            ));
            let daemon = Daemon::start(&config, &[]);
            daemon.wait_until("the reader to be assigned", MINUTE, || {
                daemon.log_text().contains("splits assigned")
            });
            // trades while it tails, then the close
            kafka.produce(&topic, &[TestRecord::to(0, format!("trade {round}"))]);
            daemon.wait_until("the trade written", MINUTE, || line_count(&dir.path("out.jsonl")) >= 1);
            let producer = kafka.live_producer();
            producer.send(&topic, &TestRecord::to(0, "CLOSE"));
            producer.flush();
            let acked = std::time::Instant::now();
            let (status, log) = daemon.wait(MINUTE);
            latencies.push(acked.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(status.code(), Some(0), "{log}");
        }
        latencies.sort_by(f64::total_cmp);
        let median = latencies[latencies.len() / 2];
        println!(
            "stop latency (marker acknowledged to exit), 5 rounds: median {median:.0} ms, worst {:.0} ms",
            latencies[latencies.len() - 1]
        );
        assert!(median <= 150.0, "median stop latency {median:.0} ms: {latencies:?}");
    }
}

/// `source.properties."fetch.max.bytes" = "1000"`: `validate` passed it and `run` failed (the
/// enumerator's client refused it, exit 1). Every consumer now fits its message size to it, and
/// validate checks the enumerator's client too: both accept it, and the replay reads everything.
/// Both sizes set and inconsistent: both refuse, exit 2, naming a key.
#[test]
fn validate_and_run_agree_on_a_small_fetch_size() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("small-fetch", 2);
    produce_numbered(&kafka, &topic, 2, 500);
    let dir = JobDir::new();
    let run_and_validate = |properties: &str| {
        let config = dir.config(&replay_config(
            &kafka,
            &topic,
            FILE_SINK,
            &format!("stopping_offsets = \"latest\"\nproperties = {{ {properties} }}"),
        ));
        let validated = std::process::Command::new(binary())
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .expect("validate");
        let (code, log) = run(&config, &[], MINUTE);
        (
            validated.status.code(),
            String::from_utf8_lossy(&validated.stderr).into_owned(),
            code,
            log,
        )
    };
    let (validated, stderr, code, log) = run_and_validate(r#""fetch.max.bytes" = "1000""#);
    assert_eq!(validated, Some(0), "{stderr}");
    assert_eq!(code, 0, "{log}");
    assert_eq!(line_count(&dir.path("out.jsonl")), 500);
    let (validated, stderr, code, log) =
        run_and_validate(r#""fetch.max.bytes" = "1000", "message.max.bytes" = "5000""#);
    assert_eq!((validated, code), (Some(2), 2), "validate: {stderr}\nrun: {log}");
    for text in [&stderr, &log] {
        assert!(
            text.contains("source.properties.\"") && text.contains("max.bytes"),
            "{text}"
        );
    }
}
