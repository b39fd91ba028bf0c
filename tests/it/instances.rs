//! One job as three processes (`job.instance = { index, count = 3 }`, a Kubernetes Indexed Job's
//! shape): each takes its share, and together they do the whole job once, for the data
//! generator, the periodic source and the Kafka source.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Run `config` as three instances at once, each with its own state file; all must exit 0.
fn run_three(config: &str) {
    let dir = JobDir::new();
    let daemons: Vec<Daemon> = (0..3)
        .map(|i| {
            let path = dir.path(&format!("job-{i}.toml"));
            let text = config.replace("{dir}", &dir.dir.path().display().to_string());
            std::fs::write(&path, text).unwrap();
            let state = dir.path(&format!("job-{i}.state")).display().to_string();
            let instance = format!("job.instance={{\"index\":{i},\"count\":3}}");
            Daemon::start(&path, &["--state", &state, "--set", &instance])
        })
        .collect();
    for d in daemons {
        let (status, log) = d.wait(MINUTE * 2);
        assert_eq!(status.code(), Some(0), "{log}");
    }
}

#[test]
fn three_datagen_instances_generate_every_index_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("instances-datagen", 3);
    let count = 30_000u64;
    run_three(&format!(
        r#"
[job]
name = "{topic}"
parallelism = 2
[source]
type = "datagen"
count = {count}
[source.fields]
seq = {{ sequence = {{}} }}
[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
"#,
        kafka.bootstrap
    ));
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for r in kafka.read_all(&topic) {
        let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        *counts.entry(v["seq"].as_u64().unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len() as u64, count, "indices missing");
    assert!(counts.values().all(|n| *n == 1), "an index generated twice");
}

#[test]
fn three_periodic_instances_fire_each_event_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("instances-periodic", 1);
    let events: Vec<String> = (0..9)
        .map(|i| format!("{{ id = \"e{i}\", value = {i}, schedule = {{ period = \"50ms\" }}, count = 4 }}"))
        .collect();
    run_three(&format!(
        r#"
[job]
name = "{topic}"
[source]
type = "periodic"
events = [{}]
[sink]
type = "kafka"
bootstrap_servers = "{}"
topic = "{topic}"
"#,
        events.join(", "),
        kafka.bootstrap
    ));
    let mut fires: BTreeMap<String, usize> = BTreeMap::new();
    for r in kafka.read_all(&topic) {
        let id = r
            .headers
            .iter()
            .find(|(k, _)| k == "tidegate-event-id")
            .and_then(|(_, v)| v.clone())
            .unwrap();
        *fires.entry(id).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = (0..9).map(|i| (format!("e{i}"), 4)).collect();
    assert_eq!(fires, expected, "each event fired its 4 times by exactly one instance");
}

#[test]
fn three_kafka_source_instances_read_every_record_once() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("instances-kafka", 6);
    let records: Vec<TestRecord> = (0..6_000).map(|i| TestRecord::to(i % 6, format!("{i}"))).collect();
    kafka.produce(&topic, &records);
    let out = kafka.create_topic("instances-kafka-out", 6);
    run_three(&format!(
        r#"
[job]
name = "{topic}"
parallelism = 2
[source]
type = "kafka"
bootstrap_servers = "{0}"
topics = ["{topic}"]
format = "string"
stopping_offsets = "latest"
[sink]
type = "kafka"
bootstrap_servers = "{0}"
topic = "{out}"
preserve_partition = true
delivery = "exactly_once"
"#,
        kafka.bootstrap
    ));
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in kafka.read_all(&out) {
        *counts.entry(String::from_utf8(r.value.unwrap()).unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len(), 6_000, "records missing");
    assert!(counts.values().all(|n| *n == 1), "a record read twice");
}
