//! `tidegate replay` and `tidegate seed` against the real broker: a one-liner writes exactly what
//! the config file it stands for writes, and so does the config its `--print-config` prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{now_millis, wait_until, TestKafka, TestRecord};
use crate::daemon_util::{binary, line_count, JobDir};

const TIMEOUT: Duration = Duration::from_secs(90);

/// What a finished `tidegate` process left: exit code, stdout, stderr.
pub(crate) struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Run `tidegate ARGS` in `dir` (stdout and stderr to files there), with `env` set, to its end.
pub(crate) fn tidegate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let out = dir.join(format!("stdout-{}", now_millis()));
    let err = out.with_extension("err");
    let mut command = Command::new(binary());
    command
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start tidegate");
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tidegate {args:?} did not end within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    let _ = (std::fs::remove_file(&out), std::fs::remove_file(&err));
    ran
}

/// Run and expect exit 0.
pub(crate) fn ok(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let ran = tidegate(dir, args, env);
    assert_eq!(ran.code, 0, "tidegate {args:?} failed:\n{}", ran.stderr);
    ran
}

/// JSON lines grouped by partition, each partition's lines in output order (the order across
/// partitions is the readers' interleaving, not part of the contract).
pub(crate) fn by_partition(text: &str) -> BTreeMap<i64, Vec<String>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"));
        let p = v["partition"].as_i64().expect("partition");
        out.entry(p).or_default().push(line.to_string());
    }
    out
}

/// `n` JSON records in 2 partitions, one a second from `start` ms, every third with header
/// region=eu, then a CLOSE marker in each partition and one record after it.
pub(crate) fn trading_topic(kafka: &TestKafka, n: i64, start: i64) -> String {
    let topic = kafka.create_topic("oneliner", 2);
    let mut records: Vec<TestRecord> = (0..n)
        .map(|i| {
            let r = TestRecord::to((i % 2) as i32, format!(r#"{{"type":"TRADE","n":{i}}}"#))
                .key(format!("k{i}"))
                .at(start + i * 1000);
            if i % 3 == 0 {
                r.header("region", "eu")
            } else {
                r
            }
        })
        .collect();
    for p in 0..2 {
        records.push(TestRecord::to(p, r#"{"type":"CLOSE"}"#).at(start + n * 1000));
        records.push(TestRecord::to(p, r#"{"type":"TRADE","n":-1}"#).at(start + n * 1000 + 1));
    }
    kafka.produce(&topic, &records);
    topic
}

/// As `replay --from` reads it: RFC 3339, UTC, milliseconds.
fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a time in chrono's range")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[test]
fn replay_one_liner_writes_what_its_config_file_writes() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let start = now_millis() - 3_600_000;
    let topic = trading_topic(&kafka, 40, start);
    // a time without a zone is UTC, whatever the local zone (New York here, so reading it as
    // local time would start 5 hours off)
    let from = chrono::DateTime::from_timestamp_millis(start + 10_000)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let one_liner = ok(
        dir.dir.path(),
        &[
            "replay",
            &topic,
            "--bootstrap-servers",
            &kafka.bootstrap,
            "--format",
            "json",
            "--from",
            &from,
            "--until",
            r#"value.type == "CLOSE""#,
            "--where",
            r#"headers.region == "eu" || value.n % 2 == 1"#,
            "--no-progress",
        ],
        &[("TZ", "America/New_York")],
    );
    let config = dir.config(&format!(
        r#"
[job]
name = "by-hand"

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
format = "json"
starting_offsets = {{ timestamp = "{}" }}
stopping_offsets = "latest"
eof = 'value.type == "CLOSE"'
where = 'headers.region == "eu" || value.n % 2 == 1'

[sink]
type = "stdout"
"#,
        kafka.bootstrap,
        rfc3339(start + 10_000)
    ));
    let by_hand = ok(
        dir.dir.path(),
        &["run", "--config", config.to_str().unwrap(), "--no-progress"],
        &[],
    );
    let (a, b) = (by_partition(&one_liner.stdout), by_partition(&by_hand.stdout));
    assert_eq!(a, b, "the one-liner and its config file wrote different records");
    // and what they wrote is the replay asked for: from record 10, odd or eu, up to the marker
    let expected: usize = (10..40).filter(|i| i % 3 == 0 || i % 2 == 1).count();
    assert_eq!(
        a.values().map(Vec::len).sum::<usize>(),
        expected,
        "{}",
        one_liner.stdout
    );
    assert!(!one_liner.stdout.contains("CLOSE") && !one_liner.stdout.contains(r#""n":-1"#));
    // no state file was left behind: the job directory holds only the config
    let left: Vec<String> = std::fs::read_dir(dir.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        vec!["job.toml".to_string()],
        "a one-liner without --state left files"
    );
}

#[test]
fn printed_config_runs_the_same_replay() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let start = now_millis() - 2 * 3_600_000;
    let topic = trading_topic(&kafka, 30, start);
    let out = dir.path("out.jsonl");
    let args = [
        "replay",
        &topic,
        "--format",
        "json",
        "--from",
        &format!("{topic}:0=4"),
        "--to",
        &format!("{topic}:1=10"),
        "--where",
        r#"value.n % 5 != 0"#,
        "--out",
        "out.jsonl",
        "--no-progress",
    ];
    // the brokers come from KAFKA_BOOTSTRAP_SERVERS when no flag names them
    let env = [("KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrap.as_str())];
    ok(dir.dir.path(), &args, &env);
    let first = std::fs::read_to_string(&out).expect("the one-liner's output");
    let printed = ok(dir.dir.path(), &[&args[..], &["--print-config"]].concat(), &env).stdout;
    assert!(
        printed.contains(&format!("bootstrap_servers = '{}'", kafka.bootstrap)),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("path = '{}'", out.display())),
        "the printed config names the output by its absolute path:\n{printed}"
    );
    std::fs::rename(&out, dir.path("first.jsonl")).unwrap();
    // the printed config, saved in another folder, run from yet another
    let saved = dir.path("saved");
    std::fs::create_dir(&saved).unwrap();
    std::fs::write(saved.join("replay.toml"), &printed).unwrap();
    ok(
        Path::new("/"),
        &[
            "run",
            "--config",
            saved.join("replay.toml").to_str().unwrap(),
            "--no-progress",
        ],
        &[],
    );
    let second = std::fs::read_to_string(&out).expect("the printed config's output");
    assert_eq!(by_partition(&first), by_partition(&second));
    // partition 0 from offset 4 (record 8) to its end (the marker has no `n`: the filter's
    // error rejects it), partition 1 up to offset 10 (record 19)
    let parts = by_partition(&first);
    let n_of = |line: &String| serde_json::from_str::<serde_json::Value>(line).unwrap()["value"]["n"].as_i64();
    let p0: Vec<i64> = parts[&0].iter().filter_map(n_of).collect();
    let p1: Vec<i64> = parts[&1].iter().filter_map(n_of).collect();
    assert_eq!(
        p0,
        (8..30)
            .step_by(2)
            .filter(|n| n % 5 != 0)
            .chain([-1])
            .collect::<Vec<_>>()
    );
    assert_eq!(p1, (1..20).step_by(2).filter(|n| n % 5 != 0).collect::<Vec<_>>());
    // without a flag or the variable, the default brokers
    let printed = ok(
        dir.dir.path(),
        &["replay", &topic, "--print-config"],
        &[("KAFKA_BOOTSTRAP_SERVERS", "")],
    )
    .stdout;
    assert!(printed.contains("bootstrap_servers = '127.0.0.1:9092'"), "{printed}");
}

#[test]
fn a_bare_offset_applies_to_every_partition_within_what_it_holds() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = kafka.create_topic("oneliner-offset", 2);
    // 12 records in partition 0, 5 in partition 1
    let records: Vec<TestRecord> = (0..12)
        .map(|i| TestRecord::to(0, format!("a{i}")))
        .chain((0..5).map(|i| TestRecord::to(1, format!("b{i}"))))
        .collect();
    kafka.produce(&topic, &records);
    let values = |from: &str, to: &str| -> BTreeMap<i64, Vec<String>> {
        let ran = ok(
            dir.dir.path(),
            &[
                "replay",
                &topic,
                "-b",
                &kafka.bootstrap,
                "--format",
                "string",
                "--from",
                from,
                "--to",
                to,
                "--no-progress",
            ],
            &[],
        );
        by_partition(&ran.stdout)
            .into_iter()
            .map(|(p, lines)| {
                let v = lines
                    .iter()
                    .map(|l| {
                        serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                            .as_str()
                            .unwrap()
                            .to_string()
                    })
                    .collect();
                (p, v)
            })
            .collect()
    };
    let strings = |prefix: &str, r: std::ops::Range<i32>| r.map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    // offsets 3 to 8 (exclusive): partition 1 ends at its end, 5
    assert_eq!(
        values("3", "8"),
        BTreeMap::from([(0, strings("a", 3..8)), (1, strings("b", 3..5))])
    );
    // a start past a partition's end starts at its end: nothing from partition 1
    assert_eq!(values("7", "latest"), BTreeMap::from([(0, strings("a", 7..12))]));
}

#[test]
fn relative_times_are_resolved_at_start_into_the_printed_config() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let now = now_millis();
    let topic = kafka.create_topic("oneliner-rel", 1);
    // two hours ago, then the last 30 minutes
    let records: Vec<TestRecord> = (0..10)
        .map(|i| {
            let at = if i < 5 {
                now - 2 * 3_600_000 + i
            } else {
                now - 1_800_000 + i
            };
            TestRecord::to(0, format!("r{i}")).at(at)
        })
        .collect();
    kafka.produce(&topic, &records);
    let args = [
        "replay",
        &topic,
        "-b",
        &kafka.bootstrap,
        "--format",
        "string",
        "--from",
        "-1h",
        "--no-progress",
    ];
    let before = now_millis();
    let printed = ok(dir.dir.path(), &[&args[..], &["--print-config"]].concat(), &[]).stdout;
    let after = now_millis();
    let line = printed
        .lines()
        .find(|l| l.starts_with("starting_offsets"))
        .unwrap_or_else(|| panic!("no starting_offsets in\n{printed}"));
    let resolved = line.split('\'').nth(1).expect("a quoted time");
    let ms = chrono::DateTime::parse_from_rfc3339(resolved)
        .expect("RFC 3339")
        .timestamp_millis();
    assert!(
        (before - 3_600_000..=after - 3_600_000).contains(&ms),
        "-1h resolved to {resolved}, not an hour before the run"
    );
    assert!(
        printed.contains(&format!("# --from -1h resolved to {resolved} at start")),
        "{printed}"
    );
    let ran = ok(dir.dir.path(), &args, &[]);
    let values: Vec<String> = by_partition(&ran.stdout)[&0]
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(values, ["r5", "r6", "r7", "r8", "r9"]);
}

#[test]
fn a_replay_with_state_resumes_where_it_stopped() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = kafka.create_topic("oneliner-state", 1);
    let start = now_millis() - 60_000;
    let records: Vec<TestRecord> = (0..60)
        .map(|i| TestRecord::to(0, format!("r{i}")).at(start + i * 100))
        .collect();
    kafka.produce(&topic, &records);
    let out = dir.path("out.jsonl");
    let state = dir.path("replay.state");
    let args = [
        "replay",
        topic.as_str(),
        "-b",
        kafka.bootstrap.as_str(),
        "--format",
        "string",
        "--speed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
        "--set",
        "checkpoint.interval=200ms",
        "--no-progress",
    ];
    // paced at real time (6 s of records): stopped with SIGTERM once 10 are written
    let mut child = Command::new(binary())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tidegate");
    wait_until("10 records written", TIMEOUT, || line_count(&out) >= 10);
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "a stopped replay exits 0 after its final checkpoint"
    );
    let stopped_at = line_count(&out);
    assert!(stopped_at < 60, "the replay ended before it was stopped");
    let again = ok(dir.dir.path(), &args, &[]);
    assert!(again.stderr.contains("resuming=true"), "{}", again.stderr);
    let values: Vec<String> = crate::daemon_util::read_jsonl(&out)
        .iter()
        .map(|v| v["value"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..60).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected, "every record once, in order, across the stop");
    let emitted = again
        .stderr
        .lines()
        .find_map(|l| l.split(" records read").next().filter(|_| l.contains("records read")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("a summary line");
    assert_eq!(
        emitted,
        60 - stopped_at,
        "the second run read only what the first had not written"
    );
}

/// `--out /dev/null` (timing a replay, discarding it) and `--out` a FIFO: any writable path.
/// /dev/null used to fail with `truncating /dev/null: Invalid argument`.
#[test]
fn out_takes_dev_null_and_a_fifo() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = trading_topic(&kafka, 40, now_millis() - 3_600_000);
    let replay = |out: &str| {
        tidegate(
            dir.dir.path(),
            &[
                "replay",
                &topic,
                "--bootstrap-servers",
                &kafka.bootstrap,
                "--out",
                out,
                "--no-progress",
            ],
            &[],
        )
    };
    let ran = replay("/dev/null");
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("44 written"), "{}", ran.stderr);
    let fifo = dir.path("records.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let reader_path = fifo.clone();
    let reader = std::thread::spawn(move || std::fs::read_to_string(reader_path).expect("read the FIFO"));
    let ran = replay(fifo.to_str().unwrap());
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(reader.join().expect("reader").lines().count(), 44);
}
