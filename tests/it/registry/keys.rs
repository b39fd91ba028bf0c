//! Avro keys: datagen writes them (`key_format = "avro"`, registered under `<topic>-key`), a
//! replay decodes them (`key_format = "avro"`) for the end-of-stream expression's `key` and the
//! envelope; with a registry, and with a local key schema.

use serde_json::{json, Value};

use super::*;
use crate::common::TestKafka;

/// A datagen job of `count` records `{type, seq}` with Avro keys, `avro` the `[source.avro]`
/// lines, `key` an optional key template.
fn keyed_datagen(kafka: &TestKafka, topic: &str, avro: &str, count: u64, key: Option<&str>) -> String {
    let key = key.map(|k| format!("key = \"{k}\"")).unwrap_or_default();
    format!(
        r#"
[job]
name = "{topic}"

[source]
type = "datagen"
count = {count}
format = "avro"
key_format = "avro"
{key}

[source.avro]
{avro}

[source.fields]
type = {{ value = "TICK" }}
seq = {{ sequence = {{ start = 0 }} }}

[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
"#,
        kafka.bootstrap
    )
}

/// A bounded replay decoding keys and values, ending at the record where `eof`.
fn keyed_replay(kafka: &TestKafka, topic: &str, avro: &str, eof: &str) -> String {
    format!(
        r#"
[job]
name = "replay-{topic}"

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
stopping_offsets = "latest"
format = "avro"
key_format = "avro"
eof = '{eof}'

[source.avro]
{avro}

[sink]
type = "file"
path = "{{dir}}/out.jsonl"
"#,
        kafka.bootstrap
    )
}

#[test]
fn avro_record_keys_go_under_the_key_subject_and_a_replay_stops_on_a_key_field() {
    let kafka = TestKafka::get();
    let url = plain();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-keys", 1);
    let value = schema(&dir, "value.avsc", &unique_name("Tick"), &[]);
    let key_schema = json!({"type": "record", "name": unique_name("TickKey"), "namespace": "tidegate.it",
        "fields": [{"name": "seq", "type": "long"}]});
    std::fs::write(dir.path("key.avsc"), key_schema.to_string()).expect("write key schema");
    let avro = format!(
        "schema_file = \"{value}\"\nkey_schema_file = \"{}\"\nschema_registry = \"{url}\"",
        dir.path("key.avsc").display()
    );
    run_ok(&dir, &keyed_datagen(&kafka, &topic, &avro, 20, None));
    assert_eq!(
        versions(&url, &format!("{topic}-key")),
        vec![1],
        "the key schema, under <topic>-key"
    );
    assert_eq!(versions(&url, &format!("{topic}-value")), vec![1]);
    // the raw key is the Confluent wire format: magic byte 0, then the key schema's id
    let raw = kafka.read_all(&topic);
    assert!(raw
        .iter()
        .all(|r| r.key.as_deref().is_some_and(|k| k.len() > 5 && k[0] == 0)));

    let reader = JobDir::new();
    let config = keyed_replay(&kafka, &topic, &format!("schema_registry = \"{url}\""), "key.seq == 12");
    let (code, log) = run(&reader.config(&config), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let lines = read_jsonl(&reader.path("out.jsonl"));
    let got: Vec<(Value, Value)> = lines
        .iter()
        .map(|l| (l["key"].clone(), l["value"]["seq"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = (0..12).map(|i| (json!({"seq": i}), json!(i))).collect();
    assert_eq!(
        got, expected,
        "keys decoded; the split ends before the record whose key.seq is 12"
    );
}

#[test]
fn avro_keys_of_a_local_schema_are_raw_datums_and_decode_without_a_registry() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-local-keys", 1);
    let value = schema(&dir, "value.avsc", "Tick", &[]);
    std::fs::write(dir.path("key.avsc"), "\"string\"").expect("write key schema");
    let avro = format!(
        "schema_file = \"{value}\"\nkey_schema_file = \"{}\"",
        dir.path("key.avsc").display()
    );
    run_ok(&dir, &keyed_datagen(&kafka, &topic, &avro, 10, Some("k{seq}")));
    // a raw Avro string: its zig-zag length, then the text
    let raw = kafka.read_all(&topic);
    assert_eq!(raw[3].key.as_deref(), Some(&b"\x04k3"[..]));

    let reader = JobDir::new();
    let config = keyed_replay(&kafka, &topic, &avro, r#"key == "k7""#);
    let (code, log) = run(&reader.config(&config), &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let keys: Vec<Value> = read_jsonl(&reader.path("out.jsonl"))
        .into_iter()
        .map(|l| l["key"].clone())
        .collect();
    assert_eq!(keys, (0..7).map(|i| json!(format!("k{i}"))).collect::<Vec<_>>());
}
