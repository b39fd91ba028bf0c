//! `source.where` against the real broker: a header filter runs before decoding (undecodable
//! values it rejects are no error), a value filter, and a filtered replay that stops, checkpoints
//! and restarts exactly as an unfiltered one (the same positions, its output filtered).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{now_millis, TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A job reading `topic` into `out.jsonl`, checkpointed every `interval`, with `extra` lines in
/// `[source]` and `[metrics]` on `metrics` when given.
fn config(kafka: &TestKafka, topic: &str, interval: &str, extra: &str, metrics: Option<&str>) -> String {
    let metrics = metrics.map_or(String::new(), |m| format!("[metrics]\nlisten = \"{m}\"\n"));
    format!(
        r#"
[job]
parallelism = 2

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
{extra}

{FILE_SINK}

[checkpoint]
path = "{{dir}}/job.state"
interval = "{interval}"

{metrics}
"#,
        kafka.bootstrap
    )
}

/// (partition, offset) of each line written, in file order.
fn coords(lines: &[serde_json::Value]) -> Vec<(i64, i64)> {
    lines
        .iter()
        .map(|l| {
            (
                l["partition"].as_i64().expect("partition"),
                l["offset"].as_i64().expect("offset"),
            )
        })
        .collect()
}

/// The lines of one partition, in file order.
fn of_partition(lines: &[serde_json::Value], p: i64) -> Vec<serde_json::Value> {
    lines.iter().filter(|l| l["partition"] == p).cloned().collect()
}

/// Each split's final state (its position and how it finished), by partition.
fn split_states(dir: &JobDir) -> BTreeMap<i64, (serde_json::Value, serde_json::Value)> {
    let state: serde_json::Value = tidegate::core::state::read_state(&dir.path("job.state"))
        .expect("a readable state")
        .expect("a state");
    state["splits"]
        .as_array()
        .expect("splits")
        .iter()
        .map(|s| {
            (
                s["split"]["partition"].as_i64().expect("partition"),
                (s["split"]["next_offset"].clone(), s["finished"].clone()),
            )
        })
        .collect()
}

fn region(line: &serde_json::Value) -> &str {
    line["headers"]["region"]
        .as_str()
        .unwrap_or_else(|| panic!("a region header: {line}"))
}

#[test]
fn a_header_filter_skips_undecodable_values_without_decoding_them_and_counts_them() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("filter-header", 1);
    // eu records hold JSON, us ones do not: with format = "json" and decode_errors = "fail", only
    // a filter evaluated before decoding lets the job through
    let records: Vec<TestRecord> = (0..300)
        .map(|i| match i % 3 {
            0 => TestRecord::to(0, format!(r#"{{"n":{i}}}"#)).header("region", "eu"),
            _ => TestRecord::to(0, "{not json").header("region", "us"),
        })
        .collect();
    kafka.produce(&topic, &records);
    let filtered = "format = \"json\"\nwhere = 'headers.region == \"eu\"'";

    // without the filter: the first us record fails the job, naming it
    let dir = JobDir::new();
    let bounded = "format = \"json\"\nstopping_offsets = \"latest\"";
    let (code, log) = run(&dir.config(&config(&kafka, &topic, "1s", bounded, None)), &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains(&format!("{topic}:0@1")), "{log}");

    // with it, unbounded: the metric counts the rejected records while the job runs
    let dir = JobDir::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = dir.config(&config(&kafka, &topic, "1s", filtered, Some(&listen)));
    let daemon = Daemon::start(&cfg, &[]);
    let mut scraped = None;
    daemon.wait_until("the filter's metric at 200", MINUTE, || {
        let log = daemon.log_text();
        assert!(!log.contains("cannot decode"), "a rejected value was decoded: {log}");
        scraped = http_get(&listen, "/metrics").and_then(|t| metric(&t, "tidegate_records_filtered_total"));
        scraped == Some(200.0)
    });
    daemon.wait_until("the eu records written", MINUTE, || {
        line_count(&dir.path("out.jsonl")) >= 100
    });
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("200 filtered out"), "the summary counts them: {log}");
    let lines = read_jsonl(&dir.path("out.jsonl"));
    let offsets: Vec<i64> = coords(&lines).into_iter().map(|(_, o)| o).collect();
    assert_eq!(offsets, (0..300).step_by(3).collect::<Vec<i64>>());
    assert!(lines
        .iter()
        .all(|l| region(l) == "eu" && l["value"]["n"] == l["offset"]));
    // the position stands past the last (rejected) record: a rerun reads nothing again
    assert_eq!(split_states(&dir)[&0].0, serde_json::json!(300));
}

#[test]
fn a_value_filter_emits_the_matching_records_and_an_undecodable_value_follows_decode_errors() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("filter-value", 2);
    let mut records: Vec<TestRecord> = (0..400)
        .map(|i| TestRecord::to(i % 2, format!(r#"{{"n":{i}}}"#)))
        .collect();
    records.push(TestRecord::to(0, "{not json"));
    records.push(TestRecord::to(1, r#"{"m":1}"#)); // no n: the evaluation fails, rejected
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let extra =
        "format = \"json\"\nstopping_offsets = \"latest\"\ndecode_errors = \"skip\"\nwhere = 'value.n % 5 == 0'";
    let (code, log) = run(&dir.config(&config(&kafka, &topic, "1s", extra, None)), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let mut ns: Vec<i64> = read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["value"]["n"].as_i64().expect("n"))
        .collect();
    ns.sort_unstable();
    assert_eq!(ns, (0..400).step_by(5).collect::<Vec<i64>>());
    // 320 rejected by value, 1 by a failed evaluation; the undecodable one was skipped, not filtered
    assert!(log.contains("321 filtered out"), "{log}");
    assert!(log.contains("skipping a record that cannot be decoded"), "{log}");
    let states = split_states(&dir);
    assert_eq!(
        (states[&0].0.clone(), states[&1].0.clone()),
        (serde_json::json!(201), serde_json::json!(201))
    );
}

/// Two partitions of `per_partition` string records each, with a `region` header (a third eu),
/// timestamps one millisecond apart, and a `CLOSE` marker at `close_at` of each partition: an eu
/// one in partition 0, a us one in partition 1.
fn trading_day(kafka: &TestKafka, topic: &str, per_partition: i64, close_at: [i64; 2]) {
    let start = now_millis() - 10 * per_partition;
    let records: Vec<TestRecord> = (0..per_partition)
        .flat_map(|i| [0, 1].map(|p| (p, i)))
        .map(|(p, i)| {
            let (value, region) = if i == close_at[p as usize] {
                ("CLOSE".to_string(), if p == 0 { "eu" } else { "us" })
            } else {
                (format!("{i:0>40}"), if i % 3 == 0 { "eu" } else { "us" })
            };
            TestRecord::to(p, value).header("region", region).at(start + i)
        })
        .collect();
    kafka.produce(topic, &records);
}

/// The lines of an unfiltered run whose region is eu, per partition in order.
fn eu_only(lines: &[serde_json::Value]) -> Vec<Vec<(i64, i64)>> {
    (0..2)
        .map(|p| {
            coords(
                &of_partition(lines, p)
                    .into_iter()
                    .filter(|l| region(l) == "eu")
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

fn per_partition(lines: &[serde_json::Value]) -> Vec<Vec<(i64, i64)>> {
    (0..2).map(|p| coords(&of_partition(lines, p))).collect()
}

/// `got` equals `expected`, partition by partition; a failure says where they part.
fn assert_same(got: &[Vec<(i64, i64)>], expected: &[Vec<(i64, i64)>]) {
    for (p, (g, e)) in got.iter().zip(expected).enumerate() {
        let first = g.iter().zip(e).position(|(a, b)| a != b);
        assert!(
            first.is_none() && g.len() == e.len(),
            "partition {p}: {} lines written, {} expected; first difference at line {first:?}; last written {:?}, expected {:?}",
            g.len(),
            e.len(),
            g.last(),
            e.last()
        );
    }
}

#[test]
fn a_filtered_replay_killed_and_restarted_writes_the_unfiltered_output_filtered_and_ends_at_the_same_positions() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("filter-kill9", 2);
    let n = 150_000;
    trading_day(&kafka, &topic, n, [120_000, 110_000]);
    let common = "format = \"string\"\neof = 'value == \"CLOSE\"'\neof_emit_marker = true";

    let unfiltered = JobDir::new();
    let (code, log) = run(
        &unfiltered.config(&config(&kafka, &topic, "1s", common, None)),
        &[],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    let all = read_jsonl(&unfiltered.path("out.jsonl"));
    assert_eq!(all.len(), 120_001 + 110_001, "both markers written, nothing after them");

    let filtered = JobDir::new();
    let extra = format!("{common}\nwhere = 'headers.region == \"eu\"'");
    let cfg = filtered.config(&config(&kafka, &topic, "200ms", &extra, None));
    let out = filtered.path("out.jsonl");
    let daemon = Daemon::start(&cfg, &[]);
    daemon.wait_until("a checkpoint and some output", MINUTE, || {
        filtered.path("job.state").exists() && line_count(&out) > 10_000
    });
    let log = daemon.kill9();
    let expected = eu_only(&all);
    let written_before = line_count(&out);
    assert!(
        written_before < expected.iter().map(Vec::len).sum(),
        "the job finished before the kill: {log}"
    );
    let (code, log) = run(&cfg, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let lines = read_jsonl(&out);
    // the file sink cuts back to the checkpoint: exactly the eu records, each once, in order;
    // partition 0's marker (eu) written, partition 1's (us) not
    assert_same(&per_partition(&lines), &expected);
    assert_eq!(
        of_partition(&lines, 0).last().map(|l| l["value"].clone()),
        Some("CLOSE".into())
    );
    assert_ne!(
        of_partition(&lines, 1).last().map(|l| l["value"].clone()),
        Some("CLOSE".into())
    );
    assert_eq!(split_states(&filtered), split_states(&unfiltered));
    eprintln!(
        "filtered kill -9: {written_before} lines before the kill, {} after the rerun",
        lines.len()
    );
}

#[test]
fn a_source_wide_stop_with_a_filter_stops_where_it_would_without_it() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("filter-source-stop", 2);
    // partition 1's marker (a us record the filter rejects) is the earlier: it stops both
    trading_day(&kafka, &topic, 3_000, [2_500, 2_000]);
    let common = "format = \"string\"\neof = 'value == \"CLOSE\"'\neof_scope = \"source\"";
    let unfiltered = JobDir::new();
    let (code, log) = run(
        &unfiltered.config(&config(&kafka, &topic, "1s", common, None)),
        &[],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    let all = read_jsonl(&unfiltered.path("out.jsonl"));
    assert_eq!(
        per_partition(&all).iter().map(Vec::len).collect::<Vec<_>>(),
        vec![2_000, 2_000]
    );

    let filtered = JobDir::new();
    let extra = format!("{common}\nwhere = 'headers.region == \"eu\"'");
    let (code, log) = run(
        &filtered.config(&config(&kafka, &topic, "1s", &extra, None)),
        &[],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    assert_same(&per_partition(&read_jsonl(&filtered.path("out.jsonl"))), &eu_only(&all));
    assert_eq!(split_states(&filtered), split_states(&unfiltered));
}
