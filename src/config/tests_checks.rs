//! Config checks that go beyond one key's type: expressions against the format, event-time
//! knobs without an event-time clock, control defaults, and errors that name their override.

use super::tests::{env_lock, error_of, key_of, write, BASE};
use super::*;

/// A field of the value needs a format with fields: over bytes or text, `value.seq` fails on
/// every record, so nothing would ever match (a one-liner's `--where` without `--format json`).
#[test]
fn an_expression_on_value_fields_needs_a_structured_format() {
    let _env = env_lock();
    for (key, expression) in [("where", "value.seq % 2 == 0"), ("eof", "has(value.type)")] {
        for format in ["bytes", "string"] {
            let sets = [format!("source.{key}={expression}"), format!("source.format={format}")];
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            let e = error_of(BASE, &sets);
            assert_eq!(key_of(&e), format!("source.{key}"), "{e}");
            assert!(
                e.to_string().contains("format") && e.to_string().contains(format),
                "{e}"
            );
        }
    }
    // the whole value is fine over text, and fields over JSON
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    for sets in [
        vec!["source.eof=value == 'CLOSE'", "source.format=string"],
        vec!["source.where=value.seq > 1", "source.format=json"],
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load(&path, &sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
    }
}

/// Control of a running job is for who is on the machine unless configured otherwise.
#[test]
fn control_defaults_to_on_for_loopback_only() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    for (sets, on) in [
        (vec!["metrics.listen=9464"], true),
        (vec!["metrics.listen=127.0.0.1:9464"], true),
        (vec!["metrics.listen=0.0.0.0:9464"], false),
        (vec!["metrics.listen=0.0.0.0:9464", "metrics.control_token=t0ken"], true),
        (vec!["metrics.listen=127.0.0.1:9464", "metrics.control=false"], false),
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        assert_eq!(load(&path, &sets).unwrap().metrics.control, on, "{sets:?}");
    }
    // control beyond loopback without a token: refused, naming the key
    let sets = ["metrics.listen=0.0.0.0:9464", "metrics.control=true"].map(String::from);
    let e = load(&path, &sets).unwrap_err();
    assert!(
        matches!(&e, Error::Config { key, .. } if key == "metrics.control_token"),
        "{e}"
    );
}

/// The event-time knobs are refused where no event-time clock runs (no pacing, no source-wide
/// stop): accepted without a word, they looked like they did something.
#[test]
fn event_time_knobs_without_an_event_time_clock_are_refused() {
    let _env = env_lock();
    for key in ["caught_up_grace", "max_out_of_orderness"] {
        let e = error_of(BASE, &[&format!("source.{key}=5s")]);
        assert_eq!(key_of(&e), format!("source.{key}"), "{e}");
        assert!(e.to_string().contains("replay_speed"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, BASE);
        for with in [
            vec!["source.replay_speed=2"],
            vec!["source.eof=key == 'x'", "source.eof_scope=source"],
        ] {
            let mut sets: Vec<String> = with.iter().map(|s| s.to_string()).collect();
            sets.push(format!("source.{key}=5s"));
            load(&path, &sets).unwrap_or_else(|e| panic!("{key} with {with:?}: {e}"));
        }
    }
}

/// An error about a key the environment or `--set` gave names where it came from: the file may
/// not have the key at all.
#[test]
fn an_error_from_an_override_names_the_variable_or_the_flag() {
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    std::env::set_var("TIDEGATE__JOB__PARALELISM", "4");
    let e = load(&path, &[]).expect_err("an unknown key");
    std::env::remove_var("TIDEGATE__JOB__PARALELISM");
    assert!(
        e.to_string()
            .contains("set by the environment variable TIDEGATE__JOB__PARALELISM"),
        "{e}"
    );
    std::env::set_var("TIDEGATE__CHECKPOINT__INTERVAL", "-5s");
    let e = load(&path, &[]).expect_err("a negative duration");
    std::env::remove_var("TIDEGATE__CHECKPOINT__INTERVAL");
    assert_eq!(key_of(&e), "checkpoint.interval", "{e}");
    assert!(e.to_string().contains("TIDEGATE__CHECKPOINT__INTERVAL"), "{e}");
    let e = error_of(BASE, &["job.parallelism=0"]);
    assert!(e.to_string().contains("set by --set job.parallelism=0"), "{e}");
    // an error about a key of the file says nothing of overrides
    let e = error_of(
        &format!("{BASE}\n[job]\nparallelism = 0\n"),
        &["checkpoint.interval=1s"],
    );
    assert!(!e.to_string().contains("set by"), "{e}");
}

/// An expression that is a bare field is a condition only where the field holds a boolean:
/// validate cannot know, so it says so (`eof = 'value.type'` passed without a word).
#[test]
fn validate_notes_an_expression_that_is_a_condition_only_on_some_data() {
    use crate::connector::SourceConnector;
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    for (key, expression, noted) in [
        ("eof", "value.type", true),
        ("eof", "value['type']", true),
        ("where", "headers.replayed", true),
        ("eof", "value.type == 'CLOSE'", false),
        ("eof", "has(value.type) && value.done", false),
    ] {
        let text = BASE.replace(
            "topics = [\"trades\"]",
            &format!("topics = [\"t\"]\nformat = \"json\"\n{key} = \"{expression}\""),
        );
        let c = load(&write(&dir, &text), &[]).unwrap();
        let SourceConfig::Kafka(k) = c.source else { panic!() };
        let lines = k.describe();
        let note = lines.iter().find(|l| l.contains("is a condition only"));
        assert_eq!(note.is_some(), noted, "{key} = {expression}: {lines:#?}");
        if let Some(note) = note {
            assert!(
                note.contains(expression) && note.contains(&format!("source.{key}")),
                "{note}"
            );
        }
    }
}

/// `checkpoint.store = "kafka"` takes the source's cluster and its connection properties by
/// default; its keys are refused with the file store; a mistake names its key.
#[test]
fn the_kafka_checkpoint_store_is_checked_and_defaults_to_the_source_cluster() {
    use crate::checkpoint_store::StoreConfig;
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{BASE}\n[job]\nname = \"replay\"\n\n[checkpoint]\nstore = \"kafka\"\n",).replace(
        "topics = [\"trades\"]",
        "topics = [\"trades\"]\nproperties = { \"security.protocol\" = \"plaintext\", \"fetch.min.bytes\" = 1 }",
    );
    let c = load(&write(&dir, &text), &[]).unwrap();
    let StoreConfig::Kafka(k) = c.checkpoint.store else {
        panic!("not the Kafka store: {:?}", c.checkpoint.store)
    };
    assert_eq!(k.bootstrap_servers, "127.0.0.1:9092");
    assert_eq!(k.cluster_of, "source");
    assert_eq!(k.topic, crate::checkpoint_store::DEFAULT_TOPIC);
    assert_eq!(k.transactional_id(), "tidegate.state.replay");
    // connection properties only: a consumer's fetch setting means nothing to the store
    assert_eq!(k.properties.keys().collect::<Vec<_>>(), vec!["security.protocol"]);

    let cases: [(String, &[&str], &str); 4] = [
        (BASE.to_string(), &["checkpoint.topic=t"], "checkpoint.topic"),
        (BASE.to_string(), &["checkpoint.store=s3"], "checkpoint.store"),
        (
            BASE.to_string(),
            &["checkpoint.store=kafka", "checkpoint.path=job.state"],
            "checkpoint.path",
        ),
        (
            "[source]\ntype = \"datagen\"\ncount = 1\n[source.fields]\nn = { sequence = {} }\n[sink]\ntype = \"null\"\n"
                .to_string(),
            &["checkpoint.store=kafka"],
            "checkpoint.bootstrap_servers",
        ),
    ];
    for (text, sets, key) in cases {
        let e = error_of(&text, sets);
        assert_eq!(key_of(&e), key, "{sets:?}: {e}");
    }
}

/// The settings the Kafka store's reading and transactions rely on are not the user's to change.
#[test]
fn the_kafka_checkpoint_store_refuses_properties_it_sets() {
    let _env = env_lock();
    for key in [
        "isolation.level",
        "enable.partition.eof",
        "transactional.id",
        "enable.idempotence",
        "acks",
        "transaction.timeout.ms",
    ] {
        let set = format!("checkpoint.properties={{\"{key}\":\"x\"}}");
        let e = error_of(BASE, &["checkpoint.store=kafka", &set]);
        assert_eq!(key_of(&e), format!("checkpoint.properties.\"{key}\""), "{e}");
    }
}

/// A transaction's timeout is `sink.transaction_timeout`, checked against the checkpoint interval
/// (and, for a group, capped): librdkafka's property would override it unchecked (at 900,000 ms
/// a killed member's open transaction held every restore for 15 minutes).
#[test]
fn the_transaction_timeout_is_only_sink_transaction_timeout() {
    let _env = env_lock();
    for delivery in ["exactly_once", "at_least_once"] {
        let text = format!("{BASE}\n[sink.properties]\n\"transaction.timeout.ms\" = \"900000\"\n").replace(
            "type = \"null\"",
            &format!(
                "type = \"kafka\"\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"out\"\ndelivery = \"{delivery}\""
            ),
        );
        let e = error_of(&text, &[]);
        assert_eq!(
            key_of(&e),
            "sink.properties.\"transaction.timeout.ms\"",
            "{delivery}: {e}"
        );
        assert!(e.to_string().contains("sink.transaction_timeout"), "{e}");
    }
}

/// The store's transactional id is in a namespace no exactly-once sink's can reach (a sink's is
/// `tidegate-<job.name>`, any name), and a job name cannot pose as another job's instance.
#[test]
fn the_kafka_store_transactional_id_cannot_be_a_sink_s() {
    use crate::checkpoint_store::StoreConfig;
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    let store = load(&path, &["checkpoint.store=kafka".into(), "job.name=x".into()]).unwrap();
    let StoreConfig::Kafka(k) = store.checkpoint.store else {
        panic!("not the Kafka store: {:?}", store.checkpoint.store)
    };
    let sink_job = load(&path, &["job.name=state-x".into()]).unwrap().job;
    let sink_id = crate::sink::kafka::config::transactional_id(&sink_job);
    assert_ne!(k.transactional_id(), sink_id, "job x's store and job state-x's sink");
    assert!(
        !k.transactional_id().starts_with("tidegate-"),
        "{}",
        k.transactional_id()
    );

    let e = error_of(BASE, &["checkpoint.store=kafka", "job.name=a#0"]);
    assert_eq!(key_of(&e), "job.name", "{e}");
}

/// With an exactly-once Kafka sink on the store's cluster, the checkpoints travel in the sink's
/// transactions (KIP-618): the store takes the sink's transactional id (opening it aborts what a
/// crashed process left open). Not with an at-least-once sink, nor one on another cluster.
#[test]
fn an_exactly_once_sink_on_the_store_s_cluster_carries_the_checkpoints() {
    use crate::checkpoint_store::StoreConfig;
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let sink = |bootstrap: &str, delivery: &str| {
        BASE.replace(
            "[sink]\ntype = \"null\"",
            &format!(
                "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{bootstrap}\"\ntopic = \"out\"\ndelivery = \"{delivery}\""
            ),
        )
    };
    let store_of = |text: String| {
        let c = load(
            &write(&dir, &text),
            &["checkpoint.store=kafka".into(), "job.name=replay".into()],
        )
        .unwrap();
        let StoreConfig::Kafka(k) = c.checkpoint.store else {
            panic!("not the Kafka store: {:?}", c.checkpoint.store)
        };
        k
    };
    let carried = store_of(sink("127.0.0.1:9092", "exactly_once"));
    assert_eq!(carried.sink_transactional_id.as_deref(), Some("tidegate-replay"));
    assert_eq!(carried.transactional_id(), "tidegate-replay");
    for (bootstrap, delivery) in [("127.0.0.1:9092", "at_least_once"), ("127.0.0.1:9093", "exactly_once")] {
        let own = store_of(sink(bootstrap, delivery));
        assert_eq!(own.sink_transactional_id, None, "{bootstrap} {delivery}");
        assert_eq!(
            own.transactional_id(),
            "tidegate.state.replay",
            "{bootstrap} {delivery}"
        );
    }
}

/// `job.coordination = "group"` is checked against the rest of the job: each refusal names the
/// key to change.
#[test]
fn a_group_coordinated_job_names_what_does_not_fit_it() {
    let _env = env_lock();
    let group = ["job.coordination=group", "job.member=m0", "checkpoint.store=kafka"];
    let cases: [(Vec<&str>, &str); 10] = [
        (
            vec![
                "sink.type=kafka",
                "sink.bootstrap_servers=127.0.0.1:9092",
                "sink.topic=out",
                "sink.delivery=exactly_once",
                "sink.transaction_timeout=5m",
            ],
            "sink.transaction_timeout",
        ),
        (vec!["job.coordination=gang"], "job.coordination"),
        (vec!["job.member=m0"], "job.member"),
        (
            vec!["job.coordination=group", "job.member=m 0", "checkpoint.store=kafka"],
            "job.member",
        ),
        (
            vec![
                "job.coordination=group",
                "job.instance={\"index\":0,\"count\":2}",
                "checkpoint.store=kafka",
            ],
            "job.instance",
        ),
        (vec!["job.coordination=group", "job.member=m0"], "checkpoint.store"),
        (
            vec!["source.topic_pattern=trades.*", "source.topics=null"],
            "source.topic_pattern",
        ),
        (vec!["sink.type=file", "sink.path=out.jsonl"], "sink.type"),
        (
            vec![
                "sink.type=kafka",
                "sink.bootstrap_servers=127.0.0.1:9093",
                "sink.topic=out",
                "sink.delivery=exactly_once",
            ],
            "sink.bootstrap_servers",
        ),
        (
            vec![
                "sink.type=kafka",
                "sink.bootstrap_servers=127.0.0.1:9092",
                "sink.topic=out",
                "sink.delivery=exactly_once",
                "checkpoint.bootstrap_servers=127.0.0.1:9093",
            ],
            "checkpoint.bootstrap_servers",
        ),
    ];
    for (sets, key) in cases {
        let mut all: Vec<&str> = if sets.iter().any(|s| s.starts_with("job.coordination")) || sets == ["job.member=m0"]
        {
            Vec::new()
        } else {
            group.to_vec()
        };
        all.extend(sets.iter().copied());
        let e = error_of(BASE, &all);
        assert_eq!(key_of(&e), key, "{all:?}: {e}");
    }
    // a datagen job keeps static instances
    let mut datagen = group.to_vec();
    datagen.push("checkpoint.bootstrap_servers=127.0.0.1:9092");
    let e = error_of(
        "[source]\ntype = \"datagen\"\ncount = 1\n[source.fields]\nn = { sequence = {} }\n[sink]\ntype = \"null\"\n",
        &datagen,
    );
    assert_eq!(key_of(&e), "job.coordination", "{e}");
    // and a job that fits loads, its member named
    let dir = tempfile::tempdir().unwrap();
    let sets: Vec<String> = group.iter().map(|s| s.to_string()).collect();
    let config = load(&write(&dir, BASE), &sets).expect("a group member's config");
    assert_eq!(config.job.member.as_deref(), Some("m0"));
    assert!(config.job.static_member, "a member named in the config is a static one");
    // without job.member, the host name (a pod's name on Kubernetes): a dynamic member
    let was = std::env::var("HOSTNAME").ok();
    std::env::set_var("HOSTNAME", "tidegate-events-tail-7d4b9-x2k8q");
    let sets: Vec<String> = ["job.coordination=group", "checkpoint.store=kafka"]
        .map(String::from)
        .to_vec();
    let loaded = load(&write(&dir, BASE), &sets);
    match was {
        Some(h) => std::env::set_var("HOSTNAME", h),
        None => std::env::remove_var("HOSTNAME"),
    }
    let loaded = loaded.expect("a member named by its host");
    assert_eq!(loaded.job.member.as_deref(), Some("tidegate-events-tail-7d4b9-x2k8q"));
    assert!(!loaded.job.static_member, "a member named by its host is a dynamic one");
}

/// A Kafka source without a stop says so, and how to bound it (`validate` and the start log):
/// a one-liner rewritten by hand, without its `stopping_offsets = "latest"`, never ends.
#[test]
fn an_unbounded_kafka_source_says_how_to_bound_it() {
    // other tests set TIDEGATE__ variables, which every load reads
    let _env = env_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, BASE);
    let hint = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load(&path, &sets).unwrap().source.unbounded_hint()
    };
    let unbounded = hint(&[]).expect("no stop: a hint");
    assert!(
        unbounded.contains("source.stopping_offsets = \"latest\""),
        "{unbounded}"
    );
    assert_eq!(hint(&["source.stopping_offsets=latest"]), None);
    assert_eq!(hint(&["source.eof=key == b\"CLOSE\""]), None);
}

/// A config error reads as a person would say it: the type in words, the closest key to a slip,
/// a missing section named once.
#[test]
fn config_errors_are_in_words_with_suggestions() {
    let _env = env_lock();
    let cases = [
        (
            BASE.replace("topics = ", "topcis = "),
            "source.topcis",
            "unknown key `topcis`: did you mean `topics`?",
        ),
        (
            format!("[job]\nparallelism = \"two\"\n{BASE}"),
            "job.parallelism",
            "expected a whole number, found the text \"two\"",
        ),
        (
            BASE.replace("[sink]\ntype = \"null\"\n", ""),
            "sink",
            "is missing: add a [sink] table",
        ),
    ];
    for (text, key, says) in cases {
        let e = error_of(&text, &[]);
        assert_eq!(key_of(&e), key, "{e}");
        assert!(e.to_string().ends_with(says), "{e}");
    }
}
