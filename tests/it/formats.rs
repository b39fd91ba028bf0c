//! Record formats against the real broker: Avro with a schema registry (the test double in
//! `schema_registry`) and with a local schema, Avro bytes cross-checked with fastavro, and the
//! decode-error policies on a poison record.

use std::collections::BTreeMap;
use std::time::Duration;

use tidegate::format::avro::{SchemaFileDecoder, SchemaFileEncoder};
use tidegate::format::{ValueDecoder, ValueEncoder};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;
use crate::registry_double::SchemaRegistryDouble;

const MINUTE: Duration = Duration::from_secs(60);

fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn seed_avro(kafka: &TestKafka, topic: &str, avro: &str, dir: &JobDir) {
    let (code, log) = run(
        std::path::Path::new(&format!("{}/config/trading-day-seed-avro.toml", root())),
        &[
            "--set",
            &format!("sink.bootstrap_servers={}", kafka.bootstrap),
            "--set",
            &format!("sink.topic={topic}"),
            "--set",
            // the transactional id is the job's: concurrent tests must not share one
            &format!("job.name={topic}"),
            "--set",
            &format!("source.avro={avro}"),
            "--set",
            "source.count=3000",
            "--set",
            &format!("checkpoint.path={}", dir.path("seed.state").display()),
        ],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
}

fn replay_avro(kafka: &TestKafka, topic: &str, avro: &str, dir: &JobDir, eof: &str) -> Vec<serde_json::Value> {
    let config = dir.config(&format!(
        r#"
[job]
parallelism = 2

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
stopping_offsets = "latest"
format = "avro"
avro = {avro}
eof = '{eof}'

[sink]
type = "file"
path = "{{dir}}/out.jsonl"
"#,
        kafka.bootstrap
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    read_jsonl(&dir.path("out.jsonl"))
}

/// The generated records, as the generator's JSON (the same seed and template, to a file).
fn generated(dir: &JobDir) -> BTreeMap<u64, serde_json::Value> {
    let out = dir.path("generated.jsonl");
    let (code, log) = run(
        std::path::Path::new(&format!("{}/config/trading-day-seed.toml", root())),
        &[
            "--set",
            "sink={\"type\":\"file\",\"path\":\"PATH\"}"
                .replace("PATH", &out.display().to_string())
                .as_str(),
            "--set",
            "source.count=3000",
            "--set",
            &format!("checkpoint.path={}", dir.path("gen.state").display()),
        ],
        MINUTE,
    );
    assert_eq!(code, 0, "{log}");
    read_jsonl(&out)
        .into_iter()
        .filter(|l| l["value"]["type"] == "TRADE")
        .map(|l| (l["value"]["seq"].as_u64().unwrap(), l["value"].clone()))
        .collect()
}

/// A generated trade as the Avro schema carries it: the same fields, plus the marker's null date.
fn as_avro_json(mut v: serde_json::Value) -> serde_json::Value {
    v["date"] = serde_json::Value::Null;
    v
}

#[test]
fn avro_with_a_schema_registry_round_trips_and_stops_at_the_marker() {
    let kafka = TestKafka::get();
    let registry = SchemaRegistryDouble::start();
    let topic = kafka.unique_topic("avro-registry");
    let dir = JobDir::new();
    let avro = format!(
        "{{\"schema_file\":\"{}/config/trade.avsc\",\"schema_registry\":\"{}\"}}",
        root(),
        registry.url
    );
    seed_avro(&kafka, &topic, &avro, &dir);
    assert!(
        registry.requests(&format!("POST /subjects/{topic}-value/versions")) >= 1,
        "the schema was registered"
    );

    let replayed = replay_avro(
        &kafka,
        &topic,
        &format!("{{ schema_registry = \"{}\" }}", registry.url),
        &dir,
        r#"value.type == "MARKET_CLOSE""#,
    );
    // schemas are fetched once per reader and cached by id, never per record
    let fetches = registry.requests("GET /schemas/ids/");
    assert!(
        (1..=2).contains(&fetches),
        "{fetches} schema fetches for {} records",
        replayed.len()
    );
    let expected = generated(&JobDir::new());
    assert_eq!(replayed.len(), expected.len(), "every trade, and no marker");
    for line in &replayed {
        let seq = line["value"]["seq"].as_u64().unwrap();
        assert_eq!(line["value"], as_avro_json(expected[&seq].clone()), "record {seq}");
    }
}

#[test]
fn avro_with_a_local_schema_round_trips_and_an_avro_field_ends_the_split() {
    let kafka = TestKafka::get();
    let topic = kafka.unique_topic("avro-file");
    let dir = JobDir::new();
    let avsc = format!("{}/config/trade.avsc", root());
    seed_avro(&kafka, &topic, &format!("{{\"schema_file\":\"{avsc}\"}}"), &dir);
    // where record 1500 landed, read with an independent decode of the raw topic
    let schema = tidegate::format::avro::read_schema("test", std::path::Path::new(&avsc)).unwrap();
    let mut decoder = SchemaFileDecoder::new(schema).unwrap();
    let raw = kafka.read_all(&topic);
    let (p1500, o1500) = raw
        .iter()
        .find(|r| decoder.decode(r.value.as_deref().unwrap()).unwrap().unwrap()["seq"] == 1500)
        .map(|r| (r.partition, r.offset))
        .expect("record 1500 was produced");
    let replayed = replay_avro(
        &kafka,
        &topic,
        &format!("{{ schema_file = \"{avsc}\" }}"),
        &dir,
        "value.seq == 1500",
    );
    let mut got: Vec<(i64, i64)> = replayed
        .iter()
        .map(|l| (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap()))
        .collect();
    got.sort_unstable();
    let expected: Vec<(i64, i64)> = raw
        .iter()
        .filter(|r| !(r.partition == p1500 && r.offset >= o1500))
        .map(|r| (r.partition as i64, r.offset))
        .collect();
    assert_eq!(
        got, expected,
        "the split of record 1500 ends just before it; the others run to the end"
    );
    let generated = generated(&JobDir::new());
    for line in replayed.iter().filter(|l| l["value"]["type"] == "TRADE") {
        let seq = line["value"]["seq"].as_u64().unwrap();
        assert_eq!(line["value"], as_avro_json(generated[&seq].clone()));
    }
}

fn fastavro(mode: &str, schema: &std::path::Path, input: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&src, input).unwrap();
    let status = std::process::Command::new("python3")
        .arg(format!("{}/tests/avro_interop.py", root()))
        .arg(mode)
        .arg(schema)
        .arg(&src)
        .arg(&dst)
        .status()
        .expect("python3 runs (the test needs python3 with fastavro: pip install fastavro)");
    assert!(
        status.success(),
        "avro_interop.py {mode} failed: is fastavro installed (pip install fastavro)?"
    );
    std::fs::read_to_string(dst).unwrap()
}

#[test]
fn avro_bytes_agree_with_fastavro_both_ways() {
    let schema_path = std::path::Path::new(root()).join("config/trade.avsc");
    let schema = tidegate::format::avro::read_schema("test", &schema_path).unwrap();
    let values: Vec<serde_json::Value> = (0..50)
        .map(|i| {
            serde_json::json!({
                "type": "TRADE", "seq": i, "trade_id": format!("id-{i}"), "ts": "2026-11-27T14:30:00.000Z",
                "symbol": if i % 3 == 0 { serde_json::Value::Null } else { serde_json::json!("AAPL") },
                "side": "BUY", "price": 100.5 + i as f64 / 8.0, "size": i * 1000, "venue": "XNAS", "date": null
            })
        })
        .collect();
    // tidegate encodes, fastavro decodes
    let encoder = SchemaFileEncoder::new(schema.clone()).unwrap();
    let hex: String = values
        .iter()
        .map(|v| {
            encoder
                .encode(v)
                .unwrap()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                + "\n"
        })
        .collect();
    let decoded: Vec<serde_json::Value> = fastavro("decode", &schema_path, &hex)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(decoded, values);
    // fastavro encodes, tidegate decodes
    let json: String = values.iter().map(|v| v.to_string() + "\n").collect();
    let mut decoder = SchemaFileDecoder::new(schema).unwrap();
    let ours: Vec<serde_json::Value> = fastavro("encode", &schema_path, &json)
        .lines()
        .map(|h| {
            let bytes: Vec<u8> = (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect();
            decoder.decode(&bytes).unwrap().unwrap()
        })
        .collect();
    assert_eq!(ours, values);
    assert_eq!(hex, fastavro("encode", &schema_path, &json), "byte-identical encodings");
}

fn poison_topic(kafka: &TestKafka) -> String {
    let topic = kafka.create_topic("poison", 1);
    let mut records: Vec<TestRecord> = (0..10).map(|i| TestRecord::to(0, format!(r#"{{"n":{i}}}"#))).collect();
    records[4] = TestRecord::to(0, "{not json").key("bad");
    kafka.produce(&topic, &records);
    topic
}

fn policy_config(kafka: &TestKafka, topic: &str, policy: &str, extra: &str) -> String {
    format!(
        r#"
[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
stopping_offsets = "latest"
format = "json"
decode_errors = "{policy}"
{extra}

[sink]
type = "file"
path = "{{dir}}/out.jsonl"

[checkpoint]
path = "{{dir}}/job.state"
interval = "100ms"
"#,
        kafka.bootstrap
    )
}

#[test]
fn a_poison_record_under_fail_stops_the_job_and_the_state_stays_before_it() {
    let kafka = TestKafka::get();
    let topic = poison_topic(&kafka);
    let dir = JobDir::new();
    let config = dir.config(&policy_config(&kafka, &topic, "fail", ""));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!("{topic}:0@4")) && log.contains("not valid JSON"),
        "{log}"
    );
    if let Some(state) = tidegate::core::state::read_state::<serde_json::Value>(&dir.path("job.state")).unwrap() {
        for s in state["splits"].as_array().unwrap() {
            assert!(
                s["split"]["next_offset"].as_i64().unwrap() <= 4,
                "the state moved past the poison record"
            );
        }
    }
    // a restart meets it again
    let (code, _) = run(&config, &[], MINUTE);
    assert_eq!(code, 1);
}

#[test]
fn a_poison_record_under_skip_is_counted_and_passed() {
    let kafka = TestKafka::get();
    let topic = poison_topic(&kafka);
    let dir = JobDir::new();
    let (code, log) = run(&dir.config(&policy_config(&kafka, &topic, "skip", "")), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let offsets: Vec<i64> = read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 5, 6, 7, 8, 9]);
    assert!(log.contains("skipping a record that cannot be decoded"), "{log}");
}

#[test]
fn a_poison_record_under_dead_letter_goes_to_the_dead_letter_topic_with_its_error() {
    let kafka = TestKafka::get();
    let topic = poison_topic(&kafka);
    let dead = kafka.create_topic("dead-letters", 1);
    let dir = JobDir::new();
    let config = dir.config(&policy_config(
        &kafka,
        &topic,
        "dead_letter",
        &format!("dead_letter_topic = \"{dead}\""),
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let offsets: Vec<i64> = read_jsonl(&dir.path("out.jsonl"))
        .iter()
        .map(|l| l["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 5, 6, 7, 8, 9]);
    let letters = kafka.read_all(&dead);
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter.value.as_deref(), Some(b"{not json".as_slice()), "the raw record");
    assert_eq!(letter.key.as_deref(), Some(b"bad".as_slice()));
    let header = |k: &str| {
        letter
            .headers
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert!(
        header("tidegate-error").contains("not valid JSON"),
        "{:?}",
        letter.headers
    );
    assert_eq!(header("tidegate-source-topic"), topic);
    assert_eq!(header("tidegate-source-partition"), "0");
    assert_eq!(header("tidegate-source-offset"), "4");
    // the summary counts the dead letter apart from the records written
    assert!(
        log.contains("10 records read, 9 written") && log.contains("1 dead-lettered"),
        "{log}"
    );
    // a dead-letter topic that does not exist is found at the start, not at the first poison
    let missing = dir.config(&policy_config(
        &kafka,
        &topic,
        "dead_letter",
        "dead_letter_topic = \"no-such-topic\"",
    ));
    let (code, log) = run(&missing, &["--reset-state"], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("source.dead_letter_topic") && log.contains("no-such-topic does not exist"),
        "{log}"
    );
}

#[test]
fn an_unreachable_schema_registry_fails_the_job_and_skips_nothing() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("registry-down", 1);
    // Confluent wire format (magic byte 0, schema id 1, a datum): valid records, whose schema
    // the registry would give
    let records: Vec<TestRecord> = (0..5u8)
        .map(|i| TestRecord::to(0, String::from_utf8(vec![0, 0, 0, 0, 1, 2 * i]).unwrap()))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let registry = format!("http://127.0.0.1:{}", free_port()); // nothing listens there
    let config = dir.config(
        &policy_config(
            &kafka,
            &topic,
            "skip",
            &format!("request_timeout = \"2s\"\navro = {{ schema_registry = \"{registry}\" }}"),
        )
        .replace("format = \"json\"", "format = \"avro\""),
    );
    let started = std::time::Instant::now();
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "an unreachable registry fails the job: {log}");
    assert!(
        log.contains(&registry) && log.contains("within 2s") && log.contains(&format!("{topic}:0@0")),
        "{log}"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(2),
        "retried until the timeout"
    );
    assert!(!log.contains("skipping a record"), "no record is skipped for it: {log}");
    assert!(read_jsonl(&dir.path("out.jsonl")).is_empty());
    // a checkpoint may have come before the split was assigned (no splits in it), or after (the
    // split where it began): never past a record
    if let Some(state) = tidegate::core::state::read_state::<serde_json::Value>(&dir.path("job.state")).unwrap() {
        let positions: Vec<i64> = state["splits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s["split"]["next_offset"].as_i64().expect("a split's next_offset"))
            .collect();
        assert!(
            positions.iter().all(|p| *p == 0),
            "the state moved past a record: {state}"
        );
    }
}
