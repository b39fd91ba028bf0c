//! The periodic source into the real broker and files: wall-time and fixed-rate punctuality, a
//! supplier file edited while running, and restarts under each catch-up policy.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::TestKafka;
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A fired record as read back: its event, scheduled instant and actual fire instant.
struct Fired {
    event: String,
    timestamp: i64,
    fired_at: i64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn read_fired(kafka: &TestKafka, topic: &str) -> Vec<Fired> {
    kafka
        .read_all(topic)
        .iter()
        .map(|r| {
            let header = |name: &str| {
                r.headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .and_then(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            Fired {
                event: header("tidegate-event-id"),
                timestamp: r.timestamp.expect("a timestamp"),
                fired_at: header("tidegate-fired-at").parse().expect("a tidegate-fired-at header"),
            }
        })
        .collect()
}

fn percentile(mut v: Vec<i64>, p: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn wall_time_events_fire_on_their_boundaries_and_on_time() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("periodic-wall", 1);
    let dir = JobDir::new();
    let config = dir.config(&format!(
        r#"
[job]
parallelism = 2
max_duration = "11s"

[source]
type = "periodic"
events = [
  {{ id = "every-1s", value = {{ p = 1 }}, schedule = {{ wall_time = true, period = "1s" }} }},
  {{ id = "every-2s", value = {{ p = 2 }}, schedule = {{ wall_time = true, period = "2s" }} }},
  {{ id = "every-5s", value = {{ p = 5 }}, schedule = {{ wall_time = true, period = "5s" }} }},
]

[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
properties = {{ "linger.ms" = 0 }}
"#,
        kafka.bootstrap
    ));
    // The job runs for max_duration from its own start; its records are read back afterwards, so
    // neither a slow start nor the broker's produce latency can change what is checked: the
    // schedule (counts, boundaries) and how promptly each fire happened.
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let received = read_fired(&kafka, &topic);
    let mut by_event: BTreeMap<&str, Vec<&Fired>> = BTreeMap::new();
    for r in &received {
        by_event.entry(r.event.as_str()).or_default().push(r);
    }
    for (event, period) in [("every-1s", 1000i64), ("every-2s", 2000), ("every-5s", 5000)] {
        let records = &by_event[event];
        let expected = 11_000 / period;
        assert!(
            (records.len() as i64 - expected).abs() <= 1,
            "{event}: {} fires, expected {expected} ± 1",
            records.len()
        );
        assert!(
            records.iter().all(|r| r.timestamp % period == 0),
            "{event}: a timestamp off its boundary"
        );
    }
    let fired: Vec<i64> = received.iter().map(|r| r.fired_at - r.timestamp).collect();
    let (p50, p99, max) = (
        percentile(fired.clone(), 0.5),
        percentile(fired.clone(), 0.99),
        percentile(fired.clone(), 1.0),
    );
    eprintln!(
        "wall time, {} records: fired after the boundary p50 {p50} ms, p99 {p99} ms, max {max} ms",
        received.len()
    );
    assert!(fired.iter().all(|d| *d >= 0), "a fire before its boundary: {fired:?}");
    assert!(p99 <= 50, "p99 of the fire delay {p99} ms > 50 ms: {fired:?}");
}

#[test]
fn a_fixed_rate_event_keeps_its_period() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("periodic-fixed", 1);
    let dir = JobDir::new();
    let config = dir.config(&format!(
        r#"
[source]
type = "periodic"
events = [ {{ id = "fixed", value = "x", schedule = {{ period = "300ms", initial_delay = "100ms" }}, count = 12 }} ]
format = "string"

[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
properties = {{ "linger.ms" = 0 }}
"#,
        kafka.bootstrap
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let records = kafka.read_all(&topic);
    assert_eq!(records.len(), 12, "count ends the event and the job");
    let header = |r: &crate::common::ReadRecord, name: &str| -> i64 {
        r.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_ref()?.parse().ok())
            .unwrap()
    };
    let scheduled: Vec<i64> = records.iter().map(|r| r.timestamp.unwrap()).collect();
    assert!(scheduled.windows(2).all(|w| w[1] - w[0] == 300), "{scheduled:?}");
    let fired: Vec<i64> = records.iter().map(|r| header(r, "tidegate-fired-at")).collect();
    let intervals: Vec<i64> = fired.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("fixed rate 300 ms: intervals {intervals:?}");
    assert!(intervals.iter().all(|i| (280..=320).contains(i)), "{intervals:?}");
}

#[test]
fn supplier_file_edits_take_effect_and_a_broken_file_keeps_the_old_events() {
    let dir = JobDir::new();
    let events = dir.path("events.toml");
    let write_events = |text: &str| std::fs::write(&events, text).unwrap();
    write_events(
        r#"
[[events]]
id = "a"
value = { e = "a" }
schedule = { period = "1s" }

[[events]]
id = "b"
value = { e = "b" }
schedule = { period = "1s" }
"#,
    );
    let port = free_port();
    let config = dir.config(&format!(
        r#"
[job]
parallelism = 2

[source]
type = "periodic"
file = "{{dir}}/events.toml"
discover_interval = "1s"

[sink]
type = "file"
path = "{{dir}}/out.jsonl"

[checkpoint]
path = "{{dir}}/job.state"
interval = "100ms"

[metrics]
listen = "{port}"
"#
    ));
    let out = dir.path("out.jsonl");
    let events_of = |since: i64| -> BTreeMap<String, Vec<i64>> {
        let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for l in read_jsonl_tolerant(&out) {
            let ts = l["timestamp"].as_i64().unwrap();
            if ts >= since {
                m.entry(l["headers"]["tidegate-event-id"].as_str().unwrap().to_string())
                    .or_default()
                    .push(ts);
            }
        }
        m
    };
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("a and b firing", MINUTE, || {
        let m = events_of(0);
        m.get("a").is_some_and(|v| v.len() >= 2) && m.get("b").is_some_and(|v| v.len() >= 2)
    });
    // remove b, add c, change a's period
    write_events(
        r#"
[[events]]
id = "a"
value = { e = "a" }
schedule = { period = "2s" }

[[events]]
id = "c"
value = { e = "c" }
schedule = { period = "500ms" }
"#,
    );
    let edited = now_ms();
    daemon.wait_until("c firing", Duration::from_secs(10), || {
        events_of(edited).get("c").is_some_and(|v| v.len() >= 4)
    });
    let settled = now_ms() - 500;
    daemon.wait_until("a firing twice on its new period", Duration::from_secs(15), || {
        events_of(settled).get("a").is_some_and(|v| v.len() >= 2)
    });
    let after = events_of(edited + 1_500); // one discover interval plus a fire of slack
    assert!(!after.contains_key("b"), "b still fires after its removal: {after:?}");
    let a = &events_of(settled)["a"];
    assert!(
        a.windows(2).all(|w| w[1] - w[0] == 2_000),
        "a is not on its new 2 s period: {a:?}"
    );

    let addr = format!("127.0.0.1:{port}");
    let failures = || {
        metric(
            &http_get(&addr, "/metrics").unwrap_or_default(),
            "tidegate_periodic_supplier_failures_total",
        )
        .unwrap_or(0.0)
    };
    let before = failures();
    write_events("[[events]\nthis is not TOML");
    let broken = now_ms();
    daemon.wait_until("the failure counted", Duration::from_secs(10), || failures() > before);
    daemon.wait_until("a and c still firing", Duration::from_secs(10), || {
        let m = events_of(broken + 1_000);
        m.get("a").is_some_and(|v| !v.is_empty()) && m.get("c").is_some_and(|v| v.len() >= 2)
    });
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("the event supplier failed"), "{log}");
}

/// Lines of a file being written: the torn last line, if any, is ignored.
fn read_jsonl_tolerant(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn catch_up_run(policy: &str) -> (i64, Vec<i64>) {
    let dir = JobDir::new();
    let config = dir.config(&format!(
        r#"
[job]
max_duration = "2500ms"

[source]
type = "periodic"
events = [ {{ id = "tick", value = {{ n = "{{seq}}" }}, schedule = {{ wall_time = true, period = "500ms" }} }} ]
catch_up = "{policy}"

[sink]
type = "file"
path = "{{dir}}/out.jsonl"

[checkpoint]
path = "{{dir}}/job.state"
"#
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let first: Vec<i64> = read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["timestamp"].as_i64().unwrap())
        .collect();
    let last = *first.last().expect("fires in the first run");
    // down for a while: about four fires are missed
    std::thread::sleep(Duration::from_millis(2_200));
    let (code, log) = run(&config, &["--set", "job.max_duration=\"1200ms\""], MINUTE);
    assert_eq!(code, 0, "{log}");
    let all: Vec<i64> = read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["timestamp"].as_i64().unwrap())
        .collect();
    (last, all.into_iter().filter(|t| *t > last).collect())
}

#[test]
fn restarts_follow_the_catch_up_policy() {
    // skip: the missed instants never appear; the restart resumes on the grid
    let (last, second) = catch_up_run("skip");
    assert!(
        !second.contains(&(last + 500)) && !second.contains(&(last + 1_000)),
        "{last} {second:?}"
    );
    assert!(second.iter().all(|t| t % 500 == 0) && !second.is_empty());

    // fire_once: one fire for the latest missed instant, then on the grid
    let (last, second) = catch_up_run("fire_once");
    assert!(!second.contains(&(last + 500)), "{last} {second:?}");
    let gap: Vec<i64> = second.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        second[0] - last >= 2_000,
        "the catch-up fire is the latest missed one: {last} {second:?}"
    );
    assert!(gap.iter().all(|g| *g == 500), "{second:?}");

    // all: every missed instant, in order, then on the grid
    let (last, second) = catch_up_run("all");
    let expected: Vec<i64> = (1..=second.len() as i64).map(|k| last + 500 * k).collect();
    assert_eq!(second, expected, "every instant after the last fire, none skipped");
    assert!(
        second.len() >= 6,
        "the missed fires and the second run's own: {second:?}"
    );
}
