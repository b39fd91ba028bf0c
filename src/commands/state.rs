//! `tidegate state show`: a job's state, from its state file or its Kafka store, read without
//! disturbing a running job.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::checkpoint_store::{kafka, StoreConfig};
use crate::error::{Error, Result};

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

/// `tidegate state …`.
pub(crate) fn state(command: StateCommand) -> Result<()> {
    match command {
        StateCommand::Show { file, config, sets } => show(file.as_deref(), config.as_deref(), &sets),
    }
}

/// `tidegate state show FILE`, or `tidegate state show --config JOB` (the configured store).
pub fn show(file: Option<&Path>, config: Option<&Path>, sets: &[String]) -> Result<()> {
    let config = match (file, config) {
        (Some(file), _) => return show_state(file),
        (None, Some(config)) => crate::config::load(config, sets)?,
        (None, None) => return Err(Error::config("state show", "give a state file or --config")),
    };
    let (location, state) = match &config.checkpoint.store {
        StoreConfig::File => match &config.checkpoint.path {
            Some(path) => return show_state(path),
            None => {
                return Err(Error::config(
                    "checkpoint.path",
                    "the job keeps no state (no checkpoint.path, checkpoint.store = \"file\")",
                ))
            }
        },
        StoreConfig::Kafka(k) if k.member.is_some() => {
            // a group's job: every member run's last checkpoint, and what a restore makes of them
            let runs = kafka::read_runs(k)?;
            let merged = kafka::members::merged(&runs.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>());
            let state = merged.map(|merged| {
                serde_json::json!({
                    "group": crate::coordination::group_id(&k.job),
                    "runs": runs
                        .into_iter()
                        .map(|(owner, checkpoint)| serde_json::json!({"run": owner, "checkpoint": checkpoint}))
                        .collect::<Vec<_>>(),
                    "merged": merged,
                })
            });
            (
                format!(
                    "kafka topic {} at {}, job {}'s members",
                    k.topic, k.bootstrap_servers, k.job
                ),
                state,
            )
        }
        StoreConfig::Kafka(k) => (
            format!("kafka topic {} at {}, job {}", k.topic, k.bootstrap_servers, k.owner),
            kafka::read_only(k)?,
        ),
    };
    let Some(state) = state else {
        return Err(Error::State {
            path: location.into(),
            source: crate::error::StateError::Unreadable(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no checkpoint of this job in the topic",
            )),
        });
    };
    let text = serde_json::to_string_pretty(&state).unwrap_or_default();
    // a closed pipe (`state show | head`) ends the output; it is not a failure
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), format!("{text}\n").as_bytes());
    Ok(())
}

/// `tidegate state show`.
fn show_state(path: &Path) -> Result<()> {
    let state: serde_json::Value = crate::core::state::read_state(path)?.ok_or_else(|| Error::State {
        path: path.to_path_buf(),
        source: crate::error::StateError::Unreadable(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")),
    })?;
    let text = serde_json::to_string_pretty(&state).unwrap_or_default();
    // a closed pipe (`state show | head`) ends the output; it is not a failure
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    Ok(())
}
