//! One-line jobs: `tidegate replay` and `tidegate seed` turn their flags into the config tree a
//! file would hold, render it as TOML, and run that text through the same loading and
//! validation as `tidegate run --config` (so errors name config keys and exit 2 alike);
//! `--print-config` prints the text instead, a file that runs the same job.

pub mod position;
pub mod toml_text;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// Brokers when neither `--bootstrap-servers` nor this variable says.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";

/// The variable `--bootstrap-servers` defaults to.
pub const BOOTSTRAP_ENV: &str = "KAFKA_BOOTSTRAP_SERVERS";

/// `--bootstrap-servers`, else `$KAFKA_BOOTSTRAP_SERVERS`, else [`DEFAULT_BOOTSTRAP`].
pub(crate) fn bootstrap(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var(BOOTSTRAP_ENV).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_string())
}

/// `path` made absolute against the working directory, so a printed config names the same file
/// wherever it is saved.
pub(crate) fn absolute(path: &Path) -> Result<String> {
    let full = std::path::absolute(path).map_err(|e| Error::io(format!("resolving {}", path.display()), e))?;
    Ok(full.display().to_string())
}

/// `[checkpoint]`: the state file of `--state`, else none (the job keeps no state).
pub(crate) fn checkpoint(common: &OneLinerArgs) -> Result<Value> {
    Ok(match &common.state {
        Some(path) => json!({ "path": absolute(path)? }),
        None => json!({}),
    })
}

/// `--set` folded into the tree, then: print it (`--print-config`) or run it.
pub(crate) fn finish(mut tree: Value, mut notes: Vec<String>, common: &OneLinerArgs, command: &str) -> Result<()> {
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
    crate::assembly::run(
        config,
        None,
        common.reset_state,
        common.no_progress || records_on_terminal,
    )
}

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

/// A number above 0 that is finite (`nan` and `inf` parse as numbers, and mean nothing here).
pub(crate) fn positive_number(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{text:?} is not a number above 0")),
    }
}
