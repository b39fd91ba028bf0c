//! Instances coordinated by Kafka's group protocol (`job.coordination = "group"`) against the
//! real broker: a live tail scaled from one member to three and back to two while records keep
//! coming, and a bounded replay whose member is killed (`kill -9`) and started again with an
//! empty directory, each into the exactly-once Kafka sink that carries the checkpoints: every
//! record once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checkpoint_store::{assert_each_once, output_counts};
use crate::common::{wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Records `value-<from>` … `value-<to - 1>` dealt over `partitions` partitions of `topic`.
pub(crate) fn produce(kafka: &TestKafka, topic: &str, partitions: i32, from: usize, to: usize) {
    let records: Vec<TestRecord> = (from..to)
        .map(|i| TestRecord::to((i % partitions as usize) as i32, format!("value-{i}")))
        .collect();
    kafka.produce(topic, &records);
}

/// A group-coordinated job reading `topic` into the exactly-once sink `out`, its checkpoints in
/// `state` (in the sink's transactions); `stop` lines for a bounded replay.
pub(crate) fn group_job(kafka: &TestKafka, name: &str, topic: &str, out: &str, state: &str, stop: &str) -> String {
    format!(
        r#"
[job]
name = "{name}"
parallelism = 2
coordination = "group"

[source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
format = "string"
{stop}

[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{out}"
delivery = "exactly_once"

[checkpoint]
interval = "300ms"
store = "kafka"
topic = "{state}"
"#,
        bootstrap = kafka.bootstrap
    )
}

/// `text` (a [`group_job`]) on Kafka's classic group protocol, a dead member dropped after 6 s
/// (under the consumer protocol, the test broker's `group.consumer.session.timeout.ms`).
pub(crate) fn on_classic_protocol(text: &str) -> String {
    text.replacen(
        "\n[sink]",
        "properties = { \"group.protocol\" = \"classic\", \"session.timeout.ms\" = \"6000\" }\n\n[sink]",
        1,
    )
}

/// How many times each value is in `topic`'s records committed so far.
fn committed_counts(kafka: &TestKafka, topic: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in kafka.read_committed_now(topic) {
        let v = String::from_utf8(r.value.expect("a value")).expect("UTF-8");
        *counts.entry(v).or_insert(0usize) += 1;
    }
    counts
}

/// A member `name` of the job, in its own empty directory: named as on a host of that name
/// (`HOSTNAME`), so a dynamic member, whose partitions move when it stops.
fn member(text: &str, name: &str) -> (JobDir, Daemon) {
    member_with(text, name, &[])
}

/// [`member`] with more arguments.
fn member_with(text: &str, name: &str, extra: &[&str]) -> (JobDir, Daemon) {
    let dir = JobDir::new();
    let daemon = Daemon::start_with_env(&dir.config(text), extra, &[("HOSTNAME", name)]);
    (dir, daemon)
}

/// A static member `name` (`job.member` set: `group.instance.id`), in its own empty directory.
fn static_member(text: &str, name: &str) -> (JobDir, Daemon) {
    member_with(text, name, &["--set", &format!("job.member={name}")])
}

/// Wait until `topic` holds `n` distinct values; `daemons`' logs are shown if it does not.
fn wait_for_output(kafka: &TestKafka, topic: &str, n: usize, daemons: &[&Daemon]) {
    let deadline = std::time::Instant::now() + MINUTE * 2;
    while committed_counts(kafka, topic).len() < n {
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = daemons.iter().map(|d| d.log_text()).collect();
            panic!(
                "{topic} did not reach {n} records; the members' logs:\n{}",
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait for `condition` up to `timeout`, as `wait_until` does; if it never holds, the panic shows
/// `members`' logs (what the group dealt each, and when).
fn wait_for_members(what: &str, timeout: Duration, members: &[&Daemon], mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !condition() {
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = members.iter().map(|d| d.log_text()).collect();
            panic!(
                "timed out waiting for {what}; the members' logs:\n{}",
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// When the last line of `log` that contains `what` was written.
fn last_time(log: &str, what: &str) -> Option<std::time::SystemTime> {
    let line = log.lines().rfind(|l| l.contains(what))?;
    humantime::parse_rfc3339(line.split_whitespace().next()?).ok()
}

/// The sizes of the assignments the group dealt a member, in order (logged before its job runs on
/// one).
fn dealt(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains("group rebalance: partitions assigned"))
        .filter_map(|l| l.split("partitions=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// How many partitions the member's job reads now, by its log: its last run's assignment, less
/// what it gave up since, with what it took in since.
fn holding(log: &str) -> Option<usize> {
    let value =
        |line: &str, key: &str| -> Option<usize> { line.split(key).nth(1)?.split_whitespace().next()?.parse().ok() };
    log.lines().rev().find_map(|l| {
        if l.contains("running the job on its assignment") {
            value(l, "partitions=")
        } else if l.contains("revoked partitions released at a checkpoint") {
            value(l, "still=")
        } else if l.contains("the job took the new partitions in and runs on") {
            value(l, "now=")
        } else {
            None
        }
    })
}

/// The partitions of each run of the member's job, by its log.
fn assignments(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains("running the job on its assignment"))
        .filter_map(|l| l.split("partitions=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn a_live_tail_scales_from_one_member_to_three_and_back_to_two_with_every_record_once() {
    let kafka = TestKafka::get();
    let partitions = 6;
    let topic = kafka.create_topic("group-tail", partitions);
    let out = kafka.create_topic("group-tail-out", 3);
    let state = kafka.unique_topic("group-tail-state");
    let name = kafka.unique_topic("group-tail-job");
    // each member reads at most 200 records a second: a backlog waits while the group rebalances
    let text = group_job(&kafka, &name, &topic, &out, &state, "max_rate = 200");

    produce(&kafka, &topic, partitions, 0, 1000);
    let (_d0, m0) = member(&text, "m0");
    wait_for_output(&kafka, &out, 1000, &[&m0]);

    // two more members: the group deals the six partitions over three
    let (_d1, m1) = member(&text, "m1");
    let (_d2, m2) = member(&text, "m2");
    wait_until("three members share the partitions", MINUTE, || {
        [&m0, &m1, &m2].iter().all(|m| holding(&m.log_text()) == Some(2))
    });
    produce(&kafka, &topic, partitions, 1000, 2000);
    wait_for_output(&kafka, &out, 2000, &[&m0, &m1, &m2]);

    // one leaves (SIGTERM: a final checkpoint) with records waiting in every partition; its
    // partitions move to the other two
    produce(&kafka, &topic, partitions, 2000, 3000);
    m0.signal(libc::SIGTERM);
    let (status, log0) = m0.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "m0's stop:\n{log0}");
    wait_until("two members share the partitions", MINUTE, || {
        [&m1, &m2].iter().all(|m| holding(&m.log_text()) == Some(3))
    });
    wait_for_output(&kafka, &out, 3000, &[&m1, &m2]);
    // the pause: from the departing member's last line (its final checkpoint committed, it
    // left the group) to the last of the new owners' first records on their assignments, or
    // (under the consumer protocol, where the two take its partitions in while their jobs run
    // on) to the last of their takes
    let logs = [m1.log_text(), m2.log_text()];
    let revoked = log0
        .lines()
        .rev()
        .find_map(|l| humantime::parse_rfc3339(l.split_whitespace().next()?).ok())
        .expect("m0's log");
    let first = logs
        .iter()
        .map(|l| {
            let taken = last_time(l, "the job took the new partitions in");
            let first = last_time(l, "first record written on this assignment");
            taken.max(first).expect("a first record or a take")
        })
        .max()
        .expect("two logs");
    let pause = first
        .duration_since(revoked)
        .expect("the first record after the revocation");
    println!(
        "group: rebalance pause, 3 → 2 members over {partitions} partitions (the departing member's last line → the new owners' first records): {} ms",
        pause.as_millis()
    );
    assert!(pause < Duration::from_secs(30), "a rebalance took {pause:?}");
    // a live tail's members take the departing member's partitions in while their jobs run on
    assert!(
        logs.iter()
            .any(|l| l.contains("the job took the new partitions in and runs on")),
        "a member took m0's partitions in:\n{}\n{}",
        logs[0],
        logs[1]
    );
    for m in [m1, m2] {
        m.signal(libc::SIGTERM);
        let (status, log) = m.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "a member's stop:\n{log}");
    }
    let counts = output_counts(&kafka, &out);
    assert_each_once(&counts, 3000, "a live tail scaled 1 → 3 → 2");
    // a run whose every partition a newer run holds is removed when a member next opens the
    // store: the last two deals' runs stay (3 and 2 here), the earlier ones went
    let runs = live_runs(&kafka, &state);
    println!(
        "group: runs with live checkpoints after the 1 → 3 → 2 tail: {}",
        runs.len()
    );
    assert!(runs.len() <= 5, "{} runs kept: {runs:?}", runs.len());
}

/// The owners (`<job>@<member>~<run>`) whose job record is live in the state topic.
fn live_runs(kafka: &TestKafka, state: &str) -> Vec<String> {
    let mut latest: BTreeMap<String, bool> = BTreeMap::new();
    for r in kafka.read_all(state) {
        let key = String::from_utf8(r.key.expect("a key")).expect("UTF-8");
        if let Some(owner) = key.strip_suffix("/checkpoint") {
            latest.insert(owner.to_string(), r.value.is_some());
        }
    }
    latest
        .into_iter()
        .filter(|(_, live)| *live)
        .map(|(owner, _)| owner)
        .collect()
}

#[test]
fn a_group_member_killed_mid_replay_and_started_again_with_an_empty_directory_writes_every_record_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("group-kill", 6);
    let out = kafka.create_topic("group-kill-out", 3);
    a_member_killed_mid_replay_and_started_again(&kafka, &topic, &out);
}

/// Three members replay the 6 partitions of `topic` into `out` (3 partitions) at most 600
/// records/s each; one is killed (`kill -9`) a quarter in and started again with an empty
/// directory: every record once, every member exits 0. Also run on the three-node cluster
/// (tests/it/cluster.rs).
pub(crate) fn a_member_killed_mid_replay_and_started_again(kafka: &TestKafka, topic: &str, out: &str) {
    let partitions = 6;
    let n = 6000;
    let state = kafka.unique_topic("group-kill-state");
    let name = kafka.unique_topic("group-kill-job");
    produce(kafka, topic, partitions, 0, n);
    let text = group_job(
        kafka,
        &name,
        topic,
        out,
        &state,
        "stopping_offsets = \"latest\"\nmax_rate = 600",
    );
    three_members_one_killed_and_started_again(&text, || (), |_| committed_counts(kafka, out).len() >= n / 4);
    let counts = output_counts(kafka, out);
    assert_each_once(&counts, n, "three members, one killed and started again");
    // `state show` of the job (from a host that is none of its members) shows the members' runs
    // and what a restore makes of them: every partition, finished. (Which members left a run
    // depends on the schedule: a member killed before its first checkpoint leaves none, and one
    // started again after the others finished may find nothing left to do.)
    let dir = JobDir::new();
    let (code, shown, err) = crate::checkpoint_store::state_show(&dir.config(&text));
    assert_eq!(code, 0, "state show:\n{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("state show prints JSON");
    let runs: Vec<&str> = shown["runs"]
        .as_array()
        .expect("the runs")
        .iter()
        .filter_map(|r| r["run"].as_str())
        .collect();
    assert!(
        !runs.is_empty()
            && runs.iter().all(|r| {
                r.starts_with(&format!("{name}@")) && ["m0", "m1", "m2"].iter().any(|m| r.contains(&format!("@{m}~")))
            }),
        "{runs:?}"
    );
    let merged = shown["merged"]["splits"].as_array().expect("the merged splits");
    assert_eq!(merged.len(), partitions as usize, "{merged:?}");
    assert!(merged.iter().all(|s| !s["finished"].is_null()), "{merged:?}");
}

/// A bounded replay of `n` records over four partitions (topics named from `prefix`) by two
/// members, m0 and m1, each at most 1,000 records a second, their sink's transactions timing out
/// after `transaction_timeout`: started, and under way once each member holds two partitions and
/// `n / written_before` records are written. The output topic and the two members.
fn two_members_replaying(
    kafka: &TestKafka,
    prefix: &str,
    n: usize,
    transaction_timeout: &str,
    written_before: usize,
) -> (String, (JobDir, Daemon), (JobDir, Daemon)) {
    let partitions = 4;
    let topic = kafka.create_topic(prefix, partitions);
    let out = kafka.create_topic(&format!("{prefix}-out"), partitions);
    let state = kafka.unique_topic(&format!("{prefix}-state"));
    let name = kafka.unique_topic(&format!("{prefix}-job"));
    produce(kafka, &topic, partitions, 0, n);
    let text = group_job(
        kafka,
        &name,
        &topic,
        &out,
        &state,
        "stopping_offsets = \"latest\"\nmax_rate = 1000",
    )
    .replace(
        "delivery = \"exactly_once\"",
        &format!("delivery = \"exactly_once\"\ntransaction_timeout = \"{transaction_timeout}\""),
    );
    let (d0, m0) = member(&text, "m0");
    let (d1, m1) = member(&text, "m1");
    wait_for_members("two members share the partitions", MINUTE, &[&m0, &m1], || {
        [&m0, &m1].iter().all(|m| holding(&m.log_text()) == Some(2))
    });
    wait_until("a part of the replay written", MINUTE, || {
        committed_counts(kafka, &out).len() >= n / written_before
    });
    (out, (d0, m0), (d1, m1))
}

/// A bounded replay of 4 partitions by two members, one killed (`kill -9`) mid-replay and never
/// started again: the survivor finishes the two partitions it was dealt, stays in the group until
/// the dead member's session expires, takes its partitions over from its last checkpoint, and
/// exits 0 once every record is written, each once. (It used to exit 0 with the dead member's
/// partitions unread: 120,000 of 240,000 records.)
#[test]
fn a_bounded_replay_whose_member_dies_is_finished_by_the_survivor() {
    let kafka = TestKafka::get();
    let n = 8000;
    // the dead member's open transaction holds an output partition until the broker aborts it
    // (10 s here, and up to 10 s more: the broker's cleanup interval); with the default 60 s, the
    // read of the output could time out first, the survivor done in 15 s
    let (out, (_d0, m0), (_d1, m1)) = two_members_replaying(&kafka, "group-survivor", n, "10s", 8);
    let killed = m1.kill9();
    assert!(!assignments(&killed).is_empty(), "{killed}");
    let (status, log) = m0.wait(MINUTE * 3);
    assert_eq!(status.code(), Some(0), "the survivor:\n{log}");
    // the dead member's partitions are the survivor's once its session expires: it took all
    // four, whether it had finished its own two first (and stayed in the group until the others'
    // were finished) or the group dealt it the four while it still read its own (a CI run saw
    // the second; the simulation's named schedule takes the first)
    assert_eq!(
        holding(&log),
        Some(4),
        "the survivor took the dead member's partitions:\n{log}"
    );
    assert_each_once(&output_counts(&kafka, &out), n, "two members, one killed for good");
}

/// A bounded replay of four partitions by two members, slow enough that the survivor of a
/// killed member still reads its own two when the dead one's session and open transaction have
/// ended: it takes the dead member's two in while its job runs on (no run after the kill: its
/// own partitions are not stopped), and exits 0 once every record is written, each once.
#[test]
fn a_bounded_replay_s_survivor_takes_a_dead_member_s_partitions_in_without_stopping() {
    let kafka = TestKafka::get();
    let n = 48000;
    // each member's 24,000 records take 24 s. The take waits for the test broker's session
    // (6 s) and for the dead member's open transaction, which holds the state topic (its
    // checkpoints are in the sink's transactions) until the broker aborts it: 2 s here, and up to
    // 10 s more (the broker's transaction.abort.timed.out.transaction.cleanup.interval.ms)
    let (out, (_d0, m0), (_d1, m1)) = two_members_replaying(&kafka, "group-bounded-take", n, "2s", 32);
    // (the first to join ran on all four a moment, before the second's join)
    let runs = assignments(&m0.log_text());
    let killed = m1.kill9();
    assert!(!assignments(&killed).is_empty(), "{killed}");
    let (status, log) = m0.wait(MINUTE * 3);
    assert_eq!(status.code(), Some(0), "the survivor:\n{log}");
    assert_eq!(assignments(&log), runs, "the survivor's job ran on, not again:\n{log}");
    assert!(
        log.contains("the job took the new partitions in and runs on"),
        "the survivor took the dead member's two in:\n{log}"
    );
    assert_eq!(
        holding(&log),
        Some(4),
        "the survivor read four partitions at the end:\n{log}"
    );
    assert_each_once(
        &output_counts(&kafka, &out),
        n,
        "a bounded replay's survivor took partitions in",
    );
}

/// Three members of `text`'s job share its 6 partitions; once they do, `started` runs; once
/// `written` holds of what it returned, one member is killed (`kill -9`) and started again with an
/// empty directory. Every member must exit 0. Returns what `started` returned.
fn three_members_one_killed_and_started_again<T>(
    text: &str,
    started: impl FnOnce() -> T,
    written: impl Fn(&T) -> bool,
) -> T {
    let (_d0, m0) = member(text, "m0");
    let (_d1, m1) = member(text, "m1");
    let (_d2, m2) = member(text, "m2");
    // (a condition, not a measure: on a cold three-node cluster beside other tiers, a CI run saw
    // the group take over a minute to form)
    wait_for_members(
        "three members share the partitions",
        MINUTE * 3,
        &[&m0, &m1, &m2],
        || [&m0, &m1, &m2].iter().all(|m| holding(&m.log_text()) == Some(2)),
    );
    let value = started();
    wait_for_members("a part of the replay written", MINUTE * 2, &[&m0, &m1, &m2], || {
        written(&value)
    });
    let killed = m1.kill9();
    assert!(!assignments(&killed).is_empty(), "{killed}");
    let (_d1b, m1b) = member(text, "m1");
    for (who, m) in [("m0", m0), ("m1 again", m1b), ("m2", m2)] {
        let (status, log) = m.wait(MINUTE * 4);
        assert_eq!(status.code(), Some(0), "{who}:\n{log}");
    }
    value
}

#[test]
fn a_member_the_group_dropped_while_it_was_paused_cannot_commit_and_every_record_is_written_once() {
    // a member stopped (SIGSTOP) past its session timeout is dropped from the group and its
    // partitions given to the others; woken up, it still holds an open transaction and its job
    // goes on: its group metadata in that transaction (KIP-447) makes the commit fail
    let kafka = TestKafka::get();
    let partitions = 6;
    let n = 9000;
    let topic = kafka.create_topic("group-zombie", partitions);
    let out = kafka.create_topic("group-zombie-out", 3);
    let state = kafka.unique_topic("group-zombie-state");
    let name = kafka.unique_topic("group-zombie-job");
    produce(&kafka, &topic, partitions, 0, n);
    let text = group_job(
        &kafka,
        &name,
        &topic,
        &out,
        &state,
        "stopping_offsets = \"latest\"\nmax_rate = 200",
    )
    // longer than the pause: the transaction is still open when the member wakes
    .replace(
        "delivery = \"exactly_once\"",
        "delivery = \"exactly_once\"\ntransaction_timeout = \"60s\"",
    );
    let (_d0, m0) = member(&text, "m0");
    let (_d1, m1) = member(&text, "m1");
    let (_d2, m2) = member(&text, "m2");
    wait_until("three members share the partitions", MINUTE, || {
        [&m0, &m1, &m2].iter().all(|m| holding(&m.log_text()) == Some(2))
    });
    wait_until("a part of the replay written", MINUTE, || {
        committed_counts(&kafka, &out).len() >= n / 6
    });
    m1.signal(libc::SIGSTOP);
    // dealt by the group (the new owners' restore then waits for the paused member's open
    // transaction: it must not time out first, or the broker would fence the member itself)
    wait_until(
        "the group deals the paused member's partitions to the others",
        MINUTE,
        || [&m0, &m2].iter().any(|m| dealt(&m.log_text()).last() > Some(&2)),
    );
    // the others read on from the paused member's last checkpoint meanwhile
    std::thread::sleep(Duration::from_secs(2));
    m1.signal(libc::SIGCONT);
    // woken, it is refused, rejoins, and the three finish the replay
    let (status, log1) = m1.wait(MINUTE * 4);
    assert_eq!(status.code(), Some(0), "the woken member:\n{log1}");
    assert!(
        log1.contains("its checkpoint was refused by the group"),
        "the woken member was not refused:\n{log1}"
    );
    for (who, m) in [("m0", m0), ("m2", m2)] {
        let (status, log) = m.wait(MINUTE * 4);
        assert_eq!(status.code(), Some(0), "{who}:\n{log}");
    }
    let counts = output_counts(&kafka, &out);
    assert_each_once(
        &counts,
        n,
        &format!("a member dropped while paused (it exited with {status}):\n{log1}"),
    );
}

#[test]
fn a_job_s_state_of_the_other_coordination_is_refused_naming_job_coordination() {
    // static instances' checkpoints read by a group member (or the reverse) would start every
    // partition over: refused, with the way out named
    let kafka = TestKafka::get();
    let partitions = 2;
    let topic = kafka.create_topic("group-switch", partitions);
    let out = kafka.create_topic("group-switch-out", 1);
    let state = kafka.unique_topic("group-switch-state");
    let name = kafka.unique_topic("group-switch-job");
    produce(&kafka, &topic, partitions, 0, 100);
    let text = group_job(&kafka, &name, &topic, &out, &state, "stopping_offsets = \"latest\"");
    let dir = JobDir::new();
    let config = dir.config(&text);
    let static_run = ["--set", "job.coordination=static"];
    let (code, log) = run(&config, &static_run, MINUTE);
    assert_eq!(code, 0, "the static run:\n{log}");
    let (code, log) = run(&config, &["--set", "job.member=m0"], MINUTE);
    assert_eq!(code, 2, "a group member over static state:\n{log}");
    assert!(
        log.contains("job.coordination") && log.contains("--reset-state"),
        "{log}"
    );
    // a member started with --reset-state starts the job over: every record once more
    let (code, log) = run(&config, &["--set", "job.member=m0", "--reset-state"], MINUTE);
    assert_eq!(code, 0, "a group member's --reset-state:\n{log}");
    let counts = output_counts(&kafka, &out);
    assert!(counts.len() == 100 && counts.values().all(|c| *c == 2), "{counts:?}");
    // now the state is a group's
    let (code, log) = run(&config, &static_run, MINUTE);
    assert_eq!(code, 2, "static instances over a group's state:\n{log}");
    assert!(log.contains("job.coordination") && log.contains("group"), "{log}");
}

/// As [`produce`], each value a JSON string (`"value-<i>"`).
fn produce_json(kafka: &TestKafka, topic: &str, partitions: i32, from: usize, to: usize) {
    let records: Vec<TestRecord> = (from..to)
        .map(|i| TestRecord::to((i % partitions as usize) as i32, format!("\"value-{i}\"")))
        .collect();
    kafka.produce(topic, &records);
}

/// The tail config of docker/k8s/live-tail.yaml's ConfigMap (parsed with PyYAML), for this
/// machine's broker and `topic`, `out`, `name`.
fn deployment_config(kafka: &TestKafka, topic: &str, out: &str, name: &str) -> String {
    let docs = crate::kubernetes::documents("docker/k8s/live-tail.yaml");
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = &container["args"];
    assert_eq!(args[2], "/etc/tidegate/tail.toml", "{args}");
    // the probes reach the endpoint the args open: /ready for readiness
    assert_eq!(args[5], "metrics.listen=0.0.0.0:9464", "{args}");
    assert_eq!(container["ports"][0]["containerPort"], 9464, "{container}");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready", "{container}");
    assert_eq!(
        container["readinessProbe"]["httpGet"]["port"],
        container["ports"][0]["name"]
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz", "{container}");
    let text = docs.iter().find(|d| d["kind"] == "ConfigMap").expect("a ConfigMap")["data"]["tail.toml"]
        .as_str()
        .expect("tail.toml")
        .to_string();
    text.replace("kafka:9092", &kafka.bootstrap)
        .replace("\"events\"", &format!("\"{topic}\""))
        .replace("\"events-copy\"", &format!("\"{out}\""))
        .replace("\"events-tail\"", &format!("\"{name}\""))
}

#[test]
fn the_kubernetes_deployment_s_live_tail_scales_two_three_one_with_every_record_once() {
    let kafka = TestKafka::get();
    let partitions = 6;
    let topic = kafka.create_topic("k8s-tail", partitions);
    let out = kafka.unique_topic("k8s-tail-out");
    let name = kafka.unique_topic("k8s-tail-job");
    let text = deployment_config(&kafka, &topic, &out, &name);
    assert!(text.contains("coordination = \"group\""), "{text}");
    produce_json(&kafka, &topic, partitions, 0, 600);
    // pods named as a Deployment's are (the member name is the pod's host name)
    let (_a, pod_a) = member(&text, "tidegate-events-tail-7d4b9-a");
    let (_b, pod_b) = member(&text, "tidegate-events-tail-7d4b9-b");
    wait_for_output(&kafka, &out, 600, &[&pod_a, &pod_b]);
    // kubectl scale --replicas=3; the new pod with its endpoint (on a port of its own here), whose
    // readiness probe sees 503 until the group has dealt it partitions and its run goes on
    let listen = format!("metrics.listen=127.0.0.1:{}", free_port());
    let (_c, pod_c) = member_with(&text, "tidegate-events-tail-7d4b9-c", &["--set", &listen]);
    let ready_addr = listen.trim_start_matches("metrics.listen=").to_string();
    let mut probes = Vec::new();
    wait_until("the new pod ready", MINUTE, || {
        let code = crate::control::http(&ready_addr, "GET", "/ready", "").map(|(code, _)| code);
        if probes.last() != Some(&code) {
            probes.push(code);
        }
        code == Some(200)
    });
    assert!(
        probes.contains(&Some(503)),
        "the probe saw {probes:?}: never 503 before the pod's first run"
    );
    wait_until("three pods share the partitions", MINUTE, || {
        [&pod_a, &pod_b, &pod_c]
            .iter()
            .all(|m| holding(&m.log_text()) == Some(2))
    });
    produce_json(&kafka, &topic, partitions, 600, 1200);
    wait_for_output(&kafka, &out, 1200, &[&pod_a, &pod_b, &pod_c]);
    // kubectl scale --replicas=1: two pods get SIGTERM
    pod_a.signal(libc::SIGTERM);
    pod_b.signal(libc::SIGTERM);
    for pod in [pod_a, pod_b] {
        let (status, log) = pod.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "a pod scaled away:\n{log}");
    }
    wait_until("one pod holds every partition", MINUTE, || {
        holding(&pod_c.log_text()) == Some(6)
    });
    produce_json(&kafka, &topic, partitions, 1200, 1800);
    wait_for_output(&kafka, &out, 1800, &[&pod_c]);
    pod_c.signal(libc::SIGTERM);
    let (status, log) = pod_c.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the last pod:\n{log}");
    // the values are JSON strings: "value-<i>"
    let counts: BTreeMap<String, usize> = output_counts(&kafka, &out)
        .into_iter()
        .map(|(v, c)| (v.trim_matches('"').to_string(), c))
        .collect();
    assert_each_once(&counts, 1800, "the Deployment scaled 2 → 3 → 1");
}

#[test]
fn a_member_killed_before_its_first_interval_checkpoint_leaves_its_partitions_where_the_job_began() {
    // a live tail from "latest": the first member's first discovery resolves where the
    // partitions start. Killed before any interval checkpoint, it must leave that start to the
    // member that takes its partitions over: not a "latest" resolved again (the records written
    // since lost), and not the partitions' start (the records from before the job repeated)
    let kafka = TestKafka::get();
    let partitions = 4;
    let n = 400;
    let topic = kafka.create_topic("group-early", partitions);
    let out = kafka.create_topic("group-early-out", 2);
    let state = kafka.unique_topic("group-early-state");
    let name = kafka.unique_topic("group-early-job");
    let before: Vec<TestRecord> = (0..n)
        .map(|i| TestRecord::to((i % partitions as usize) as i32, format!("before-{i}")))
        .collect();
    kafka.produce(&topic, &before);
    // the classic protocol's case (the others run on the consumer protocol)
    let text = on_classic_protocol(&group_job(
        &kafka,
        &name,
        &topic,
        &out,
        &state,
        "starting_offsets = \"latest\"",
    ))
    // no interval checkpoint during the test: only a first discovery's and a stop's
    .replace("interval = \"300ms\"", "interval = \"50s\"")
    .replace(
        "delivery = \"exactly_once\"",
        "delivery = \"exactly_once\"\ntransaction_timeout = \"100s\"",
    );
    let (_d1, m1) = member(&text, "m1");
    wait_until("the first member reads its partitions", MINUTE, || {
        m1.log_text().contains("splits assigned")
    });
    // killed before it read anything (no transaction of its own left open), and before any
    // interval checkpoint; the records come after it
    let killed = m1.kill9();
    produce(&kafka, &topic, partitions, 0, n);
    let port = free_port();
    let dir0 = JobDir::new();
    let m0 = Daemon::start(
        &dir0.config(&text),
        &[
            "--set",
            "job.member=m0",
            "--set",
            &format!("metrics.listen=127.0.0.1:{port}"),
        ],
    );
    // the records written since the job began: 400
    m0.wait_until("the next member writes the 400 records", MINUTE, || {
        records_written(port).unwrap_or(0) >= n as u64
    });
    m0.signal(libc::SIGTERM);
    let (status, log) = m0.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let counts = output_counts(&kafka, &out);
    assert_each_once(
        &counts,
        n,
        &format!("a member killed before its first interval checkpoint; its log:\n{killed}\nthe next one's:\n{log}"),
    );
}

#[test]
fn job_max_duration_counts_from_a_member_s_start_across_its_runs() {
    // a member's rebalance starts a new run of its job (on the classic protocol: on the
    // consumer one the job gives the partition up and runs on); max_duration still ends the
    // process when it has run that long, not that long after its last run began
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("group-duration", 2);
    let out = kafka.create_topic("group-duration-out", 1);
    let state = kafka.unique_topic("group-duration-state");
    let name = kafka.unique_topic("group-duration-job");
    let text = on_classic_protocol(&group_job(&kafka, &name, &topic, &out, &state, "")).replace(
        "coordination = \"group\"",
        "coordination = \"group\"\nmax_duration = \"20s\"",
    );
    let started = std::time::Instant::now();
    let (_d0, m0) = member(&text, "m0");
    // a second member joins 12 s in: the first one's job starts again on a new assignment
    wait_until("12 s of the first member's run", MINUTE, || {
        started.elapsed() >= Duration::from_secs(12)
    });
    let (_d1, m1) = member(&text.replace("max_duration = \"20s\"", ""), "m1");
    let (status, log) = m0.wait(MINUTE);
    let ran = started.elapsed();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        assignments(&log).len() >= 2,
        "the first member ran its job once only:\n{log}"
    );
    // 20 s from its start (and its final checkpoint), not 20 s from its second run's (12 s on)
    assert!(ran < Duration::from_secs(28), "the first member ran {ran:?}:\n{log}");
    m1.signal(libc::SIGTERM);
    let (status, log) = m1.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
}

/// A trading day over the 6 partitions of `topic`: at each step `i` (`base + 10 i` ms) one trade
/// in partition `i % 6`, five when that is partition 4, and the market close in partition 4 after
/// step `close_after` (each partition in timestamp order). Partition 4's member reaches the close
/// last: the others have read past its timestamp by then. Returns the ids of the trades before the
/// close, and how many were produced.
fn produce_trading_day(kafka: &TestKafka, topic: &str, steps: usize, close_after: usize) -> (Vec<i64>, usize) {
    let base = 1_795_789_800_000i64;
    let close = base + 10 * close_after as i64 + 5;
    let (mut records, mut before) = (Vec::new(), Vec::new());
    for i in 0..steps {
        let partition = (i % 6) as i32;
        for _ in 0..if partition == 4 { 5 } else { 1 } {
            let id = records.len() as i64;
            let at = base + 10 * i as i64;
            if at < close {
                before.push(id);
            }
            records.push(TestRecord::to(partition, format!(r#"{{"id":{id},"type":"TRADE"}}"#)).at(at));
        }
        if i == close_after {
            records.push(TestRecord::to(4, r#"{"id":-1,"type":"MARKET_CLOSE"}"#).at(close));
        }
    }
    let produced = records.len();
    kafka.produce(topic, &records);
    (before, produced)
}

/// How many times each trade id is in `topic`'s committed records.
fn trade_counts(kafka: &TestKafka, topic: &str) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for (value, count) in output_counts(kafka, topic) {
        let json: serde_json::Value = serde_json::from_str(&value).expect("a JSON value");
        *counts.entry(json["id"].as_i64().expect("an id")).or_insert(0) += count;
    }
    counts
}

/// `eof_scope = "source"` across members: the market close is in one member's partition, which
/// that member reaches last, and every member's partitions end at its timestamp, with one member
/// killed (`kill -9`) mid-replay and started again with an empty directory. Every trade before
/// the close is written once, none after it (without the members' published watermarks, the
/// others wrote their partitions' trades past the close, and learnt of it only from the
/// checkpoints the next rebalance restored).
#[test]
fn a_source_wide_stop_found_by_one_member_ends_every_member_s_partitions_at_its_timestamp() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("group-close", 6);
    let out = kafka.create_topic("group-close-out", 3);
    let state = kafka.unique_topic("group-close-state");
    let name = kafka.unique_topic("group-close-job");
    // the shared template reads strings; this replay reads JSON, for its end-of-stream rule
    let text = group_job(
        &kafka,
        &name,
        &topic,
        &out,
        &state,
        "eof = 'value.type == \"MARKET_CLOSE\"'\neof_scope = \"source\"\nmax_rate = 600",
    )
    .replace("format = \"string\"", "format = \"json\"");
    // produced once each member reads its own partitions: no member finds the close alone
    let (before, produced) = three_members_one_killed_and_started_again(
        &text,
        || produce_trading_day(&kafka, &topic, 6000, 3600),
        |(before, _)| committed_counts(&kafka, &out).len() >= before.len() / 4,
    );
    let counts = trade_counts(&kafka, &out);
    let expected: std::collections::BTreeSet<i64> = before.iter().copied().collect();
    let after: Vec<&i64> = counts.keys().filter(|id| !expected.contains(id)).take(5).collect();
    assert!(
        after.is_empty(),
        "written at or after the close: {after:?}… ({} of {produced} records written, {} before the close)",
        counts.len(),
        before.len()
    );
    let missing: Vec<&i64> = before.iter().filter(|id| !counts.contains_key(id)).take(5).collect();
    assert!(missing.is_empty(), "missing before the close: {missing:?}…");
    let repeated: Vec<(&i64, &usize)> = counts.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(repeated.is_empty(), "repeated: {repeated:?}…");
}

/// `--reset-state` starts a group's source-wide replay over without the stop the job before
/// found: the values its members published go with its state (without that, the old stop
/// ended the new replay at the old close, though its end-of-stream rule matches nothing).
#[test]
fn a_member_s_reset_state_forgets_the_source_wide_stop_the_job_before_found() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("group-reclose", 6);
    let out = kafka.create_topic("group-reclose-out", 1);
    let state = kafka.unique_topic("group-reclose-state");
    let name = kafka.unique_topic("group-reclose-job");
    let (before, produced) = produce_trading_day(&kafka, &topic, 600, 300);
    let config = |eof: &str| {
        let stop = format!("eof = '{eof}'\neof_scope = \"source\"\nstopping_offsets = \"latest\"");
        let text =
            group_job(&kafka, &name, &topic, &out, &state, &stop).replace("format = \"string\"", "format = \"json\"");
        let dir = JobDir::new();
        let path = dir.config(&text);
        (dir, path)
    };
    let (_first, at_the_close) = config("value.type == \"MARKET_CLOSE\"");
    let (code, log) = run(&at_the_close, &["--set", "job.member=m0"], MINUTE * 2);
    assert_eq!(code, 0, "the replay to the close:\n{log}");
    assert_eq!(trade_counts(&kafka, &out).len(), before.len(), "the first replay");
    let (_again, to_the_end) = config("value.type == \"NONE\"");
    let (code, log) = run(&to_the_end, &["--set", "job.member=m0", "--reset-state"], MINUTE * 2);
    assert_eq!(code, 0, "the replay started over:\n{log}");
    let counts = trade_counts(&kafka, &out);
    assert_eq!(
        counts.len(),
        produced,
        "the second replay did not write every record (the close included): {} distinct of {produced}",
        counts.len()
    );
    assert!(
        before.iter().all(|id| counts[id] == 2),
        "a trade before the close not written twice"
    );
}

/// A live tail of two partitions, one each for two members; a third joins and is dealt nothing.
/// Under the consumer protocol (KIP-848) the two are told nothing and run on: neither runs its
/// job again nor gives anything back, and the records written meanwhile come on. (Under the
/// classic protocol the join stops both, each then runs again: this test fails there.)
#[test]
fn a_member_whose_partitions_do_not_move_runs_on_through_another_member_s_join() {
    let kafka = TestKafka::get();
    let partitions = 2;
    let topic = kafka.create_topic("group-stay", partitions);
    let out = kafka.create_topic("group-stay-out", 2);
    let state = kafka.unique_topic("group-stay-state");
    let name = kafka.unique_topic("group-stay-job");
    let text = group_job(&kafka, &name, &topic, &out, &state, "");
    let (_d0, m0) = member(&text, "m0");
    let (_d1, m1) = member(&text, "m1");
    wait_until("two members share the partitions", MINUTE, || {
        [&m0, &m1].iter().all(|m| holding(&m.log_text()) == Some(1))
    });
    produce(&kafka, &topic, partitions, 0, 400);
    wait_for_output(&kafka, &out, 400, &[&m0, &m1]);
    // the first to join took both partitions, and gave one up when the second joined
    let before: Vec<(Vec<usize>, usize)> = [&m0, &m1]
        .iter()
        .map(|m| {
            let log = m.log_text();
            (assignments(&log), log.matches("partitions revoked").count())
        })
        .collect();
    let (_d2, m2) = member(&text, "m2");
    wait_for_members(
        "the third member runs on what it was dealt: nothing",
        MINUTE,
        &[&m0, &m1, &m2],
        || holding(&m2.log_text()) == Some(0),
    );
    produce(&kafka, &topic, partitions, 400, 800);
    wait_for_output(&kafka, &out, 800, &[&m0, &m1, &m2]);
    for ((who, m), (runs, revoked)) in [("m0", &m0), ("m1", &m1)].into_iter().zip(before) {
        let log = m.log_text();
        assert_eq!(assignments(&log), runs, "{who} ran its job no more:\n{log}");
        assert_eq!(
            log.matches("partitions revoked").count(),
            revoked,
            "{who} gave nothing back:\n{log}"
        );
    }
    for m in [m0, m1, m2] {
        m.signal(libc::SIGTERM);
        let (status, log) = m.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "a member's stop:\n{log}");
    }
    assert_each_once(&output_counts(&kafka, &out), 800, "a third member joined two");
}

/// A live tail of four partitions, read by one member; a second joins and is dealt two of them.
/// Under the consumer protocol the first releases those two at a checkpoint and its job runs on
/// with the other two: one run, the records written meanwhile come on, each once. (Under the
/// classic protocol the join stops its job, and it runs again: this test fails there.)
#[test]
fn a_member_that_gives_partitions_up_runs_on_with_the_rest() {
    let kafka = TestKafka::get();
    let partitions = 4;
    let topic = kafka.create_topic("group-give", partitions);
    let out = kafka.create_topic("group-give-out", 2);
    let state = kafka.unique_topic("group-give-state");
    let name = kafka.unique_topic("group-give-job");
    let text = group_job(&kafka, &name, &topic, &out, &state, "");
    let (_d0, m0) = member(&text, "m0");
    wait_for_members("the first member reads every partition", MINUTE, &[&m0], || {
        holding(&m0.log_text()) == Some(4)
    });
    produce(&kafka, &topic, partitions, 0, 400);
    wait_for_output(&kafka, &out, 400, &[&m0]);
    let (_d1, m1) = member(&text, "m1");
    wait_for_members("the second member reads two partitions", MINUTE, &[&m0, &m1], || {
        holding(&m1.log_text()) == Some(2)
    });
    produce(&kafka, &topic, partitions, 400, 800);
    wait_for_output(&kafka, &out, 800, &[&m0, &m1]);
    let log = m0.log_text();
    assert_eq!(assignments(&log), [4], "m0 ran its job once:\n{log}");
    assert_eq!(
        log.matches("revoked partitions released at a checkpoint").count(),
        1,
        "m0 released two partitions in place:\n{log}"
    );
    for m in [m0, m1] {
        m.signal(libc::SIGTERM);
        let (status, log) = m.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "a member's stop:\n{log}");
    }
    assert_each_once(&output_counts(&kafka, &out), 800, "a member gave two partitions up");
}

/// Two static members (`job.member` set: `group.instance.id`) share a live tail of four
/// partitions. One is stopped and started again within its session: it is dealt its two
/// partitions back, and the other is dealt nothing in between (a dynamic member's stop would
/// have moved them to it). Then it is killed and started again at once: its place is held until
/// its session ends, which the new process waits out, joining again; every record once.
#[test]
fn a_static_member_restarted_within_its_session_keeps_its_partitions() {
    let kafka = TestKafka::get();
    let partitions = 4;
    let topic = kafka.create_topic("group-static", partitions);
    let out = kafka.create_topic("group-static-out", 2);
    let state = kafka.unique_topic("group-static-state");
    let name = kafka.unique_topic("group-static-job");
    let text = group_job(&kafka, &name, &topic, &out, &state, "");
    let (_d0, s0) = static_member(&text, "s0");
    let (_d1, s1) = static_member(&text, "s1");
    wait_for_members("two static members share the partitions", MINUTE, &[&s0, &s1], || {
        [&s0, &s1].iter().all(|m| holding(&m.log_text()) == Some(2))
    });
    produce(&kafka, &topic, partitions, 0, 400);
    wait_for_output(&kafka, &out, 400, &[&s0, &s1]);
    let (dealt_before, revoked_before) = {
        let log = s0.log_text();
        (dealt(&log), log.matches("partitions revoked").count())
    };

    s1.signal(libc::SIGTERM);
    let (status, log) = s1.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the static member's stop:\n{log}");
    let (_d1, s1) = static_member(&text, "s1");
    wait_for_members(
        "the restarted member holds its two partitions",
        MINUTE,
        &[&s0, &s1],
        || holding(&s1.log_text()) == Some(2),
    );
    assert_eq!(
        dealt(&s1.log_text()),
        [2],
        "the restarted member was dealt its partitions at once"
    );
    produce(&kafka, &topic, partitions, 400, 800);
    wait_for_output(&kafka, &out, 800, &[&s0, &s1]);
    let log = s0.log_text();
    assert_eq!(
        dealt(&log),
        dealt_before,
        "s0 was dealt nothing while s1 restarted:\n{log}"
    );
    assert_eq!(
        log.matches("partitions revoked").count(),
        revoked_before,
        "s0 gave nothing up:\n{log}"
    );

    let _ = s1.kill9();
    let (_d1, s1) = static_member(&text, "s1");
    wait_for_members(
        "the member started after a kill is dealt partitions again",
        MINUTE,
        &[&s0, &s1],
        || holding(&s1.log_text()).is_some_and(|n| n > 0),
    );
    let log = s1.log_text();
    assert!(
        log.contains("static member's place in the group is still held"),
        "the new process waited for the killed one's place:\n{log}"
    );
    produce(&kafka, &topic, partitions, 800, 1200);
    wait_for_output(&kafka, &out, 1200, &[&s0, &s1]);
    for m in [s0, s1] {
        m.signal(libc::SIGTERM);
        let (status, log) = m.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "a member's stop:\n{log}");
    }
    assert_each_once(
        &output_counts(&kafka, &out),
        1200,
        "a static member restarted and killed",
    );
}

/// A second process started under a running static member's name (its twin, sharing its
/// `group.instance.id` and its transactional ids): the broker refuses it its place, which it
/// waits for up to the broker's longest session (6 s on the test broker) and 3 s more, then it
/// exits 1 naming `job.member`, having fenced nothing: the member it shadows writes on, every
/// record once.
#[test]
fn a_static_member_s_twin_is_refused_naming_job_member_and_the_member_runs_on() {
    let kafka = TestKafka::get();
    let partitions = 2;
    let topic = kafka.create_topic("group-twin", partitions);
    let out = kafka.create_topic("group-twin-out", 1);
    let state = kafka.unique_topic("group-twin-state");
    let name = kafka.unique_topic("group-twin-job");
    let text = group_job(&kafka, &name, &topic, &out, &state, "");
    let (_d0, t0) = static_member(&text, "t0");
    wait_for_members("the static member holds the partitions", MINUTE, &[&t0], || {
        holding(&t0.log_text()) == Some(2)
    });
    produce(&kafka, &topic, partitions, 0, 200);
    wait_for_output(&kafka, &out, 200, &[&t0]);

    let (_twin_dir, twin) = static_member(&text, "t0");
    let (status, log) = twin.wait(MINUTE);
    assert_eq!(status.code(), Some(1), "the twin's exit:\n{log}");
    assert!(
        log.contains("another process holds static member t0") && log.contains("job.member"),
        "the twin's error names the member and job.member:\n{log}"
    );
    assert!(
        log.contains("wait_s=9"),
        "the twin waited the broker's longest session (6 s) and 3 s:\n{log}"
    );
    assert!(dealt(&log).is_empty(), "the twin was dealt nothing:\n{log}");

    produce(&kafka, &topic, partitions, 200, 400);
    wait_for_output(&kafka, &out, 400, &[&t0]);
    t0.signal(libc::SIGTERM);
    let (status, log) = t0.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "the static member's stop:\n{log}");
    assert_each_once(&output_counts(&kafka, &out), 400, "a static member and its twin");
}

/// A broker that offers only the classic group protocol (as before Kafka 4.0, or with
/// `group.coordinator.rebalance.protocols = classic`): the member says so once and joins on the
/// classic protocol, `/status` says which, and the bounded replay is written once.
#[test]
fn a_broker_without_the_consumer_protocol_gets_a_classic_member() {
    let broker = crate::own_broker::OwnBroker::start_with(&[("KAFKA_GROUP_PROTOCOLS", "classic")]);
    let kafka: TestKafka = broker.kafka();
    let partitions = 2;
    let topic = kafka.create_topic("group-classic", partitions);
    let out = kafka.create_topic("group-classic-out", 2);
    let state = kafka.unique_topic("group-classic-state");
    let name = kafka.unique_topic("group-classic-job");
    produce(&kafka, &topic, partitions, 0, 500);
    let text = group_job(&kafka, &name, &topic, &out, &state, "stopping_offsets = \"latest\"");
    let listen = format!("metrics.listen=127.0.0.1:{}", free_port());
    let (_d, m) = member_with(&text, "m0", &["--set", &listen, "--set", "metrics.linger=\"5s\""]);
    let addr = listen.trim_start_matches("metrics.listen=").to_string();
    let mut status = serde_json::Value::Null;
    wait_for_members("the member's status says its protocol", MINUTE, &[&m], || {
        status = crate::control::http(&addr, "GET", "/status", "")
            .and_then(|(_, body)| serde_json::from_str(&body).ok())
            .unwrap_or_default();
        status["group"]["protocol"] == "classic"
    });
    let (code, log) = m.wait(MINUTE * 2);
    assert_eq!(code.code(), Some(0), "{log}");
    assert_eq!(
        log.matches("does not offer Kafka's consumer group protocol").count(),
        1,
        "said once:\n{log}"
    );
    assert_each_once(&output_counts(&kafka, &out), 500, "a classic member");
}
