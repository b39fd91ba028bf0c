//! Fault tolerance, measured: the daemon killed at random points, the broker killed and paused,
//! damaged and unwritable state, offsets deleted by retention, bad configs, secrets. Every test
//! prints its figures (`faults:` lines), which the README's reliability table reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{wait_until, TestKafka, TestRecord};
use crate::daemon_util::*;
use crate::own_broker::OwnBroker;

const MINUTE: Duration = Duration::from_secs(60);

/// A small deterministic generator for "random" kill points (reproducible runs).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

pub(crate) fn produce_coordinates(kafka: &TestKafka, topic: &str, partitions: i32, n: usize) {
    // each value names its own coordinates' index, so copies can be checked without the source
    let records: Vec<TestRecord> = (0..n)
        .map(|i| TestRecord::to((i % partitions as usize) as i32, format!("{i:0>12}{}", "x".repeat(80))))
        .collect();
    kafka.produce(topic, &records);
}

/// A bounded replay (to the end offsets at start) checkpointed every `interval`.
fn replay_config(kafka: &TestKafka, topic: &str, sink: &str, interval: &str) -> String {
    crate::daemon_util::replay_config(kafka, topic, sink, "stopping_offsets = \"latest\"", interval)
}

/// Checkpointed next offsets per partition.
fn checkpointed(dir: &JobDir) -> BTreeMap<i64, i64> {
    let Some(state) = tidegate::core::state::read_state::<serde_json::Value>(&dir.path("job.state")).unwrap() else {
        return BTreeMap::new();
    };
    state["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["split"]["partition"].as_i64().unwrap(),
                s["split"]["next_offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The checkpoint id in the state file (0 without one).
fn checkpoint_id(dir: &JobDir) -> u64 {
    tidegate::core::state::read_state::<serde_json::Value>(&dir.path("job.state"))
        .ok()
        .flatten()
        .and_then(|s| s["checkpoint_id"].as_u64())
        .unwrap_or(0)
}

/// How many times the kill tests kill the replay.
const KILLS: usize = 20;

/// Kill the replay with -9 at `KILLS` pseudo-random points, restarting each time; then check the
/// output for loss, duplicates and order within each partition. The file sink and the Kafka sink
/// with `delivery = "exactly_once"` (`kafka-exactly-once`, read back `read_committed`) must hold
/// every record once; the at-least-once Kafka sink may repeat, at each kill, only what was
/// written after the last completed checkpoint.
///
/// The kills are placed by progress, not by time: each restart is killed once it has completed a
/// checkpoint (so the job moves on) and its sink has taken a random number of records. The
/// broker paces the replay with a fetch quota on the daemon's client id, so a fast machine cannot
/// finish the million records before the kills are done, and a slow one only takes longer.
fn kill_nine_times(sink_kind: &str) {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-kill", 2);
    let total = 1_000_000usize;
    produce_coordinates(&kafka, &topic, 2, total);
    let client_id = kafka.unique_topic("kill-test-client");
    // about 10,000 records/s of these ~105-byte records: a restart reads for well under a second
    // before its first checkpoint, then up to 15,000 records before its kill, so twenty restarts
    // take about a third of the records (half at 50,000 per restart)
    kafka.set_consumer_quota(&client_id, Some(1_000_000));
    let dir = JobDir::new();
    let out_topic = kafka.create_topic("faults-kill-out", 2);
    let exactly_once = sink_kind != "kafka";
    let sink = match sink_kind {
        "file" => FILE_SINK.to_string(),
        _ => format!(
            "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{out_topic}\"\npreserve_partition = true\ndelivery = \"{}\"",
            kafka.bootstrap,
            if exactly_once { "exactly_once" } else { "at_least_once" }
        ),
    };
    // the job's name is its transactional id: unique, so no other test's job fences it
    let config = dir.config(&format!(
        "{}\n[source.properties]\n\"client.id\" = \"{client_id}\"\n",
        replay_config(&kafka, &topic, &sink, "300ms").replace("[job]", &format!("[job]\nname = \"{out_topic}\""))
    ));
    let out = dir.path("out.jsonl");
    // (source partition, offset) of every record written so far; `ended`: the writer ended (its
    // last commit is waited for), else it was killed (its open transaction is not)
    let written = |ended: bool| -> Vec<(i64, i64)> {
        let records = match sink_kind {
            "file" => return read_lenient(&out),
            _ if ended => kafka.read_all(&out_topic),
            _ => kafka.read_committed_now(&out_topic),
        };
        records
            .iter()
            .map(|r| {
                let i: i64 = String::from_utf8_lossy(&r.value.as_deref().unwrap()[..12])
                    .parse()
                    .unwrap();
                (i % 2, i / 2)
            })
            .collect()
    };
    let mut rng = Lcg(0x71de_6a7e);
    let mut allowed = 0usize; // the sum, over kills, of what each kill may repeat
    let mut worst_kill = 0usize;
    let mut recoveries = Vec::new();
    let mut kills = 0;
    while kills < KILLS {
        let resumed_from = checkpoint_id(&dir);
        let port = free_port();
        let listen = format!("metrics.listen=127.0.0.1:{port}");
        let mut daemon = Daemon::start(&config, &["--set", &listen]);
        let started = Instant::now();
        let kill_at = 1 + rng.next(15_000);
        let deadline = Instant::now() + MINUTE;
        let mut recovered = None;
        let mut finished = false;
        loop {
            // recovered: the restarted job made progress durable (a new checkpoint)
            if recovered.is_none() && checkpoint_id(&dir) > resumed_from {
                recovered = Some(started.elapsed());
            }
            if let Some(status) = daemon.child.try_wait().unwrap() {
                assert!(status.success(), "the replay failed: {}", daemon.log_text());
                finished = true;
                break;
            }
            if recovered.is_some() && records_written(port).is_some_and(|n| n >= kill_at) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no checkpoint, or no progress, within a minute of a restart: {}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        if finished {
            break; // the replay ended before this kill
        }
        let _ = daemon.kill9();
        kills += 1;
        recoveries.push(recovered.unwrap_or_default());
        // what this kill may repeat: what was written after the last completed checkpoint
        let cp = checkpointed(&dir);
        let after_cp = written(false)
            .iter()
            .filter(|(p, o)| *o >= cp.get(p).copied().unwrap_or(0))
            .count();
        allowed += after_cp;
        worst_kill = worst_kill.max(after_cp);
    }
    let progress: i64 = checkpointed(&dir).values().sum();
    assert_eq!(
        kills, KILLS,
        "the replay ended after {kills} kills; the pace should leave room for {KILLS}"
    );
    // the rest at full speed
    kafka.set_consumer_quota(&client_id, None);
    let (code, log) = run(&config, &[], MINUTE * 2);
    assert_eq!(code, 0, "{log}");
    let coords = written(true);
    let mut seen: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for c in &coords {
        *seen.entry(*c).or_default() += 1;
    }
    let lost = total - seen.len();
    let duplicates = coords.len() - seen.len();
    assert_eq!(lost, 0, "records lost");
    if exactly_once {
        assert_eq!(duplicates, 0, "records written twice");
    } else {
        assert!(
            duplicates <= allowed,
            "{duplicates} duplicates; the kills could repeat at most {allowed}"
        );
    }
    for p in 0..2 {
        let offsets: Vec<i64> = coords.iter().filter(|c| c.0 == p).map(|c| c.1).collect();
        let rewinds = offsets.windows(2).filter(|w| w[1] <= w[0]).count();
        let most = if exactly_once { 0 } else { kills };
        assert!(
            rewinds <= most,
            "partition {p} rewound {rewinds} times for {kills} kills"
        );
        // a rewind only replays records written before: no record is skipped
        let mut high = -1;
        for o in &offsets {
            assert!(*o <= high + 1, "partition {p} skipped from {high} to {o}");
            high = high.max(*o);
        }
    }
    let mean = recoveries.iter().map(Duration::as_millis).sum::<u128>() / recoveries.len().max(1) as u128;
    let worst = recoveries.iter().max().copied().unwrap_or_default().as_millis();
    let bound = if exactly_once {
        String::new()
    } else {
        format!(" (at most {worst_kill} in one kill: the records of one interval)")
    };
    eprintln!(
        "faults: kill -9 x{kills} ({sink_kind} sink, {total} records, checkpoint every 300 ms, {progress} \
         records durable at the last kill): lost 0, duplicates {duplicates}{bound}, time to recover \
         (restart to the next checkpoint) mean {mean} ms, worst {worst} ms"
    );
}

fn read_lenient(path: &Path) -> Vec<(i64, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|l| (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap()))
        .collect()
}

#[test]
fn kill_9_at_twenty_points_to_a_file_sink_loses_and_repeats_nothing() {
    kill_nine_times("file");
}

#[test]
fn kill_9_at_twenty_points_to_an_exactly_once_kafka_sink_loses_and_repeats_nothing() {
    kill_nine_times("kafka-exactly-once");
}

#[test]
fn kill_9_at_twenty_points_to_an_at_least_once_kafka_sink_repeats_at_most_an_interval() {
    kill_nine_times("kafka");
}

fn broker_fault(fault: &str) {
    broker_fault_for(fault, Duration::from_secs(12));
}

/// `fault` ("kill", or "pause" for `pause`) mid-replay at parallelism 2: nothing lost or repeated.
fn broker_fault_for(fault: &str, pause: Duration) {
    let broker = OwnBroker::start();
    let kafka = broker.kafka();
    let topic = kafka.create_topic("faults-broker", 2);
    let total = 300_000;
    produce_coordinates(&kafka, &topic, 2, total);
    let dir = JobDir::new();
    let config =
        dir.config(&replay_config(&kafka, &topic, FILE_SINK, "200ms").replace("[job]", "[job]\nqueue_capacity = 1"));
    let out = dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("some output", MINUTE, || line_count(&out) > 20_000);
    let outage = Instant::now();
    match fault {
        "kill" => {
            broker.signal(libc::SIGKILL);
            std::thread::sleep(Duration::from_secs(2));
            broker.script("start"); // the same data directory: Kafka recovers its logs
        }
        _ => {
            broker.signal(libc::SIGSTOP);
            std::thread::sleep(pause);
            broker.signal(libc::SIGCONT);
        }
    }
    let back = outage.elapsed();
    let (status, log) = daemon.wait(MINUTE * 3);
    assert_eq!(status.code(), Some(0), "{log}");
    let coords = read_lenient(&out);
    let unique: std::collections::BTreeSet<(i64, i64)> = coords.iter().copied().collect();
    assert_eq!(unique.len(), total, "lost {} records", total - unique.len());
    assert_eq!(
        coords.len(),
        total,
        "{} records written twice",
        coords.len() - unique.len()
    );
    eprintln!(
        "faults: broker {} mid-replay for {:.1} s: lost 0 of {total}, duplicates {}",
        if fault == "kill" {
            "killed with -9 and restarted"
        } else {
            "paused with SIGSTOP"
        },
        back.as_secs_f64(),
        coords.len() - unique.len()
    );
}

#[test]
fn the_broker_killed_and_restarted_mid_replay_loses_nothing() {
    broker_fault("kill");
}

#[test]
fn the_broker_paused_mid_replay_loses_nothing() {
    broker_fault("pause");
}

/// Paused long enough that librdkafka gives up on its connections and reconnects.
#[test]
fn the_broker_paused_past_the_consumers_patience_mid_replay_loses_nothing() {
    broker_fault_for("pause", Duration::from_secs(30));
}

#[test]
fn datagen_across_a_broker_restart_writes_every_index() {
    let broker = OwnBroker::start();
    let kafka = broker.kafka();
    let topic = kafka.create_topic("faults-datagen", 3);
    let dir = JobDir::new();
    let count = 60_000u64;
    let config = dir.config(&format!(
        r#"
[source]
type = "datagen"
count = {count}
rate = 15000.0
[source.fields]
seq = {{ sequence = {{}} }}
[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
delivery = "exactly_once"
[checkpoint]
path = "{{dir}}/job.state"
interval = "500ms"
"#,
        kafka.bootstrap
    ));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("some records", MINUTE, || {
        kafka.end_offsets(&topic).values().sum::<i64>() > 10_000
    });
    broker.signal(libc::SIGKILL);
    std::thread::sleep(Duration::from_secs(2));
    broker.script("start");
    let (status, log) = daemon.wait(MINUTE * 3);
    assert_eq!(status.code(), Some(0), "{log}");
    let mut counts = vec![0u32; count as usize];
    for r in kafka.read_all(&topic) {
        let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        counts[v["seq"].as_u64().unwrap() as usize] += 1;
    }
    let missing = counts.iter().filter(|c| **c == 0).count();
    let duplicates: u32 = counts.iter().map(|c| c.saturating_sub(1)).sum();
    assert_eq!(missing, 0, "indices missing after the broker restart");
    assert_eq!(duplicates, 0, "indices written twice across the broker restart");
    eprintln!(
        "faults: datagen into an exactly-once Kafka sink across a broker kill -9 and restart: {count} indices, missing 0, duplicates {duplicates}"
    );
}

#[test]
fn a_leftover_temp_file_is_ignored_and_the_good_state_used() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-temp", 1);
    produce_coordinates(&kafka, &topic, 1, 100);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", "5s"));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    // a crash between writing the temp file and the rename leaves this beside the good state
    std::fs::write(
        dir.path(".job.state.tmp"),
        b"{\"format\":\"tidegate-state\",\"version\":1,\"len",
    )
    .unwrap();
    produce_coordinates(&kafka, &topic, 1, 10);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("temp state file left by an interrupted checkpoint"),
        "{log}"
    );
    assert!(!dir.path(".job.state.tmp").exists());
    // the good state was used: its split had already ended, so nothing is read again
    assert!(log.contains(": 0 records read, 0 written"), "{log}");
}

fn expect_state_error(config: &Path, state: &Path, what: &str) -> String {
    let (code, log) = run(config, &["--state", &state.display().to_string()], MINUTE);
    assert_eq!(code, 3, "{what}: {log}");
    log
}

#[test]
fn an_unwritable_state_location_is_refused_before_reading() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-unwritable", 1);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", "1s"));
    // /proc cannot take new files, whoever we are (root ignores permission bits elsewhere)
    let log = expect_state_error(
        &config,
        Path::new("/proc/tidegate/job.state"),
        "a state file under /proc",
    );
    assert!(log.contains("not writable"), "{log}");
    // a state path whose directory is a file
    let file = dir.path("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let log = expect_state_error(&config, &file.join("job.state"), "a directory that is a file");
    assert!(
        log.contains(&format!("{} is a file, not a directory", file.display())),
        "{log}"
    );
}

/// A 64 KiB tmpfs; the test needs root and mount, as CI has.
struct TinyDisk {
    path: PathBuf,
}

impl TinyDisk {
    fn mount() -> TinyDisk {
        let path = tempfile::tempdir().unwrap().keep();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs (the full-disk test runs as root, as CI does)"
        );
        TinyDisk { path }
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

#[test]
fn a_full_disk_fails_the_checkpoint_clearly_and_keeps_the_old_state() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-full", 4);
    produce_coordinates(&kafka, &topic, 4, 40);
    let disk = TinyDisk::mount();
    let dir = JobDir::new();
    let state = disk.path.join("job.state");
    let config = dir.config(&replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", "1s"));
    let (code, log) = run(&config, &["--state", &state.display().to_string()], MINUTE);
    assert_eq!(code, 0, "{log}");
    let good = std::fs::read(&state).unwrap();
    // fill the disk, leaving less room than a new checkpoint needs
    let mut filler = std::fs::File::create(disk.path.join("filler")).unwrap();
    let _ = std::io::Write::write_all(&mut filler, &vec![0u8; 64 * 1024]);
    drop(filler);
    produce_coordinates(&kafka, &topic, 4, 40);
    let (code, log) = run(&config, &["--state", &state.display().to_string()], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    assert_eq!(std::fs::read(&state).unwrap(), good, "the last good state is intact");
    assert!(!disk.path.join(".job.state.tmp").exists(), "no partial temp file left");
}

#[test]
fn offsets_deleted_by_retention_are_an_error_unless_a_reset_is_chosen() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-retention", 1);
    produce_coordinates(&kafka, &topic, 1, 100);
    let dir = JobDir::new();
    // unbounded: the split stays open, with its position in the state file
    let config =
        dir.config(&replay_config(&kafka, &topic, FILE_SINK, "1s").replace("stopping_offsets = \"latest\"", ""));
    let out = dir.path("out.jsonl");
    let stop_after = |lines: usize, extra: &[&str]| {
        let daemon = Daemon::start(&config, extra);
        daemon.wait_until("the records", MINUTE, || line_count(&out) >= lines);
        daemon.signal(libc::SIGTERM);
        let (status, log) = daemon.wait(MINUTE);
        assert_eq!(status.code(), Some(0), "{log}");
    };
    stop_after(100, &[]);
    assert_eq!(checkpointed(&dir)[&0], 100);
    // 100 more arrive, then retention (here: an explicit delete) removes offsets below 150:
    // the stored position 100 is gone
    produce_coordinates(&kafka, &topic, 1, 100);
    kafka.delete_records_before(&topic, 0, 150);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!("{topic}:0 wants offset 100 but the earliest available is 150")),
        "{log}"
    );
    assert!(log.contains("offset_reset"), "the message says how to go on: {log}");
    assert_eq!(checkpointed(&dir)[&0], 100, "the state did not move");
    stop_after(150, &["--set", "source.offset_reset=\"earliest\""]);
    let offsets: Vec<i64> = read_jsonl(&out).iter().map(|l| l["offset"].as_i64().unwrap()).collect();
    assert_eq!(offsets, (0..100).chain(150..200).collect::<Vec<_>>());
    eprintln!("faults: a stored offset deleted by retention: exit 1 naming the partition by default; `earliest` continues at 150");
}

#[test]
fn more_config_mistakes_exit_2() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let kafka_base = replay_config(&kafka, "t", "[sink]\ntype = \"null\"", "1s");
    let cases: Vec<(String, &str)> = vec![
        (kafka_base.replace("topics = [\"t\"]", "topics = [\"t\"]\ntopic_pattern = \"t.*\""), "source.topics"),
        (
            kafka_base.replace(
                "stopping_offsets = \"latest\"",
                "starting_offsets = { offsets = { \"t:0\" = 50 } }\nstopping_offsets = { offsets = { \"t:0\" = 10 } }",
            ),
            "source.stopping_offsets.offsets",
        ),
        (kafka_base.replace("parallelism = 2", "parallelism = 0"), "job.parallelism"),
        (
            "[source]\ntype = \"datagen\"\ncount = 5\nrate = 0.0\n[sink]\ntype = \"null\"\n".to_string(),
            "source.rate",
        ),
        (
            "[source]\ntype = \"periodic\"\nevents = [{ id = \"a\", value = 1, schedule = { period = \"0s\" } }]\n[sink]\ntype = \"null\"\n"
                .to_string(),
            "source.events[0].schedule.period",
        ),
    ];
    for (text, key) in cases {
        let (code, log) = run(&dir.config(&text), &[], MINUTE);
        assert_eq!(code, 2, "{text}\n{log}");
        assert!(log.contains(key), "expected {key:?} in {log}");
    }
}

#[test]
fn an_unreachable_bootstrap_server_fails_within_the_request_timeout() {
    let dir = JobDir::new();
    let config = dir.config(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"127.0.0.1:1\"\ntopics = [\"t\"]\nstopping_offsets = \"latest\"\nrequest_timeout = \"3s\"\n[sink]\ntype = \"null\"\n",
    );
    let started = Instant::now();
    let (code, log) = run(&config, &[], MINUTE);
    let took = started.elapsed();
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("127.0.0.1:1") && log.contains("3s"), "{log}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    eprintln!(
        "faults: an unreachable bootstrap server: exit 1 after {:.1} s (request_timeout 3 s)",
        took.as_secs_f64()
    );
    // one clear line per cause: librdkafka says it every few hundred milliseconds, twice
    let loud = |log: &str| {
        log.lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .count()
    };
    assert!(
        loud(&log) <= 3,
        "{} warnings for one unreachable broker:\n{log}",
        loud(&log)
    );
    assert!(
        log.contains("error: ") && log.contains("Connection refused"),
        "the error says why: {log}"
    );
    // a name that does not resolve says so, not "BrokerTransportFailure"
    let (code, log) = run(
        &config,
        &["--set", "source.bootstrap_servers=nowhere.invalid:9092"],
        MINUTE,
    );
    assert_eq!(code, 1, "{log}");
    let error = log
        .lines()
        .find(|l| l.starts_with("tidegate: error:"))
        .unwrap_or_default();
    assert!(error.contains("Failed to resolve 'nowhere.invalid:9092'"), "{log}");
    assert!(
        loud(&log) <= 3,
        "{} warnings for one unresolvable broker:\n{log}",
        loud(&log)
    );
}

#[test]
fn metrics_bind_to_loopback_and_secrets_are_never_logged() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("faults-secrets", 1);
    let dir = JobDir::new();
    let port = free_port();
    let config = dir.config(&format!(
        "{}\n[metrics]\nlisten = \"{port}\"\n[source.properties]\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"alice\"\n\"sasl.password\" = \"hunter2-secret\"\n\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"debug\" = \"security,broker\"\n",
        replay_config(&kafka, &topic, "[sink]\ntype = \"null\"", "1s").replace("stopping_offsets", "request_timeout = \"3s\"\nstopping_offsets")
    ));
    let out = Command::new(binary())
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && shown.contains("sasl.password") && !shown.contains("hunter2-secret"),
        "{shown}"
    );
    // SASL against a plaintext broker fails; the settings reached librdkafka, the password never the log
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(!log.contains("hunter2-secret"), "the password was logged");
    assert!(
        log.contains(&format!("127.0.0.1:{port}")) && !log.contains(&format!("0.0.0.0:{port}")),
        "{log}"
    );
    eprintln!("faults: SASL settings pass through (the plaintext broker refuses them); password never printed; metrics on 127.0.0.1");
}

#[test]
fn the_broker_script_is_idempotent_stops_only_its_broker_and_shows_a_failed_start() {
    let broker = OwnBroker::start();
    let first = broker.pid();
    broker.script("start"); // a second start: the same broker
    assert_eq!(broker.pid(), first, "a second start must not start a second broker");
    let running = |pid: i32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(running(first));
    broker.script("stop");
    wait_until("the broker process gone", MINUTE, || !running(first));
    // a start that cannot work prints the broker's own words and fails
    let out = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
        .arg("start")
        .envs(broker.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("KAFKA_HEAP", "1k")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("last lines of its logs") && stderr.contains("heap"),
        "{stderr}"
    );
}
