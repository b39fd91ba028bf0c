//! The data generator into the real broker: exact counts in parallel, determinism, restarts,
//! end markers, and the trading-day pair of example configs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::{ReadRecord, TestKafka};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

fn datagen_config(kafka: &TestKafka, topic: &str, count: u64, parallelism: usize, extra: &str) -> String {
    format!(
        r#"
[job]
parallelism = {parallelism}

[source]
type = "datagen"
count = {count}
seed = 99
key = "{{symbol}}-{{seq}}"
{extra}

[source.fields]
seq = {{ sequence = {{}} }}
symbol = {{ choice = ["A", "B", "C", "D", "E", "F", "G"] }}
price = {{ normal = {{ mean = 10.0, stddev = 2.0 }}, round = 3 }}
id = {{ uuid = {{}} }}

[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"

[checkpoint]
path = "{{dir}}/job.state"
interval = "200ms"
"#,
        kafka.bootstrap
    )
}

fn index_of(r: &ReadRecord) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
    v["seq"].as_u64().unwrap()
}

#[test]
fn count_100000_at_parallelism_4_into_6_partitions_is_exact_and_in_order() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("gen-exact", 6);
    let dir = JobDir::new();
    let config = dir.config(&datagen_config(&kafka, &topic, 100_000, 4, ""));
    let (code, log) = run(&config, &[], MINUTE * 2);
    assert_eq!(code, 0, "{log}");
    let records = kafka.read_all(&topic);
    let mut counts = vec![0u32; 100_000];
    for r in &records {
        counts[index_of(r) as usize] += 1;
    }
    assert!(counts.iter().all(|c| *c == 1), "every index exactly once");
    assert_eq!(records.len(), 100_000);
    // within a partition, the records of one split (a contiguous range) keep their order
    let split_of = |i: u64| i / 25_000;
    let mut last: BTreeMap<(i32, u64), u64> = BTreeMap::new();
    for r in &records {
        let i = index_of(r);
        if let Some(prev) = last.insert((r.partition, split_of(i)), i) {
            assert!(i > prev, "partition {} has {i} after {prev}", r.partition);
        }
    }
}

#[test]
fn fewer_records_than_readers_and_zero_records_both_finish() {
    let kafka = TestKafka::get();
    for count in [3u64, 0] {
        let topic = kafka.create_topic("gen-small", 2);
        let dir = JobDir::new();
        let config = dir.config(&datagen_config(&kafka, &topic, count, 4, ""));
        let (code, log) = run(&config, &[], MINUTE);
        assert_eq!(code, 0, "{log}");
        let mut indices: Vec<u64> = kafka.read_all(&topic).iter().map(index_of).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..count).collect::<Vec<_>>());
    }
}

fn values_by_index(kafka: &TestKafka, topic: &str) -> BTreeMap<u64, (Option<Vec<u8>>, Vec<u8>)> {
    kafka
        .read_all(topic)
        .into_iter()
        .map(|r| (index_of(&r), (r.key.clone(), r.value.clone().unwrap())))
        .collect()
}

#[test]
fn the_same_seed_gives_byte_identical_records() {
    let kafka = TestKafka::get();
    let (a, b) = (kafka.create_topic("gen-seed-a", 3), kafka.create_topic("gen-seed-b", 2));
    for (topic, p) in [(&a, 3), (&b, 1)] {
        let dir = JobDir::new();
        let (code, log) = run(&dir.config(&datagen_config(&kafka, topic, 5_000, p, "")), &[], MINUTE);
        assert_eq!(code, 0, "{log}");
    }
    let (va, vb) = (values_by_index(&kafka, &a), values_by_index(&kafka, &b));
    assert_eq!(va.len(), 5_000);
    assert_eq!(va, vb, "parallelism and partitioning must not change any record");
}

#[test]
fn kill_9_and_restart_produces_the_same_records_with_bounded_duplicates() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("gen-kill", 3);
    let reference = kafka.create_topic("gen-ref", 3);
    let count = 60_000u64;
    let dir = JobDir::new();
    let config = dir.config(&datagen_config(&kafka, &topic, count, 2, "rate = 20000.0"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("a checkpoint and some records", MINUTE * 3, || {
        dir.path("job.state").exists() && kafka.end_offsets(&topic).values().sum::<i64>() > 15_000
    });
    let log = daemon.kill9();
    let state: serde_json::Value = tidegate::core::state::read_state(&dir.path("job.state"))
        .unwrap()
        .unwrap();
    // every split's checkpointed position: in the readers' states, or untouched in the enumerator's
    let mut resume: Vec<(u64, u64)> = state["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["split"]["next_offset"].as_u64().unwrap(),
                s["split"]["end"].as_u64().unwrap(),
            )
        })
        .collect();
    resume.extend(
        state["enumerator"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["next_offset"].as_u64().unwrap(), s["end"].as_u64().unwrap())),
    );
    let before = kafka.end_offsets(&topic).values().sum::<i64>();
    assert!((before as u64) < count, "finished before the kill: {log}");

    let (code, log) = run(&config, &[], MINUTE * 2);
    assert_eq!(code, 0, "{log}");
    let ref_dir = JobDir::new();
    let (code, log) = run(
        &ref_dir.config(&datagen_config(&kafka, &reference, count, 2, "")),
        &[],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");

    let mut seen: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    for r in kafka.read_all(&topic) {
        seen.entry(index_of(&r)).or_default().push(r.value.clone().unwrap());
    }
    let expected = values_by_index(&kafka, &reference);
    assert_eq!(seen.len() as u64, count, "every index present");
    let mut duplicates = 0;
    for (i, values) in &seen {
        assert!(
            values.iter().all(|v| *v == expected[i].1),
            "index {i} differs from an uninterrupted run"
        );
        if values.len() > 1 {
            duplicates += values.len() - 1;
            let after_checkpoint = resume.iter().any(|(next, end)| i >= next && i < end);
            assert!(
                after_checkpoint,
                "index {i} duplicated although it was before the checkpoint"
            );
        }
    }
    eprintln!("datagen kill -9: {before} records before the kill, {duplicates} duplicates, 0 missing");
}

#[test]
fn a_generator_that_fails_fails_the_job_with_its_cause() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("gen-fail", 1);
    let dir = JobDir::new();
    // record 0 (which validation generates) is fine; a later one draws the bad time
    let config = dir.config(&datagen_config(&kafka, &topic, 50, 1, "timestamp = \"when\"").replace(
        "[source.fields]",
        "[source.fields]\nwhen = { choice = [\"2026-11-27T09:30:00Z\", \"not a time\"] }",
    ));
    // with the endpoint lingering after the failure, /status says so
    let addr = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start(
        &config,
        &[
            "--set",
            &format!("metrics.listen={addr}"),
            "--set",
            "metrics.linger=\"2m\"",
        ],
    );
    daemon.wait_until("the job's end, the endpoint lingering", MINUTE, || {
        daemon.log_text().contains("metrics.linger")
    });
    let status = crate::control::status(&addr).expect("/status while lingering");
    assert_eq!(status["state"], "failed", "{status}");
    assert!(
        status["error"].as_str().is_some_and(|e| e.contains("not a time")),
        "{status}"
    );
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(1), "{log}");
    assert!(
        log.contains("generating record") && !log.contains("generating record 0") && log.contains("not a time"),
        "{log}"
    );
    // a generator that cannot make its first record is a config error, found before running
    let config = dir.config(&datagen_config(&kafka, &topic, 10, 1, "timestamp = \"when\"").replace(
        "[source.fields]",
        "[source.fields]\nwhen = { choice = [\"not a time\"] }",
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("source.timestamp") && log.contains("generating record 0"),
        "{log}"
    );
}

/// The trading day of config/trading-day-seed.toml in a topic of its own, checked as an
/// exchange feed: each partition ends with its market-close record and is in timestamp order.
/// The topic and each trade's timestamp by its `seq`.
fn seeded_trading_day(kafka: &TestKafka, dir: &JobDir) -> (String, std::collections::HashMap<u64, i64>) {
    let topic = kafka.unique_topic("trades");
    let root = env!("CARGO_MANIFEST_DIR");
    let state = |name: &str| format!("checkpoint.path={}", dir.path(name).display());
    let (code, log) = run(
        std::path::Path::new(&format!("{root}/config/trading-day-seed.toml")),
        &[
            "--set",
            &format!("sink.bootstrap_servers={}", kafka.bootstrap),
            "--set",
            &format!("sink.topic={topic}"),
            "--set",
            // the transactional id is the job's: concurrent tests must not share one
            &format!("job.name={topic}"),
            "--set",
            &state("seed.state"),
        ],
        // seconds alone; a loaded machine's Docker broker took a minute once
        MINUTE * 3,
    );
    assert_eq!(code, 0, "{log}");
    // every partition ends with the market-close record
    let records = kafka.read_all(&topic);
    for p in 0..3 {
        let last = records.iter().rfind(|r| r.partition == p).unwrap();
        assert!(String::from_utf8_lossy(last.value.as_deref().unwrap()).contains("MARKET_CLOSE"));
    }
    // and each partition is in timestamp order, as an exchange feed is, whatever the parallelism
    let mut in_order = kafka.read_all(&topic);
    in_order.sort_by_key(|r| (r.partition, r.offset));
    let backward: Vec<(i32, i64, i64)> = in_order
        .windows(2)
        .filter(|w| w[0].partition == w[1].partition && w[1].timestamp < w[0].timestamp)
        .map(|w| {
            (
                w[1].partition,
                w[1].offset,
                w[0].timestamp.unwrap_or(0) - w[1].timestamp.unwrap_or(0),
            )
        })
        .collect();
    assert!(
        backward.is_empty(),
        "{} backward jumps in timestamp (partition, offset, ms back), e.g. {:?}",
        backward.len(),
        &backward[..backward.len().min(5)]
    );
    let trade_ts: std::collections::HashMap<u64, i64> = records
        .iter()
        .filter_map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
            Some((v["seq"].as_u64()?, r.timestamp?))
        })
        .collect();
    assert_eq!(trade_ts.len(), 20_000, "every trade once");
    (topic, trade_ts)
}

/// The example configs seed a trading day and replay it to the market-close records; at the
/// end the progress stands at 100 %, and the summary (JSON under `log.format = "json"`),
/// `/status` and the metrics give the same totals (served on by `metrics.linger`).
#[test]
fn the_trading_day_seed_and_replay_configs() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let root = env!("CARGO_MANIFEST_DIR");
    let (topic, _) = seeded_trading_day(&kafka, &dir);
    let out = dir.path("trades.jsonl");
    let addr = format!("127.0.0.1:{}", free_port());
    let sets = [
        format!("source.bootstrap_servers={}", kafka.bootstrap),
        format!("source.topics=[\"{topic}\"]"),
        format!("sink.path={}", out.display()),
        format!("checkpoint.path={}", dir.path("replay.state").display()),
        format!("metrics.listen={addr}"),
        "metrics.linger=\"2m\"".to_string(),
        "log.format=\"json\"".to_string(),
    ];
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s.as_str()]).collect();
    let daemon = Daemon::start(Path::new(&format!("{root}/config/trading-day-replay.toml")), &args);
    daemon.wait_until("the job's end, the endpoint lingering", MINUTE, || {
        daemon.log_text().contains("metrics.linger")
    });
    let log = daemon.log_text();
    let summary: serde_json::Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["message"] == "summary")
        .unwrap_or_else(|| panic!("no JSON summary in {log}"));
    let summary = &summary["fields"];
    let status = crate::control::status(&addr).expect("/status while lingering");
    let metrics = http_get(&addr, "/metrics").expect("/metrics while lingering");
    let metric = |name: &str| metric(&metrics, name).unwrap_or_else(|| panic!("{name} in {metrics}")) as u64;
    // 20,000 trades written; the three market-close records read, matched and not written
    assert_eq!(summary["outcome"], "finished", "{summary}");
    assert_eq!(summary["records_written"], 20_000, "{summary}");
    assert_eq!(summary["records_read"], 20_000, "{summary}");
    assert_eq!(summary["records_expected"], 20_000, "the summary at 100 %: {summary}");
    assert_eq!(status["state"], "finished", "{status}");
    assert_eq!(status["records"]["done"], 20_000, "{status}");
    assert_eq!(status["records"]["expected"], 20_000, "/status at 100 %: {status}");
    assert_eq!(status["records"]["read"], 20_000, "{status}");
    assert_eq!(status["records"]["written"], 20_000, "{status}");
    assert_eq!(metric("tidegate_expected_records"), 20_000, "the metrics at 100 %");
    assert_eq!(metric("tidegate_records_written_total"), 20_000);
    assert_eq!(metric("tidegate_records_emitted_total"), 20_000);
    // ended, the job is not ready; SIGTERM ends the lingering at once
    assert!(http_get(&addr, "/ready").is_none(), "/ready after the end");
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_exit_0(code, &log);
    let lines = read_jsonl(&out);
    assert_eq!(lines.len(), 20_000, "every trade");
    assert!(
        lines.iter().all(|l| l["value"]["type"] == "TRADE"),
        "no MARKET_CLOSE record"
    );
    let mut seqs: Vec<u64> = lines.iter().map(|l| l["value"]["seq"].as_u64().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..20_000).collect::<Vec<_>>());
    assert_eq!(log.matches("eof_record at").count(), 3, "{log}");
}

/// Timing measured in milliseconds: run alone (`scripts/test` runs `punctual::` serially).
mod punctual {
    use super::*;

    /// The same day paced at 3600x into a topic: 6.5 hours of trades in about 6.5 seconds, each
    /// trade on schedule.
    #[test]
    fn the_trading_day_paced_at_3600x_keeps_its_schedule() {
        let kafka = TestKafka::get();
        let dir = JobDir::new();
        let root = env!("CARGO_MANIFEST_DIR");
        let state = |name: &str| format!("checkpoint.path={}", dir.path(name).display());
        let (topic, trade_ts) = seeded_trading_day(&kafka, &dir);
        let live = kafka.unique_topic("trades-live");
        let started = std::time::Instant::now();
        let (code, log) = run(
            std::path::Path::new(&format!("{root}/config/trading-day-replay-paced.toml")),
            &[
                "--set",
                &format!("source.bootstrap_servers={}", kafka.bootstrap),
                "--set",
                &format!("source.topics=[\"{topic}\"]"),
                "--set",
                &format!("sink.bootstrap_servers={}", kafka.bootstrap),
                "--set",
                &format!("sink.topic={live}"),
                "--set",
                &format!("job.name={live}"),
                "--set",
                &state("paced.state"),
            ],
            MINUTE,
        );
        let took = started.elapsed();
        assert_eq!(code, 0, "{log}");
        let out = kafka.read_all(&live);
        assert_eq!(out.len(), 20_000, "every trade");
        assert!(out
            .iter()
            .all(|r| String::from_utf8_lossy(r.value.as_deref().unwrap()).contains("\"TRADE\"")));
        assert!(
            took >= std::time::Duration::from_secs(6),
            "6.5 hours at 3600x took {took:?}"
        );
        // each trade left on schedule: its emit time less (its trade time - the first trade time) /
        // 3600 is the same for all but noise (the earliest such difference is the clock's start)
        let t0 = trade_ts.values().min().copied().unwrap();
        let offsets: Vec<i64> = out
            .iter()
            .map(|r| {
                let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
                let trade = trade_ts[&v["seq"].as_u64().unwrap()];
                r.timestamp.unwrap() - (trade - t0) / 3600
            })
            .collect();
        let start = offsets.iter().min().copied().unwrap();
        let errors: Vec<i64> = offsets.iter().map(|o| o - start).collect();
        let late = errors.iter().filter(|e| **e > 500).count();
        let worst = errors.iter().max().copied().unwrap_or(0);
        let mut sorted = errors.clone();
        sorted.sort_unstable();
        let p99 = sorted[sorted.len() * 99 / 100];
        eprintln!("paced replay: {late} of 20000 trades more than 500 ms behind schedule, p99 {p99} ms, worst {worst} ms, took {took:?}");
        // a loaded machine delays a few batches; an unordered day delays thousands by seconds
        assert!(
            late <= 200,
            "{late} of 20000 trades more than 500 ms behind schedule (p99 {p99} ms, worst {worst} ms)"
        );
    }
}

/// A record's key, value and partition.
type Placed = (Option<Vec<u8>>, Vec<u8>, i32);

/// `source.partitions`: each partition written by one reader in index order, at a parallelism
/// that is not the partition count, through a kill -9 and an exactly-once restart.
#[test]
fn partitions_by_key_are_each_in_index_order_through_a_kill_and_restart() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("gen-parts", 4);
    let reference = kafka.create_topic("gen-parts-ref", 4);
    let count = 40_000u64;
    let dir = JobDir::new();
    let partitioned = |extra: &str| {
        datagen_config(&kafka, &topic, count, 3, &format!("partitions = 4\n{extra}")).replace(
            &format!("topic = \"{topic}\""),
            &format!("topic = \"{topic}\"\npreserve_partition = true\ndelivery = \"exactly_once\""),
        )
    };
    let config = dir.config(&partitioned("rate = 10000.0"));
    let name = format!("job.name={topic}");
    let daemon = Daemon::start(&config, &["--set", &name]);
    daemon.wait_until("a checkpoint and some records", MINUTE * 3, || {
        dir.path("job.state").exists() && kafka.end_offsets(&topic).values().sum::<i64>() > 10_000
    });
    let log = daemon.kill9();
    assert!(
        (kafka.end_offsets(&topic).values().sum::<i64>() as u64) < count,
        "finished before the kill: {log}"
    );
    // the partitions are part of what the state's positions mean
    let (code, log) = run(&config, &["--set", &name, "--set", "source.partitions=2"], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("source.partitions"), "{log}");
    let (code, log) = run(&config, &["--set", &name], MINUTE * 2);
    assert_eq!(code, 0, "{log}");

    let ref_dir = JobDir::new();
    let (code, log) = run(
        &ref_dir.config(&datagen_config(&kafka, &reference, count, 2, "")),
        &[],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    // an unpartitioned run, where the sink's own partitioner placed each key
    let expected: BTreeMap<u64, Placed> = kafka
        .read_all(&reference)
        .into_iter()
        .map(|r| (index_of(&r), (r.key.clone(), r.value.clone().unwrap(), r.partition)))
        .collect();
    let records = kafka.read_all(&topic);
    assert_eq!(records.len() as u64, count, "every record once (read_committed)");
    let mut last: BTreeMap<i32, u64> = BTreeMap::new();
    let mut sorted = records;
    sorted.sort_by_key(|r| (r.partition, r.offset));
    for r in &sorted {
        let i = index_of(r);
        assert_eq!(
            (r.key.clone(), r.value.clone().unwrap(), r.partition),
            expected[&i],
            "index {i} differs from an unpartitioned run, or is in another partition than the \
             sink's partitioner puts its key"
        );
        if let Some(prev) = last.insert(r.partition, i) {
            assert!(i > prev, "partition {} has index {i} after {prev}", r.partition);
        }
    }
    assert_eq!(last.len(), 4, "every partition written: {last:?}");
}

/// An unbounded generator stopped by `job.max_duration` has no total: its summary says what it
/// read, never "of up to" a number of u64's size (its ranges are all of u64's).
#[test]
fn an_unbounded_generator_s_summary_has_no_total() {
    let dir = JobDir::new();
    let config = dir.config(
        "[job]\nname = \"unbounded\"\nparallelism = 2\nmax_duration = \"500ms\"\n\n\
         [source]\ntype = \"datagen\"\n\n[source.fields]\nn = { sequence = {} }\n\n[sink]\ntype = \"null\"\n",
    );
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let summary = log
        .lines()
        .find(|l| l.starts_with("tidegate: job unbounded stopped"))
        .unwrap_or_else(|| panic!("no summary in {log}"));
    assert!(
        summary.contains(" records read, ") && !summary.contains("of up to"),
        "{summary}"
    );
}
