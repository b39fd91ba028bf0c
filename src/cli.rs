//! The command line (clap): `run`, `validate`, `plan`, `state show`, `config-reference`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// tidegate: Kafka sources with Flink's FLIP-27 semantics, in one binary.
#[derive(Debug, Parser)]
#[command(name = "tidegate", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job until its input ends, or until SIGTERM/SIGINT (then a final checkpoint).
    Run(RunArgs),
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
pub struct RunArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub config: PathBuf,
    /// The state file (overrides `checkpoint.path`).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Override a config key, e.g. `--set job.parallelism=4` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub sets: Vec<String>,
    /// Start from scratch: the existing state file is moved aside (never deleted).
    #[arg(long)]
    pub reset_state: bool,
    /// No progress bar or progress log lines.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub config: PathBuf,
    /// The state file to resume from (overrides `checkpoint.path`); it is only read.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Override a config key, e.g. `--set source.stopping_offsets=latest` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub sets: Vec<String>,
    /// Print the plan as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Also count the records exactly, by reading the ranges as a run would (read_committed),
    /// without the sink; the default shows only offsets, an upper bound.
    #[arg(long)]
    pub exact: bool,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Check a state file and print it.
    Show {
        /// The state file.
        file: PathBuf,
    },
}
