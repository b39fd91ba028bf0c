//! Avro against a real schema registry: Apicurio Registry 3.0.9's Confluent API, plain and behind
//! nginx with TLS and basic auth (`scripts/registry`). What users meet: datagen writes and a replay
//! reads, a schema evolving under a running reader, the subject name strategies, a schema the
//! registry refuses (here); Avro keys (`keys`); refused credentials and an untrusted certificate
//! (`secured`). Fault injection stays with the in-process double (`schema_registry`).
//!
//! The registry comes from the environment (`eval "$(scripts/registry env)"` prints it):
//! `SCHEMA_REGISTRY_URL` (plain), `SCHEMA_REGISTRY_TLS_URL`, `SCHEMA_REGISTRY_CA`,
//! `SCHEMA_REGISTRY_USER`, `SCHEMA_REGISTRY_PASSWORD` (through nginx). A test fails, saying how
//! to start it, when they are unset.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::TestKafka;
use crate::daemon_util::*;

mod keys;
mod secured;

pub const MINUTE: Duration = Duration::from_secs(60);

pub const HOW: &str = "start the registry with \
    `REGISTRY_TLS_PORT=8443 REGISTRY_USERS=tidegate:secret scripts/registry start` \
    and export its variables with `eval \"$(REGISTRY_TLS_PORT=8443 REGISTRY_USERS=tidegate:secret scripts/registry env)\"`";

pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW}"))
}

/// The plain registry.
pub fn plain() -> String {
    var("SCHEMA_REGISTRY_URL")
}

/// Talks to the registry's Confluent API directly, as an operator would with curl.
pub fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

pub fn subjects(url: &str) -> Vec<String> {
    let r = http()
        .get(format!("{url}/subjects"))
        .send()
        .unwrap_or_else(|e| panic!("the registry at {url} does not answer ({e}): {HOW}"));
    assert!(r.status().is_success(), "GET {url}/subjects: {}", r.status());
    r.json().expect("a subject list")
}

pub fn versions(url: &str, subject: &str) -> Vec<u32> {
    let r = http()
        .get(format!("{url}/subjects/{subject}/versions"))
        .send()
        .expect("the registry answers");
    assert!(r.status().is_success(), "GET versions of {subject}: {}", r.status());
    r.json().expect("a version list")
}

pub fn set_compatibility(url: &str, subject: &str, level: &str) {
    let r = http()
        .put(format!("{url}/config/{subject}"))
        .header("Content-Type", "application/vnd.schemaregistry.v1+json")
        .body(json!({ "compatibility": level }).to_string())
        .send()
        .expect("the registry answers");
    assert!(
        r.status().is_success(),
        "PUT /config/{subject}: {} {:?}",
        r.status(),
        r.text()
    );
}

/// A record schema named `name` (unique per test: the registry outlives test runs) with the
/// fields `type` and `seq`, and `extra` fields.
pub fn schema(dir: &JobDir, file: &str, name: &str, extra: &[Value]) -> String {
    let mut fields = vec![
        json!({"name": "type", "type": "string"}),
        json!({"name": "seq", "type": "long"}),
    ];
    fields.extend(extra.iter().cloned());
    let schema = json!({"type": "record", "name": name, "namespace": "tidegate.it", "fields": fields});
    let path = dir.path(file);
    std::fs::write(&path, schema.to_string()).expect("write schema");
    path.display().to_string()
}

/// A unique record name: Apicurio keeps subjects until it stops.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or_default()
    )
}

/// A datagen job writing `count` records `{type = "TICK", seq = start…}` plus `fields` in Avro
/// to `topic` (one partition), `avro` being the `[source.avro]` table's lines, and a `CLOSE`
/// end marker with `marker_extra` fields when given.
pub fn datagen(
    kafka: &TestKafka,
    topic: &str,
    avro: &str,
    count: u64,
    start: u64,
    fields: &str,
    marker: Option<&str>,
) -> String {
    let marker = marker
        .map(|extra| format!("[source.end_marker]\nvalue = {{ type = \"CLOSE\", seq = -1{extra} }}\n"))
        .unwrap_or_default();
    format!(
        r#"
[job]
name = "{topic}-{start}"

[source]
type = "datagen"
count = {count}
format = "avro"

[source.avro]
{avro}

[source.fields]
type = {{ value = "TICK" }}
seq = {{ sequence = {{ start = {start} }} }}
{fields}

{marker}
[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
"#,
        kafka.bootstrap
    )
}

/// A replay of `topic` with the `[source.avro]` lines `avro`, to `{dir}/out.jsonl`; bounded at
/// the ends unless `live`, then it runs until the `CLOSE` record.
pub fn replay(kafka: &TestKafka, topic: &str, avro: &str, live: bool) -> String {
    let stop = if live { "none" } else { "latest" };
    format!(
        r#"
[job]
name = "replay-{topic}"

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
stopping_offsets = "{stop}"
format = "avro"
eof = 'value.type == "CLOSE"'
request_timeout = "10m"

[source.avro]
{avro}

[sink]
type = "file"
path = "{{dir}}/out.jsonl"
"#,
        kafka.bootstrap
    )
}

pub fn run_ok(dir: &JobDir, config: &str) -> String {
    let (code, log) = run(&dir.config(config), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    log
}

/// Poll until `path` holds `n` lines.
pub fn wait_lines(path: &Path, n: usize, daemon: &Daemon) {
    let deadline = Instant::now() + MINUTE;
    while line_count(path) < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} lines after a minute; log:\n{}",
            line_count(path),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn datagen_writes_avro_through_the_registry_and_a_replay_reads_it_back() {
    let kafka = TestKafka::get();
    let url = plain();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-roundtrip", 1);
    let name = unique_name("Tick");
    let avsc = schema(&dir, "tick.avsc", &name, &[]);
    let avro = format!("schema_file = \"{avsc}\"\nschema_registry = \"{url}\"");
    run_ok(&dir, &datagen(&kafka, &topic, &avro, 50, 0, "", Some("")));
    assert_eq!(
        versions(&url, &format!("{topic}-value")),
        vec![1],
        "registered once, under <topic>-value"
    );
    // the reader knows only the registry: schemas come by id
    run_ok(
        &dir,
        &replay(&kafka, &topic, &format!("schema_registry = \"{url}\""), false),
    );
    let values: Vec<Value> = read_jsonl(&dir.path("out.jsonl"))
        .into_iter()
        .map(|l| l["value"].clone())
        .collect();
    let expected: Vec<Value> = (0..50).map(|i| json!({"type": "TICK", "seq": i})).collect();
    assert_eq!(values, expected, "every record, decoded, and not the CLOSE marker");
}

#[test]
fn a_schema_evolved_with_a_defaulted_field_decodes_beside_the_old_one_in_a_running_replay() {
    let kafka = TestKafka::get();
    let url = plain();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-evolution", 1);
    let name = unique_name("Tick");
    let v1 = schema(&dir, "v1.avsc", &name, &[]);
    let v2 = schema(
        &dir,
        "v2.avsc",
        &name,
        &[json!({"name": "venue", "type": "string", "default": "none"})],
    );
    run_ok(
        &dir,
        &datagen(
            &kafka,
            &topic,
            &format!("schema_file = \"{v1}\"\nschema_registry = \"{url}\""),
            10,
            0,
            "",
            None,
        ),
    );
    let subject = format!("{topic}-value");
    // a real evolution: the registry checks v2 against v1
    set_compatibility(&url, &subject, "BACKWARD");

    // a live replay holds v1 (it decoded the first ten records) when v2 arrives
    let reader_dir = JobDir::new();
    let reader = Daemon::start(
        &reader_dir.config(&replay(&kafka, &topic, &format!("schema_registry = \"{url}\""), true)),
        &[],
    );
    let out_reader = reader_dir.path("out.jsonl");
    wait_lines(&out_reader, 10, &reader);
    run_ok(
        &dir,
        &datagen(
            &kafka,
            &topic,
            &format!("schema_file = \"{v2}\"\nschema_registry = \"{url}\""),
            10,
            10,
            "venue = { value = \"XNAS\" }",
            Some(", venue = \"\""),
        ),
    );
    assert_eq!(versions(&url, &subject), vec![1, 2], "v2 registered beside v1");
    let (status, log) = reader.wait(MINUTE);
    assert!(status.success(), "{log}");
    let values: Vec<Value> = read_jsonl(&out_reader)
        .into_iter()
        .map(|l| l["value"].clone())
        .collect();
    let mut expected: Vec<Value> = (0..10).map(|i| json!({"type": "TICK", "seq": i})).collect();
    expected.extend((10..20).map(|i| json!({"type": "TICK", "seq": i, "venue": "XNAS"})));
    assert_eq!(
        values, expected,
        "v1 records as v1, v2 records as v2, up to the CLOSE marker"
    );
}

#[test]
fn writers_name_subjects_by_the_topic_record_and_topic_record_strategies() {
    let kafka = TestKafka::get();
    let url = plain();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-strategies", 1);
    let name = unique_name("Tick");
    let avsc = schema(&dir, "tick.avsc", &name, &[]);
    for (i, strategy) in ["topic", "record", "topic_record"].iter().enumerate() {
        let avro =
            format!("schema_file = \"{avsc}\"\nschema_registry = \"{url}\"\nsubject_name_strategy = \"{strategy}\"");
        run_ok(&dir, &datagen(&kafka, &topic, &avro, 2, 2 * i as u64, "", None));
    }
    let all = subjects(&url);
    let fullname = format!("tidegate.it.{name}");
    for subject in [
        format!("{topic}-value"),
        fullname.clone(),
        format!("{topic}-{fullname}"),
    ] {
        assert!(
            all.contains(&subject),
            "subject {subject} registered; the registry has {all:?}"
        );
    }
    // whatever the subject, a reader decodes by schema id
    let reader = JobDir::new();
    let config = replay(&kafka, &topic, &format!("schema_registry = \"{url}\""), false);
    let (code, log) = run(&reader.config(&config), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let seqs: Vec<Value> = read_jsonl(&reader.path("out.jsonl"))
        .into_iter()
        .map(|l| l["value"]["seq"].clone())
        .collect();
    assert_eq!(seqs, (0..6).map(|i| json!(i)).collect::<Vec<_>>());
}

#[test]
fn a_schema_the_registry_refuses_as_incompatible_fails_the_writer_naming_subject_and_reason() {
    let kafka = TestKafka::get();
    let url = plain();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-incompatible", 1);
    let name = unique_name("Tick");
    let v1 = schema(&dir, "v1.avsc", &name, &[]);
    // a new field without a default: records written with v1 cannot be read with it
    let bad = schema(&dir, "bad.avsc", &name, &[json!({"name": "venue", "type": "string"})]);
    run_ok(
        &dir,
        &datagen(
            &kafka,
            &topic,
            &format!("schema_file = \"{v1}\"\nschema_registry = \"{url}\""),
            3,
            0,
            "",
            None,
        ),
    );
    let subject = format!("{topic}-value");
    set_compatibility(&url, &subject, "BACKWARD");
    let config = datagen(
        &kafka,
        &topic,
        &format!("schema_file = \"{bad}\"\nschema_registry = \"{url}\""),
        3,
        3,
        "venue = { value = \"XNAS\" }",
        None,
    );
    let (code, log) = run(&dir.config(&config), &[], MINUTE);
    assert_eq!(code, 1, "a runtime failure (DESIGN.md's exit codes); log:\n{log}");
    let error = log
        .lines()
        .find(|l| l.starts_with("tidegate: error:"))
        .unwrap_or_default();
    assert!(
        error.contains(&format!("registering the Avro schema under subject {subject}"))
            && error.contains(&format!("the schema registry {url} refused it (HTTP 409)"))
            && error.contains("Incompatible"),
        "the error names the subject, the registry and its reason: {error}\n{log}"
    );
    assert_eq!(versions(&url, &subject), vec![1], "nothing registered");
    assert_eq!(
        kafka.read_all(&topic).len(),
        3,
        "nothing written with the refused schema"
    );
}
