//! `tidegate run`: a job from its config file, until its input ends or a signal stops it.

use std::path::PathBuf;

use crate::error::Result;

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

/// `tidegate run`.
pub(crate) fn run(args: RunArgs) -> Result<()> {
    let config = crate::config::load(&args.config, &args.sets)?;
    crate::assembly::run(config, args.state.as_deref(), args.reset_state, args.no_progress)
}
