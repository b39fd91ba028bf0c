//! Protobuf and JSON Schema in the Confluent wire format against a real schema registry (any
//! with the Confluent API, e.g. Apicurio Registry's `/apis/ccompat/v7`, at
//! `SCHEMA_REGISTRY_URL`) and the real broker: datagen registers the schema and seeds a topic,
//! the raw bytes carry the registered id, and a replay decodes them, stops at an `eof` on a
//! decoded field, and prints the generator's values; poison records go through the decode policy.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::TestKafka;
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// The registry's Confluent-compatible API; the tests fail, saying how to start one, without it.
fn registry_url() -> String {
    match std::env::var("SCHEMA_REGISTRY_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim_end_matches('/').to_string(),
        _ => panic!(
            "SCHEMA_REGISTRY_URL is not set: these tests need a schema registry with the Confluent API. \
             Start Apicurio Registry 3.0.9 (`mvn dependency:copy \
             -Dartifact=io.apicurio:apicurio-registry-app:3.0.9:zip:all -DoutputDirectory=.cache/apicurio`, \
             unzip it, `java -Dquarkus.http.port=8781 -jar apicurio-registry-app-3.0.9-runner.jar`) and \
             export SCHEMA_REGISTRY_URL=http://127.0.0.1:8781/apis/ccompat/v7"
        ),
    }
}

/// GET `path` below the registry URL (plain HTTP on this machine), the body of a 200.
fn registry_get(url: &str, path: &str) -> Option<serde_json::Value> {
    let rest = url.strip_prefix("http://").expect("an http:// registry URL");
    let (addr, base) = rest
        .split_once('/')
        .map(|(a, b)| (a, format!("/{b}")))
        .unwrap_or((rest, String::new()));
    let body = http_get(addr, &format!("{base}{path}"))?;
    // a chunked body starts with its length: the JSON starts at the first brace
    let start = body.find('{')?;
    let end = body.rfind('}')?;
    serde_json::from_str(&body[start..=end]).ok()
}

const TRADE_PROTO: &str = r#"syntax = "proto3";
package tidegate.test;

// declared first, so the written message has the index [1], not the shortcut [0]
message Close {
  string type = 1;
}

message Trade {
  string type = 1;
  int64 seq = 2;
  string symbol = 3;
  double price = 4;
  int32 size = 5;
}
"#;

const TRADE_JSON_SCHEMA: &str = r#"{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "properties": {
    "type": {"type": "string"},
    "seq": {"type": "integer", "minimum": 0},
    "symbol": {"enum": ["AAPL", "MSFT", "NVDA"]},
    "price": {"type": "number"},
    "size": {"type": "integer"}
  },
  "required": ["type", "seq", "symbol", "price", "size"],
  "additionalProperties": false
}"#;

const COUNT: u64 = 200;

/// Datagen of COUNT trades on one partition in `format` (with its `table` line) into `sink`.
fn datagen_config(format: &str, table: &str, sink: &str, state: &str) -> String {
    format!(
        r#"
[job]
parallelism = 1

[source]
type = "datagen"
count = {COUNT}
seed = 20261127
format = "{format}"
{table}
key = "{{symbol}}"

[source.fields]
type = {{ value = "TRADE" }}
seq = {{ sequence = {{ start = 0 }} }}
symbol = {{ choice = ["AAPL", "MSFT", "NVDA"] }}
price = {{ normal = {{ mean = 187.5, stddev = 9.0 }}, round = 2, min = 1.0 }}
size = {{ uniform = {{ min = 1, max = 1000 }} }}

{sink}

[checkpoint]
path = "{{dir}}/{state}"
interval = "1s"
"#
    )
}

/// The generated trades by seq, as the generator's JSON (the same template, as JSON to a file).
fn generated() -> BTreeMap<u64, serde_json::Value> {
    let dir = JobDir::new();
    let config = dir.config(&datagen_config("json", "", FILE_SINK, "gen.state"));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    read_jsonl(&dir.path("out.jsonl"))
        .into_iter()
        .map(|l| (l["value"]["seq"].as_u64().expect("a seq"), l["value"].clone()))
        .collect()
}

/// Seeds a fresh one-partition topic with the trades in `format` (schema `table`), registering
/// the schema; returns the topic and the id the registry gave it.
fn seed(kafka: &TestKafka, dir: &JobDir, url: &str, format: &str, table: &str) -> (String, u32) {
    let topic = kafka.create_topic(format, 1);
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{topic}\"",
        kafka.bootstrap
    );
    let config = dir.config(&datagen_config(format, table, &sink, "seed.state"));
    let (code, log) = run(&config, &["--set", &format!("job.name={topic}")], MINUTE);
    assert_eq!(code, 0, "{log}");
    let latest = registry_get(url, &format!("/subjects/{topic}-value/versions/latest"))
        .unwrap_or_else(|| panic!("the registry at {url} has no subject {topic}-value"));
    let id = latest["id"].as_u64().expect("a registered id") as u32;
    (topic, id)
}

/// Replays `topic` in `format` (schema `table`) until `eof`, with the decode-error policy
/// `errors`; the exit code, the log and the envelopes written.
fn replay(
    kafka: &TestKafka,
    topic: &str,
    format: &str,
    table: &str,
    eof: &str,
    errors: &str,
) -> (i32, String, Vec<serde_json::Value>) {
    let dir = JobDir::new();
    let config = dir.config(&format!(
        r#"
[job]
parallelism = 1

[source]
type = "kafka"
bootstrap_servers = "{}"
topics = ["{topic}"]
stopping_offsets = "latest"
format = "{format}"
{table}
eof = '{eof}'
decode_errors = "{errors}"

{FILE_SINK}

[checkpoint]
path = "{{dir}}/replay.state"
interval = "1s"
"#,
        kafka.bootstrap
    ));
    let (code, log) = run(&config, &[], MINUTE);
    (code, log, read_jsonl(&dir.path("out.jsonl")))
}

/// The replay stopped before the record with seq 120: 0..120 in order, each the generator's value.
fn assert_stopped_at_120(replayed: &[serde_json::Value], expected: &BTreeMap<u64, serde_json::Value>) {
    let seqs: Vec<u64> = replayed
        .iter()
        .map(|l| l["value"]["seq"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(
        seqs,
        (0..120).collect::<Vec<u64>>(),
        "records before the marker, in order"
    );
    for line in replayed {
        let seq = line["value"]["seq"].as_u64().unwrap_or_default();
        assert_eq!(line["value"], expected[&seq], "record {seq}");
        assert_eq!(line["key"], expected[&seq]["symbol"], "record {seq}'s key");
    }
}

#[test]
fn protobuf_through_a_registry_round_trips_and_stops_at_a_decoded_field() {
    let url = registry_url();
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    std::fs::write(dir.path("trade.proto"), TRADE_PROTO).expect("write the schema");
    let table = format!(
        "protobuf = {{ schema_file = \"{{dir}}/trade.proto\", schema_registry = \"{url}\", message = \"tidegate.test.Trade\" }}"
    );
    let (topic, id) = seed(&kafka, &dir, &url, "protobuf", &table);
    let schema = registry_get(&url, &format!("/schemas/ids/{id}")).expect("the registered schema");
    assert_eq!(schema["schemaType"], "PROTOBUF", "{schema}");

    // the bytes: magic 0, the registered id, message index [1] (zigzag count 1, index 1)
    let raw = kafka.read_all(&topic);
    assert_eq!(raw.len() as u64, COUNT);
    for r in &raw {
        let v = r.value.as_deref().unwrap_or_default();
        assert_eq!(
            v[..7],
            [&[0u8][..], &id.to_be_bytes(), &[2, 2]].concat()[..],
            "offset {}",
            r.offset
        );
    }

    let expected = generated();
    let (code, log, replayed) = replay(
        &kafka,
        &topic,
        "protobuf",
        &format!("protobuf = {{ schema_registry = \"{url}\" }}"),
        "value.seq == 120 && value.type == \"TRADE\"",
        "fail",
    );
    assert_eq!(code, 0, "{log}");
    assert_stopped_at_120(&replayed, &expected);
}

#[test]
fn json_schema_through_a_registry_round_trips_and_stops_at_a_decoded_field() {
    let url = registry_url();
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    std::fs::write(dir.path("trade.schema.json"), TRADE_JSON_SCHEMA).expect("write the schema");
    let table = format!("json_schema = {{ schema_file = \"{{dir}}/trade.schema.json\", schema_registry = \"{url}\" }}");
    let (topic, id) = seed(&kafka, &dir, &url, "json_schema", &table);
    let schema = registry_get(&url, &format!("/schemas/ids/{id}")).expect("the registered schema");
    assert_eq!(schema["schemaType"], "JSON", "{schema}");

    // the bytes: magic 0, the registered id, the generator's JSON
    let expected = generated();
    let raw = kafka.read_all(&topic);
    assert_eq!(raw.len() as u64, COUNT);
    for r in &raw {
        let v = r.value.as_deref().unwrap_or_default();
        assert_eq!(
            v[..5],
            [&[0u8][..], &id.to_be_bytes()].concat()[..],
            "offset {}",
            r.offset
        );
        let json: serde_json::Value = serde_json::from_slice(&v[5..]).expect("JSON after the frame");
        assert_eq!(json, expected[&(r.offset as u64)], "offset {}", r.offset);
    }

    let read = format!("json_schema = {{ schema_registry = \"{url}\" }}");
    let (code, log, replayed) = replay(&kafka, &topic, "json_schema", &read, "value.seq == 120", "fail");
    assert_eq!(code, 0, "{log}");
    assert_stopped_at_120(&replayed, &expected);

    // poison records after them: one not framed, one naming an id the registry lacks, one that
    // breaks the registered schema; with "skip" the replay passes them and stops at the marker
    let framed = |id: u32, json: &str| [vec![0], id.to_be_bytes().to_vec(), json.as_bytes().to_vec()].concat();
    produce_bytes(
        &kafka,
        &topic,
        &[
            b"{\"type\":\"TRADE\"}".to_vec(),
            framed(2_000_000_000, r#"{"seq":1}"#),
            framed(id, r#"{"type":"TRADE","seq":"one","symbol":"AAPL","price":1,"size":1}"#),
            framed(
                id,
                r#"{"type":"MARKET_CLOSE","seq":999,"symbol":"AAPL","price":0,"size":0}"#,
            ),
        ],
    );
    let until_close = "value.type == \"MARKET_CLOSE\"";
    let (code, log, replayed) = replay(&kafka, &topic, "json_schema", &read, until_close, "skip");
    assert_eq!(code, 0, "{log}");
    assert_eq!(replayed.len() as u64, COUNT, "every trade, no poison record, no marker");
    assert_eq!(
        log.matches("skipping a record that cannot be decoded").count(),
        3,
        "{log}"
    );
    for why in ["Confluent wire format", "schema 2000000000", "/seq"] {
        assert!(log.contains(why), "no skip for {why:?}: {log}");
    }
    // with "fail" the first poison record ends the job, naming where it is
    let (code, log, _) = replay(&kafka, &topic, "json_schema", &read, until_close, "fail");
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!("cannot decode record at {topic}:0@{COUNT}")),
        "{log}"
    );
    // read as Protobuf, the registry's answer says the schema is another type: a decode error
    let as_proto = format!("protobuf = {{ schema_registry = \"{url}\" }}");
    let (code, log, _) = replay(&kafka, &topic, "protobuf", &as_proto, until_close, "fail");
    assert_eq!(code, 1, "{log}");
    assert!(log.contains(&format!("schema {id} is JSON, not PROTOBUF")), "{log}");
}

/// Produces raw values to partition 0 (the wire format is not text).
fn produce_bytes(kafka: &TestKafka, topic: &str, values: &[Vec<u8>]) {
    use rdkafka::producer::{BaseRecord, Producer};
    let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .create()
        .expect("a producer");
    for v in values {
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(v).partition(0))
            .expect("queued");
    }
    producer.flush(Duration::from_secs(30)).expect("flushed");
}

#[test]
fn periodic_events_in_protobuf_are_registered_and_decoded() {
    let url = registry_url();
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("periodic-protobuf", 1);
    let dir = JobDir::new();
    std::fs::write(
        dir.path("tick.proto"),
        "syntax = \"proto3\";\npackage tidegate.test;\nmessage Tick { string type = 1; string id = 2; string n = 3; }\n",
    )
    .expect("write the schema");
    let config = dir.config(&format!(
        r#"
[job]
name = "{topic}"
max_duration = "3s"

[source]
type = "periodic"
format = "protobuf"
protobuf = {{ schema_file = "{{dir}}/tick.proto", schema_registry = "{url}" }}
events = [ {{ id = "tick", value = {{ type = "TICK", id = "{{id}}", n = "{{seq}}" }}, schedule = {{ period = "50ms" }} }} ]

[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
"#,
        kafka.bootstrap
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let raw = kafka.read_all(&topic);
    // 60 fires in 3 s; the replay below needs 4
    assert!(raw.len() >= 4, "only {} fires in 3 s: {log}", raw.len());
    let latest = registry_get(&url, &format!("/subjects/{topic}-value/versions/latest")).expect("registered");
    let id = latest["id"].as_u64().expect("an id") as u32;
    for r in &raw {
        let v = r.value.as_deref().unwrap_or_default();
        // the only message: index [0], written as the single byte 0
        assert_eq!(
            v[..6],
            [&[0u8][..], &id.to_be_bytes(), &[0]].concat()[..],
            "offset {}",
            r.offset
        );
    }

    let (code, log, replayed) = replay(
        &kafka,
        &topic,
        "protobuf",
        &format!("protobuf = {{ schema_registry = \"{url}\" }}"),
        "value.n == \"3\"",
        "fail",
    );
    assert_eq!(code, 0, "{log}");
    let ns: Vec<String> = replayed
        .iter()
        .map(|l| l["value"]["n"].as_str().unwrap_or("?").to_string())
        .collect();
    let first: u64 = ns.first().and_then(|n| n.parse().ok()).expect("a first fire");
    let expected: Vec<String> = (first..3).map(|n| n.to_string()).collect();
    assert_eq!(ns, expected, "fires before n == 3, in order");
    for line in &replayed {
        assert_eq!(line["value"]["type"], "TICK");
        assert_eq!(line["value"]["id"], "tick");
    }
}

#[test]
fn protobuf_and_json_schema_without_a_registry_are_raw_values_of_the_local_schema() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    std::fs::write(dir.path("trade.proto"), TRADE_PROTO).expect("write the schema");
    std::fs::write(dir.path("trade.schema.json"), TRADE_JSON_SCHEMA).expect("write the schema");
    let expected = generated();
    for (format, table) in [
        (
            "protobuf",
            "protobuf = { schema_file = \"{dir}/trade.proto\", message = \"tidegate.test.Trade\" }",
        ),
        (
            "json_schema",
            "json_schema = { schema_file = \"{dir}/trade.schema.json\" }",
        ),
    ] {
        let topic = kafka.create_topic(&format!("{format}-raw"), 1);
        let sink = format!(
            "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{topic}\"",
            kafka.bootstrap
        );
        let config = dir.config(&datagen_config(format, table, &sink, &format!("{format}.state")));
        let (code, log) = run(&config, &["--set", &format!("job.name={topic}")], MINUTE);
        assert_eq!(code, 0, "{log}");
        let raw = kafka.read_all(&topic);
        assert_eq!(raw.len() as u64, COUNT);
        assert!(
            raw.iter()
                .all(|r| r.value.as_deref().is_some_and(|v| v.first() != Some(&0))),
            "{format}: no Confluent frame without a registry"
        );
        let table = table.replace("{dir}", &dir.dir.path().display().to_string());
        let (code, log, replayed) = replay(&kafka, &topic, format, &table, "value.seq == 120", "fail");
        assert_eq!(code, 0, "{format}: {log}");
        assert_stopped_at_120(&replayed, &expected);
    }
}

/// POST a JSON `body` to `path` below the registry URL (plain HTTP on this machine); the JSON
/// answer of a 200, else a panic with the registry's answer.
fn registry_post(url: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http:// registry URL");
    let (addr, base) = rest
        .split_once('/')
        .map(|(a, b)| (a, format!("/{b}")))
        .unwrap_or((rest, String::new()));
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("the registry at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        s,
        "POST {base}{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("the request sent");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("the registry's answer");
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "POST {path}: {answer}");
    // a chunked body starts with its length: the JSON starts at the first brace
    let json = rest
        .find('{')
        .zip(rest.rfind('}'))
        .map(|(start, end)| &rest[start..=end])
        .unwrap_or(rest);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("POST {path}: {e}: {answer}"))
}

/// The imported schema of the descriptor-form test, registered under its own subject and
/// referenced by its import path.
const VENUE_IMPORT: &str = "tidegate/test/venue.proto";
const VENUE_PROTO: &str = r#"syntax = "proto3";
package tidegate.test.ref;

message Venue {
  string mic = 1;
  string country = 2;
}
"#;

/// The root schema: it imports the reference and a well-known type (which a producer does not
/// register: every reader has it).
const FILL_PROTO: &str = r#"syntax = "proto3";
package tidegate.test;

import "tidegate/test/venue.proto";
import "google/protobuf/timestamp.proto";

message Close {
  string type = 1;
  int64 seq = 2;
}

message Fill {
  string type = 1;
  int64 seq = 2;
  tidegate.test.ref.Venue venue = 3;
  google.protobuf.Timestamp at = 4;
}
"#;

/// A schema registered as confluent-kafka-python's `ProtobufSerializer` registers it: each file
/// (the root and its import) as a base64 serialized `FileDescriptorProto`, not as `.proto` text;
/// records framed as its serializer frames them. A replay through the registry decodes every one.
#[test]
fn protobuf_registered_as_base64_descriptors_with_imports_is_decoded() {
    use base64::Engine as _;
    use prost::Message as _;

    let url = registry_url();
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("protobuf-descriptor", 1);

    // the files compiled as a producer compiles them; the root's own name ("acc_fill.proto", as
    // a generated module names it) is none tidegate could guess
    let dir = JobDir::new();
    std::fs::create_dir_all(dir.path("tidegate/test")).expect("a schema folder");
    std::fs::write(dir.path(VENUE_IMPORT), VENUE_PROTO).expect("write the reference");
    std::fs::write(dir.path("acc_fill.proto"), FILL_PROTO).expect("write the schema");
    let mut compiler = protox::Compiler::new([dir.dir.path()]).expect("a compiler");
    compiler
        .include_imports(true)
        .open_file("acc_fill.proto")
        .unwrap_or_else(|e| panic!("the test's schema: {e}"));
    let pool = compiler.descriptor_pool();
    let descriptor = |name: &str| {
        let file = pool.get_file_by_name(name).expect("a compiled file");
        base64::engine::general_purpose::STANDARD.encode(file.file_descriptor_proto().encode_to_vec())
    };

    // the reference under its own subject, then the root referencing it by its import path
    let venue_subject = format!("{topic}-venue");
    let venue_schema = descriptor(VENUE_IMPORT);
    registry_post(
        &url,
        &format!("/subjects/{venue_subject}/versions"),
        &serde_json::json!({"schemaType": "PROTOBUF", "schema": venue_schema}),
    );
    let venue_version = registry_get(&url, &format!("/subjects/{venue_subject}/versions/latest"))
        .and_then(|v| v["version"].as_u64())
        .expect("the reference's version");
    let fill_schema = descriptor("acc_fill.proto");
    let registered = registry_post(
        &url,
        &format!("/subjects/{topic}-value/versions"),
        &serde_json::json!({
            "schemaType": "PROTOBUF",
            "schema": fill_schema,
            "references": [{"name": VENUE_IMPORT, "subject": venue_subject, "version": venue_version}],
        }),
    );
    let id = registered["id"].as_u64().expect("a registered id") as u32;
    // the registry hands the descriptor form back as it was given: that is what tidegate reads
    let stored = registry_get(&url, &format!("/schemas/ids/{id}")).expect("the registered schema");
    assert_eq!(stored["schema"], fill_schema.as_str(), "{stored}");

    // fills (message index [1]: count 1, index 1, as zigzag varints) and closes (index [0]: the
    // single byte 0), each framed with the id; the last close is the end marker
    let fill = pool.get_message_by_name("tidegate.test.Fill").expect("Fill");
    let close = pool.get_message_by_name("tidegate.test.Close").expect("Close");
    let venues = [("XNAS", "US"), ("XLON", "GB"), ("XPAR", "FR")];
    let mut expected = Vec::new();
    let mut values = Vec::new();
    for seq in 0..60_i64 {
        let (message, index, value) = if seq % 10 == 9 {
            (&close, &[0u8][..], serde_json::json!({"type": "CLOSE", "seq": seq}))
        } else {
            let (mic, country) = venues[seq as usize % venues.len()];
            let value = serde_json::json!({
                "type": "FILL",
                "seq": seq,
                "venue": {"mic": mic, "country": country},
                "at": format!("2026-11-27T14:30:{:02}.250Z", seq),
            });
            (&fill, &[2u8, 2][..], value)
        };
        let message = prost_reflect::DynamicMessage::deserialize(message.clone(), &value)
            .unwrap_or_else(|e| panic!("{value} as {}: {e}", message.full_name()));
        values.push([&[0u8][..], &id.to_be_bytes(), index, &message.encode_to_vec()].concat());
        expected.push(value);
    }
    let end = prost_reflect::DynamicMessage::deserialize(close.clone(), &serde_json::json!({"type": "END"}))
        .expect("the end marker");
    values.push([&[0u8][..], &id.to_be_bytes(), &[0], &end.encode_to_vec()].concat());
    produce_bytes(&kafka, &topic, &values);

    let (code, log, replayed) = replay(
        &kafka,
        &topic,
        "protobuf",
        &format!("protobuf = {{ schema_registry = \"{url}\" }}"),
        "value.type == \"END\"",
        "fail",
    );
    assert_eq!(code, 0, "{log}");
    let decoded: Vec<serde_json::Value> = replayed.iter().map(|l| l["value"].clone()).collect();
    assert_eq!(decoded, expected, "every record before the marker, as it was written");
}
