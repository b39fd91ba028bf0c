//! One-line jobs: `tidegate replay` and `tidegate seed` turn their flags into the config tree a
//! file would hold, render it as TOML, and run that text through the same loading and
//! validation as `tidegate run --config` (so errors name config keys and exit 2 alike);
//! `--print-config` prints the text instead, a file that runs the same job.

pub mod position;
pub mod toml_text;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::cli::{OneLinerArgs, ReplayArgs, SeedArgs};
use crate::error::{Error, Result};
use position::Bound;

/// Brokers when neither `--bootstrap-servers` nor this variable says.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";

/// The variable `--bootstrap-servers` defaults to.
pub const BOOTSTRAP_ENV: &str = "KAFKA_BOOTSTRAP_SERVERS";

/// `--bootstrap-servers`, else `$KAFKA_BOOTSTRAP_SERVERS`, else [`DEFAULT_BOOTSTRAP`].
fn bootstrap(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var(BOOTSTRAP_ENV).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_string())
}

/// `path` made absolute against the working directory, so a printed config names the same file
/// wherever it is saved.
fn absolute(path: &Path) -> Result<String> {
    let full = std::path::absolute(path).map_err(|e| Error::io(format!("resolving {}", path.display()), e))?;
    Ok(full.display().to_string())
}

/// `tidegate replay`.
pub fn replay(args: ReplayArgs) -> Result<()> {
    let (tree, notes) = replay_tree(&args, Utc::now())?;
    finish(tree, notes, &args.common, "tidegate replay")
}

/// `tidegate seed`.
pub fn seed(args: SeedArgs) -> Result<()> {
    let tree = seed_tree(&args)?;
    finish(tree, Vec::new(), &args.common, "tidegate seed")
}

/// The config tree of a replay, and the notes the printed config carries (resolved times).
pub fn replay_tree(args: &ReplayArgs, now: DateTime<Utc>) -> Result<(Value, Vec<String>)> {
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

/// `[checkpoint]`: the state file of `--state`, else none (the job keeps no state).
fn checkpoint(common: &OneLinerArgs) -> Result<Value> {
    Ok(match &common.state {
        Some(path) => json!({ "path": absolute(path)? }),
        None => json!({}),
    })
}

/// The fields of a seed without `--example`: a sequence and a UUID.
fn default_fields() -> Value {
    json!({
        "seq": { "sequence": { "start": 0 } },
        "id": { "uuid": {} },
    })
}

/// The config tree of a seed.
pub fn seed_tree(args: &SeedArgs) -> Result<Value> {
    if args.count.is_none() && args.rate.is_none() && args.example.is_none() {
        // an unbounded stream as fast as the broker takes it is never what a bare `seed t` meant
        return Err(Error::config(
            "--count",
            "give --count N, or --rate R for an endless stream at R records/s",
        ));
    }
    let servers = bootstrap(args.bootstrap_servers.as_deref());
    let mut tree = match args.example.as_deref() {
        Some(name) => example(name)?,
        None => json!({
            "job": { "name": format!("seed-{}", args.topic) },
            "source": {
                "type": "datagen",
                "format": if args.value.is_some() { "string" } else { "json" },
                "fields": default_fields(),
            },
            "sink": { "type": "kafka" },
        }),
    };
    let source = &mut tree["source"];
    if let Some(seed) = args.seed {
        source["seed"] = json!(seed);
    }
    if let Some(count) = args.count {
        source["count"] = json!(count);
    }
    if let Some(rate) = args.rate {
        source["rate"] = json!(rate);
    }
    if let Some(key) = &args.key {
        source["key"] = json!(key);
    }
    if let Some(value) = &args.value {
        source["value"] = json!(value);
    }
    if let Some(p) = args.partitions {
        source["partitions"] = json!(p);
    }
    let partitions = source["partitions"].as_u64();
    let sink = &mut tree["sink"];
    sink["bootstrap_servers"] = json!(servers);
    sink["topic"] = json!(args.topic);
    sink["create_topic"] = json!({ "partitions": partitions.unwrap_or(1) });
    if partitions.is_some() {
        // each record to the partition its generator stamped (see `source.partitions`)
        sink["preserve_partition"] = json!(true);
    }
    if args.exactly_once {
        sink["delivery"] = json!("exactly_once");
    }
    // an example's own state file would be a surprise beside the working directory: `--state`
    let mut kept = tree["checkpoint"].as_object().cloned().unwrap_or_default();
    kept.remove("path");
    if let Value::Object(state) = checkpoint(&args.common)? {
        kept.extend(state);
    }
    tree["checkpoint"] = Value::Object(kept);
    Ok(tree)
}

/// A worked example's config tree, its state file left to `--state`.
fn example(name: &str) -> Result<Value> {
    let text = match name {
        "trading-day" => include_str!("../../config/trading-day-seed.toml"),
        other => {
            return Err(Error::config(
                "--example",
                format!("no example {other:?}; one of: trading-day"),
            ))
        }
    };
    let built = ::config::Config::builder()
        .add_source(::config::File::from_str(text, ::config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<Value>())
        .map_err(|e| Error::config("--example", e.to_string()))?;
    Ok(built)
}

/// `--set` folded into the tree, then: print it (`--print-config`) or run it.
fn finish(mut tree: Value, mut notes: Vec<String>, common: &OneLinerArgs, command: &str) -> Result<()> {
    for set in &common.sets {
        crate::config::apply_set(&mut tree, set)?;
    }
    // paths given with `--set` are relative to the working directory; the printed config names
    // them absolutely, so it runs the same job from wherever it is saved
    let cwd = std::env::current_dir().map_err(|e| Error::io("reading the working directory", e))?;
    crate::config::resolve_paths(&mut tree, &cwd);
    notes.insert(
        0,
        format!("Made by `{command} … --print-config`; run it with `tidegate run --config FILE`."),
    );
    let text = toml_text::render(&tree, &notes);
    // the same loading and validation as a file; `--set` again, so it still comes after the
    // TIDEGATE__ environment as it does for `run`
    let config = crate::config::load_text(&PathBuf::from(command), &text, &common.sets)?;
    if common.print_config {
        // a closed pipe (`--print-config | head`) ends the output; it is not a failure
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
        return Ok(());
    }
    // records on the terminal are the progress: a bar on the same screen would tear their lines
    let records_on_terminal = config.sink.kind() == "stdout" && std::io::IsTerminal::is_terminal(&std::io::stdout());
    crate::daemon::run_loaded(
        config,
        None,
        common.reset_state,
        common.no_progress || records_on_terminal,
    )
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
                "sink": { "type": "kafka", "bootstrap_servers": "k:1", "topic": "t", "delivery": "exactly_once" },
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

    #[test]
    fn the_trading_day_example_keeps_its_seed_and_leaves_the_state_file_to_state() {
        let Command::Seed(args) = parse(&["seed", "day", "-b", "k:1", "--example", "trading-day", "--count", "30"])
        else {
            panic!("not a seed");
        };
        let tree = seed_tree(&args).unwrap();
        assert_eq!(tree["source"]["seed"], json!(20261127));
        assert_eq!(tree["source"]["count"], json!(30));
        assert_eq!(tree["source"]["end_marker"]["key"], json!("CLOSE"));
        assert_eq!(tree["sink"]["topic"], json!("day"));
        assert_eq!(tree["sink"]["create_topic"], json!({ "partitions": 3 }));
        assert_eq!(
            tree["checkpoint"],
            json!({ "interval": "2s" }),
            "no state file without --state"
        );
        let text = toml_text::render(&tree, &[]);
        crate::config::load_text(Path::new("seed"), &text, &[]).unwrap();
    }
}
