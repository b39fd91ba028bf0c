//! Controlling a running replay over HTTP against a real broker: `source.max_rate` limits it,
//! `POST /control` changes the rate within 100 ms, pauses (checkpoints go on) and resumes it,
//! and `GET /status` agrees with the output and the broker's offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// `n` records over `partitions`, values `value-i`.
fn produce(kafka: &TestKafka, topic: &str, partitions: i32, n: usize) {
    let records: Vec<TestRecord> = (0..n)
        .map(|i| {
            TestRecord::to((i % partitions as usize) as i32, format!("value-{i}")).at(1_790_000_000_000 + i as i64)
        })
        .collect();
    kafka.produce(topic, &records);
}

/// A bounded replay of `topic` into `{dir}/out.jsonl`, checkpointed every 200 ms, HTTP on `port`.
pub fn controlled_config(kafka: &TestKafka, topic: &str, port: u16, extra_source: &str) -> String {
    controlled_config_every(kafka, topic, port, extra_source, "200ms")
}

/// [`controlled_config`] with checkpoints every `interval`.
pub fn controlled_config_every(
    kafka: &TestKafka,
    topic: &str,
    port: u16,
    extra_source: &str,
    interval: &str,
) -> String {
    format!(
        "{}\n[metrics]\nlisten = \"{port}\"\n",
        replay_config(
            kafka,
            topic,
            FILE_SINK,
            &format!("stopping_offsets = \"latest\"\n{extra_source}"),
            interval
        )
    )
}

/// An HTTP request on `addr`: (status code, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// `GET /status`, parsed (`None` while the endpoint is not up).
pub fn status(addr: &str) -> Option<Value> {
    let (code, body) = http(addr, "GET", "/status", "")?;
    (code == 200).then(|| serde_json::from_str(&body).expect("/status is JSON"))
}

/// `POST /control` with `body`: (status code, answer).
pub fn control(addr: &str, body: &str) -> (u16, Value) {
    let (code, text) = http(addr, "POST", "/control", body).expect("POST /control answered");
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn emitted(s: &Value) -> u64 {
    s["records"]["emitted"].as_u64().expect("records.emitted")
}

/// Every line's (partition, offset), checked unique, and their count.
fn exactly_once(out: &std::path::Path, n: usize) {
    let lines = read_jsonl(out);
    let coords: BTreeSet<(i64, i64)> = lines
        .iter()
        .map(|l| (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap()))
        .collect();
    assert_eq!(coords.len(), n, "every record once");
    assert_eq!(lines.len(), n, "no duplicate");
}

#[test]
fn max_rate_limits_a_replay_and_a_changed_rate_applies_within_100_ms() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("max-rate", 2);
    produce(&kafka, &topic, 2, 3_000);
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // checkpoints rarely: nothing but the change itself may wake the waiting readers
    let config = dir.config(&controlled_config_every(&kafka, &topic, port, "max_rate = 200", "1h"));
    let daemon = Daemon::start(&config, &[]);
    let mut first = None;
    daemon.wait_until("the first record emitted", MINUTE, || {
        let sent = Instant::now();
        first = status(&addr).filter(|s| emitted(s) > 0).map(|s| (sent, emitted(&s)));
        first.is_some()
    });
    let (start, n0) = first.expect("first");
    // the limit holds over every window of at least 2 s from there (the bucket holds 10 ms: 2
    // records; the window runs from before the first request to after the last answer)
    let mut last = (Duration::ZERO, 0u64);
    daemon.wait_until("2 s of a limited replay", MINUTE, || {
        let s = daemon.must("/status", status(&addr));
        let elapsed = start.elapsed();
        let n = emitted(&s) - n0;
        let bound = 200.0 * elapsed.as_secs_f64() + 3.0;
        assert!(
            n as f64 <= bound,
            "{n} records in {elapsed:?} at max_rate 200 (bound {bound})"
        );
        last = (elapsed, n);
        elapsed >= Duration::from_secs(2)
    });
    assert!(last.1 > 0, "the limited replay went on: {last:?}");
    assert_eq!(daemon.must("/status", status(&addr))["control"]["max_rate"], 200.0);

    // down to 1 record/s, then up to unlimited: the change shows within 100 ms of the answer
    let (code, answer) = control(&addr, r#"{"max_rate": 1}"#);
    assert_eq!((code, &answer["max_rate"]), (200, &Value::from(1.0)), "{answer}");
    // one record at 1/s: the readers now wait about a second for the next
    let slow = emitted(&daemon.must("/status", status(&addr)));
    let mut before = slow;
    daemon.wait_until("a record at 1/s", MINUTE, || {
        before = emitted(&daemon.must("/status", status(&addr)));
        before > slow
    });
    let posted = Instant::now();
    let (code, answer) = control(&addr, r#"{"max_rate": null}"#);
    let answered = Instant::now();
    assert_eq!((code, &answer["max_rate"]), (200, &Value::Null), "{answer}");
    let (seen, poll_rtt) = loop {
        let sent = Instant::now();
        let s = daemon.must("/status", status(&addr));
        // 1 record/s could not add 20 in the few seconds this takes
        if emitted(&s) >= before + 20 || s["state"] == "finished" {
            break (Instant::now(), sent.elapsed());
        }
        assert!(posted.elapsed() < MINUTE, "the raised rate never showed");
    };
    // stated slack: the round trip of the /status request that saw the change (the change
    // happened before its answer) and 20 ms for this process's scheduling
    let latency = seen - answered;
    let allowed = Duration::from_millis(120) + poll_rtt;
    eprintln!(
        "rate change seen {latency:?} after the answer (request {:?}, allowed {allowed:?})",
        answered - posted
    );
    assert!(
        latency <= allowed,
        "the raised rate showed only {latency:?} after POST's 200"
    );

    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    exactly_once(&dir.path("out.jsonl"), 3_000);
}

#[test]
fn pause_stops_emission_while_checkpoints_complete_and_status_matches_the_output() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("pause", 2);
    produce(&kafka, &topic, 2, 2_000);
    let ends = kafka.end_offsets(&topic);
    let dir = JobDir::new();
    let out = dir.path("out.jsonl");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.config(&controlled_config(&kafka, &topic, port, "max_rate = 300"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("100 records emitted", MINUTE, || {
        status(&addr).is_some_and(|s| emitted(&s) >= 100)
    });
    let (code, answer) = control(&addr, r#"{"paused": true}"#);
    assert_eq!((code, &answer["paused"]), (200, &Value::Bool(true)), "{answer}");
    let checkpoints = |s: &Value| s["checkpoints"].as_u64().expect("checkpoints");
    let c0 = checkpoints(&daemon.must("/status", status(&addr)));
    // a checkpoint triggered after the pause: whatever was on its way is written by then. The
    // first to complete may have been triggered before it (its barrier passed, a record emitted
    // behind it, written by the next), and one checkpoint is in flight at a time: the second
    let mut paused = Value::Null;
    daemon.wait_until("a checkpoint triggered after the pause", MINUTE, || {
        paused = daemon.must("/status", status(&addr));
        checkpoints(&paused) > c0 + 1
    });
    let lines = line_count(&out);
    let mut later = Value::Null;
    daemon.wait_until("3 more checkpoints while paused", MINUTE, || {
        later = daemon.must("/status", status(&addr));
        checkpoints(&later) >= checkpoints(&paused) + 3
    });
    assert_eq!(later["state"], "paused");
    assert_eq!(emitted(&later), emitted(&paused), "nothing emitted while paused");
    assert_eq!(line_count(&out), lines, "nothing written while paused");
    assert_eq!(later["records"]["written"].as_u64(), Some(lines as u64));

    // while paused the numbers stand still: each split's position is its last offset written + 1
    let mut next: BTreeMap<i64, i64> = BTreeMap::new();
    for l in read_jsonl(&out) {
        let (p, o) = (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap());
        let e = next.entry(p).or_insert(0);
        *e = (*e).max(o + 1);
    }
    let splits = later["splits"].as_array().expect("splits");
    assert_eq!(splits.len(), 2, "{later}");
    for s in splits {
        let p = s["partition"].as_i64().expect("partition");
        let position = s["position"].as_i64().expect("position");
        let stop = s["stop"].as_i64().expect("stop");
        assert_eq!(s["topic"], topic.as_str());
        assert_eq!(position, next.get(&p).copied().unwrap_or(0), "split {p}: {s}");
        assert_eq!(stop, ends[&(p as i32)], "split {p}: the plan's stop (the end offset)");
        assert_eq!(s["records_left"].as_i64(), Some(stop - position), "{s}");
        assert_eq!(s["finished"], false);
    }
    let expected = later["records"]["expected"].as_u64().expect("expected");
    assert_eq!(expected, 2_000);
    let left: i64 = splits.iter().map(|s| s["records_left"].as_i64().unwrap_or(0)).sum();
    assert_eq!(
        left as u64 + lines as u64,
        expected,
        "records left + written = the plan's total"
    );

    // resume: it goes on
    let (code, answer) = control(&addr, r#"{"paused": false}"#);
    assert_eq!((code, &answer["paused"]), (200, &Value::Bool(false)), "{answer}");
    // at its rate, without catching up the paused time
    emits_at_most(
        &daemon,
        &addr,
        300.0,
        Duration::from_millis(500),
        4.0,
        "resumed at 300/s",
    );
    daemon.wait_until("records emitted again", MINUTE, || {
        status(&addr).is_some_and(|s| emitted(&s) >= emitted(&later) + 50 && s["state"] == "running")
    });
    // paused again and stopped: a final checkpoint, exit 0; a restart finishes exactly once
    assert_eq!(control(&addr, r#"{"paused": true}"#).0, 200);
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "SIGTERM while paused: {log}");
    assert!(line_count(&out) < 2_000, "stopped before the end");
    let (code, log) = run(&config, &["--set", "source.max_rate=1000000"], MINUTE);
    assert_eq!(code, 0, "{log}");
    exactly_once(&out, 2_000);
}

#[test]
fn control_refuses_bad_bodies_and_controls_the_job_lacks() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("control-errors", 1);
    produce(&kafka, &topic, 1, 100);
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // unbounded (it waits for SIGTERM), no max_rate, no replay_speed: only pause and resume
    let config = dir.config(&format!(
        "{}\n[metrics]\nlisten = \"{port}\"\n",
        replay_config(&kafka, &topic, FILE_SINK, "", "200ms")
    ));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("/status", MINUTE, || status(&addr).is_some());
    let (code, _) = control(&addr, r#"{"paused": true}"#);
    assert_eq!(code, 200);
    for (body, want, says) in [
        ("not json", 400, "JSON object"),
        (r#"{"paused": "yes"}"#, 400, "true or false"),
        (r#"{"max_rate": -1}"#, 400, "above 0"),
        (r#"{"speed": 2}"#, 400, "unknown control"),
        (r#"{"max_rate": 100}"#, 409, "source.max_rate"),
        (r#"{"replay_speed": 10}"#, 409, "source.replay_speed"),
    ] {
        let (code, answer) = control(&addr, body);
        assert_eq!(code, want, "{body}: {answer}");
        assert!(
            answer["error"].as_str().is_some_and(|e| e.contains(says)),
            "{body}: {answer}"
        );
    }
    assert_eq!(http(&addr, "GET", "/control", "").map(|r| r.0), Some(405));
    // what a page of another site can send without asking (a "simple" request): not taken
    let form = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        let body = r#"{"paused": false}"#;
        write!(
            s,
            "POST /control HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("answer");
        answer
    };
    assert!(form.starts_with("HTTP/1.1 415"), "{form}");
    assert_eq!(
        daemon.must("/status", status(&addr))["state"],
        "paused",
        "a refused request changed nothing"
    );
    assert_eq!(control(&addr, r#"{"paused": false}"#).0, 200);
    daemon.wait_until("every record written", MINUTE, || {
        status(&addr).is_some_and(|s| s["records"]["written"] == 100)
    });
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    exactly_once(&dir.path("out.jsonl"), 100);
}

#[test]
fn max_rate_config_mistakes_name_the_key() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    for (extra, key) in [
        ("max_rate = 0", "source.max_rate"),
        ("max_bytes_rate = -5.0", "source.max_bytes_rate"),
    ] {
        let config = dir.config(&controlled_config(&kafka, "t", free_port(), extra));
        let (code, log) = run(&config, &[], MINUTE);
        assert_eq!(code, 2, "{extra}: {log}");
        assert!(log.contains(key), "{extra}: {log}");
    }
}

/// Over the next `window`, at most `rate` records/s emitted (plus `slack`), and at least one.
fn emits_at_most(daemon: &Daemon, addr: &str, rate: f64, window: Duration, slack: f64, what: &str) {
    let sent = Instant::now();
    let n0 = emitted(&daemon.must("/status", status(addr)));
    let mut n = n0;
    daemon.wait_until(what, MINUTE, || {
        n = emitted(&daemon.must("/status", status(addr)));
        let elapsed = sent.elapsed();
        let bound = rate * elapsed.as_secs_f64() + slack;
        assert!(
            ((n - n0) as f64) <= bound,
            "{what}: {} records in {elapsed:?} (bound {bound})",
            n - n0
        );
        elapsed >= window
    });
    // a stalled replay (a pacing clock left behind by the change) would emit nothing
    daemon.wait_until(&format!("{what}: a record"), Duration::from_secs(5), || {
        emitted(&daemon.must("/status", status(addr))) > n0
    });
}

#[test]
fn replay_speed_changes_and_resumes_without_a_burst_or_a_stall() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("speed", 2);
    // one record every 100 ms of event time
    let records: Vec<TestRecord> = (0..2_000)
        .map(|i| TestRecord::to(i % 2, format!("value-{i}")).at(1_790_000_000_000 + 100 * i as i64))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // 100 records/s at speed 10
    let config = dir.config(&controlled_config(&kafka, &topic, port, "replay_speed = 10.0"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("100 records emitted", MINUTE, || {
        status(&addr).is_some_and(|s| emitted(&s) >= 100)
    });
    // 10 records/s at speed 1: no faster (the old schedule is not kept), and no stall (nor
    // is the old event time replayed at the new speed from the start)
    let (code, answer) = control(&addr, r#"{"replay_speed": 1.0}"#);
    assert_eq!((code, &answer["replay_speed"]), (200, &Value::from(1.0)), "{answer}");
    let t0 = daemon.must("/status", status(&addr))["event_time_ms"]
        .as_i64()
        .expect("event time");
    emits_at_most(&daemon, &addr, 10.0, Duration::from_secs(1), 3.0, "at speed 1");
    let t1 = daemon.must("/status", status(&addr))["event_time_ms"]
        .as_i64()
        .expect("event time");
    assert!(t1 >= t0, "event time never runs back: {t0} then {t1}");
    // paused for a second at speed 10: resumed, it does not catch up the paused time
    assert_eq!(control(&addr, r#"{"replay_speed": 10.0, "paused": true}"#).0, 200);
    let paused = Instant::now();
    daemon.wait_until("a second paused", MINUTE, || paused.elapsed() >= Duration::from_secs(1));
    assert_eq!(control(&addr, r#"{"paused": false}"#).0, 200);
    emits_at_most(
        &daemon,
        &addr,
        100.0,
        Duration::from_millis(500),
        5.0,
        "resumed at speed 10",
    );
    // as fast as possible: done
    assert_eq!(control(&addr, r#"{"replay_speed": null}"#).0, 200);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    exactly_once(&dir.path("out.jsonl"), 2_000);
}

#[test]
fn max_bytes_rate_limits_a_replay() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("max-bytes-rate", 2);
    // 1,000-byte values (no keys): 20,000 bytes/s is 20 records/s
    let records: Vec<TestRecord> = (0..400)
        .map(|i| TestRecord::to(i % 2, format!("{i:01000}")).at(1_790_000_000_000 + i as i64))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.config(&controlled_config(&kafka, &topic, port, "max_bytes_rate = 20000"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the first record", MINUTE, || {
        status(&addr).is_some_and(|s| emitted(&s) > 0)
    });
    // a record may overdraw the bucket: one record over the rate at most
    emits_at_most(&daemon, &addr, 20.0, Duration::from_secs(2), 2.0, "at 20,000 bytes/s");
    let (code, answer) = control(&addr, r#"{"max_bytes_rate": null}"#);
    assert_eq!((code, &answer["max_bytes_rate"]), (200, &Value::Null), "{answer}");
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    exactly_once(&dir.path("out.jsonl"), 400);
}

/// An unbounded data generator at `rate` records/s into `{dir}/out.jsonl`, HTTP on `port`.
fn datagen_config(port: u16, rate: u32, metrics_extra: &str) -> String {
    format!(
        r#"
[job]
parallelism = 2

[source]
type = "datagen"
rate = {rate}
seed = 7

[source.fields]
seq = {{ sequence = {{}} }}

[sink]
type = "file"
path = "{{dir}}/out.jsonl"

[checkpoint]
path = "{{dir}}/job.state"
interval = "200ms"

[metrics]
listen = "{port}"
{metrics_extra}
"#
    )
}

#[test]
fn any_source_pauses_and_resumes_and_control_can_be_switched_off() {
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // a data generator: no held records, the reader drivers' pause alone
    let daemon = Daemon::start(&dir.config(&datagen_config(port, 200, "")), &[]);
    daemon.wait_until("records", MINUTE, || status(&addr).is_some_and(|s| emitted(&s) >= 20));
    let (code, answer) = control(&addr, r#"{"max_rate": 10}"#);
    assert_eq!(code, 409, "the generator's rate is source.rate: {answer}");
    assert_eq!(control(&addr, r#"{"paused": true}"#).0, 200);
    let checkpoints = |s: &Value| s["checkpoints"].as_u64().expect("checkpoints");
    let c0 = checkpoints(&daemon.must("/status", status(&addr)));
    let mut paused = Value::Null;
    daemon.wait_until("a checkpoint after the pause", MINUTE, || {
        paused = daemon.must("/status", status(&addr));
        checkpoints(&paused) > c0
    });
    let mut later = Value::Null;
    daemon.wait_until("3 more checkpoints while paused", MINUTE, || {
        later = daemon.must("/status", status(&addr));
        checkpoints(&later) >= checkpoints(&paused) + 3
    });
    assert_eq!(emitted(&later), emitted(&paused), "nothing generated while paused");
    assert_eq!(later["state"], "paused");
    assert_eq!(control(&addr, r#"{"paused": false}"#).0, 200);
    daemon.wait_until("records again", MINUTE, || {
        status(&addr).is_some_and(|s| emitted(&s) >= emitted(&later) + 20)
    });
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");

    // metrics.control = false: the status is served, control refused
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let daemon = Daemon::start(&dir.config(&datagen_config(port, 50, "control = false")), &[]);
    daemon.wait_until("/status", MINUTE, || status(&addr).is_some());
    let (code, answer) = control(&addr, r#"{"paused": true}"#);
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer["error"].as_str().is_some_and(|e| e.contains("metrics.control")),
        "{answer}"
    );
    assert_eq!(daemon.must("/status", status(&addr))["state"], "running");
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
}

/// The guards against a running job, with a real HTTP client (reqwest): a foreign `Host`, a
/// foreign `Origin`, a missing or wrong token are refused and change nothing; `/ready` and
/// `/ping` answer; the token shows nowhere. Control on every address without a token is refused
/// at start, naming the key.
#[test]
fn the_endpoint_refuses_foreign_hosts_origins_and_tokens_from_a_real_client() {
    const TOKEN: &str = "it-token-7f3a";
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let extra = format!("control_token = \"{TOKEN}\"\nallowed_hosts = [\"tidegate.test\"]");
    let daemon = Daemon::start(&dir.config(&datagen_config(port, 50, &extra)), &[]);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let base = format!("http://{addr}");
    let get = |path: &str, host: Option<&str>| {
        let mut r = client.get(format!("{base}{path}"));
        if let Some(h) = host {
            r = r.header("Host", h);
        }
        r.send().map(|r| r.status().as_u16()).unwrap_or(0)
    };
    daemon.wait_until("ready", MINUTE, || get("/ready", None) == 200);
    assert_eq!(get("/ping", Some("anything.example")), 200);
    assert_eq!(get("/status", None), 200);
    assert_eq!(get("/status", Some(&format!("localhost:{port}"))), 200);
    assert_eq!(get("/status", Some("tidegate.test")), 200, "an allowed host");
    for path in ["/status", "/metrics", "/"] {
        assert_eq!(get(path, Some("evil.example")), 421, "{path}");
        assert_eq!(get(path, Some(&format!("evil.example:{port}"))), 421, "{path}");
    }
    let post = |headers: &[(&str, &str)]| {
        let mut r = client
            .post(format!("{base}/control"))
            .header("Content-Type", "application/json")
            .body(r#"{"paused": true}"#);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let answer = r.send().expect("an answer");
        (answer.status().as_u16(), answer.text().unwrap_or_default())
    };
    let bearer = format!("Bearer {TOKEN}");
    let refused: [(&[(&str, &str)], u16); 5] = [
        (
            &[
                ("Host", "evil.example"),
                ("Origin", "http://evil.example"),
                ("Authorization", &bearer),
            ],
            421,
        ),
        (&[("Origin", "http://evil.example"), ("Authorization", &bearer)], 403),
        (&[("Origin", "null"), ("Authorization", &bearer)], 403),
        (&[], 401),
        (&[("Authorization", "Bearer not-the-token")], 401),
    ];
    for (headers, want) in refused {
        let (code, text) = post(headers);
        assert_eq!(code, want, "{headers:?}: {text}");
        assert!(!text.contains(TOKEN), "{text}");
        assert_eq!(
            daemon.must("/status", status(&addr))["state"],
            "running",
            "{headers:?} paused the job"
        );
    }
    let (code, text) = post(&[("Authorization", &bearer), ("Origin", &base)]);
    assert_eq!(code, 200, "{text}");
    daemon.wait_until("paused", MINUTE, || {
        status(&addr).is_some_and(|s| s["state"] == "paused")
    });
    assert!(!daemon.must("/status", status(&addr)).to_string().contains(TOKEN));
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    assert!(!log.contains(TOKEN), "the token in the log:\n{log}");
    assert!(log.contains("POST /control refused"), "{log}");

    // control on every address without a token: refused at start, naming the key
    let dir = JobDir::new();
    let config = dir.config(&datagen_config(free_port(), 50, ""));
    let listen = format!("metrics.listen=0.0.0.0:{}", free_port());
    let daemon = Daemon::start(&config, &["--set", &listen, "--set", "metrics.control=true"]);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(2), "{log}");
    assert!(
        log.contains("metrics.control_token: POST /control on 0.0.0.0:"),
        "{log}"
    );
}
