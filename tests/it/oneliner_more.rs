//! `tidegate replay` to a topic, `tidegate seed`, and bad flags, against the real broker (the
//! helpers are in `oneliner`).

use crate::common::{now_millis, TestKafka};
use crate::daemon_util::JobDir;
use crate::oneliner::{ok, tidegate, trading_topic};

#[test]
fn replay_to_a_topic_copies_records_to_their_partitions() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let start = now_millis() - 600_000;
    let topic = trading_topic(&kafka, 20, start);
    let target = kafka.create_topic("oneliner-copy", 2);
    let args = [
        "replay",
        topic.as_str(),
        "-b",
        kafka.bootstrap.as_str(),
        "--until",
        r#"value.type == "CLOSE""#,
        "--format",
        "json",
        "--to-topic",
        target.as_str(),
        "--preserve-partition",
        "--exactly-once",
        "--no-progress",
    ];
    let printed = ok(dir.dir.path(), &[&args[..], &["--print-config"]].concat(), &[]).stdout;
    // the target's brokers default to the source's
    assert!(
        printed.contains(&format!(
            "[sink]\ntype = 'kafka'\nbootstrap_servers = '{}'",
            kafka.bootstrap
        )),
        "{printed}"
    );
    ok(dir.dir.path(), &args, &[]);
    let content = |t: &str| -> Vec<_> {
        kafka
            .read_all(t)
            .into_iter()
            .filter(|r| {
                !r.value
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with(br#"{"type":"CLOSE""#)
            })
            .map(|r| (r.partition, r.key, r.value, r.timestamp))
            .collect()
    };
    let expected: Vec<_> = content(&topic)
        .into_iter()
        .filter(|(_, _, v, _)| !v.as_deref().unwrap_or_default().ends_with(br#""n":-1}"#))
        .collect();
    let mut copied = content(&target);
    copied.sort_by_key(|(p, _, _, ts)| (*p, *ts));
    let mut expected_sorted = expected.clone();
    expected_sorted.sort_by_key(|(p, _, _, ts)| (*p, *ts));
    assert_eq!(expected_sorted.len(), 20);
    assert_eq!(
        copied, expected_sorted,
        "every record up to the markers, in its own partition"
    );
}

#[test]
fn bad_flags_exit_2_as_bad_config_does() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let topic = kafka.create_topic("oneliner-bad", 1);
    // clap's own message for a flag it does not know, a missing topic, a bad number
    for (args, says) in [
        (vec!["replay", "t", "--frm", "earliest"], "unexpected argument '--frm'"),
        (vec!["replay"], "required arguments were not provided"),
        (
            vec!["replay", "t", "--speed", "fast"],
            "invalid value 'fast' for '--speed <X>'",
        ),
        (
            vec!["replay", "t", "--out", "x", "--to-topic", "y"],
            "cannot be used with",
        ),
        (vec!["seed", "t", "--count", "-5"], "unexpected argument '-5'"),
        (
            vec!["replay", "t", "--exactly-once"],
            "required arguments were not provided",
        ),
    ] {
        let ran = tidegate(dir.dir.path(), &args, &[]);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("For more information, try '--help'."),
            "{args:?}: {}",
            ran.stderr
        );
    }
    let ran = tidegate(dir.dir.path(), &["seed", "t"], &[]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("--count: give --count N, or --rate R"),
        "{}",
        ran.stderr
    );
    let ran = tidegate(dir.dir.path(), &["replay", "t", "--from", "yesterday"], &[]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("--from: \"yesterday\": not a time"),
        "{}",
        ran.stderr
    );
    // a mistake a config file could make is reported as the config file's is, by its key
    let bad_where = "value.n >";
    let one_liner = tidegate(
        dir.dir.path(),
        &["replay", &topic, "-b", &kafka.bootstrap, "--where", bad_where],
        &[],
    );
    let config = dir.config(&format!(
        "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{topic}\"]\nwhere = '{bad_where}'\n\n[sink]\ntype = \"stdout\"\n",
        kafka.bootstrap
    ));
    let by_hand = tidegate(dir.dir.path(), &["run", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(
        (one_liner.code, by_hand.code),
        (2, 2),
        "{}\n{}",
        one_liner.stderr,
        by_hand.stderr
    );
    let error = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("tidegate: error"))
            .map(str::to_string)
    };
    assert!(
        error(&one_liner.stderr).is_some_and(|e| e.contains("source.where")),
        "{}",
        one_liner.stderr
    );
    assert_eq!(error(&one_liner.stderr), error(&by_hand.stderr));
}

#[test]
fn seed_one_liner_writes_what_its_printed_config_writes() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let first = kafka.unique_topic("oneliner-seed");
    let second = kafka.unique_topic("oneliner-seed");
    let args = [
        "seed",
        first.as_str(),
        "-b",
        kafka.bootstrap.as_str(),
        "--count",
        "50",
        "--partitions",
        "2",
        "--key",
        "{seq}",
        "--seed",
        "7",
        "--no-progress",
    ];
    ok(dir.dir.path(), &args, &[]);
    let printed = ok(dir.dir.path(), &[&args[..], &["--print-config"]].concat(), &[]).stdout;
    let config = dir.config(&printed);
    ok(
        dir.dir.path(),
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--set",
            &format!("sink.topic={second}"),
            "--no-progress",
        ],
        &[],
    );
    let content = |topic: &str| {
        let mut records: Vec<_> = kafka
            .read_all(topic)
            .into_iter()
            .map(|r| (r.partition, r.offset, r.key, r.value))
            .collect();
        records.sort();
        records
    };
    let (a, b) = (content(&first), content(&second));
    assert_eq!(a.len(), 50);
    assert_eq!(a, b, "the one-liner and its printed config seeded different records");
    let seqs: std::collections::BTreeSet<i64> = a
        .iter()
        .map(|(_, _, _, v)| {
            serde_json::from_slice::<serde_json::Value>(v.as_deref().unwrap()).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (0..50).collect());
    assert_eq!(
        kafka.end_offsets(&first).len(),
        2,
        "the topic was created with --partitions 2"
    );
}
