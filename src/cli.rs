//! The command line (clap): `run`, `replay`, `seed`, `validate`, `plan`, `state show`,
//! `config-reference`.

use clap::{Parser, Subcommand};

use crate::commands;

/// Runs the `tidegate` command line: parses the arguments, runs the command, and exits with the
/// documented code (0 done, 1 runtime failure, 2 invalid config or usage, 3 unusable state file).
pub fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Replay(args) => commands::replay::replay(args),
        Command::Seed(args) => commands::seed::seed(args),
        Command::Validate(args) => commands::validate::validate(args),
        Command::Plan(args) => commands::plan::plan(args),
        Command::State { command } => commands::state::state(command),
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
    Run(commands::run::RunArgs),
    /// Replay Kafka topics in one line, kcat-style: the flags make the config `run` would run.
    #[command(after_help = commands::replay::REPLAY_EXAMPLES)]
    Replay(commands::replay::ReplayArgs),
    /// Seed a Kafka topic with generated records in one line (the datagen source).
    #[command(after_help = commands::seed::SEED_EXAMPLES)]
    Seed(commands::seed::SeedArgs),
    /// Check a config file and print what it would run.
    Validate(commands::validate::ValidateArgs),
    /// Show what a Kafka replay will read, without reading it: each partition's resolved start
    /// and stop, the offsets in between, the first and last timestamps, and a total.
    Plan(commands::plan::PlanArgs),
    /// Inspect state files.
    State {
        #[command(subcommand)]
        command: commands::state::StateCommand,
    },
    /// Print the configuration reference: every key, its type, default and meaning (docs/config.md).
    ConfigReference,
}
