//! The Kafka checkpoint store (`checkpoint.store = "kafka"`) against the real broker: a replay
//! stopped by SIGTERM resumes from a fresh, empty directory with every record once; the file
//! store and the Kafka store write byte-identical output; a corrupt state record stops the job
//! with exit 3 and nothing written; a crash inside the store's transaction leaves the checkpoint
//! before as the one restored; a restart waits out another producer's open transaction on the
//! state topic and restores the latest checkpoint; a data generator's instance count changes
//! between runs (2 → 3 → 1) with every index once; a changed count whose old instances left a
//! file sink's tail to recover is refused.
//! Needs the binary built with `failpoints` (scripts/test does).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// `n` records `value-<i>` spread over `partitions` partitions of a new topic.
pub(crate) fn source_topic(kafka: &TestKafka, prefix: &str, partitions: i32, n: usize) -> String {
    let topic = kafka.create_topic(prefix, partitions);
    let records: Vec<TestRecord> = (0..n)
        .map(|i| {
            TestRecord::to((i % partitions as usize) as i32, format!("value-{i}")).at(1_790_000_000_000 + i as i64)
        })
        .collect();
    kafka.produce(&topic, &records);
    topic
}

/// A bounded replay of `topic` (to the end offsets at start) at `max_rate` records/s, into
/// `sink`, with checkpoints every 200 ms in `[checkpoint]` (`store` lines).
pub(crate) fn job(kafka: &TestKafka, name: &str, topic: &str, parallelism: usize, sink: &str, store: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
parallelism = {parallelism}

[source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
format = "string"
stopping_offsets = "latest"
max_rate = 300

{sink}

[checkpoint]
interval = "200ms"
{store}
"#,
        bootstrap = kafka.bootstrap
    )
}

pub(crate) fn kafka_store(state_topic: &str) -> String {
    format!("store = \"kafka\"\ntopic = \"{state_topic}\"")
}

/// `tidegate state show --json --config` of a job: exit code, stdout, stderr.
pub(crate) fn state_show(config: &Path) -> (i32, String, String) {
    state_show_as(config, &["--json"])
}

/// `tidegate state show --config` of a job, with more flags: exit code, stdout, stderr.
pub(crate) fn state_show_as(config: &Path, flags: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary())
        .args(["state", "show"])
        .args(flags)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run tidegate state show");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every record of the state topic, aborted transactions included (`read_uncommitted`), as
/// (key, value) pairs.
fn state_records_uncommitted(kafka: &TestKafka, topic: &str) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("group.id", "tidegate-test-state-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let deadline = std::time::Instant::now() + MINUTE;
    let mut out = Vec::new();
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "reading {topic} did not reach its end"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
}

/// How many times each value is in a JSON-lines output file.
fn value_counts(path: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in read_jsonl(path) {
        *counts
            .entry(line["value"].as_str().expect("a string value").to_string())
            .or_default() += 1;
    }
    counts
}

/// The exactly-once Kafka sink into `topic` (on the store's cluster: its transactions carry the
/// checkpoints).
pub(crate) fn eos_sink(kafka: &TestKafka, topic: &str) -> String {
    format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{topic}\"\ndelivery = \"exactly_once\"",
        kafka.bootstrap
    )
}

/// How many times each value is in `topic`'s committed records.
pub(crate) fn output_counts(kafka: &TestKafka, topic: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in kafka.read_all(topic) {
        let v = String::from_utf8(r.value.expect("a value")).expect("UTF-8");
        *counts.entry(v).or_insert(0usize) += 1;
    }
    counts
}

pub(crate) fn assert_each_once(counts: &BTreeMap<String, usize>, n: usize, what: &str) {
    let missing: Vec<String> = (0..n)
        .map(|i| format!("value-{i}"))
        .filter(|v| !counts.contains_key(v))
        .take(5)
        .collect();
    let repeated: Vec<(&String, &usize)> = counts.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?}…");
    assert!(repeated.is_empty(), "{what}: repeated {repeated:?}…");
    assert_eq!(counts.len(), n, "{what}: unexpected records");
}

#[test]
fn a_replay_stopped_by_sigterm_resumes_from_an_empty_directory_exactly_once() {
    let kafka = TestKafka::get();
    let n = 600;
    let topic = source_topic(&kafka, "store-src", 2, n);
    let out_topic = kafka.create_topic("store-out", 1);
    let state_topic = kafka.unique_topic("store-state");
    let name = kafka.unique_topic("store-job");
    let sink = eos_sink(&kafka, &out_topic);
    let text = job(&kafka, &name, &topic, 2, &sink, &kafka_store(&state_topic));
    let port = free_port();
    let first_dir = JobDir::new();
    let config = first_dir.config(&format!("{text}\n[metrics]\nlisten = \"{port}\"\n"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("200 records written", MINUTE, || {
        records_written(port).unwrap_or(0) >= 200
    });
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the stopped run:\n{log}");
    let first = kafka.read_all(&out_topic).len();
    assert!(
        first < n,
        "the first run was meant to stop mid-way, it wrote {first} of {n}"
    );

    // another machine: nothing of the first directory
    let second_dir = JobDir::new();
    let config = second_dir.config(&text);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the resumed run:\n{log}");
    assert!(
        log.contains("resuming=true"),
        "the second run did not resume from the Kafka store:\n{log}"
    );
    let counts = output_counts(&kafka, &out_topic);
    assert_each_once(
        &counts,
        n,
        &format!("stopped after {first}, resumed from an empty directory"),
    );
}

#[test]
fn the_file_store_and_the_kafka_store_write_identical_output() {
    let kafka = TestKafka::get();
    let n = 400;
    // one partition, one reader: the output's order is the topic's, whatever the timing
    let topic = source_topic(&kafka, "store-same", 1, n);
    let name = kafka.unique_topic("store-same-job");
    let file_dir = JobDir::new();
    let config = file_dir.config(&job(&kafka, &name, &topic, 1, FILE_SINK, "path = \"{dir}/job.state\""));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the file store's run:\n{log}");

    // the Kafka store's run is killed mid-way (records past its last checkpoint in the file,
    // cut back on restore to the length the Kafka store holds) and resumed
    let kafka_dir = JobDir::new();
    let state_topic = kafka.unique_topic("store-same-state");
    let config = kafka_dir.config(&job(&kafka, &name, &topic, 1, FILE_SINK, &kafka_store(&state_topic)));
    let out = kafka_dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("100 records written", MINUTE, || line_count(&out) >= 100);
    let log = daemon.kill9();
    assert!(
        line_count(&out) < n,
        "the Kafka store's first run was meant to be killed mid-way:\n{log}"
    );
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the Kafka store's resumed run:\n{log}");

    let with_file = std::fs::read(file_dir.path("out.jsonl")).expect("the file store's output");
    let with_kafka = std::fs::read(&out).expect("the Kafka store's output");
    assert_each_once(&value_counts(&out), n, "the Kafka store's output");
    assert!(
        with_file == with_kafka,
        "the outputs differ: {} bytes with the file store, {} with the Kafka store",
        with_file.len(),
        with_kafka.len()
    );
}

#[test]
fn a_corrupt_state_record_stops_the_job_with_exit_3_and_nothing_written() {
    let kafka = TestKafka::get();
    let topic = source_topic(&kafka, "store-corrupt", 2, 100);
    let state_topic = kafka.unique_topic("store-corrupt-state");
    let name = kafka.unique_topic("store-corrupt-job");
    let dir = JobDir::new();
    let config = dir.config(&job(&kafka, &name, &topic, 2, FILE_SINK, &kafka_store(&state_topic)));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the first run:\n{log}");

    // garbage under the job's key, outside any transaction
    let key = format!("{name}/checkpoint");
    kafka.produce(
        &state_topic,
        &[TestRecord::to(0, "\u{1}garbage, not JSON").key(key.clone())],
    );
    // (the first run's last commit marker may still be on its way: compared once settled,
    // markers included)
    let ends = kafka.settled_ends(&state_topic);
    let output = std::fs::read(dir.path("out.jsonl")).expect("output");

    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 3, "a corrupt state record must stop the job with exit 3:\n{log}");
    assert!(
        log.contains(&format!("key {key}")) && log.contains("not a tidegate state"),
        "the error names the key and the damage:\n{log}"
    );
    assert_eq!(
        kafka.settled_ends(&state_topic),
        ends,
        "the state topic was written to:\n{log}"
    );
    assert_eq!(
        std::fs::read(dir.path("out.jsonl")).expect("output"),
        output,
        "the output changed"
    );

    let (code, _, err) = state_show(&config);
    assert_eq!(code, 3, "state show of a corrupt record:\n{err}");
    assert!(err.contains(&key), "{err}");
}

#[test]
fn a_crash_inside_the_store_transaction_restores_the_checkpoint_before() {
    let kafka = TestKafka::get();
    let n = 600;
    let topic = source_topic(&kafka, "store-crash", 2, n);
    let state_topic = kafka.unique_topic("store-crash-state");
    let name = kafka.unique_topic("store-crash-job");
    let dir = JobDir::new();
    let config = dir.config(&job(&kafka, &name, &topic, 2, FILE_SINK, &kafka_store(&state_topic)));
    let point = "kafka_store.before_commit";
    let crashed = Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("TIDEGATE_FAILPOINT", format!("{point}:3"))
        .output()
        .expect("run tidegate");
    let log = String::from_utf8_lossy(&crashed.stderr);
    assert!(
        log.contains(&format!("failpoint {point} reached")) && crashed.status.code().is_none(),
        "the daemon did not crash in checkpoint 3's transaction ({:?}):\n{log}",
        crashed.status
    );
    // checkpoint 3's records reached the broker, in a transaction that never committed
    let job_key = format!("{name}/checkpoint");
    let written: Vec<u64> = state_records_uncommitted(&kafka, &state_topic)
        .into_iter()
        .filter(|(k, _)| *k == job_key)
        .filter_map(|(_, v)| serde_json::from_str::<serde_json::Value>(&v).ok()?["checkpoint_id"].as_u64())
        .collect();
    assert_eq!(written, vec![1, 2, 3], "the job records sent, committed or not:\n{log}");

    let (code, shown, err) = state_show(&config);
    assert_eq!(code, 0, "state show after the crash:\n{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("state show prints JSON");
    assert_eq!(
        shown["checkpoint_id"], 2,
        "the aborted checkpoint 3 must not be restored:\n{shown:#}"
    );

    let (code, restart) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the restart:\n{restart}");
    assert_each_once(
        &value_counts(&dir.path("out.jsonl")),
        n,
        &format!("crashed in checkpoint 3's transaction\n--- the crashed run:\n{log}\n--- the restart:\n{restart}"),
    );
}

/// With an exactly-once Kafka sink on the store's cluster, a checkpoint's state records travel
/// in the sink's transaction (KIP-618): a crash after the state is sent and before the commit
/// leaves neither that checkpoint's output nor its state; the restart aborts the open
/// transaction at once (the store takes the sink's transactional id), restores the checkpoint
/// before without a commit marker to look up, and writes every record once.
#[test]
fn a_checkpoint_in_the_sink_s_transaction_is_lost_with_its_output_by_a_crash_before_the_commit() {
    let kafka = TestKafka::get();
    let n = 600;
    let topic = source_topic(&kafka, "store-kip618", 2, n);
    let out_topic = kafka.create_topic("store-kip618-out", 1);
    let state_topic = kafka.unique_topic("store-kip618-state");
    let name = kafka.unique_topic("store-kip618-job");
    let sink = eos_sink(&kafka, &out_topic);
    let dir = JobDir::new();
    let config = dir.config(&job(&kafka, &name, &topic, 2, &sink, &kafka_store(&state_topic)));
    let point = "checkpoint.after_state";
    let crashed = Command::new(binary())
        .args(["run", "--no-progress", "--config"])
        .arg(&config)
        .env("TIDEGATE_FAILPOINT", format!("{point}:3"))
        .output()
        .expect("run tidegate");
    let log = String::from_utf8_lossy(&crashed.stderr);
    assert!(
        log.contains(&format!("failpoint {point} reached")) && crashed.status.code().is_none(),
        "the daemon did not crash after checkpoint 3's state ({:?}):\n{log}",
        crashed.status
    );
    // checkpoint 3's job record reached the broker; none keeps a checkpoint to fall back to
    let job_key = format!("{name}/checkpoint");
    let written: Vec<serde_json::Value> = state_records_uncommitted(&kafka, &state_topic)
        .into_iter()
        .filter(|(k, _)| *k == job_key)
        .filter_map(|(_, v)| serde_json::from_str(&v).ok())
        .collect();
    let ids: Vec<u64> = written.iter().filter_map(|r| r["checkpoint_id"].as_u64()).collect();
    assert_eq!(ids, vec![1, 2, 3], "the job records sent, committed or not:\n{log}");
    for record in &written {
        assert!(
            record["payload"].get("previous").is_none(),
            "a checkpoint committed with its output needs none before it: {record}"
        );
    }

    let (code, restart) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the restart:\n{restart}");
    assert!(
        restart.contains("restoring from the last checkpoint checkpoint=2"),
        "the restart restores checkpoint 2 (3's state was in the aborted transaction):\n{restart}"
    );
    for unexpected in ["an open transaction holds", "was not committed"] {
        assert!(
            !restart.contains(unexpected),
            "the crashed transaction is aborted at once and nothing is looked up ({unexpected:?}):\n{restart}"
        );
    }
    let counts = output_counts(&kafka, &out_topic);
    assert_each_once(
        &counts,
        n,
        &format!("crashed after checkpoint 3's state\n--- the crashed run:\n{log}\n--- the restart:\n{restart}"),
    );
}

#[test]
fn a_state_topic_that_is_not_compacted_is_a_config_error() {
    let kafka = TestKafka::get();
    let topic = source_topic(&kafka, "store-policy", 1, 10);
    // the broker's default policy: delete
    let state_topic = kafka.create_topic("store-policy-state", 1);
    let dir = JobDir::new();
    let name = kafka.unique_topic("store-policy-job");
    let config = dir.config(&job(&kafka, &name, &topic, 1, FILE_SINK, &kafka_store(&state_topic)));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("checkpoint.topic") && log.contains("cleanup.policy=delete"),
        "the error names the key and the policy:\n{log}"
    );
    assert!(!dir.path("out.jsonl").exists(), "the job started:\n{log}");
}

#[test]
fn a_second_process_of_the_job_fences_the_first() {
    let kafka = TestKafka::get();
    let n = 3000;
    let topic = source_topic(&kafka, "store-fence", 2, n);
    let state_topic = kafka.unique_topic("store-fence-state");
    let name = kafka.unique_topic("store-fence-job");
    // no output: what is tested is the store's fencing, not a sink's
    let port = free_port();
    let text = job(
        &kafka,
        &name,
        &topic,
        2,
        "[sink]\ntype = \"null\"",
        &kafka_store(&state_topic),
    );
    let first_dir = JobDir::new();
    let first = Daemon::start(
        &first_dir.config(&format!("{text}\n[metrics]\nlisten = \"{port}\"\n")),
        &[],
    );
    first.wait_until("the first process's records", MINUTE, || {
        records_written(port).unwrap_or(0) >= 100
    });

    // the same job on another machine: it takes over the store's transactional id
    let second_dir = JobDir::new();
    let second = Daemon::start(&second_dir.config(&text), &[]);
    let (status, log) = first.wait(MINUTE);
    assert_eq!(
        status.code(),
        Some(1),
        "the first process must stop once fenced:\n{log}"
    );
    assert!(
        log.contains("fences the first") && log.contains(&format!("tidegate.state.{name}")),
        "the error says it was fenced, naming the transactional id:\n{log}"
    );
    let (status, log) = second.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the second process:\n{log}");
    let (code, shown, err) = state_show(&second_dir.path("job.toml"));
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("state show prints JSON");
    assert_eq!(
        shown["end_of_input"], true,
        "the second process finished the job:\n{shown:#}"
    );
}

/// Two processes of a job whose exactly-once sink carries its checkpoints: the second takes over
/// the sink's transactional id when it opens the store, so the first cannot commit output or
/// state again and stops; the second resumes from the first's last commit, and every record is
/// in the output once.
#[test]
fn a_second_process_fences_the_first_s_sink_and_the_output_holds_every_record_once() {
    let kafka = TestKafka::get();
    let n = 3000;
    let topic = source_topic(&kafka, "store-fence-eos", 2, n);
    let out_topic = kafka.create_topic("store-fence-eos-out", 1);
    let state_topic = kafka.unique_topic("store-fence-eos-state");
    let name = kafka.unique_topic("store-fence-eos-job");
    let sink = eos_sink(&kafka, &out_topic);
    let text = job(&kafka, &name, &topic, 2, &sink, &kafka_store(&state_topic));
    let port = free_port();
    let first_dir = JobDir::new();
    let first = Daemon::start(
        &first_dir.config(&format!("{text}\n[metrics]\nlisten = \"{port}\"\n")),
        &[],
    );
    first.wait_until("the first process's records", MINUTE, || {
        records_written(port).unwrap_or(0) >= 300
    });
    let second_dir = JobDir::new();
    let second = Daemon::start(&second_dir.config(&text), &[]);
    let (status, first_log) = first.wait(MINUTE);
    assert_eq!(
        status.code(),
        Some(1),
        "the first process must stop once fenced:\n{first_log}"
    );
    assert!(
        first_log.contains("fenced") && first_log.contains(&format!("tidegate-{name}")),
        "the error says it was fenced, naming the sink's transactional id:\n{first_log}"
    );
    let (status, second_log) = second.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the second process:\n{second_log}");
    let counts = output_counts(&kafka, &out_topic);
    assert_each_once(
        &counts,
        n,
        &format!("two processes of one job\n--- the first:\n{first_log}\n--- the second:\n{second_log}"),
    );
}

/// The id of the last "checkpoint complete" line of a daemon's log (0: none).
fn last_checkpoint(log: &str) -> u64 {
    log.lines()
        .rev()
        .filter(|l| l.contains("checkpoint complete"))
        .find_map(|l| l.split("checkpoint=").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn an_open_foreign_transaction_on_the_state_topic_delays_the_restore_until_it_ends() {
    let kafka = TestKafka::get();
    let n = 3000;
    let topic = source_topic(&kafka, "store-lso", 2, n);
    let state_topic = kafka.unique_topic("store-lso-state");
    let name = kafka.unique_topic("store-lso-job");
    let dir = JobDir::new();
    let config = dir.config(&job(&kafka, &name, &topic, 2, FILE_SINK, &kafka_store(&state_topic)));
    let first = Daemon::start(&config, &[]);
    first.wait_until("the first run's checkpoints", MINUTE, || {
        last_checkpoint(&first.log_text()) >= 2
    });
    // another producer (another job, another instance) opens a transaction on the state topic
    let foreign = kafka.transactional_producer();
    foreign.begin();
    foreign.send_and_flush(&state_topic, &[TestRecord::to(0, "{}").key("another-job/checkpoint")]);
    let before = last_checkpoint(&first.log_text());
    // checkpoints committed after the foreign transaction began, then a stop
    first.wait_until("checkpoints after the foreign transaction began", MINUTE, || {
        last_checkpoint(&first.log_text()) >= before + 3
    });
    first.signal(libc::SIGTERM);
    let (status, log) = first.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the first run:\n{log}");
    let latest = last_checkpoint(&log);
    assert!(
        !log.contains("finished after"),
        "the first run ended before the stop; the test needs a longer input:\n{log}"
    );

    let second = Daemon::start(&config, &[]);
    second.wait_until("the restart waiting for the open transaction", MINUTE, || {
        let log = second.log_text();
        assert!(
            !log.contains("restoring from"),
            "the restart restored while a transaction held the state topic back:\n{log}"
        );
        log.contains("open transaction")
    });
    foreign.abort();
    let (status, log) = second.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the restart:\n{log}");
    assert!(
        log.contains(&format!("checkpoint={latest} ")) && log.contains("restoring from"),
        "the restart must restore the latest checkpoint, {latest}:\n{log}"
    );
    assert_each_once(&value_counts(&dir.path("out.jsonl")), n, "after the restart");
}

#[test]
fn an_instance_started_after_its_siblings_checkpointed_starts_fresh_and_reads_its_share_once() {
    // Indexed Job pods start in any order: instance 1 of 2 checkpoints (here: finishes) before
    // instance 0 first opens the store. Its siblings' records are no changed count (it was
    // refused as one, seen in tests/it/kubernetes.rs with three pods started at once).
    let kafka = TestKafka::get();
    let n = 80;
    let topic = source_topic(&kafka, "store-sibling", 4, n);
    let state_topic = kafka.unique_topic("store-sibling-state");
    let name = kafka.unique_topic("store-sibling-job");
    let text = job(&kafka, &name, &topic, 1, FILE_SINK, &kafka_store(&state_topic));
    let mut counts = BTreeMap::new();
    for index in [1, 0] {
        let dir = JobDir::new();
        let config = dir.config(&text);
        let instance = format!("job.instance={{\"index\":{index},\"count\":2}}");
        let (code, log) = run(&config, &["--set", &instance], MINUTE);
        assert_eq!(code, 0, "instance {index} of 2:\n{log}");
        let share = value_counts(&dir.path("out.jsonl"));
        assert!(!share.is_empty(), "instance {index} read nothing:\n{log}");
        for (value, times) in share {
            *counts.entry(value).or_insert(0) += times;
        }
    }
    assert_each_once(&counts, n, "two instances, the second started after the first finished");
    // a third instance is a changed count, not a late sibling: it would cut its share from the
    // two instances' checkpoints, but their file sinks' tails are theirs to recover
    let dir = JobDir::new();
    let third = "job.instance={\"index\":2,\"count\":3}";
    let (code, log) = run(&dir.config(&text), &["--set", third], MINUTE);
    assert_eq!(code, 2, "instance 2 of 3 beside the state of 2 instances:\n{log}");
    assert!(log.contains("job.instance.count") && log.contains("recover"), "{log}");
    assert!(
        !log.contains("fenced"),
        "a refused change leaves the instances of the count before running:\n{log}"
    );
}

#[test]
fn a_changed_instance_count_with_a_file_sink_is_refused_naming_job_instance_count() {
    let kafka = TestKafka::get();
    let n = 50;
    let topic = source_topic(&kafka, "store-inst", 2, n);
    let state_topic = kafka.unique_topic("store-inst-state");
    let name = kafka.unique_topic("store-inst-job");
    let dir = JobDir::new();
    let config = dir.config(&job(&kafka, &name, &topic, 2, FILE_SINK, &kafka_store(&state_topic)));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "the first run, one instance:\n{log}");

    // the same job as two instances: the one instance's file is its own to cut back
    let two = "job.instance={\"index\":0,\"count\":2}";
    let (code, log) = run(&config, &["--set", two], MINUTE);
    assert_eq!(
        code, 2,
        "a changed job.instance must be refused, not start afresh:\n{log}"
    );
    assert!(
        log.contains("job.instance.count") && log.contains("was 1") && log.contains("recover"),
        "the error names the key, the count before and why:\n{log}"
    );
    // --reset-state starts the job over, as it says: the one instance's records go too
    let (code, log) = run(&config, &["--set", two, "--reset-state"], MINUTE);
    assert_eq!(code, 0, "--reset-state:\n{log}");
    let job_key = format!("{name}/checkpoint");
    let last = state_records_uncommitted(&kafka, &state_topic)
        .into_iter()
        .rfind(|(k, _)| *k == job_key)
        .map(|(_, v)| v);
    assert_eq!(
        last.as_deref(),
        Some(""),
        "the count-1 instance's job record is a tombstone after --reset-state:\n{log}"
    );
}

/// A bounded data generator job at 1,000 records/s (the whole job's rate), into a Kafka sink
/// of `delivery` on the store's cluster (with `exactly_once`, its transactions carry the
/// checkpoints).
fn datagen_job(kafka: &TestKafka, name: &str, count: u64, out: &str, state_topic: &str, delivery: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
parallelism = 2

[source]
type = "datagen"
count = {count}
rate = 1000
[source.fields]
seq = {{ sequence = {{}} }}

[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{out}"
delivery = "{delivery}"

[checkpoint]
interval = "200ms"
{store}
"#,
        bootstrap = kafka.bootstrap,
        store = kafka_store(state_topic)
    )
}

/// Run `count` instances of the job at once (each with its own empty directory, `extra`
/// arguments after the instance); every one must exit 0. Their logs.
fn run_instances(text: &str, count: usize, extra: &[&str]) -> Vec<String> {
    let dirs: Vec<JobDir> = (0..count).map(|_| JobDir::new()).collect();
    let daemons: Vec<Daemon> = dirs
        .iter()
        .enumerate()
        .map(|(index, dir)| {
            let instance = format!("job.instance={{\"index\":{index},\"count\":{count}}}");
            let mut args = vec!["--set", instance.as_str()];
            args.extend_from_slice(extra);
            Daemon::start(&dir.config(text), &args)
        })
        .collect();
    daemons
        .into_iter()
        .enumerate()
        .map(|(index, d)| {
            let (status, log) = d.wait(MINUTE * 2);
            assert_eq!(status.code(), Some(0), "instance {index} of {count}:\n{log}");
            log
        })
        .collect()
}

#[test]
fn a_datagen_job_s_instance_count_changes_between_runs_and_every_index_is_written_once() {
    count_changes_write_every_index_once("exactly_once");
}

#[test]
fn an_at_least_once_datagen_job_s_instance_count_changes_and_clean_stops_write_every_index_once() {
    // the store in its own transactions, beside an at-least-once sink: the same cut; stops that
    // take their final checkpoint leave nothing to write again
    count_changes_write_every_index_once("at_least_once");
}

fn count_changes_write_every_index_once(delivery: &str) {
    let kafka = TestKafka::get();
    let count = 12_000u64;
    let out = kafka.create_topic("store-recount-out", 3);
    let state_topic = kafka.unique_topic("store-recount-state");
    let name = kafka.unique_topic("store-recount-job");
    let text = datagen_job(&kafka, &name, count, &out, &state_topic, delivery);
    let written = || kafka.read_all(&out).len() as u64;
    // two instances stopped part of the way, then three, then one to the end; each run of a
    // new count cuts its shares from the checkpoints of the count before
    let stop = ["--set", "job.max_duration=\"1500ms\""];
    let mut logs = run_instances(&text, 2, &stop);
    let after_two = written();
    assert!(
        after_two > 0 && after_two < count,
        "two instances wrote {after_two} of {count}"
    );
    let three = run_instances(&text, 3, &stop);
    for log in &three {
        assert!(
            log.contains("job.instance.count changed"),
            "every instance of three cuts its share:\n{log}"
        );
    }
    logs.extend(three);
    let after_three = written();
    assert!(
        after_three > after_two && after_three < count,
        "three instances moved on from {after_two} to {after_three} of {count}"
    );
    let one = run_instances(&text, 1, &[]);
    assert!(one[0].contains("job.instance.count changed"), "{}", one[0]);
    logs.extend(one);
    let mut seqs: BTreeMap<u64, usize> = BTreeMap::new();
    for r in kafka.read_all(&out) {
        let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON");
        *seqs.entry(v["seq"].as_u64().expect("seq")).or_default() += 1;
    }
    let missing: Vec<u64> = (0..count).filter(|i| !seqs.contains_key(i)).take(5).collect();
    let repeated: Vec<(&u64, &usize)> = seqs.iter().filter(|(_, n)| **n > 1).take(5).collect();
    let context = || logs.join("\n-----\n");
    assert!(missing.is_empty(), "missing {missing:?}…\n{}", context());
    assert!(repeated.is_empty(), "repeated {repeated:?}…\n{}", context());
    assert_eq!(seqs.len() as u64, count, "unexpected indices\n{}", context());
}

#[test]
fn a_kafka_source_job_s_instance_count_changes_between_runs_and_every_record_is_written_once() {
    let kafka = TestKafka::get();
    let n = 4000;
    let topic = source_topic(&kafka, "store-recount-kafka", 6, n);
    let out = kafka.create_topic("store-recount-kafka-out", 1);
    let state_topic = kafka.unique_topic("store-recount-kafka-state");
    let name = kafka.unique_topic("store-recount-kafka-job");
    let sink = eos_sink(&kafka, &out);
    let text = job(&kafka, &name, &topic, 2, &sink, &kafka_store(&state_topic));
    let written = || kafka.read_all(&out).len();
    // the partitions move with their offsets: two instances, then three, then one to the end
    let stop = ["--set", "job.max_duration=\"1500ms\""];
    let mut logs = run_instances(&text, 2, &stop);
    let after_two = written();
    assert!(after_two > 0 && after_two < n, "two instances wrote {after_two} of {n}");
    let three = run_instances(&text, 3, &stop);
    for log in &three {
        assert!(
            log.contains("job.instance.count changed"),
            "every instance of three cuts its share:\n{log}"
        );
    }
    logs.extend(three);
    let after_three = written();
    assert!(
        after_three > after_two && after_three < n,
        "three instances moved on from {after_two} to {after_three} of {n}"
    );
    logs.extend(run_instances(&text, 1, &[]));
    let counts = output_counts(&kafka, &out);
    assert_each_once(&counts, n, &logs.join("\n-----\n"));
}

#[test]
fn an_instance_of_the_count_before_started_again_after_the_change_began_is_refused() {
    // A fenced pod restarted with the old spec before the new count's first checkpoint (a
    // Deployment rolling back, a kubelet restart) finds the new generation's claim and stops,
    // rather than resume its old share beside the new instance that now holds it.
    let kafka = TestKafka::get();
    let n = 3000;
    let topic = source_topic(&kafka, "store-claim", 6, n);
    let out = kafka.create_topic("store-claim-out", 1);
    let state_topic = kafka.unique_topic("store-claim-state");
    let name = kafka.unique_topic("store-claim-job");
    let sink = eos_sink(&kafka, &out);
    let text = job(&kafka, &name, &topic, 2, &sink, &kafka_store(&state_topic));
    let mut logs = run_instances(&text, 2, &["--set", "job.max_duration=\"1500ms\""]);
    // instance 0 of 3 cuts its share, its first checkpoint 20 s away
    let new_dir = JobDir::new();
    let new = Daemon::start(
        &new_dir.config(&text),
        &[
            "--set",
            "job.instance={\"index\":0,\"count\":3}",
            "--set",
            "checkpoint.interval=\"20s\"",
        ],
    );
    let deadline = std::time::Instant::now() + MINUTE;
    while !new.log_text().contains("job.instance.count changed") {
        assert!(
            std::time::Instant::now() < deadline,
            "the new instance did not cut its share:\n{}",
            new.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let old_dir = JobDir::new();
    let old = ["--set", "job.instance={\"index\":0,\"count\":2}"];
    let (code, log) = run(&old_dir.config(&text), &old, MINUTE);
    assert_eq!(code, 2, "an instance of the count before must be refused:\n{log}");
    assert!(
        log.contains("job.instance.count = 3"),
        "the error says the count now:\n{log}"
    );
    new.signal(libc::SIGTERM);
    let (status, log) = new.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the new instance, stopped:\n{log}");
    logs.push(log);
    // the three to the end: instance 0 from its own checkpoint, 1 and 2 cut from the two's
    logs.extend(run_instances(&text, 3, &[]));
    let counts = output_counts(&kafka, &out);
    assert_each_once(&counts, n, &logs.join("\n-----\n"));
}
