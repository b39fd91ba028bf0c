//! validate = run: every client a run makes is among the probes, and a property any of them
//! refuses is refused at load, naming its section.

use std::collections::BTreeSet;

use super::super::tests::{env_lock, error_of, key_of, write};
use super::super::{load, Config};
use super::probes;

/// A job that makes every kind of client: a group member's Kafka source with a committer, a
/// dead-letter topic and a source-wide stop, an exactly-once Kafka sink, the Kafka store.
const EVERYTHING: &str = r#"
[job]
name = "all"
coordination = "group"
member = "m1"

[source]
type = "kafka"
bootstrap_servers = "127.0.0.1:9092"
topics = ["trades"]
format = "json"
group_id = "progress"
dead_letter_topic = "dead"
eof = 'value.type == "CLOSE"'
eof_scope = "source"

[sink]
type = "kafka"
bootstrap_servers = "127.0.0.1:9092"
topic = "out"
delivery = "exactly_once"

[checkpoint]
store = "kafka"
"#;

fn everything(sets: &[&str]) -> Config {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = write(&dir, EVERYTHING);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load(&path, &sets).unwrap_or_else(|e| panic!("{e}"))
}

/// The names of the clients the code makes: each `ClientSpec::new(…, "name")` in src/, and the
/// consumers made from a config of their own (the readers', the committer's).
fn clients_in_the_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut names = BTreeSet::from(["reader".to_string(), "committer".to_string()]);
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // tests and the simulation make clients of their own
        if name.ends_with("tests.rs")
            || file
                .components()
                .any(|c| c.as_os_str() == "simulation" || c.as_os_str() == "testing")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for call in flat.split("ClientSpec::new(").skip(1) {
            let args = call.split(')').next().unwrap_or_default();
            if let Some(literal) = args.rsplit(',').next().map(str::trim).and_then(|a| a.strip_prefix('"')) {
                names.insert(literal.trim_end_matches('"').to_string());
            }
        }
    }
    names
}

#[test]
fn every_client_the_code_makes_is_probed() {
    let _env = env_lock();
    let config = everything(&[]);
    let probed: BTreeSet<String> = probes(&config.job, &config.source, &config.sink, &config.checkpoint.store)
        .expect("the probes")
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    let made = clients_in_the_source();
    assert!(made.len() >= 15, "the walk found too few clients to be right: {made:?}");
    let missing: Vec<&String> = made.difference(&probed).collect();
    assert!(
        missing.is_empty(),
        "clients a run makes that validate does not: {missing:?}"
    );
}

#[test]
fn a_property_any_client_refuses_is_refused_naming_its_section() {
    let _env = env_lock();
    for (set, key) in [
        (
            "source.properties.\"bogus.source\"=1",
            "source.properties.\"bogus.source\"",
        ),
        ("sink.properties.\"bogus.sink\"=1", "sink.properties.\"bogus.sink\""),
        // only the store's clients take these
        (
            "checkpoint.properties.\"bogus.state\"=1",
            "checkpoint.properties.\"bogus.state\"",
        ),
    ] {
        let e = error_of(EVERYTHING, &[set]);
        assert_eq!(key_of(&e), key, "{e}");
        assert!(e.to_string().contains("No such configuration property"), "{e}");
    }
}

/// A group member speaks the consumer protocol unless told otherwise: the keys it leaves to the
/// broker are refused by name, each saying what replaces it; the classic protocol takes them;
/// both take the protocol's own keys; an unknown protocol is refused by name.
#[test]
fn the_consumer_protocol_s_broker_side_keys_are_refused_by_name_and_the_classic_one_takes_them() {
    let _env = env_lock();
    for (key, replaced_by) in [
        ("session.timeout.ms", "group.consumer.session.timeout.ms"),
        ("heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
        ("partition.assignment.strategy", "group.remote.assignor"),
    ] {
        let value = if key == "partition.assignment.strategy" {
            "range"
        } else {
            "9000"
        };
        let set = format!("source.properties.\"{key}\"={value}");
        let e = error_of(EVERYTHING, &[&set]);
        assert_eq!(key_of(&e), format!("source.properties.\"{key}\""), "{e}");
        assert!(e.to_string().contains(replaced_by), "{e}");
        // the same key on the classic protocol
        let classic = everything(&[&set, "source.properties.\"group.protocol\"=classic"]);
        assert!(matches!(classic.job.member.as_deref(), Some("m1")));
    }
    let e = error_of(EVERYTHING, &["source.properties.\"group.protocol\"=cooperative"]);
    assert_eq!(key_of(&e), "source.properties.\"group.protocol\"", "{e}");
    // said explicitly, and with the broker's assignor: every client a run makes takes it
    everything(&[
        "source.properties.\"group.protocol\"=consumer",
        "source.properties.\"group.remote.assignor\"=range",
    ]);
}
