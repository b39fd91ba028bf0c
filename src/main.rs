//! The `tidegate` binary: parses the command line, runs the command, maps errors to exit codes
//! (0 done, 1 runtime failure, 2 invalid config or usage, 3 unusable state file).

use clap::Parser;

use tidegate::cli::{Cli, Command, StateCommand};

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => tidegate::daemon::run(args),
        Command::Replay(args) => tidegate::oneliner::replay(args),
        Command::Seed(args) => tidegate::oneliner::seed(args),
        Command::Validate { config, sets, connect } => tidegate::daemon::validate(&config, &sets, connect),
        Command::Plan(args) => tidegate::daemon::plan(args),
        Command::State {
            command: StateCommand::Show { file },
        } => tidegate::daemon::show_state(&file),
        Command::ConfigReference => {
            let mut out = std::io::stdout().lock();
            // a closed pipe (`| head`) ends the output; it is not a failure
            let _ = std::io::Write::write_all(&mut out, tidegate::config::reference::markdown().as_bytes());
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
