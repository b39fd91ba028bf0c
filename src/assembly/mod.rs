//! Job assembly: a validated [`Config`] in, a running job out. The one place that knows every
//! part a job is made of: the source (through the connector registry), the sink, the checkpoint
//! store, the group coordination, the metrics endpoint, the progress display and the signals.
//! The commands above it parse their flags and call it; the features below it never call back.

pub mod build;
pub mod group;
pub mod logging;
mod prepared;
pub mod runtime;
pub mod session;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::warn;

pub use build::source_context;
pub use session::Session;

use crate::config::Config;
use crate::core::{CheckpointStore, Sink};
use crate::error::{Error, Result};
use crate::record::Record;

/// Move a state file aside for `--reset-state`; nothing is ever deleted.
fn move_aside(path: &Path) -> Result<Option<PathBuf>> {
    if !path.exists() {
        return Ok(None);
    }
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let aside = path.with_file_name(format!("{name}.reset-{stamp}"));
    std::fs::rename(path, &aside).map_err(|e| Error::io(format!("moving {} aside", path.display()), e))?;
    Ok(Some(aside))
}

/// Run a loaded config (`tidegate run`, and the one-liners of `crate::commands`); `state`
/// overrides `checkpoint.path`.
pub fn run(config: Config, state: Option<&Path>, reset_state: bool, no_progress: bool) -> Result<()> {
    logging::init(config.log.format);
    if config.job.member.is_some() {
        if let Some(path) = state {
            return Err(Error::config(
                "--state",
                format!(
                    "names a state file ({}), but the members of a consumer group keep their checkpoints in Kafka",
                    path.display()
                ),
            ));
        }
        return group::run(config, reset_state, no_progress);
    }
    let state_path = state.map(Path::to_path_buf).or_else(|| config.checkpoint.path.clone());
    if let (Some(path), crate::checkpoint_store::StoreConfig::Kafka(k)) = (state, &config.checkpoint.store) {
        return Err(Error::config(
            "--state",
            format!(
                "names a state file ({}), but this job keeps its checkpoints in Kafka (checkpoint.store = \"kafka\", topic {})",
                path.display(),
                k.topic
            ),
        ));
    }
    let opened = crate::checkpoint_store::open(
        &config.checkpoint.store,
        state.map(Path::to_path_buf).or_else(|| config.checkpoint.path.clone()),
    )?;
    // read (and check) the state before anything starts: damaged state stops us here, untouched
    // (unless --reset-state, which ignores it)
    let resuming = match &opened.store {
        Some(s) if !reset_state => s.resumes()?,
        _ => false,
    };
    // a first run that cannot start (a missing topic, no broker) stops before anything changes:
    // before a sink creates its topic or starts its file, and before --reset-state moves the
    // old state aside (or, with the Kafka store, writes its tombstones)
    if !resuming {
        config.source.check_before_start()?;
    }
    if reset_state {
        opened.reset(|| {
            if let Some(path) = &state_path {
                if let Some(aside) = move_aside(path)? {
                    warn!(state = %path.display(), moved_to = %aside.display(), "--reset-state: starting from scratch");
                }
            }
            Ok(())
        })?;
    }
    let sink = build::sink_of(&config, resuming, opened.sink_slot())?;
    let store = opened.store;
    let runtime = runtime::start()?;
    let result = runtime.block_on(run_config(&config, store, sink, no_progress, resuming));
    runtime::shut_down(runtime);
    result
}

async fn run_config(
    config: &Config,
    store: Option<Arc<dyn CheckpointStore>>,
    sink: Box<dyn Sink<Record>>,
    no_progress: bool,
    resuming: bool,
) -> Result<()> {
    let session = Session::start(config).await?;
    let stop = session.stop.clone();
    let result = session
        .run_job(
            config,
            store,
            sink,
            session::Steering { stop, handovers: None },
            no_progress,
            resuming,
        )
        .await;
    session.linger(&result).await;
    result
}
