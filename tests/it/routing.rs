//! Routing through the Kafka sink: `sink.topic` templates (dead letters sent back to their source
//! topics, a record without a topic handled by `decode_errors`, one transaction across topics
//! through a kill -9), header rules, and a restart with changed routing refused.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{TestKafka, TestRecord};
use crate::copies::{produce_raw, read_raw, RawRecord};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

fn job(name: &str, source: &str, sink: &str) -> String {
    format!(
        "[job]\nname = \"{name}\"\nparallelism = 2\n\n{source}\n\n{sink}\n\n[checkpoint]\npath = \"{{dir}}/job.state\"\ninterval = \"500ms\"\n"
    )
}

fn values(records: &[RawRecord]) -> Vec<String> {
    let mut v: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    v.sort();
    v
}

/// Dead letters of two topics, written by `decode_errors = "dead_letter"`, replayed home with
/// `topic = "{headers.tidegate-source-topic}"`; the tidegate-* headers dropped on the way, one
/// set. A dead letter without the header then fails a replay with `decode_errors = "fail"`,
/// naming where it is, is skipped with "skip" and dead-lettered again with "dead_letter".
#[test]
fn dead_letters_go_back_to_their_source_topics() {
    let kafka = TestKafka::get();
    let a = kafka.create_topic("home-a", 2);
    let b = kafka.create_topic("home-b", 1);
    let dlt = kafka.create_topic("home-dlt", 1);
    for (topic, partitions) in [(&a, 2), (&b, 1)] {
        let records: Vec<TestRecord> = (0..20)
            .map(|i| {
                let value = if i % 5 == 0 {
                    format!("poison {topic} {i}")
                } else {
                    format!("{{\"i\":{i}}}")
                };
                TestRecord::to(i % partitions, value).header("trace", &format!("t{i}"))
            })
            .collect();
        kafka.produce(topic, &records);
    }
    let ends: BTreeMap<String, usize> = [(&a, 20usize), (&b, 20)]
        .into_iter()
        .map(|(t, n)| (t.clone(), n))
        .collect();

    let dir = JobDir::new();
    let source = format!(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{a}\", \"{b}\"]\nformat = \"json\"\nstopping_offsets = \"latest\"\ndecode_errors = \"dead_letter\"\ndead_letter_topic = \"{dlt}\"",
        kafka.bootstrap
    );
    let config = dir.config(&job(&kafka.unique_topic("dl"), &source, "[sink]\ntype = \"null\""));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_raw(&kafka, &dlt).len(), 8, "4 poison records of each topic");

    let home = JobDir::new();
    let source = format!(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{dlt}\"]\nformat = \"bytes\"\nstopping_offsets = \"latest\"",
        kafka.bootstrap
    );
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{{headers.tidegate-source-topic}}\"\ndelivery = \"exactly_once\"\n\n[sink.headers]\ndrop = [\"tidegate-*\"]\nset = {{ \"x-replayed-by\" = \"tidegate\" }}",
        kafka.bootstrap
    );
    let config = home.config(&job(&kafka.unique_topic("home"), &source, &sink));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    for (topic, end) in &ends {
        let all = read_raw(&kafka, topic);
        let back: Vec<RawRecord> = all
            .iter()
            .filter(|r| r.headers.iter().any(|(k, _)| k == "x-replayed-by"))
            .cloned()
            .collect();
        assert_eq!(all.len(), end + 4, "{topic}: its 20 records and its 4 dead letters");
        let wanted: Vec<String> = (0..20)
            .filter(|i| i % 5 == 0)
            .map(|i| format!("poison {topic} {i}"))
            .collect();
        let mut wanted = wanted;
        wanted.sort();
        assert_eq!(values(&back), wanted, "{topic}: its own dead letters came back");
        for r in &back {
            let names: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                ["trace", "x-replayed-by"],
                "{topic}: tidegate-* dropped, the rest kept, one set"
            );
        }
    }

    // a dead letter without its source topic: decode_errors = "fail" names it
    produce_raw(
        &kafka,
        &dlt,
        &[RawRecord {
            partition: 0,
            key: None,
            value: Some(b"orphan".to_vec()),
            timestamp: Some(5),
            headers: vec![],
        }],
    );
    let failing = JobDir::new();
    let source = format!("{source}\ndecode_errors = \"fail\"");
    let config = failing.config(&job(&kafka.unique_topic("orphan"), &source, &sink));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!("{dlt}:0@8")) && log.contains("no header \"tidegate-source-topic\""),
        "the error names the record and what it lacks:\n{log}"
    );

    // "skip": the job finishes, the record is logged as skipped
    let skipping = JobDir::new();
    let source_skip = source.replace("decode_errors = \"fail\"", "decode_errors = \"skip\"");
    let config = skipping.config(&job(&kafka.unique_topic("skip"), &source_skip, &sink));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("skipping a record") && log.contains("offset=8") && log.contains("no header"),
        "the skip is logged with its record:\n{log}"
    );

    // "dead_letter": it goes to the (next) dead-letter topic, with why
    let dlt2 = kafka.create_topic("home-dlt2", 1);
    let lettering = JobDir::new();
    let source_dl = source.replace(
        "decode_errors = \"fail\"",
        &format!("decode_errors = \"dead_letter\"\ndead_letter_topic = \"{dlt2}\""),
    );
    let config = lettering.config(&job(&kafka.unique_topic("dl2"), &source_dl, &sink));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let letters = read_raw(&kafka, &dlt2);
    assert_eq!(values(&letters), ["orphan"], "only the record without a topic");
    let error = letters[0]
        .headers
        .iter()
        .find(|(k, _)| k == "tidegate-error")
        .and_then(|(_, v)| v.clone())
        .expect("a tidegate-error header");
    assert!(String::from_utf8_lossy(&error).contains("sink.topic"), "{error:?}");
}

/// A replay routing two topics to two others (`{topic}-out`), exactly once, killed with kill -9
/// once output is committed and restarted: each target holds each record once (read_committed).
#[test]
fn exactly_once_spans_the_topics_a_template_routes_to() {
    let kafka = TestKafka::get();
    let prefix = kafka.unique_topic("eo-route");
    let sources = [format!("{prefix}-x"), format!("{prefix}-y")];
    let count = 600;
    for s in &sources {
        kafka.create_named_topic(s, 2);
        kafka.create_named_topic(&format!("{s}-out"), 2);
        // 10 ms of event time apart: paced at replay_speed 1, the run lasts about 6 s
        let records: Vec<TestRecord> = (0..count)
            .map(|i| TestRecord::to(i % 2, format!("{s}/{i}")).at(1_700_000_000_000 + i as i64 * 10))
            .collect();
        kafka.produce(s, &records);
    }
    let dir = JobDir::new();
    let source = format!(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{}\", \"{}\"]\nformat = \"bytes\"\nstopping_offsets = \"latest\"\nreplay_speed = 1.0",
        kafka.bootstrap, sources[0], sources[1]
    );
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{{topic}}-out\"\ndelivery = \"exactly_once\"\npreserve_partition = true",
        kafka.bootstrap
    );
    let config = dir.config(&job(&prefix, &source, &sink));
    let daemon = Daemon::start(&config, &[]);
    let committed = |t: &str| read_raw(&kafka, &format!("{t}-out")).len();
    daemon.wait_until("output committed in both targets", MINUTE, || {
        sources.iter().all(|s| committed(s) >= 50)
    });
    let before: Vec<usize> = sources.iter().map(|s| committed(s)).collect();
    let log = daemon.kill9();
    assert!(
        before.iter().all(|n| *n < count as usize),
        "killed before the end ({before:?}), or the kill tests nothing:\n{log}"
    );
    let (code, log) = run(&config, &[], MINUTE * 2);
    assert_eq!(code, 0, "{log}");
    for s in &sources {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for v in values(&read_raw(&kafka, &format!("{s}-out"))) {
            *seen.entry(v).or_default() += 1;
        }
        let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        assert!(repeated.is_empty(), "{s}-out: repeated {repeated:?}");
        let missing: Vec<i32> = (0..count)
            .filter(|i| !seen.contains_key(&format!("{s}/{i}")))
            .take(5)
            .collect();
        assert!(missing.is_empty(), "{s}-out: missing {missing:?}");
        assert_eq!(seen.len(), count as usize, "{s}-out: only its own records");
    }
}

/// A restart whose header rules differ from the state file's is refused (exit 2, naming
/// `sink.headers`), as a changed topic is.
#[test]
fn a_restart_with_changed_routing_is_refused() {
    let kafka = TestKafka::get();
    let source_topic = kafka.create_topic("reroute", 1);
    let target = kafka.create_topic("reroute-out", 1);
    kafka.produce(&source_topic, &[TestRecord::to(0, "a"), TestRecord::to(0, "b")]);
    let dir = JobDir::new();
    let name = kafka.unique_topic("reroute");
    let source = format!(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{source_topic}\"]\nformat = \"bytes\"",
        kafka.bootstrap
    );
    let sink = |rules: &str| {
        format!(
            "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{target}\"\n\n[sink.headers]\n{rules}",
            kafka.bootstrap
        )
    };
    let config = dir.config(&job(&name, &source, &sink("set = { \"by\" = \"one\" }")));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("the first checkpoint", MINUTE, || dir.path("job.state").exists());
    daemon.wait_until("the records copied", MINUTE, || read_raw(&kafka, &target).len() == 2);
    daemon.signal(libc::SIGTERM);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(0), "{log}");
    let config = dir.config(&job(&name, &source, &sink("set = { \"by\" = \"two\" }")));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 2, "{log}");
    assert!(
        log.contains("sink.headers: changed") && log.contains("\"two\""),
        "the refusal names the key and shows what changed:\n{log}"
    );
}
