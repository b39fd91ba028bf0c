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
        let message = e.chain_text();
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
    /// Show a job's state, or move one partition's position in it.
    State {
        #[command(subcommand)]
        command: commands::state::StateCommand,
    },
    /// Print the configuration reference: every key, its type, default and meaning (docs/config.md).
    ConfigReference,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::{Cli, Command};

    /// A `tidegate …` line as the shell's words, up to a redirection, a pipe or the next command;
    /// `None` for a synopsis (`[--flag]`, `FILE`, `…`), which is no command.
    fn words_of(page: &str, line: &str) -> Option<Vec<String>> {
        let line = line.trim().trim_start_matches("$ ");
        if !line.starts_with("tidegate ")
            || ["[", "…", "...", " FILE", "TOPIC", "|"]
                .iter()
                .any(|s| line.contains(s))
        {
            return None;
        }
        let words = shlex::split(line.split(" #").next().unwrap_or(line))
            .unwrap_or_else(|| panic!("{page}: unbalanced quotes in `{line}`"));
        Some(
            words
                .into_iter()
                .take_while(|w| !matches!(w.as_str(), ">" | "&&" | "|" | ";"))
                .collect(),
        )
    }

    /// The README's and docs/' `tidegate …` lines: (page, words, whole) where `whole` is a
    /// command in a code block, and not whole a mention in a code span (`tidegate run`,
    /// `tidegate validate --connect`).
    fn documented_commands() -> Vec<(String, Vec<String>, bool)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut pages = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
        for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
            pages.push(entry.expect("docs/ entry").path());
        }
        let mut commands = Vec::new();
        for page in pages.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
            let text = std::fs::read_to_string(page).expect("a page").replace("\\\n", " ");
            let name = page.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let blocks = text.split("```").skip(1).step_by(2).flat_map(|b| b.lines().skip(1));
            for words in blocks.filter_map(|l| words_of(&name, l)) {
                commands.push((name.clone(), words, true));
            }
            let spans = text.split('`').skip(1).step_by(2).filter(|s| !s.contains('\n'));
            for words in spans.filter_map(|l| words_of(&name, l)) {
                commands.push((name.clone(), words, false));
            }
        }
        commands
    }

    /// A whole command: it parses, and a one-liner's flags make a config.
    fn check_whole(words: &[String]) -> Result<(), String> {
        let cli = Cli::try_parse_from(words).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Replay(args) => crate::commands::replay::replay_tree(&args, chrono::Utc::now())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Command::Seed(args) => crate::commands::seed::seed_tree(&args)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// A mention: its subcommands exist, and each `--flag` is one of the last one's.
    fn check_mention(words: &[String]) -> Result<(), String> {
        let mut command = <Cli as clap::CommandFactory>::command();
        if let Some(first) = words.get(1).filter(|w| !w.starts_with('-')) {
            if command.find_subcommand(first.as_str()).is_none() {
                return Err(format!("there is no `tidegate {first}`"));
            }
        }
        let mut rest = words.iter().skip(1).peekable();
        while let Some(sub) = rest.peek().and_then(|w| command.find_subcommand(w.as_str())).cloned() {
            command = sub;
            rest.next();
        }
        for flag in rest.filter_map(|w| w.strip_prefix("--")) {
            let flag = flag.split('=').next().unwrap_or(flag);
            if flag != "help" && !command.get_arguments().any(|a| a.get_long() == Some(flag)) {
                return Err(format!("`tidegate {}` has no --{flag}", command.get_name()));
            }
        }
        Ok(())
    }

    #[test]
    fn every_command_in_the_docs_parses_with_the_current_command_line() {
        let commands = documented_commands();
        let whole = commands.iter().filter(|c| c.2).count();
        assert!(
            whole >= 20 && commands.len() > whole,
            "{whole} of {} commands whole: is the scan broken?",
            commands.len()
        );
        let mut failed = Vec::new();
        for (page, words, whole) in &commands {
            let checked = if *whole {
                check_whole(words)
            } else {
                check_mention(words)
            };
            if let Err(e) = checked {
                failed.push(format!("{page}: `{}`:\n{e}", words.join(" ")));
            }
        }
        assert!(
            failed.is_empty(),
            "commands the docs show that do not parse:\n{}",
            failed.join("\n")
        );
    }

    #[test]
    fn a_flag_that_is_gone_fails_the_scan() {
        assert!(Cli::try_parse_from(["tidegate", "replay", "trades", "--fromm", "-1h"]).is_err());
        assert!(Cli::try_parse_from(["tidegate", "state", "show", "--json", "x.state"]).is_ok());
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_mention(&words(&["tidegate", "validate", "--connect"])).is_ok());
        assert!(check_mention(&words(&["tidegate", "state", "set", "--dry-run"])).is_ok());
        assert!(check_mention(&words(&["tidegate", "state", "set", "--dry-runs"])).is_err());
        assert!(check_mention(&words(&["tidegate", "stat"])).is_err());
        assert!(check_whole(&words(&["tidegate", "seed", "t", "--count", "many"])).is_err());
    }
}
