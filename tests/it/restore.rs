//! What a restart does when the config changed since the state file was written: changed
//! stopping offsets apply to the unfinished splits; a changed subscription, start or format is an
//! error naming the key (exit 2), the state untouched.

use std::time::Duration;

use crate::common::{wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn an_unbounded_replay_resumed_with_stopping_offsets_ends_at_them() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("restore-bounds", 2);
    let produce = |from: usize, n: usize| {
        let records: Vec<TestRecord> = (from..from + n)
            .map(|i| TestRecord::to((i % 2) as i32, format!("{i}")))
            .collect();
        kafka.produce(&topic, &records);
    };
    produce(0, 100);
    let dir = JobDir::new();
    // unbounded: no stopping offsets
    let config = dir.config(&replay_config(&kafka, &topic, FILE_SINK, "", "200ms"));
    let out = dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the first 100 records", MINUTE, || line_count(&out) >= 100);
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    produce(100, 50);
    // the same job, now bounded: the restored splits must take the new stops, and the job end
    let (code, log) = run(&config, &["--set", "source.stopping_offsets=latest"], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("stopping_offsets changed since the last checkpoint"),
        "{log}"
    );
    let mut values: Vec<u64> = read_jsonl(&out)
        .iter()
        .map(|l| l["value"].as_str().unwrap().parse().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(
        values,
        (0..150).collect::<Vec<_>>(),
        "every record once, up to the new end"
    );
}

#[test]
fn a_changed_subscription_start_or_format_is_refused_with_the_state_untouched() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("restore-changed", 1);
    kafka.produce(&topic, &[TestRecord::to(0, "{\"a\":1}")]);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
        "200ms",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let state = std::fs::read(dir.path("job.state")).unwrap();
    let other = kafka.create_topic("restore-other", 1);
    for (set, key) in [
        (format!("source.topics=[\"{other}\"]"), "source.topics"),
        ("source.starting_offsets=latest".to_string(), "source.starting_offsets"),
        ("source.format=json".to_string(), "source.format"),
    ] {
        let (code, log) = run(&config, &["--set", &set], MINUTE);
        assert_eq!(code, 2, "{set}: {log}");
        assert!(
            log.contains(key) && log.contains("changed since the last checkpoint") && log.contains("--reset-state"),
            "{set}: {log}"
        );
        assert_eq!(
            std::fs::read(dir.path("job.state")).unwrap(),
            state,
            "{set}: the state moved"
        );
    }
}

fn datagen(name: &str, count: u64) -> String {
    format!(
        "[job]\nname = \"{name}\"\n[source]\ntype = \"datagen\"\ncount = {count}\n[source.fields]\nseq = {{ sequence = {{}} }}\n[sink]\ntype = \"null\"\n[checkpoint]\npath = \"{{dir}}/job.state\"\n"
    )
}

#[test]
fn another_jobs_or_sources_state_is_refused_in_words() {
    let dir = JobDir::new();
    let (code, log) = run(&dir.config(&datagen("seed-a", 100)), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let state = std::fs::read(dir.path("job.state")).unwrap();
    // the same file, another job's config
    let (code, log) = run(&dir.config(&datagen("seed-b", 100)), &[], MINUTE);
    assert_eq!(code, 3, "{log}");
    assert!(log.contains("written by job seed-a, not by this job (seed-b)"), "{log}");
    // another source type: said in words, not as a deserialization error
    let kafka = "[job]\nname = \"seed-a\"\n[source]\ntype = \"kafka\"\nbootstrap_servers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n[sink]\ntype = \"null\"\n[checkpoint]\npath = \"{dir}/job.state\"\n";
    let (code, log) = run(&dir.config(kafka), &[], MINUTE);
    assert_eq!(code, 3, "{log}");
    assert!(
        log.contains("written by a datagen source, but this job's source is kafka"),
        "{log}"
    );
    assert!(
        !log.contains("invalid length") && !log.contains("expected struct"),
        "{log}"
    );
    assert_eq!(
        std::fs::read(dir.path("job.state")).unwrap(),
        state,
        "the state is untouched"
    );
}

#[test]
fn a_finished_seed_rerun_with_another_count_says_why_it_cannot_resume() {
    let dir = JobDir::new();
    let (code, log) = run(&dir.config(&datagen("seed", 100)), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let (code, log) = run(&dir.config(&datagen("seed", 200)), &[], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("source.count") && log.contains("was 100, now 200") && log.contains("--reset-state"),
        "{log}"
    );
    // and with the same settings it is simply done
    let (code, log) = run(&dir.config(&datagen("seed", 100)), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains(": 0 records read, 0 written"), "{log}");
}

#[test]
fn offsets_for_missing_partitions_or_outside_the_log_name_the_partition_and_the_range() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("offsets-range", 2);
    kafka.produce(
        &topic,
        &(0..10)
            .map(|i| TestRecord::to(i % 2, format!("{i}")))
            .collect::<Vec<_>>(),
    );
    let dir = JobDir::new();
    let cases = [
        (
            format!("starting_offsets = {{ offsets = {{ \"{topic}:5\" = 0 }} }}\nstopping_offsets = \"latest\""),
            format!("source.starting_offsets.offsets.\"{topic}:5\""),
            format!("no such partition: {topic} has partitions 0 to 1"),
        ),
        (
            format!("stopping_offsets = {{ offsets = {{ \"{topic}:7\" = 3 }} }}"),
            format!("source.stopping_offsets.offsets.\"{topic}:7\""),
            "no such partition".to_string(),
        ),
        // beyond the end: bounded, and unbounded
        (
            format!("starting_offsets = {{ offsets = {{ \"{topic}:0\" = 500 }} }}\nstopping_offsets = \"latest\""),
            format!("source.starting_offsets.offsets.\"{topic}:0\""),
            format!("500 is outside {topic}:0, which holds offsets 0 to 5"),
        ),
        (
            format!("starting_offsets = {{ offsets = {{ \"{topic}:1\" = 500 }} }}"),
            format!("source.starting_offsets.offsets.\"{topic}:1\""),
            format!("500 is outside {topic}:1, which holds offsets 0 to 5"),
        ),
    ];
    for (extra, key, says) in cases {
        let config = dir.config(&replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", &extra, "1s"));
        let (code, log) = run(&config, &["--reset-state"], MINUTE);
        assert_eq!(code, 2, "{extra}: {log}");
        assert!(log.contains(&key) && log.contains(&says), "{extra}: {log}");
    }
}

/// Finding 2.2 of issue #24: a state file pins what wrote it. Each change that cannot apply
/// exactly is refused (exit 2, naming the key, the state untouched); `replay_speed` applies.
#[test]
fn a_changed_sink_instance_or_end_rule_is_refused_naming_it() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("restore-writer", 1);
    let records: Vec<TestRecord> = (0..20)
        .map(|i| TestRecord::to(0, if i == 15 { "CLOSE".to_string() } else { format!("{i}") }))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let eof = "eof = 'value == \"CLOSE\"'";
    let config_with = |sink: &str| dir.config(&replay_config(&kafka, &topic, sink, eof, "200ms"));
    let config = config_with(FILE_SINK);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let state = std::fs::read(dir.path("job.state")).unwrap();
    let other_file = dir.path("other.jsonl").display().to_string();
    let cases = [
        ("[sink]\ntype = \"stdout\"", "", "sink.type"),
        (FILE_SINK, &*format!("sink.path={other_file}"), "sink.path"),
        (FILE_SINK, "job.instance={\"index\":0,\"count\":2}", "job.instance"),
        (FILE_SINK, "source.eof=value == \"OPEN\"", "source.eof"),
        (FILE_SINK, "source.eof_scope=source", "source.eof_scope"),
        (FILE_SINK, "source.eof_emit_marker=true", "source.eof_emit_marker"),
    ];
    for (sink, set, key) in cases {
        let config = config_with(sink);
        let args: &[&str] = if set.is_empty() { &[] } else { &["--set", set] };
        let (code, log) = run(&config, args, MINUTE);
        assert_eq!(code, 2, "{key}: {log}");
        assert!(
            log.contains(key) && log.contains("changed since the last checkpoint") && log.contains("--reset-state"),
            "{key}: {log}"
        );
        assert_eq!(
            std::fs::read(dir.path("job.state")).unwrap(),
            state,
            "{key}: the state moved"
        );
    }
    // pacing does not change what is written: a new replay_speed applies
    let config = config_with(FILE_SINK);
    let (code, log) = run(&config, &["--set", "source.replay_speed=1000"], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("replay_speed changed since the last checkpoint"), "{log}");

    // an exactly-once Kafka sink's checkpoint is settled through its transactional id: switching
    // to at-least-once (or another sink) after a crash between the state file and the commit
    // would lose that checkpoint, so it is refused
    let out = kafka.create_topic("restore-writer-out", 1);
    let kafka_sink = |delivery: &str| {
        format!(
            "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{out}\"\ndelivery = \"{delivery}\"",
            kafka.bootstrap
        )
    };
    let dir = JobDir::new();
    // a job of its own: its transactional id is derived from the name
    let name = format!("[job]\nname = \"{}\"\n", kafka.unique_topic("writer"));
    let config_with =
        |sink: &str| dir.config(&replay_config(&kafka, &topic, sink, eof, "200ms").replacen("[job]\n", &name, 1));
    let (code, log) = run(&config_with(&kafka_sink("exactly_once")), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let state = std::fs::read(dir.path("job.state")).unwrap();
    for (sink, key) in [
        (kafka_sink("at_least_once"), "sink.delivery"),
        (FILE_SINK.to_string(), "sink.type"),
    ] {
        let (code, log) = run(&config_with(&sink), &[], MINUTE);
        assert_eq!(code, 2, "{key}: {log}");
        assert!(log.contains(key) && log.contains("--reset-state"), "{key}: {log}");
        assert_eq!(
            std::fs::read(dir.path("job.state")).unwrap(),
            state,
            "{key}: the state moved"
        );
    }
}

/// Finding 2.3 of issue #24: with an exactly-once Kafka sink, a crash between the first
/// checkpoint's state file and its commit made the restart start afresh, resolving `latest`
/// again: the records produced between the two starts were never read. The restart must read
/// from where the first run's `latest` was.
#[test]
fn an_uncommitted_first_checkpoint_keeps_the_resolved_latest() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("restore-first-txn", 1);
    let out = kafka.create_topic("restore-first-txn-out", 1);
    let produce = |values: &[String]| {
        let records: Vec<TestRecord> = values.iter().map(|v| TestRecord::to(0, v.clone())).collect();
        kafka.produce(&topic, &records);
    };
    let old: Vec<String> = (0..50).map(|i| format!("old-{i}")).collect();
    produce(&old);
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{out}\"\ndelivery = \"exactly_once\"",
        kafka.bootstrap
    );
    let dir = JobDir::new();
    // a long interval: the first checkpoint comes after the records produced below are read
    let config = dir.config(
        &replay_config(
            &kafka,
            &topic,
            &sink,
            "starting_offsets = \"latest\"\neof = 'value == \"CLOSE\"'",
            "4s",
        )
        // a job of its own: its transactional id is derived from the name
        .replacen(
            "[job]\n",
            &format!("[job]\nname = \"{}\"\n", kafka.unique_topic("first-txn")),
            1,
        ),
    );
    let log_path = dir.path("crashed.log");
    let mut crashed = std::process::Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("TIDEGATE_FAILPOINT", "checkpoint.after_state:1")
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("run tidegate");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_until("the split assigned at latest", MINUTE, || {
        log().contains("splits assigned")
    });
    let first: Vec<String> = (0..10).map(|i| format!("first-{i}")).collect();
    produce(&first);
    let status = crashed.wait().expect("wait");
    let log = log();
    assert!(
        status.code().is_none() && log.contains("failpoint checkpoint.after_state reached"),
        "the first run did not crash at its first checkpoint ({status:?}):\n{log}"
    );
    // the precondition: checkpoint 1 holds records in a transaction that was never committed
    let state: serde_json::Value = tidegate::core::state::read_state(&dir.path("job.state"))
        .unwrap()
        .expect("a state file");
    assert_eq!(state["checkpoint_id"], 1, "{state:#}");
    assert!(
        state["sink"]["transaction"].is_string(),
        "checkpoint 1 wrote nothing: {state:#}\n{log}"
    );

    let second: Vec<String> = (0..10).map(|i| format!("second-{i}")).collect();
    produce(&second);
    produce(&["CLOSE".to_string()]);
    let (code, restart) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{restart}");
    let mut written: Vec<String> = kafka
        .read_all(&out)
        .into_iter()
        .map(|r| String::from_utf8(r.value.expect("a value")).expect("text"))
        .collect();
    written.sort();
    let mut expected: Vec<String> = first.iter().chain(&second).cloned().collect();
    expected.sort();
    assert_eq!(
        written, expected,
        "every record after the first run's latest, once\n--- crashed run:\n{log}\n--- restart:\n{restart}"
    );
}
