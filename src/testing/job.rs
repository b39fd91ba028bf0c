//! Any tidegate job, written as the daemon's TOML config, run to its end from a test: the config
//! loaded and assembled as the daemon does, without metrics, progress or signals.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::runtime::{block_on_own, own_runtime};
use crate::connector::{JobFuture, SourceVisitor};
use crate::core::{Job, JobOptions, Sink, Source, SourceSplit};
use crate::error::{Error, Result};
use crate::record::Record;

/// How a job run by [`run_job`] or [`Replay::run`](super::Replay::run) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// Records the sink took.
    pub records_written: u64,
    /// Checkpoints written to the state file (or taken without one).
    pub checkpoints: u64,
    /// Each split's end, in the words of the daemon's end-of-run table.
    pub splits: Vec<String>,
}

/// Run any tidegate job, written as the daemon's TOML config, to its end: seed a topic with a
/// data generator, copy a topic, and so on. Relative paths are relative to the working directory;
/// `TIDEGATE__…` environment overrides apply as for the daemon. No metrics endpoint, no progress
/// output, no signal handling.
pub fn run_job(toml: &str) -> Result<JobSummary> {
    let dir = std::env::current_dir().map_err(|e| Error::io("the working directory", e))?;
    let file = tempfile_in(&dir, toml)?;
    let path = file.0.clone();
    let result = block_on_own(move || async move { run_config_file(&path).await });
    drop(file);
    result
}

/// [`run_job`], awaited.
pub async fn run_job_async(toml: &str) -> Result<JobSummary> {
    let dir = std::env::current_dir().map_err(|e| Error::io("the working directory", e))?;
    let file = tempfile_in(&dir, toml)?;
    let path = file.0.clone();
    let result = own_runtime(move || async move { run_config_file(&path).await }).await;
    drop(file);
    result
}

/// A config file written for [`run_job`], removed when dropped.
struct TempConfig(PathBuf);

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_in(dir: &Path, text: &str) -> Result<TempConfig> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".tidegate-job-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(TempConfig(path))
}

async fn run_config_file(path: &Path) -> Result<JobSummary> {
    let config = crate::config::load(path, &[])?;
    // the Kafka store's admin calls run a runtime of their own: not on this one's thread
    let opened = config.clone();
    let opened = tokio::task::spawn_blocking(move || {
        crate::checkpoint_store::open(&opened.checkpoint.store, opened.checkpoint.path.clone())
    })
    .await
    .map_err(|e| crate::Error::runtime("opening the checkpoint store", e))??;
    let store = opened.store.clone();
    let resuming = match &store {
        Some(s) => s.resumes()?,
        None => false,
    };
    let sink = crate::assembly::build::sink_of(&config, resuming, opened.sink_slot())?;
    let source_ctx = crate::assembly::source_context(&config);
    let mut options = JobOptions::new(config.job.name.clone(), config.job.parallelism);
    options.checkpoint_interval = Some(config.checkpoint.interval);
    options.max_duration = config.job.max_duration;
    options.instance = config.job.instance;
    let summary = Arc::new(std::sync::Mutex::new(None));
    let runner = RunToEnd {
        sink,
        options,
        store,
        summary: Arc::clone(&summary),
    };
    config.source.visit(&source_ctx, runner)?.await?;
    let summary = summary.lock().unwrap_or_else(|p| p.into_inner()).take();
    summary.ok_or_else(|| Error::runtime("running the job", "it ended without a summary"))
}

/// Runs the configured source's job to its end (the visitor the connector registry hands the
/// built source to), keeping its summary.
struct RunToEnd {
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<std::sync::Arc<dyn crate::core::CheckpointStore>>,
    summary: Arc<std::sync::Mutex<Option<JobSummary>>>,
}

impl<'a> SourceVisitor<'a> for RunToEnd {
    fn visit<S: Source<Output = Record>>(self, source: S) -> JobFuture<'a> {
        let RunToEnd {
            sink,
            options,
            store,
            summary,
        } = self;
        Box::pin(async move {
            let ended = run_source(source, sink, options, store).await?;
            *summary.lock().unwrap_or_else(|p| p.into_inner()) = Some(ended.summary);
            Ok(())
        })
    }
}

/// How a job ended: its summary, whether it was stopped (`max_duration`) before its end, and
/// the splits it left unfinished.
pub(super) struct Ended {
    pub(super) summary: JobSummary,
    pub(super) stopped: bool,
    pub(super) unfinished: Vec<String>,
}

pub(super) async fn run_source<S: Source<Output = Record>>(
    source: S,
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<std::sync::Arc<dyn crate::core::CheckpointStore>>,
) -> Result<Ended> {
    let mut job = Job::new(source, options);
    if let Some(store) = store {
        job = job.with_store(store);
    }
    let report = job.run(sink).await?;
    let unfinished = report
        .splits
        .iter()
        .filter(|s| s.finished.is_none())
        .map(|s| s.split.split_id().to_string())
        .collect();
    Ok(Ended {
        summary: JobSummary {
            records_written: report.records_written,
            checkpoints: report.checkpoints,
            splits: report
                .splits
                .iter()
                .map(|s| {
                    let end = match s.finished {
                        Some(f) => f.reason.as_str().to_string(),
                        None => "unfinished".to_string(),
                    };
                    format!("{} {end}: {}", s.split.split_id(), s.split.describe())
                })
                .collect(),
        },
        stopped: report.stopped,
        unfinished,
    })
}
