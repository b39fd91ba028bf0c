//! `tidegate state set` (offsets by hand, Kafka Connect's KIP-875) against the real broker: one
//! partition of a finished exactly-once replay moved back, with the state file and with the
//! Kafka store; the next run rereads exactly that range (each of its records once more, nothing
//! else); a dry run changes nothing; a position outside the partition, and a job that holds its
//! state file's lock, are refused.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::checkpoint_store::{eos_sink, job, kafka_store, output_counts, source_topic, state_show, state_show_as};
use crate::common::TestKafka;
use crate::daemon_util::*;
use crate::group::group_job;

const MINUTE: Duration = Duration::from_secs(60);

/// `tidegate state set --config CONFIG ARGS…`: exit code, stdout, stderr.
fn state_set(config: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary())
        .args(["state", "set", "--config"])
        .arg(config)
        .args(args)
        .output()
        .expect("run tidegate state set");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A bounded exactly-once replay of 200 records over two partitions (the config `job_of(topic,
/// output topic)`, run with `args`), run to its end; partition 0 moved back to offset 60 by
/// `state set` (a dry run first); run again: the records of partition 0 from offset 60 (values
/// 120, 122, … 198) are in the output twice, the rest once.
fn moved_back_and_reread(kafka: &TestKafka, job_of: impl Fn(&str, &str) -> String, args: &[&str]) {
    let n = 200;
    let topic = source_topic(kafka, "set-src", 2, n);
    let out = kafka.create_topic("set-out", 1);
    let dir = JobDir::new();
    let config = dir.config(&job_of(&topic, &out));
    let (code, log) = run(&config, args, MINUTE);
    assert_eq!(code, 0, "the first run:\n{log}");
    let partition = format!("{topic}:0");

    let (_, before, _) = state_show(&config);
    let (code, stdout, stderr) = state_set(&config, &["--partition", &partition, "--offset", "60", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "{partition}: next_offset 100, stop_offset 100, finished (stopping_offset) -> next_offset 60, \
             stop_offset 100, unfinished (dry run: nothing written)\n"
        )
    );
    assert_eq!(state_show(&config).1, before, "a dry run changed the state");

    // beyond the partition's end: refused, naming its range
    let (code, _, stderr) = state_set(&config, &["--partition", &partition, "--offset", "500"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("holds offsets 0 to 100 now"), "{stderr}");

    let (code, stdout, stderr) = state_set(&config, &["--partition", &partition, "--offset", "60"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("-> next_offset 60, stop_offset 100, unfinished (written to"),
        "{stdout}"
    );
    let (code, shown, stderr) = state_show(&config);
    assert_eq!(code, 0, "{stderr}");
    let state: serde_json::Value = serde_json::from_str(&shown).expect("state show prints JSON");
    // a group's job: what a restore makes of its members' runs
    let state = state.get("merged").unwrap_or(&state);
    let history = state["history"].as_array().expect("the change in the state's history");
    assert_eq!(history.len(), 1, "{shown}");
    assert_eq!(history[0]["partition"], partition.as_str());
    assert_eq!(history[0]["position"], "--offset 60");
    // for people: the partition's row, and the change by hand
    let (code, shown, stderr) = state_show_as(&config, &[]);
    assert_eq!(code, 0, "{stderr}");
    let row = shown
        .lines()
        .find(|l| l.starts_with(&format!("{partition} ")))
        .unwrap_or_else(|| panic!("no row of {partition} in\n{shown}"));
    assert!(
        row.contains("unfinished, up to 40 left") && row.ends_with("next_offset 60, stop_offset 100"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("tidegate state set {partition}: next_offset 100")),
        "{shown}"
    );

    let (code, log) = run(&config, args, MINUTE);
    assert_eq!(code, 0, "the run after the change:\n{log}");
    let counts = output_counts(kafka, &out);
    let expected: BTreeMap<String, usize> = (0..n)
        .map(|i| (format!("value-{i}"), if i % 2 == 0 && i / 2 >= 60 { 2 } else { 1 }))
        .collect();
    assert_eq!(counts, expected, "the output after partition 0 was moved back to 60");
    // and the history is kept by the checkpoints that followed
    let (_, shown, _) = state_show(&config);
    let state: serde_json::Value = serde_json::from_str(&shown).expect("state show prints JSON");
    let state = state.get("merged").unwrap_or(&state);
    assert_eq!(state["history"].as_array().map(Vec::len), Some(1), "{shown}");
}

/// A static job of `store`: a bounded replay into the exactly-once Kafka sink.
fn static_job<'a>(kafka: &'a TestKafka, store: &'a str) -> impl Fn(&str, &str) -> String + 'a {
    move |topic, out| {
        let name = kafka.unique_topic("set-job");
        job(kafka, &name, topic, 2, &eos_sink(kafka, out), store)
    }
}

#[test]
fn a_partition_moved_back_in_the_state_file_is_read_again_exactly_once_more() {
    let kafka = TestKafka::get();
    moved_back_and_reread(&kafka, static_job(&kafka, "path = \"{dir}/job.state\""), &[]);
}

#[test]
fn a_partition_moved_back_in_the_kafka_store_is_read_again_exactly_once_more() {
    let kafka = TestKafka::get();
    let store = kafka_store(&kafka.unique_topic("set-state"));
    moved_back_and_reread(&kafka, static_job(&kafka, &store), &[]);
}

#[test]
fn a_partition_moved_back_in_a_group_members_job_is_read_again_exactly_once_more() {
    let kafka = TestKafka::get();
    let state = kafka.unique_topic("set-group-state");
    let name = kafka.unique_topic("set-group-job");
    moved_back_and_reread(
        &kafka,
        |topic, out| group_job(&kafka, &name, topic, out, &state, "stopping_offsets = \"latest\""),
        &[],
    );
}

#[test]
fn state_set_is_refused_while_the_job_holds_its_state_file() {
    let kafka = TestKafka::get();
    let topic = source_topic(&kafka, "set-locked", 1, 10);
    let dir = JobDir::new();
    let config = dir.config(&job(
        &kafka,
        &kafka.unique_topic("set-locked-job"),
        &topic,
        1,
        "[sink]\ntype = \"file\"\npath = \"{dir}/out.jsonl\"",
        "path = \"{dir}/job.state\"",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let state = std::fs::read(dir.path("job.state")).expect("the state file");
    // the lock a running job holds on its state file
    let lock = std::fs::File::create(dir.path(".job.state.lock")).expect("the lock file");
    // SAFETY: flock on a file descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let (code, _, stderr) = state_set(&config, &["--partition", &format!("{topic}:0"), "--earliest"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("in use by another tidegate process"), "{stderr}");
    assert_eq!(
        std::fs::read(dir.path("job.state")).expect("the state file"),
        state,
        "the state changed"
    );
    drop(lock);
    let (code, stdout, stderr) = state_set(&config, &["--partition", &format!("{topic}:0"), "--earliest"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("-> next_offset 0, stop_offset 10, unfinished (written to"),
        "{stdout}"
    );
}

#[test]
fn state_set_is_refused_while_a_member_of_the_group_runs() {
    let kafka = TestKafka::get();
    let topic = source_topic(&kafka, "set-live", 2, 20);
    let out = kafka.create_topic("set-live-out", 1);
    let (state, name) = (kafka.unique_topic("set-live-state"), kafka.unique_topic("set-live-job"));
    let dir = JobDir::new();
    // a live tail: it runs until stopped
    let config = dir.config(&group_job(&kafka, &name, &topic, &out, &state, ""));
    let port = free_port();
    let listen = format!("metrics.listen=127.0.0.1:{port}");
    // a dynamic member (its name the host's), which leaves the group as it stops
    let member = Daemon::start_with_env(&config, &["--set", &listen], &[("HOSTNAME", "m1")]);
    member.wait_until("the member's 20 records written", MINUTE, || {
        records_written(port).unwrap_or(0) >= 20
    });
    let partition = format!("{topic}:0");
    let (code, _, stderr) = state_set(&config, &["--partition", &partition, "--earliest"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("whose members run: "), "{stderr}");
    // a dry run only reads
    let (code, stdout, stderr) = state_set(&config, &["--partition", &partition, "--earliest", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("-> next_offset 0, unfinished (dry run"), "{stdout}");
    member.signal(libc::SIGTERM);
    let (status, log) = member.wait(MINUTE);
    assert_exit_0(status, &log);
    // the member left the group as it stopped
    let (code, stdout, stderr) = state_set(&config, &["--partition", &partition, "--earliest"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("-> next_offset 0, unfinished (written to"), "{stdout}");
}
