//! The command line (clap): `run`, `replay`, `seed`, `validate`, `plan`, `state show`,
//! `config-reference`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Runs the `tidegate` command line: parses the arguments, runs the command, and exits with the
/// documented code (0 done, 1 runtime failure, 2 invalid config or usage, 3 unusable state file).
pub fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => crate::daemon::run(args),
        Command::Replay(args) => crate::oneliner::replay(args),
        Command::Seed(args) => crate::oneliner::seed(args),
        Command::Validate { config, sets, connect } => crate::daemon::validate(&config, &sets, connect),
        Command::Plan(args) => crate::daemon::plan(args),
        Command::State {
            command: StateCommand::Show { file, config, sets },
        } => crate::checkpoint_store::show(file.as_deref(), config.as_deref(), &sets),
        Command::ConfigReference => {
            let mut out = std::io::stdout().lock();
            // a closed pipe (`| head`) ends the output; it is not a failure
            let _ = std::io::Write::write_all(&mut out, crate::config::reference::markdown().as_bytes());
            Ok(())
        }
    };
    if let Err(e) = result {
        // the reader of our output went away (`tidegate run … | head`): a normal end, as for
        // any Unix tool, not a failure to report
        if e.is_broken_pipe() {
            std::process::exit(0);
        }
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !message.contains(&text) {
                message.push_str(&format!(": {text}"));
            }
            source = s.source();
        }
        // (not `eprintln!`: it panics when nobody reads stderr any more, and the exit code is
        // what is left to tell)
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("tidegate: error: {message}\n").as_bytes(),
        );
        std::process::exit(e.exit_code());
    }
}

/// tidegate: Kafka sources with Flink's FLIP-27 semantics, in one binary.
#[derive(Debug, Parser)]
#[command(name = "tidegate", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a job until its input ends, or until SIGTERM/SIGINT (then a final checkpoint).
    Run(RunArgs),
    /// Replay Kafka topics in one line, kcat-style: the flags make the config `run` would run.
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(ReplayArgs),
    /// Seed a Kafka topic with generated records in one line (the datagen source).
    #[command(after_help = SEED_EXAMPLES)]
    Seed(SeedArgs),
    /// Check a config file and print what it would run.
    Validate {
        /// The job's TOML config.
        #[arg(long)]
        config: PathBuf,
        /// Override a config key, e.g. `--set job.parallelism=4` (repeatable).
        #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
        sets: Vec<String>,
        /// Also connect to the Kafka clusters the job reads and writes, as the job would (TLS,
        /// SASL), and the schema registries it uses: a refusal or an unreachable service exits 1.
        #[arg(long)]
        connect: bool,
    },
    /// Show what a Kafka replay will read, without reading it: each partition's resolved start
    /// and stop, the offsets in between, the first and last timestamps, and a total.
    Plan(PlanArgs),
    /// Inspect state files.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Print the configuration reference: every key, its type, default and meaning (docs/config.md).
    ConfigReference,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// The state file (overrides `checkpoint.path`).
    #[arg(long)]
    pub(crate) state: Option<PathBuf>,
    /// Override a config key, e.g. `--set job.parallelism=4` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Start from scratch: the existing state file is moved aside (never deleted).
    #[arg(long)]
    pub(crate) reset_state: bool,
    /// No progress bar or progress log lines.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// The state file to resume from (overrides `checkpoint.path`); it is only read.
    #[arg(long)]
    pub(crate) state: Option<PathBuf>,
    /// Override a config key, e.g. `--set source.stopping_offsets=latest` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Print the plan as one JSON document.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also count the records exactly, by reading the ranges as a run would (read_committed),
    /// without the sink; the default shows only offsets, an upper bound.
    #[arg(long)]
    pub(crate) exact: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StateCommand {
    /// Check a job's state and print it: a state file, or the job's store (`--config`: its
    /// state file, or its records in the Kafka checkpoint topic, read without disturbing a
    /// running job).
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
    },
}

const REPLAY_EXAMPLES: &str = "\
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

const SEED_EXAMPLES: &str = "\
Examples:
  tidegate seed people --count 1000 --rate 100               # {\"seq\":0,\"id\":\"…\"}, … at 100/s
  tidegate seed orders --count 10 --key '{seq}' --value 'order {seq}'
  tidegate seed orders --count 10 --set 'source.fields.price={\"uniform\":{\"min\":1,\"max\":99}}'
  tidegate seed trades-2026-11-27 --example trading-day      # config/trading-day-seed.toml
  tidegate seed people --count 1000 --print-config > seed.toml";

/// What every one-liner takes besides its own flags.
#[derive(Debug, clap::Args)]
pub(crate) struct OneLinerArgs {
    /// Keep a state file: a second run with the same FILE resumes (default: no state, each run
    /// starts from scratch and leaves no file behind).
    #[arg(long, value_name = "FILE")]
    pub(crate) state: Option<PathBuf>,
    /// Override any config key that has no flag, e.g. `--set job.parallelism=4` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Print the config these flags make (TOML) and exit, without connecting.
    #[arg(long)]
    pub(crate) print_config: bool,
    /// With --state: start from scratch, the state file moved aside (never deleted).
    #[arg(long, requires = "state")]
    pub(crate) reset_state: bool,
    /// No progress bar or progress log lines.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

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
    /// Write to this Kafka topic instead of --out (it must exist, or add
    /// --set sink.create_topic.partitions=N).
    #[arg(long, value_name = "TOPIC")]
    pub(crate) to_topic: Option<String>,
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

#[derive(Debug, clap::Args)]
pub(crate) struct SeedArgs {
    /// The topic to write (created if missing, with --partitions partitions).
    pub(crate) topic: String,
    /// Brokers [default: $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092].
    #[arg(short = 'b', long, value_name = "HOST:PORT[,…]")]
    pub(crate) bootstrap_servers: Option<String>,
    /// Records to write; without it, --rate R writes until Ctrl-C [default with --example: its count].
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
    /// Records per second [default: as fast as possible].
    #[arg(long, value_name = "R", value_parser = positive_number)]
    pub(crate) rate: Option<f64>,
    /// Partitions of the topic, each written in record order by one reader [default: 1 when created].
    #[arg(long, value_name = "N")]
    pub(crate) partitions: Option<u32>,
    /// Key template over the fields, e.g. '{seq}' [default: no key].
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) key: Option<String>,
    /// Value template over the fields, written as a string, e.g. 'order {seq}' [default: the
    /// fields as a JSON object; fields are seq (0, 1, …) and id (a UUID); add more with
    /// --set source.fields.NAME=JSON].
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) value: Option<String>,
    /// Seed of the generator: the same seed writes the same records [default: 0, or the example's].
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Start from a worked example instead of the seq/id fields: trading-day (the config
    /// config/trading-day-seed.toml, into TOPIC).
    #[arg(long, value_name = "NAME", value_parser = ["trading-day"], conflicts_with = "value")]
    pub(crate) example: Option<String>,
    /// Write through Kafka transactions, each record once (needs --state to resume).
    #[arg(long)]
    pub(crate) exactly_once: bool,
    #[command(flatten)]
    pub(crate) common: OneLinerArgs,
}

/// A number above 0 that is finite (`nan` and `inf` parse as numbers, and mean nothing here).
fn positive_number(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{text:?} is not a number above 0")),
    }
}
