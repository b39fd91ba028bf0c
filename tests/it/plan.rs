//! `tidegate plan` against what a run then reads: on a topic with transaction markers and an
//! aborted transaction, the plan's ranges hold exactly the records the run emits, its stops are
//! where the run's splits end, and its timestamps are the first and last records'; with a state
//! file it shows what a resumed run has left.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);
/// Timestamps of the produced records: `BASE + i` for record `i`.
const BASE: i64 = 1_795_789_800_000;

/// `tidegate plan --json` with `extra` arguments: (exit code, parsed stdout, stderr).
fn plan(config: &std::path::Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(binary())
        .args(["plan", "--json", "--config"])
        .arg(config)
        .args(extra)
        .output()
        .expect("run tidegate plan");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), json, stderr)
}

/// Records `from..to`, alternating over two partitions, with their index as value and timestamp.
fn records(from: i64, to: i64) -> Vec<TestRecord> {
    (from..to)
        .map(|i| TestRecord::to((i % 2) as i32, i.to_string()).at(BASE + i))
        .collect()
}

/// One partition of a plan.
struct Range {
    start: i64,
    stop: Option<i64>,
    offsets: Option<u64>,
    first: Option<i64>,
    last: Option<i64>,
}

/// The partitions of a plan, by number.
fn ranges(plan: &serde_json::Value) -> BTreeMap<i64, Range> {
    plan["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no partitions in {plan}"))
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                Range {
                    start: p["start"].as_i64().unwrap(),
                    stop: p["stop"].as_i64(),
                    offsets: p["offsets"].as_u64(),
                    first: p["first_timestamp"].as_i64(),
                    last: p["last_timestamp"].as_i64(),
                },
            )
        })
        .collect()
}

/// Check `plan` against the records a run wrote (`lines`) and the values it should have read
/// (`expected`): every record inside its partition's range, the first and last timestamps the
/// edge records', the offsets an upper bound.
fn check_plan_against_run(plan: &serde_json::Value, lines: &[serde_json::Value], expected: &[i64]) {
    let ranges = ranges(plan);
    let mut values: Vec<i64> = lines
        .iter()
        .map(|l| l["value"].as_str().unwrap().parse().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(
        values, expected,
        "the run read exactly the committed records of the plan's ranges"
    );
    for (
        partition,
        Range {
            start,
            stop,
            offsets,
            first,
            last,
        },
    ) in &ranges
    {
        let stop = stop.expect("a bounded plan");
        let mine: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["partition"].as_i64() == Some(*partition))
            .collect();
        for l in &mine {
            let offset = l["offset"].as_i64().unwrap();
            assert!(
                (*start..stop).contains(&offset),
                "offset {offset} of partition {partition} outside the plan's {start}..{stop}"
            );
        }
        assert_eq!(*offsets, Some((stop - start) as u64));
        assert!(mine.len() as u64 <= offsets.unwrap(), "the offsets are an upper bound");
        let ts: Vec<i64> = mine.iter().map(|l| l["timestamp"].as_i64().unwrap()).collect();
        assert_eq!(
            *first,
            ts.iter().min().copied(),
            "partition {partition}: the first timestamp"
        );
        assert_eq!(
            *last,
            ts.iter().max().copied(),
            "partition {partition}: the last timestamp"
        );
    }
    let total: u64 = ranges.values().map(|r| r.offsets.unwrap()).sum();
    assert_eq!(plan["total_offsets"].as_u64(), Some(total));
}

#[test]
fn plan_matches_what_a_run_then_reads_with_markers_and_an_aborted_transaction() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("plan", 2);
    // committed 0..40, aborted 40..60 (never read), plain 60..80, committed 80..100
    kafka.produce_transactions(&topic, &[(records(0, 40), true), (records(40, 60), false)]);
    kafka.produce(&topic, &records(60, 80));
    kafka.produce_transactions(&topic, &[(records(80, 100), true)]);
    let ends = kafka.end_offsets(&topic);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
        "200ms",
    ));

    let (code, first_plan, stderr) = plan(&config, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first_plan["checkpoint_id"], serde_json::Value::Null);
    for (partition, Range { start, stop, .. }) in ranges(&first_plan) {
        assert_eq!(start, 0);
        assert_eq!(
            stop,
            ends.get(&(partition as i32)).copied(),
            "the stop is the end of the log"
        );
    }
    // the offsets count 3 transaction markers and 10 aborted records per partition beyond the reads
    assert_eq!(first_plan["total_offsets"].as_u64(), Some(80 + 2 * 13));

    // the text form says the same, in a table with a total
    let text = Command::new(binary())
        .args(["plan", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("{topic}:0")) && text.contains("total: 106 offsets in 2 partitions"),
        "{text}"
    );

    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let expected: Vec<i64> = (0..40).chain(60..100).collect();
    check_plan_against_run(&first_plan, &read_jsonl(&dir.path("out.jsonl")), &expected);
    // the run's splits end where the plan said
    let shown = Command::new(binary())
        .args(["state", "show", "--json"])
        .arg(dir.path("job.state"))
        .output()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("state show prints JSON");
    for split in state["splits"].as_array().unwrap() {
        let partition = split["split"]["partition"].as_i64().unwrap();
        // (its position stays after the last record: the commit marker at the end is not read)
        assert_eq!(
            split["split"]["stop_offset"].as_i64(),
            ranges(&first_plan)[&partition].stop,
            "{split}"
        );
        assert_eq!(split["finished"]["reason"], "stopping_offset", "{split}");
    }
}

#[test]
fn plan_with_a_state_file_shows_what_a_resumed_run_has_left() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("plan-resume", 2);
    kafka.produce(&topic, &records(0, 100));
    let dir = JobDir::new();
    // unbounded: stopped by SIGTERM once everything is read
    let config = dir.config(&replay_config(&kafka, &topic, FILE_SINK, "", "200ms"));
    let out = dir.path("out.jsonl");
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the first 100 records", MINUTE, || line_count(&out) >= 100);
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let read_before = read_jsonl(&out).len();

    kafka.produce_transactions(&topic, &[(records(100, 120), false), (records(120, 160), true)]);
    let bounded = ["--set", "source.stopping_offsets=latest"];
    let (code, resumed, stderr) = plan(&config, &bounded);
    assert_eq!(code, 0, "{stderr}");
    assert!(resumed["checkpoint_id"].as_u64().is_some(), "{resumed}");
    let ends = kafka.end_offsets(&topic);
    for (partition, Range { start, stop, .. }) in ranges(&resumed) {
        assert_eq!(start, 50, "partition {partition} resumes after the 50 records it had");
        assert_eq!(stop, ends.get(&(partition as i32)).copied());
    }
    // the plan only reads: the state file is as it was, and the run resumes from it
    let (code, log) = run(&config, &bounded, MINUTE);
    assert_eq!(code, 0, "{log}");
    let lines = read_jsonl(&out);
    check_plan_against_run(&resumed, &lines[read_before..], &(120..160).collect::<Vec<_>>());

    // a finished state: nothing left
    let (code, done, stderr) = plan(&config, &bounded);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(done["total_offsets"].as_u64(), Some(0), "{done}");
}

#[test]
fn plan_exits_as_validate_does() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = kafka.create_topic("plan-errors", 1);
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
        "200ms",
    ));
    // an invalid key: 2, naming it
    let (code, _, stderr) = plan(&config, &["--set", "job.parallelism=0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("job.parallelism"), "{stderr}");
    // a damaged state file: 3, the file untouched
    std::fs::write(dir.path("job.state"), b"{not json").unwrap();
    let (code, _, stderr) = plan(&config, &[]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(std::fs::read(dir.path("job.state")).unwrap(), b"{not json");
    // a datagen source has no plan to show: 2, saying where to look
    let datagen = dir.config("[source]\ntype = \"datagen\"\ncount = 10\n[source.fields]\nid = { sequence = { start = 1 } }\n[sink]\ntype = \"null\"\n");
    let (code, _, stderr) = plan(&datagen, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("tidegate validate"), "{stderr}");
}

/// A paced replay that ends source-wide: the plan says the first marker in any partition ends
/// every partition, and how long the pacing takes for the event time planned.
#[test]
fn plan_shows_a_source_wide_stop_and_the_duration_of_a_paced_replay() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("plan-paced", 2);
    // an hour of event time: record i at BASE + i minutes, 61 records
    let produced: Vec<TestRecord> = (0..61i64)
        .map(|i| TestRecord::to((i % 2) as i32, i.to_string()).at(BASE + i * 60_000))
        .collect();
    kafka.produce(&topic, &produced);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"\neof = 'value == \"60\"'\neof_scope = \"source\"\nreplay_speed = 60.0",
        "1s",
    ));
    let (code, json, stderr) = plan(&config, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json["eof_scope"], "source", "{json}");
    assert_eq!(json["replay_speed"].as_f64(), Some(60.0), "{json}");
    // 60 minutes of event time at 60x: a minute
    assert_eq!(json["paced_seconds"].as_f64(), Some(60.0), "{json}");
    let text = Command::new(binary())
        .args(["plan", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("ends every partition") && !text.contains("each partition ends earlier"),
        "{text}"
    );
    assert!(text.contains("paced at 60x: 1h of event time in about 1m"), "{text}");
}

/// `plan --exact` counts the records a run reads (read_committed: no transaction markers, no
/// aborted records) beside the offsets, which stay the default's upper bound.
#[test]
fn plan_exact_counts_the_committed_records_beside_the_offsets() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("plan-exact", 2);
    // committed 0..40, aborted 40..60, plain 60..80, committed 80..100: 80 records to read
    kafka.produce_transactions(&topic, &[(records(0, 40), true), (records(40, 60), false)]);
    kafka.produce(&topic, &records(60, 80));
    kafka.produce_transactions(&topic, &[(records(80, 100), true)]);
    let dir = JobDir::new();
    let config = dir.config(&replay_config(
        &kafka,
        &topic,
        FILE_SINK,
        "stopping_offsets = \"latest\"",
        "200ms",
    ));
    let (code, bound, stderr) = plan(&config, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(bound["total_offsets"].as_u64(), Some(106));
    assert_eq!(
        bound["total_records"],
        serde_json::Value::Null,
        "counted only when asked"
    );
    let (code, exact, stderr) = plan(&config, &["--exact"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(exact["total_offsets"].as_u64(), Some(106), "{exact}");
    assert_eq!(exact["total_records"].as_u64(), Some(80), "{exact}");
    for p in exact["partitions"].as_array().unwrap() {
        assert_eq!(p["records"].as_u64(), Some(40), "{p}");
    }
    let text = Command::new(binary())
        .args(["plan", "--exact", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("total: 106 offsets") && text.contains("exactly 80 records"),
        "{text}"
    );
    // an end-of-stream record may stop a partition sooner: the count is a bound then
    let text = Command::new(binary())
        .args(["plan", "--exact", "--set", "source.eof=offset == 30", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("up to 80 records") && !text.contains("exactly 80"),
        "{text}"
    );
    // and a run reads as many
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_jsonl(&dir.path("out.jsonl")).len(), 80);
}
