//! `tidegate state show`: a job's state, from its state file or its Kafka store, read without
//! disturbing a running job; `tidegate state set`: one partition's position in a stopped job's
//! state moved by hand (Kafka Connect's offsets API, KIP-875).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::checkpoint_store::{kafka, StoreConfig};
use crate::connector::registry::SourceConfig;
use crate::connector::SourceConnector;
use crate::error::{Error, Result};

#[derive(Debug, Subcommand)]
pub(crate) enum StateCommand {
    /// Check a job's state and print it, as a table of its splits (or as stored, `--json`): a
    /// state file, or the job's store (`--config`: its state file, or its records in the Kafka
    /// checkpoint topic, read without disturbing a running job).
    Show {
        /// The state file.
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The job's TOML config: show the state of the store it configures.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override a config key (repeatable), with --config.
        #[arg(long = "set", value_name = "KEY.PATH=VALUE", requires = "config")]
        sets: Vec<String>,
        /// Print the state as stored (JSON) instead of a table of its splits.
        #[arg(long)]
        json: bool,
    },
    /// Move one partition's position in a stopped job's last checkpoint (its state file, or its
    /// records in the Kafka checkpoint topic), or mark it finished or unfinished: the next run
    /// reads that partition from there. Refused while the job runs (the state file's lock; a
    /// group's job while its consumer group has members; a static job's Kafka store has its
    /// transactional ids taken over, which fences a running process).
    /// The change is kept in the state's history (`tidegate state show`).
    Set(SetArgs),
}

/// `tidegate state set`'s arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("position").args(["offset", "timestamp", "earliest", "latest"])))]
#[command(group(clap::ArgGroup::new("what").args(["offset", "timestamp", "earliest", "latest", "finished", "unfinished"]).required(true).multiple(true)))]
pub(crate) struct SetArgs {
    /// The job's TOML config.
    #[arg(long)]
    config: PathBuf,
    /// The state file (overrides `checkpoint.path`).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Override a config key (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    sets: Vec<String>,
    /// The partition to move, `topic:partition`.
    #[arg(long, value_name = "TOPIC:PARTITION")]
    partition: String,
    /// The next offset to read.
    #[arg(long)]
    offset: Option<i64>,
    /// The first record at or after this time (RFC 3339 or epoch milliseconds); the partition's
    /// end when none is that late.
    #[arg(long, value_name = "TIME")]
    timestamp: Option<String>,
    /// The partition's first offset.
    #[arg(long)]
    earliest: bool,
    /// The partition's end: nothing of it is read until more is produced.
    #[arg(long)]
    latest: bool,
    /// Mark the partition finished: the next run does not read it (a new position alone makes
    /// it unfinished).
    #[arg(long, conflicts_with = "unfinished")]
    finished: bool,
    /// Mark the partition unfinished: the next run reads it from its position.
    #[arg(long)]
    unfinished: bool,
    /// Print the change without writing it.
    #[arg(long)]
    dry_run: bool,
}

/// `tidegate state …`.
pub(crate) fn state(command: StateCommand) -> Result<()> {
    match command {
        StateCommand::Show {
            file,
            config,
            sets,
            json,
        } => show(file.as_deref(), config.as_deref(), &sets, json),
        StateCommand::Set(args) => set(args),
    }
}

/// `tidegate state show FILE`, or `tidegate state show --config JOB` (the configured store): for
/// people, or as stored with `json`.
pub fn show(file: Option<&Path>, config: Option<&Path>, sets: &[String], json: bool) -> Result<()> {
    let config = match (file, config) {
        (Some(file), _) => return show_state(file, json),
        (None, Some(config)) => crate::config::load(config, sets)?,
        (None, None) => return Err(Error::config("state show", "give a state file or --config")),
    };
    let text = match &config.checkpoint.store {
        StoreConfig::File => match &config.checkpoint.path {
            Some(path) => return show_state(path, json),
            None => {
                return Err(Error::config(
                    "checkpoint.path",
                    "the job keeps no state (no checkpoint.path, checkpoint.store = \"file\")",
                ))
            }
        },
        StoreConfig::Kafka(k) if k.member.is_some() => {
            // a group's job: every member run's last checkpoint, and what a restore makes of them
            let location = format!("kafka topic {} at {}", k.topic, k.bootstrap_servers);
            let group = crate::coordination::group_id(&k.job);
            let runs = kafka::read_runs(k)?;
            let merged = kafka::members::merged(&runs.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>())
                .ok_or_else(|| no_state(&format!("{location}, job {}'s members", k.job)))?;
            if json {
                pretty(&serde_json::json!({
                    "group": group,
                    "runs": runs
                        .into_iter()
                        .map(|(owner, checkpoint)| serde_json::json!({"run": owner, "checkpoint": checkpoint}))
                        .collect::<Vec<_>>(),
                    "merged": merged,
                }))
            } else {
                super::state_view::group(&group, &location, &runs, &merged)
            }
        }
        StoreConfig::Kafka(k) => {
            let location = format!("kafka topic {} at {}, job {}", k.topic, k.bootstrap_servers, k.owner);
            let state = kafka::read_only(k)?.ok_or_else(|| no_state(&location))?;
            if json {
                pretty(&state)
            } else {
                super::state_view::checkpoint(&state, &location)
            }
        }
    };
    print(&text);
    Ok(())
}

/// `tidegate state show FILE`.
fn show_state(path: &Path, json: bool) -> Result<()> {
    let state: serde_json::Value = crate::core::state::read_state(path)?.ok_or_else(|| Error::State {
        path: path.to_path_buf(),
        source: crate::error::StateError::Unreadable(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")),
    })?;
    print(&if json {
        pretty(&state)
    } else {
        super::state_view::checkpoint(&state, &path.display().to_string())
    });
    Ok(())
}

fn pretty(state: &serde_json::Value) -> String {
    format!("{}\n", serde_json::to_string_pretty(state).unwrap_or_default())
}

/// To stdout; a closed pipe (`state show | head`) ends the output, and is not a failure.
fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `tidegate state set`: the change resolved against the source's cluster, applied to the last
/// checkpoint (and the one kept before it), printed, and written back unless `--dry-run`.
fn set(args: SetArgs) -> Result<()> {
    use crate::kafka::alter::{alter, resolve, Alteration, Position};
    let config = crate::config::load(&args.config, &args.sets)?;
    crate::assembly::logging::init(config.log.format);
    let SourceConfig::Kafka(kafka_source) = &config.source else {
        return Err(Error::config(
            "source.type",
            format!(
                "`state set` moves a Kafka source's positions; a {} source has none to move",
                config.source.kind()
            ),
        ));
    };
    let (topic, partition) = args
        .partition
        .rsplit_once(':')
        .and_then(|(t, p)| Some((t.to_string(), p.parse::<i32>().ok().filter(|p| *p >= 0)?)))
        .filter(|(t, _)| !t.is_empty())
        .ok_or_else(|| {
            Error::config(
                "--partition",
                format!("{:?} is not topic:partition (like trades:0)", args.partition),
            )
        })?;
    let position = match (&args.offset, &args.timestamp, args.earliest, args.latest) {
        (Some(n), ..) => Some(Position::Offset(*n)),
        (_, Some(t), ..) => Some(Position::Timestamp(
            crate::connector::values::parse_time(t).map_err(|m| Error::config("--timestamp", m))?,
        )),
        (_, _, true, _) => Some(Position::Earliest),
        (_, _, _, true) => Some(Position::Latest),
        _ => None,
    };
    let offset = match position {
        Some(position) => {
            let source = kafka_source.build(&crate::assembly::source_context(&config))?;
            Some((resolve(&source, &topic, partition, &position)?, position))
        }
        None => None,
    };
    let change = Alteration {
        topic,
        partition,
        offset,
        finished: (args.finished || args.unfinished).then_some(args.finished),
    };
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (location, mut state, write): (String, serde_json::Value, WriteBack) = match &config.checkpoint.store {
        StoreConfig::File => {
            let path = args
                .state
                .clone()
                .or_else(|| config.checkpoint.path.clone())
                .ok_or_else(|| {
                    Error::config(
                        "checkpoint.path",
                        "the job keeps no state (no checkpoint.path, checkpoint.store = \"file\"): nothing to set",
                    )
                })?;
            let location = path.display().to_string();
            if args.dry_run {
                let state = crate::core::state::read_state(&path)?.ok_or_else(|| no_state(&location))?;
                (location, state, Box::new(|_| Ok(())))
            } else {
                // the lock a running job holds: refused while it runs
                let store = crate::core::StateStore::open(&path)?;
                let state = store.load()?.ok_or_else(|| no_state(&location))?;
                (location, state, Box::new(move |state| store.write(&state)))
            }
        }
        StoreConfig::Kafka(k) if k.member.is_some() => {
            let group = crate::coordination::group_id(&k.job);
            let location = format!(
                "kafka topic {} at {}, job {}'s group members",
                k.topic, k.bootstrap_servers, k.job
            );
            let members = crate::coordination::twins::running_members(kafka_source, &group)?;
            if !members.is_empty() && !args.dry_run {
                return Err(Error::State {
                    path: location.into(),
                    source: crate::error::StateError::Locked(PathBuf::from(format!(
                        "consumer group {group}, whose members run: {} (a static member, one whose job.member is \
                         set, stays in the group for the broker's session timeout after it stops: try again \
                         once that has passed)",
                        members.join(", ")
                    ))),
                });
            }
            let runs: Vec<serde_json::Value> = kafka::read_runs(k)?.into_iter().map(|(_, v)| v).collect();
            let state = kafka::members::merged(&runs).ok_or_else(|| no_state(&location))?;
            let (k, tp) = ((**k).clone(), (change.topic.clone(), change.partition));
            let write: WriteBack = if args.dry_run {
                Box::new(|_| Ok(()))
            } else {
                Box::new(move |state| {
                    let owner = kafka::members::write_run(&k, run_of(state, &tp.0, tp.1))?;
                    tracing::info!(run = %owner, "the change written as a run of the group's job of its own");
                    Ok(())
                })
            };
            (location, state, write)
        }
        StoreConfig::Kafka(k) => {
            let location = format!("kafka topic {} at {}, job {}", k.topic, k.bootstrap_servers, k.owner);
            if args.dry_run {
                let state = kafka::read_only(k)?.ok_or_else(|| no_state(&location))?;
                (location, state, Box::new(|_| Ok(())))
            } else {
                // the job's transactional ids taken over: a process of the job still running is
                // fenced (its next checkpoint fails), and a transaction it left open aborted
                let store = kafka::KafkaCheckpointStore::open((**k).clone())?;
                let state = crate::core::CheckpointStore::load(&store)?.ok_or_else(|| no_state(&location))?;
                (location, state, Box::new(move |state| store.replace(state)))
            }
        }
    };
    if state["source"] != "kafka" {
        return Err(Error::config(
            "--config",
            format!(
                "the state at {location} is a {} source's, not a Kafka source's",
                state["source"]
            ),
        ));
    }
    let altered = alter(&mut state, &change, &at).map_err(|m| Error::config("--partition", m))?;
    let line = format!(
        "{}:{}: {} -> {}{}\n",
        change.topic,
        change.partition,
        altered.before,
        altered.after,
        if args.dry_run {
            " (dry run: nothing written)".to_string()
        } else {
            format!(" (written to {location}; kept in its history)")
        }
    );
    if !args.dry_run {
        write(state)?;
        tracing::info!(partition = %args.partition, before = %altered.before, after = %altered.after, state = %location, "state set by hand");
    }
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
    Ok(())
}

/// A group's job: the run `state set` writes, holding only the changed partition (its reader's
/// snapshot and its enumerator's entry), with the newest run's other fields: a restore takes that
/// partition from it, every other from the runs before.
fn run_of(mut state: serde_json::Value, topic: &str, partition: i32) -> serde_json::Value {
    let is = |s: &serde_json::Value| s["split"]["topic"] == topic && s["split"]["partition"] == partition;
    for list in ["/splits", "/enumerator/splits"] {
        if let Some(splits) = state.pointer_mut(list).and_then(|l| l.as_array_mut()) {
            splits.retain(is);
        }
    }
    if let Some(fields) = state.as_object_mut() {
        fields.remove("previous");
    }
    state
}

/// How `state set` writes the changed state back (nothing, for a dry run).
type WriteBack = Box<dyn FnOnce(serde_json::Value) -> Result<()>>;

fn no_state(location: &str) -> Error {
    Error::State {
        path: location.into(),
        source: crate::error::StateError::Unreadable(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no checkpoint of this job: it never ran, or its state was reset",
        )),
    }
}
