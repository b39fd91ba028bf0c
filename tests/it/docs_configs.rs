//! Every whole config the README and docs/ print runs as printed against a fresh broker. Only
//! what an environment gives is changed: the broker's address, a free port for `metrics.listen`,
//! and job and topic names made unique to the run (tests share the broker). The input is seeded
//! to suit each config: a trading day compressed to a minute of event time, with pre-market
//! records before its start and records after its close, or a stream of events.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::{assert_exit_0, free_port, read_jsonl, run, Daemon, JobDir};

const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
/// 2026-11-27T09:30:00-05:00, where the trading-day configs start.
const OPEN_MS: i64 = 1_795_789_800_000;
const PARTITIONS: i32 = 3;
const TRADES_PER_PARTITION: usize = 100;
const EVENTS: usize = 200;

/// The ```toml blocks of the README and docs/ that are whole configs (a `[source]` and a
/// `[sink]`, nothing elided), with the file they come from.
fn whole_configs() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let mut configs = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let mut block: Option<String> = None;
        for line in text.lines() {
            match (&mut block, line.trim_start()) {
                (None, l) if l.starts_with("```toml") => block = Some(String::new()),
                (Some(b), l) if l.starts_with("```") => {
                    let lines: BTreeSet<&str> = b.lines().map(str::trim).collect();
                    if lines.contains("[source]") && lines.contains("[sink]") && !b.contains('…') {
                        let name = page.strip_prefix(root).unwrap_or(&page).display().to_string();
                        configs.push((name, b.clone()));
                    }
                    block = None;
                }
                (Some(b), _) => {
                    b.push_str(line);
                    b.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    configs
}

/// A string value of `key = "…"` lines in `config`.
fn values_of<'a>(config: &'a str, key: &str) -> Vec<&'a str> {
    config
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            if k.trim() != key {
                return None;
            }
            let v = v.trim();
            let v = v.strip_prefix('[').unwrap_or(v);
            v.trim_start().strip_prefix('"')?.split('"').next()
        })
        .collect()
}

/// The config with the environment's values: the broker, a free port, unique names.
fn localised(config: &str, kafka: &TestKafka, unique: &str) -> String {
    let mut out = config.to_string();
    for servers in ["127.0.0.1:9092", "kafka:9092"] {
        out = out.replace(&format!("\"{servers}\""), &format!("\"{}\"", kafka.bootstrap));
    }
    for name in values_of(config, "topics")
        .into_iter()
        .chain(values_of(config, "topic"))
    {
        if !name.contains('{') {
            out = out.replace(&format!("\"{name}\""), &format!("\"{name}-{unique}\""));
        }
    }
    for name in values_of(config, "name") {
        out = out.replace(&format!("name = \"{name}\""), &format!("name = \"{name}-{unique}\""));
    }
    for listen in values_of(config, "listen") {
        out = out.replace(&format!("\"{listen}\""), &format!("\"127.0.0.1:{}\"", free_port()));
    }
    out
}

/// A trading day in each partition: pre-market records, trades from the open, the market-close
/// record a minute after the open (in every partition, at the same time), then after-hours ones.
fn seed_trading_day(kafka: &TestKafka, topic: &str) {
    kafka.create_named_topic(topic, PARTITIONS);
    let mut records = Vec::new();
    for p in 0..PARTITIONS {
        for i in 0..5 {
            records.push(TestRecord::to(p, r#"{"type":"PRE_MARKET"}"#).at(OPEN_MS - 1_800_000 + i));
        }
        for i in 0..TRADES_PER_PARTITION {
            let seq = p as usize * TRADES_PER_PARTITION + i;
            records.push(
                TestRecord::to(p, format!(r#"{{"type":"TRADE","seq":{seq}}}"#))
                    .key("AAPL")
                    .at(OPEN_MS + i as i64 * 500),
            );
        }
        records.push(TestRecord::to(p, r#"{"type":"MARKET_CLOSE"}"#).at(OPEN_MS + 60_000));
        for i in 0..5 {
            records.push(TestRecord::to(p, r#"{"type":"AFTER_HOURS"}"#).at(OPEN_MS + 61_000 + i));
        }
    }
    kafka.produce(topic, &records);
}

/// The values' `seq` of a replayed trading day, checked to be trades only; sorted.
fn trades(values: impl Iterator<Item = serde_json::Value>) -> Vec<u64> {
    let mut seqs: Vec<u64> = values
        .map(|v| {
            assert_eq!(v["type"], "TRADE", "only trades are replayed: {v}");
            v["seq"].as_u64().expect("a trade's seq")
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

#[test]
fn every_whole_config_in_the_readme_and_docs_runs_as_printed() {
    let kafka = TestKafka::get();
    let configs = whole_configs();
    let found: Vec<&str> = configs.iter().map(|(page, _)| page.as_str()).collect();
    // the README's replay, docs/replaying.md's, docs/scaling.md's group tail
    assert!(configs.len() >= 3, "whole configs found in {found:?}");
    let all_trades: Vec<u64> = (0..(PARTITIONS as usize * TRADES_PER_PARTITION) as u64).collect();
    for (i, (page, printed)) in configs.iter().enumerate() {
        let unique = kafka.unique_topic(&format!("docs{i}"));
        let config = localised(printed, &kafka, &unique);
        let dir = JobDir::new();
        let path = dir.config(&config);
        let source = values_of(&config, "topics")[0].to_string();
        // the [sink] table, up to the next table
        let sink = config
            .split("\n[sink]\n")
            .nth(1)
            .map(|rest| rest.split("\n[").next().unwrap_or(rest))
            .unwrap_or_else(|| panic!("{page}: no [sink] table in\n{config}"));
        let sink_type = values_of(sink, "type")
            .first()
            .map(|t| t.to_string())
            .unwrap_or_default();
        if printed.contains("MARKET_CLOSE") {
            // a bounded replay of the trading day to its close
            seed_trading_day(&kafka, &source);
            let (code, log) = run(&path, &[], 2 * MINUTE);
            assert_eq!(code, 0, "{page}'s config:\n{config}\n{log}");
            let written = match sink_type.as_str() {
                "kafka" => {
                    let topic = values_of(sink, "topic")[0].replace("{topic}", &source);
                    let read = kafka.read_all(&topic);
                    trades(
                        read.iter()
                            .map(|r| serde_json::from_slice(r.value.as_deref().expect("a value")).expect("JSON")),
                    )
                }
                "file" => {
                    let file = dir.path(values_of(sink, "path")[0]);
                    trades(read_jsonl(&file).into_iter().map(|l| l["value"].clone()))
                }
                other => panic!("{page}: a sink of type {other:?} this test does not read yet"),
            };
            assert_eq!(written, all_trades, "{page}: every trade once, nothing else\n{log}");
        } else {
            // an unbounded tail: it copies what arrives until it is stopped
            assert_eq!(sink_type, "kafka", "{page}: a tail this test does not read yet");
            let target = values_of(sink, "topic")[0].to_string();
            kafka.create_named_topic(&source, 2);
            kafka.create_named_topic(&target, 2);
            let events: Vec<TestRecord> = (0..EVENTS)
                .map(|i| TestRecord::to((i % 2) as i32, format!(r#"{{"event":{i}}}"#)))
                .collect();
            kafka.produce(&source, &events);
            let daemon = Daemon::start(&path, &[]);
            daemon.wait_until(&format!("{page}: the events copied"), 3 * MINUTE, || {
                kafka.read_committed_now(&target).len() >= EVENTS
            });
            daemon.signal(libc::SIGTERM);
            let (status, log) = daemon.wait(MINUTE);
            assert_exit_0(status, &log);
            let mut copied: Vec<String> = kafka
                .read_all(&target)
                .iter()
                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
                .collect();
            copied.sort();
            let mut sent: Vec<String> = (0..EVENTS).map(|i| format!(r#"{{"event":{i}}}"#)).collect();
            sent.sort();
            assert_eq!(copied, sent, "{page}: every event once\n{log}");
        }
    }
}
