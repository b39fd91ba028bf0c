//! Config loading and validation: every error names its key; examples under config/ parse.

use std::collections::BTreeMap;

use super::*;
use crate::kafka::{StartingOffsets, StoppingOffsets, Subscription};
use crate::record::ValueFormat;

/// Config loading reads the process environment, and one test sets a variable: tests that load
/// a config hold this lock, so none sees another's variable.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(super) fn env_lock() -> std::sync::MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("job.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(super) const BASE: &str = r#"
[source]
type = "kafka"
bootstrap_servers = "127.0.0.1:9092"
topics = ["trades"]

[sink]
type = "null"
"#;

pub(super) fn error_of(text: &str, sets: &[&str]) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, text);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load(&path, &sets).expect_err("invalid config")
}

pub(super) fn key_of(e: &Error) -> String {
    match e {
        Error::Config { key, .. } => key.clone(),
        other => panic!("not a config error: {other}"),
    }
}

#[test]
fn a_minimal_config_has_sensible_defaults() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let c = load(&write(&dir, BASE), &[]).unwrap();
    assert_eq!(c.job.name, "job");
    assert_eq!(c.job.parallelism, 1);
    assert_eq!(c.checkpoint.interval, Duration::from_secs(5));
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert_eq!(k.settings.starting, StartingOffsets::Earliest);
    assert_eq!(k.settings.stopping, StoppingOffsets::None);
    assert_eq!(k.settings.discovery_interval, Some(Duration::from_secs(300)));
    assert_eq!(k.format, ValueFormat::Bytes);
}

#[test]
fn each_mistake_names_its_key() {
    let _env = env_lock();
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (format!("{BASE}\n[job]\nparalelism = 2\n"), vec![], "job.paralelism"),
        (
            format!("{BASE}\n[job]\nparallelism = \"two\"\n"),
            vec![],
            "job.parallelism",
        ),
        (format!("{BASE}\n[job]\nparallelism = 0\n"), vec![], "job.parallelism"),
        (
            format!("{BASE}\n[checkpoint]\ninterval = \"-5s\"\n"),
            vec![],
            "checkpoint.interval",
        ),
        (
            BASE.replace("type = \"kafka\"", "type = \"kafak\""),
            vec![],
            "source.type",
        ),
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"trades\"]\neof = 'value.type == '"),
            vec![],
            "source.eof",
        ),
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"t\"]\ntopic_pattern = \"t.*\""),
            vec![],
            "source.topics",
        ),
        (
            BASE.to_string(),
            vec!["source.starting_offsets=\"sometime\""],
            "source.starting_offsets",
        ),
        (
            BASE.to_string(),
            vec!["source.stopping_offsets={\"offsets\":{\"t\":5}}"],
            "source.stopping_offsets.offsets.\"t\"",
        ),
        (BASE.to_string(), vec!["source.tpoics=[\"x\"]"], "source.tpoics"),
        (BASE.replace("type = \"null\"", "type = \"file\""), vec![], "sink.path"),
        (
            format!("{BASE}\n[metrics]\nlisten = \"nowhere\"\n"),
            vec![],
            "metrics.listen",
        ),
        // librdkafka's own checks, made when a client is created: run at validation too
        (
            // (tidegate fits message.max.bytes to a fetch.max.bytes set alone; both set, theirs stand)
            format!("{BASE}\n[source.properties]\n\"fetch.max.bytes\" = 1000\n\"message.max.bytes\" = 2000\n"),
            vec![],
            "source.properties.\"message.max.bytes\"",
        ),
        (
            format!("{BASE}\n[source.properties]\n\"fetch.min.byte\" = 1\n"),
            vec![],
            "source.properties.\"fetch.min.byte\"",
        ),
        (
            BASE.replace(
                "type = \"null\"",
                "type = \"kafka\"\nbootstrap_servers = \"127.0.0.1:1\"\ntopic = \"t\"\nproperties = { \"linger.mss\" = 5 }",
            ),
            vec![],
            "sink.properties.\"linger.mss\"",
        ),
        (
            BASE.replace(
                "type = \"null\"",
                "type = \"kafka\"\nbootstrap_servers = \"127.0.0.1:1\"\ntopic = \"t\"\ndelivery = \"exactly_once\"",
            ),
            vec!["checkpoint.interval=\"45s\""],
            "sink.transaction_timeout",
        ),
    ];
    for (text, sets, key) in cases {
        let e = error_of(&text, &sets);
        assert_eq!(key_of(&e), key, "{e}");
        assert_eq!(e.exit_code(), 2);
    }
}

#[test]
fn toml_syntax_errors_give_the_position() {
    let _env = env_lock();
    let e = error_of("[job\nparallelism = 2\n", &[]);
    let text = e.to_string();
    assert!(text.contains("line 1") || text.contains("1:"), "{text}");
}

#[test]
fn a_missing_file_is_a_config_error() {
    let _env = env_lock();
    let e = load(Path::new("/nonexistent/tidegate.toml"), &[]).unwrap_err();
    assert_eq!(key_of(&e), "--config");
}

#[test]
fn dotted_librdkafka_keys_survive_loading() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{BASE}\n[source.properties]\n\"fetch.wait.max.ms\" = 50\n\"client.rack\" = \"r1\"\n\"enable.partition.eof\" = true\n"
    );
    let c = load(
        &write(&dir, &text),
        &["source.properties.\"fetch.min.bytes\"=1".to_string()],
    )
    .unwrap();
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    let p = &k.settings.properties;
    assert_eq!(p.get("fetch.wait.max.ms").map(String::as_str), Some("50"));
    assert_eq!(p.get("client.rack").map(String::as_str), Some("r1"));
    assert_eq!(p.get("enable.partition.eof").map(String::as_str), Some("true"));
    assert_eq!(p.get("fetch.min.bytes").map(String::as_str), Some("1"));
    // the case of a key survives too (the config crate would lowercase it): librdkafka then
    // refuses the name as written
    let e = error_of(&format!("{BASE}\n[source.properties]\n\"Client.Rack\" = \"r1\"\n"), &[]);
    assert_eq!(key_of(&e), "source.properties.\"Client.Rack\"", "{e}");
}

#[test]
fn property_secrets_come_from_files_and_unset_variables_are_named() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("kafka-password");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let text = format!(
        "{BASE}\n[source.properties]\n\"sasl.password\" = {{ file = {:?} }}\n",
        secret.display().to_string()
    );
    let c = load(&write(&dir, &text), &[]).unwrap();
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert_eq!(
        k.settings.properties.get("sasl.password").map(String::as_str),
        Some("s3cret")
    );
    // a value from a secret file or variable is shown as `***`, whatever its name
    let text = format!(
        "{BASE}\n[source.properties]\n\"client.id\" = {{ file = {:?} }}\n",
        secret.display().to_string()
    );
    let c = load(&write(&dir, &text), &[]).unwrap();
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert_eq!(crate::client::redacted(&k.settings.properties)["client.id"], "***");
    let e = error_of(
        &BASE.replace(
            "type = \"null\"",
            "type = \"kafka\"\nbootstrap_servers = \"127.0.0.1:1\"\ntopic = \"t\"\nproperties = { \"sasl.password\" = { env = \"TIDEGATE_TEST_NEVER_SET\" } }",
        ),
        &[],
    );
    assert_eq!(key_of(&e), "sink.properties.\"sasl.password\"", "{e}");
    assert!(
        e.to_string()
            .contains("the environment variable TIDEGATE_TEST_NEVER_SET is not set"),
        "{e}"
    );
}

#[test]
fn environment_and_set_override_the_file() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    std::env::set_var("TIDEGATE__CHECKPOINT__INTERVAL", "7s");
    let c = load(
        &path,
        &[
            "job.parallelism=3".to_string(),
            "source.topics=[\"a\",\"b\"]".to_string(),
        ],
    )
    .unwrap();
    std::env::remove_var("TIDEGATE__CHECKPOINT__INTERVAL");
    assert_eq!(c.checkpoint.interval, Duration::from_secs(7));
    assert_eq!(c.job.parallelism, 3);
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert!(matches!(k.settings.subscription, Subscription::Topics(ref t) if t == &["a", "b"]));
}

/// A data generator config with `extra` lines in `[source]`.
fn datagen(extra: &str) -> String {
    format!("[source]\ntype = \"datagen\"\ncount = 5\n{extra}\n[source.fields]\nseq = {{ sequence = {{}} }}\nts = {{ value = {{ a = 1 }} }}\n[sink]\ntype = \"null\"\n")
}

#[test]
fn validate_refuses_what_run_would_fail_on() {
    let _env = env_lock();
    let cases: Vec<(String, &str, &str)> = vec![
        // the end-of-stream expression: an unknown function, a result that is no condition
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"t\"]\neof = 'foo(value)'"),
            "source.eof",
            "unknown function foo",
        ),
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"t\"]\neof = 'value.i + 1'"),
            "source.eof",
            "not true or false",
        ),
        // the filter: the same checks, naming its own key
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"t\"]\nwhere = 'size(headers)'"),
            "source.where",
            "not true or false",
        ),
        (
            BASE.replace("topics = [\"trades\"]", "topics = [\"t\"]\nwhere = 'region == 1'"),
            "source.where",
            "unknown variable region",
        ),
        // a missing Avro schema file
        (
            BASE.replace(
                "topics = [\"trades\"]",
                "topics = [\"t\"]\nformat = \"avro\"\navro = { schema_file = \"/nowhere/x.avsc\" }",
            ),
            "source.avro.schema_file",
            "cannot read",
        ),
        // record 0 of the generator: a timestamp field that is no time
        (
            datagen("timestamp = \"ts\""),
            "source.timestamp",
            "not epoch milliseconds or RFC 3339",
        ),
        // a time without its zone
        (
            datagen("").replace(
                "ts = { value = { a = 1 } }",
                "ts = { timestamp = { start = \"2026-11-27T09:30:00\" } }",
            ),
            "source.fields.ts.timestamp.start",
            "has no time zone",
        ),
        // weights in the user's words
        (
            datagen("").replace(
                "ts = { value = { a = 1 } }",
                "ts = { choice = [1, 2], weights = [0, 0] }",
            ),
            "source.fields.ts.weights",
            "at least one of them above 0",
        ),
    ];
    for (text, key, says) in cases {
        let e = error_of(&text, &[]);
        assert_eq!(key_of(&e), key, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn the_environment_sets_lists_and_dotted_librdkafka_keys() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    std::env::set_var("TIDEGATE__SOURCE__TOPICS", "[\"a\",\"b\"]");
    std::env::set_var("TIDEGATE__SOURCE__PROPERTIES__FETCH_MIN_BYTES", "1");
    let c = load(&path, &[]);
    std::env::remove_var("TIDEGATE__SOURCE__TOPICS");
    std::env::remove_var("TIDEGATE__SOURCE__PROPERTIES__FETCH_MIN_BYTES");
    let SourceConfig::Kafka(k) = c.unwrap().source else {
        panic!()
    };
    assert!(matches!(k.settings.subscription, Subscription::Topics(ref t) if t == &["a", "b"]));
    assert_eq!(
        k.settings.properties.get("fetch.min.bytes").map(String::as_str),
        Some("1")
    );
}

#[test]
fn where_text_is_expected_a_number_is_taken_as_text() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let c = load(
        &write(&dir, BASE),
        &["metrics.listen=19464".to_string(), "job.name=123".to_string()],
    )
    .unwrap();
    assert_eq!(c.metrics.listen, Some("127.0.0.1:19464".parse().unwrap()));
    assert_eq!(c.job.name, "123");
}

#[test]
fn an_unquoted_dotted_property_says_to_quote_it() {
    let _env = env_lock();
    let e = error_of(BASE, &["source.properties.fetch.min.bytes=1"]);
    assert_eq!(key_of(&e), "source.properties");
    assert!(
        e.to_string()
            .contains("--set 'source.properties.\"fetch.min.bytes\"=1'"),
        "{e}"
    );
}

#[test]
fn offsets_specs_parse() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let text = BASE.replace(
        "topics = [\"trades\"]",
        "topics = [\"trades\"]\nstarting_offsets = { timestamp = \"2026-11-27T09:30:00-05:00\" }\nstopping_offsets = { offsets = { \"trades:0\" = 50 } }\ngroup_id = \"g\"",
    );
    let c = load(&write(&dir, &text), &[]).unwrap();
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert_eq!(k.settings.starting, StartingOffsets::Timestamp(1_795_789_800_000));
    assert_eq!(
        k.settings.stopping,
        StoppingOffsets::Specific(BTreeMap::from([(("trades".to_string(), 0), 50)]))
    );
    // bounded: no discovery by default
    assert_eq!(k.settings.discovery_interval, None);
}

#[test]
fn one_offset_for_every_partition() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let with = |start: &str, stop: &str| {
        BASE.replace(
            "topics = [\"trades\"]",
            &format!("topics = [\"trades\"]\nstarting_offsets = {start}\nstopping_offsets = {stop}"),
        )
    };
    let c = load(&write(&dir, &with("{ offset = 3 }", "{ offset = 8 }")), &[]).unwrap();
    let SourceConfig::Kafka(k) = c.source else { panic!() };
    assert_eq!(k.settings.starting, StartingOffsets::Offset(3));
    assert_eq!(k.settings.stopping, StoppingOffsets::Offset(8));
    let e = load(&write(&dir, &with("{ offset = 9 }", "{ offset = 8 }")), &[]).unwrap_err();
    assert_eq!(key_of(&e), "source.stopping_offsets.offset");
    let e = load(&write(&dir, &with("{ offset = -1 }", "\"latest\"")), &[]).unwrap_err();
    assert_eq!(key_of(&e), "source.starting_offsets.offset");
}

#[test]
fn every_example_config_parses() {
    let _env = env_lock();
    // the secret config/secured-cluster.toml reads from the environment
    std::env::set_var("KAFKA_PASSWORD", "example-password");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("toml") {
            load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    std::env::remove_var("KAFKA_PASSWORD");
    assert!(seen >= 3, "expected example configs in {}", dir.display());
}

/// The whole configs the README and docs/ show (a block with a `[job]` table) load as written.
#[test]
fn the_configs_in_the_readme_and_docs_load() {
    let _env = env_lock();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        pages.push(entry.expect("docs/ entry").path());
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for page in pages.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(page).unwrap();
        for block in text.split("```toml\n").skip(1) {
            let toml = block.split("```").next().unwrap_or_default();
            if !toml.contains("[job]") {
                continue; // a fragment, not a whole config
            }
            let path = write(&dir, toml);
            load(&path, &[]).unwrap_or_else(|e| panic!("a config in {}: {e}\n{toml}", page.display()));
            seen += 1;
        }
    }
    assert!(seen >= 2, "the README's and docs/replaying.md's configs");
}

#[test]
fn the_config_reference_is_current() {
    let _env = env_lock();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/config.md");
    let generated = reference::markdown();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/config.md is stale: regenerate it with `cargo run -- config-reference > docs/config.md`"
    );
}

#[test]
fn validate_says_where_a_filter_is_evaluated() {
    use crate::connector::SourceConnector;
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    for (filter, line) in [
        (
            "headers.region == 'eu'",
            "  records where headers.region == 'eu' (evaluated before decoding); the others are skipped, their position kept",
        ),
        (
            "value.size > 2",
            "  records where value.size > 2 (evaluated on the decoded value); the others are skipped, their position kept",
        ),
    ] {
        let text = BASE.replace("topics = [\"trades\"]", &format!("topics = [\"t\"]\nformat = \"json\"\nwhere = \"{filter}\""));
        let c = load(&write(&dir, &text), &[]).unwrap();
        let SourceConfig::Kafka(k) = c.source else { panic!() };
        assert_eq!(k.filter.as_deref(), Some(filter));
        assert!(k.describe().iter().any(|l| l == line), "{:#?}", k.describe());
    }
}
