//! A job that ends badly, tried as a new user would: its logs piped into `head -1`, and a stop
//! asked for while the broker does not answer.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;
use crate::own_broker::OwnBroker;

const MINUTE: Duration = Duration::from_secs(60);

/// The state file's checkpoint (`null` when there is none yet).
fn state(path: &std::path::Path) -> serde_json::Value {
    tidegate::core::state::read_state::<serde_json::Value>(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .unwrap_or_default()
}

/// The next offsets a Kafka replay's state file claims, summed over its partitions.
fn claimed(path: &std::path::Path) -> i64 {
    state(path)["splits"]
        .as_array()
        .map(|s| s.iter().map(|s| s["split"]["next_offset"].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

#[test]
fn logs_piped_into_head_neither_kill_the_job_nor_lose_its_output() {
    let dir = JobDir::new();
    let count = 3_000;
    // paced, so the job logs (checkpoints, progress) long after `head -1` has gone
    let config = dir.config(&format!(
        r#"
[job]
name = "logs-into-head"
parallelism = 2

[source]
type = "datagen"
count = {count}
rate = 1500
format = "json"

[source.fields]
seq = {{ sequence = {{}} }}

{FILE_SINK}

[checkpoint]
path = "{{dir}}/job.state"
interval = "200ms"
"#
    ));
    // `tidegate run … 2>&1 | head -1`: a pipe whose reader goes away after the first line
    let mut child = Command::new(binary())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tidegate");
    let mut stderr = child.stderr.take().expect("stderr pipe");
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while !first.ends_with(b"\n") {
        match std::io::Read::read(&mut stderr, &mut byte) {
            Ok(1) => first.push(byte[0]),
            _ => break,
        }
    }
    drop(stderr); // `head` exits: the pipe has no reader any more
    assert!(
        String::from_utf8_lossy(&first).contains("starting"),
        "the first log line: {:?}",
        String::from_utf8_lossy(&first)
    );
    let deadline = Instant::now() + MINUTE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tidegate did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "a closed log pipe must not fail the job");
    let state = state(&dir.path("job.state"));
    assert_eq!(state["end_of_input"], true, "the final checkpoint: {state:#}");
    let lines = read_jsonl(&dir.path("out.jsonl"));
    assert_eq!(lines.len(), count, "every record in the output");
}

/// Where the replay of the SIGINT tests writes.
#[derive(Clone, Copy)]
enum Out {
    File,
    Kafka { exactly_once: bool },
}

#[test]
fn sigint_while_the_broker_does_not_answer_exits_promptly_with_a_final_checkpoint() {
    sigint_while_the_broker_does_not_answer(false, Out::File);
}

#[test]
fn sigint_while_the_broker_does_not_answer_exits_promptly_with_group_offsets_too() {
    sigint_while_the_broker_does_not_answer(true, Out::File);
}

#[test]
fn sigint_while_the_broker_does_not_answer_exits_promptly_from_a_kafka_sink() {
    sigint_while_the_broker_does_not_answer(false, Out::Kafka { exactly_once: false });
}

#[test]
fn sigint_while_the_broker_does_not_answer_exits_promptly_from_an_exactly_once_sink() {
    sigint_while_the_broker_does_not_answer(false, Out::Kafka { exactly_once: true });
}

/// A replay idle at the end of its topic, the broker paused, then SIGINT: the final checkpoint
/// is in the state file, its output is all there, and the process is gone well within the
/// request timeout. `group`: it also commits its offsets to a consumer group (a progress report).
fn sigint_while_the_broker_does_not_answer(group: bool, out: Out) {
    let broker = OwnBroker::start();
    let kafka: TestKafka = broker.kafka();
    let topic = kafka.create_topic("exit-unreachable", 2);
    let records: Vec<TestRecord> = (0..200).map(|i| TestRecord::to(i % 2, format!("{i}"))).collect();
    kafka.produce(&topic, &records);
    let target = format!("{topic}-out");
    let sink = match out {
        Out::File => FILE_SINK.to_string(),
        Out::Kafka { exactly_once } => {
            kafka.create_named_topic(&target, 2);
            format!(
                "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{target}\"\ndelivery = \"{}\"",
                kafka.bootstrap,
                if exactly_once { "exactly_once" } else { "at_least_once" }
            )
        }
    };
    let dir = JobDir::new();
    // unbounded: only a signal ends it
    let request_timeout = Duration::from_secs(30);
    let mut extra = format!("request_timeout = \"{}s\"", request_timeout.as_secs());
    if group {
        extra.push_str(&format!("\ngroup_id = \"{topic}-group\""));
    }
    let config = dir.config(&replay_config(&kafka, &topic, &sink, &extra, "500ms"));
    let state_path = dir.path("job.state");
    let daemon = Daemon::start(&config, &[]);
    // every record written and checkpointed (with transactions: a later checkpoint had nothing
    // to write, so the one holding the records was committed): the job idles at the topic's end
    daemon.wait_until("every record checkpointed", MINUTE, || {
        claimed(&state_path) == 200 && state(&state_path)["sink"]["transaction"].is_null()
    });
    // the broker stops answering (its connections stay open, as behind a dead network)
    broker.signal(libc::SIGSTOP);
    let (status, took, log) = interrupt(daemon, &broker, request_timeout * 3);
    eprintln!(
        "exit: SIGINT with the broker paused: exit {:?} after {took:?}",
        status.code()
    );
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(
        took < request_timeout / 3,
        "the process lived {took:?} after SIGINT (request timeout {request_timeout:?}); log:\n{log}"
    );
    // what the state claims is in the output
    assert_eq!(claimed(&state_path), 200, "the final checkpoint");
    let written = match out {
        Out::File => read_jsonl(&dir.path("out.jsonl")).len(),
        Out::Kafka { .. } => kafka.read_all(&target).len(),
    };
    assert_eq!(written, 200, "the output");
}

#[test]
fn sigint_during_a_partition_discovery_the_broker_does_not_answer_exits_promptly() {
    let broker = OwnBroker::start();
    let kafka: TestKafka = broker.kafka();
    let topic = kafka.create_topic("exit-discovery", 2);
    let dir = JobDir::new();
    let request_timeout = Duration::from_secs(30);
    let extra = format!("request_timeout = \"{}s\"", request_timeout.as_secs());
    let config = dir.config(&replay_config(&kafka, &topic, FILE_SINK, &extra, "200ms"));
    let state_path = dir.path("job.state");
    // the broker stops answering before the job starts: its first discovery waits for it
    broker.signal(libc::SIGSTOP);
    let daemon = Daemon::start(&config, &[]);
    // a checkpoint (of no split yet): the job runs, its discovery asked and waits
    daemon.wait_until("a first checkpoint", MINUTE, || {
        state(&state_path)["checkpoint_id"].as_u64().is_some()
    });
    let (status, took, log) = interrupt(daemon, &broker, request_timeout * 3);
    eprintln!(
        "exit: SIGINT during a discovery with the broker paused: exit {:?} after {took:?}",
        status.code()
    );
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(
        took < request_timeout / 3,
        "the process lived {took:?} after SIGINT (request timeout {request_timeout:?}); log:\n{log}"
    );
}

/// SIGINT to `daemon`, whose broker is paused: its exit status, how long it took, and its log
/// (the broker resumes either way; past `limit` the daemon is killed and the test fails).
fn interrupt(mut daemon: Daemon, broker: &OwnBroker, limit: Duration) -> (std::process::ExitStatus, Duration, String) {
    let stopped_at = Instant::now();
    daemon.signal(libc::SIGINT);
    let deadline = stopped_at + limit;
    let status = loop {
        if let Some(status) = daemon.child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = daemon.child.kill();
            broker.signal(libc::SIGCONT);
            panic!("tidegate did not end; log:\n{}", daemon.log_text());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = stopped_at.elapsed();
    broker.signal(libc::SIGCONT);
    (status, took, daemon.log_text())
}
