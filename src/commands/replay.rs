//! `tidegate replay`: Kafka topics replayed in one line, kcat-style; its flags make the config
//! `tidegate run` would run.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use super::oneliner::position::{self, Bound};
use super::oneliner::{absolute, bootstrap, checkpoint, finish, positive_number, OneLinerArgs};
use crate::error::{Error, Result};

pub(crate) const REPLAY_EXAMPLES: &str = "\
Each flag sets a config key; `--print-config` prints the TOML (relative times resolved, paths made
absolute) that `tidegate run --config FILE` runs the same way. Times without a zone are UTC.

Examples:
  tidegate replay trades --format json                       # whole topic as it stands, JSON lines on stdout
  tidegate replay trades --from -1h --to none                # the last hour, then follow
  tidegate replay trades --from 2026-11-27T09:30-05:00 --until 'value.type == \"MARKET_CLOSE\"' --out day.jsonl
  tidegate replay trades,quotes --where 'headers.region == \"eu\"' --to-topic eu-replay
  tidegate replay trades --from 100 --to 2026-11-27T16:00 --speed 60   # offset 100 in every partition
  tidegate replay trades --from trades:0=100,trades:1=250 --to -5m
  tidegate replay trades --format json --print-config > replay.toml   # graduate to a file";

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// Topics to read, comma-separated.
    #[arg(value_name = "TOPIC[,TOPIC…]")]
    pub(crate) topics: String,
    /// Brokers [default: $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092].
    #[arg(short = 'b', long, value_name = "HOST:PORT[,…]")]
    pub(crate) bootstrap_servers: Option<String>,
    /// Start: earliest, latest, a TIME (see --to), an OFFSET in every partition, or
    /// TOPIC:PARTITION=OFFSET[,…] (others at earliest).
    #[arg(long, value_name = "WHERE", default_value = "earliest", allow_hyphen_values = true)]
    pub(crate) from: String,
    /// Stop (exclusive): latest (the ends at start, then exit), none (follow), TIME, OFFSET (or
    /// the end at start) or TOPIC:PARTITION=OFFSET[,…]. TIME: RFC 3339, 2026-11-27T16:00 (UTC),
    /// 2026-11-27, -1h/-30m/-2d (before now), now, @EPOCH_MS.
    #[arg(long, value_name = "WHERE", default_value = "latest", allow_hyphen_values = true)]
    pub(crate) to: String,
    /// End each partition at the first record matching this CEL expression (not written).
    #[arg(long, value_name = "CEL")]
    pub(crate) until: Option<String>,
    /// Write only records matching this CEL expression, e.g. 'value.type == "TRADE"'.
    #[arg(long = "where", value_name = "CEL")]
    pub(crate) filter: Option<String>,
    /// Value format: bytes (base64 in the output), string, json or avro (with --set source.avro…).
    #[arg(long, value_name = "FORMAT", default_value = "bytes")]
    pub(crate) format: String,
    /// Replay at event time: 1 is real time, 60 plays an hour in a minute [default: as fast as possible].
    #[arg(long, value_name = "X", value_parser = positive_number)]
    pub(crate) speed: Option<f64>,
    /// JSON lines to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE|-", default_value = "-", conflicts_with = "to_topic")]
    pub(crate) out: String,
    /// Write to this Kafka topic instead of --out (it must exist, or add --create-topic).
    #[arg(long, value_name = "TOPIC")]
    pub(crate) to_topic: Option<String>,
    /// With --to-topic: create the topic if it does not exist, with the source's partition count
    /// and its cleanup, retention and message-size configs (replication factor 1 unless
    /// --set sink.create_topic.replication_factor=N).
    #[arg(long, requires = "to_topic")]
    pub(crate) create_topic: bool,
    /// The brokers of --to-topic [default: --bootstrap-servers].
    #[arg(long, value_name = "HOST:PORT[,…]", requires = "to_topic")]
    pub(crate) to_bootstrap_servers: Option<String>,
    /// With --to-topic: each record to the partition number it was read from.
    #[arg(long, requires = "to_topic")]
    pub(crate) preserve_partition: bool,
    /// With --to-topic: write through Kafka transactions, each record once (needs --state to resume).
    #[arg(long, requires = "to_topic")]
    pub(crate) exactly_once: bool,
    #[command(flatten)]
    pub(crate) common: OneLinerArgs,
}

/// `tidegate replay`.
pub(crate) fn replay(args: ReplayArgs) -> Result<()> {
    let (tree, notes) = replay_tree(&args, Utc::now())?;
    finish(tree, notes, &args.common, "tidegate replay")
}

/// The config tree of a replay, and the notes the printed config carries (resolved times).
pub(crate) fn replay_tree(args: &ReplayArgs, now: DateTime<Utc>) -> Result<(Value, Vec<String>)> {
    let topics: Vec<String> = args
        .topics
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if topics.is_empty() {
        return Err(Error::config(
            "TOPIC",
            "give at least one topic, e.g. `tidegate replay trades`",
        ));
    }
    let servers = bootstrap(args.bootstrap_servers.as_deref());
    let from = position::parse(Bound::From, &args.from, now)?;
    let to = position::parse(Bound::To, &args.to, now)?;
    // a relative time resolves anew on every run: a second run could not resume the first's state
    if let Some(state) = args
        .common
        .state
        .as_ref()
        .filter(|s| s.exists() && !args.common.reset_state)
    {
        for (flag, text, note) in [("--from", &args.from, &from.note), ("--to", &args.to, &to.note)] {
            if note.is_some() {
                return Err(Error::config(
                    flag,
                    format!(
                        "{text} is relative, and {} holds an earlier run's replay: give the time that run resolved (its `--print-config`, or `tidegate state show`), or --reset-state to start again",
                        state.display()
                    ),
                ));
            }
        }
    }
    let notes: Vec<String> = [from.note, to.note].into_iter().flatten().collect();

    let mut source = Map::new();
    source.insert("type".into(), json!("kafka"));
    source.insert("bootstrap_servers".into(), json!(servers));
    source.insert("topics".into(), json!(topics));
    source.insert("format".into(), json!(args.format));
    source.insert("starting_offsets".into(), from.value);
    source.insert("stopping_offsets".into(), to.value);
    if let Some(until) = &args.until {
        source.insert("eof".into(), json!(until));
    }
    if let Some(filter) = &args.filter {
        source.insert("where".into(), json!(filter));
    }
    if let Some(speed) = args.speed {
        source.insert("replay_speed".into(), json!(speed));
    }
    let sink = match &args.to_topic {
        Some(topic) => {
            let mut sink = json!({
                "type": "kafka",
                "bootstrap_servers": args.to_bootstrap_servers.clone().unwrap_or_else(|| servers.clone()),
                "topic": topic,
            });
            if args.preserve_partition {
                sink["preserve_partition"] = json!(true);
            }
            if args.exactly_once {
                sink["delivery"] = json!("exactly_once");
            }
            if args.create_topic {
                sink["create_topic"] = json!({ "like_source": true });
            }
            sink
        }
        None if args.out == "-" => json!({ "type": "stdout" }),
        None => json!({ "type": "file", "path": absolute(Path::new(&args.out))? }),
    };
    let name = format!("replay-{}", topics.join("+"));
    let tree = json!({
        "job": { "name": name },
        "source": source,
        "sink": sink,
        "checkpoint": checkpoint(&args.common)?,
    });
    Ok((tree, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from([&["tidegate"], args].concat()).unwrap().command
    }

    #[test]
    fn replay_flags_map_onto_config_keys() {
        let Command::Replay(args) = parse(&[
            "replay",
            "a, b",
            "-b",
            "k:1",
            "--from",
            "-1h",
            "--to",
            "9",
            "--until",
            "x",
            "--where",
            "y",
            "--speed",
            "60",
            "--to-topic",
            "t",
            "--exactly-once",
            "--create-topic",
            "--state",
            "/s/state",
        ]) else {
            panic!("not a replay");
        };
        let now = DateTime::parse_from_rfc3339("2026-11-27T16:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let (tree, notes) = replay_tree(&args, now).unwrap();
        assert_eq!(
            tree,
            json!({
                "job": { "name": "replay-a+b" },
                "source": {
                    "type": "kafka", "bootstrap_servers": "k:1", "topics": ["a", "b"], "format": "bytes",
                    "starting_offsets": { "timestamp": "2026-11-27T15:30:00.000Z" },
                    "stopping_offsets": { "offset": 9 },
                    "eof": "x", "where": "y", "replay_speed": 60.0,
                },
                "sink": {
                    "type": "kafka", "bootstrap_servers": "k:1", "topic": "t", "delivery": "exactly_once",
                    "create_topic": { "like_source": true },
                },
                "checkpoint": { "path": "/s/state" },
            })
        );
        assert_eq!(notes, ["--from -1h resolved to 2026-11-27T15:30:00.000Z at start"]);
    }

    #[test]
    fn a_relative_time_cannot_resume_a_state_and_numbers_are_finite() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let state_arg = state.to_str().unwrap();
        let now = Utc::now();
        let replay =
            |extra: &[&str]| match parse(&[&["replay", "t", "--from", "-1h", "--state", state_arg], extra].concat()) {
                Command::Replay(args) => replay_tree(&args, now),
                other => panic!("{other:?}"),
            };
        assert!(replay(&[]).is_ok(), "a first run");
        std::fs::write(&state, "an earlier run's").unwrap();
        let e = replay(&[]).expect_err("a resume with a relative --from");
        assert!(
            e.to_string().contains("--from") && e.to_string().contains("relative"),
            "{e}"
        );
        assert!(replay(&["--reset-state"]).is_ok(), "starting again");
        for bad in [
            ["replay", "t", "--speed", "nan"],
            ["replay", "t", "--speed", "inf"],
            ["seed", "t", "--rate", "NaN"],
        ] {
            assert!(
                Cli::try_parse_from([&["tidegate"][..], &bad[..]].concat()).is_err(),
                "{bad:?}"
            );
        }
    }
}
