//! tidegate in your own integration tests (the `testing` feature): reach a Kafka broker (yours,
//! or a container started for the test process), seed topics with any tidegate job written as
//! TOML (a data generator, say), and replay a topic into memory, bounded, until an end-of-stream
//! expression, or until a Rust closure says so, with the same checkpoints as the daemon when
//! wanted.
//!
//! ```no_run
//! use tidegate::testing::{Kafka, Replay};
//!
//! let kafka = Kafka::get()?;
//! kafka.create_topic("trades", 3)?;
//! tidegate::testing::run_job(&format!(
//!     r#"
//!     [source]
//!     type = "datagen"
//!     count = 100
//!     format = "json"
//!     [source.fields]
//!     seq = {{ sequence = {{}} }}
//!     [source.end_marker]
//!     value = {{ type = "CLOSE" }}
//!     [sink]
//!     type = "kafka"
//!     bootstrap_servers = "{}"
//!     topic = "trades"
//!     "#,
//!     kafka.bootstrap()
//! ))?;
//! // waits for the CLOSE record in every partition (up to Replay::timeout, then an error)
//! let records = Replay::topic(kafka.bootstrap(), "trades")
//!     .json()
//!     .until_eof(r#"value.type == "CLOSE""#)?
//!     .collect()?;
//! assert_eq!(records.len(), 100);
//! # Ok::<(), tidegate::Error>(())
//! ```
//!
//! Every call blocks its thread and is safe within an async runtime; in a `#[tokio::test]`
//! the `_async` forms await instead ([`Replay::collect_async`], [`run_job_async`],
//! [`Kafka::create_topic_async`]). Jobs run on a runtime and thread of their own either way: they
//! need a multi-threaded runtime, which a `#[tokio::test]` is not by default.
//!
//! Which containers are removed when is said at [`Kafka::get`] and [`Kafka::start`].
#![deny(missing_docs)]

mod kafka;
mod replay;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::connector::{JobFuture, SourceVisitor};
use crate::core::{Job, JobOptions, Sink, Source, SourceSplit};
use crate::error::{Error, Result};
use crate::record::Record;

pub use kafka::{Kafka, KafkaContainer};
pub use replay::{Replay, DEFAULT_TIMEOUT};

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting an async runtime", e))
}

/// Run `work` on this thread, or, within an async runtime (where blocking on another runtime
/// panics), on a thread of its own while this one waits.
fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// The future `make` builds, run to its end on a multi-threaded runtime of its own, which then
/// waits at most [`crate::assembly::LEFTOVER_WAIT`] for work left behind (a client waiting on a
/// broker).
fn run_on_own_runtime<T, F: Future<Output = Result<T>>>(make: impl FnOnce() -> F) -> Result<T> {
    let runtime = runtime()?;
    let result = runtime.block_on(make());
    crate::assembly::shut_down(runtime);
    result
}

/// [`run_on_own_runtime`] from blocking code, in or out of an async runtime.
fn block_on_own<T: Send, F: Future<Output = Result<T>>>(make: impl FnOnce() -> F + Send) -> Result<T> {
    off_runtime(move || run_on_own_runtime(make))
}

/// [`run_on_own_runtime`] on a thread of its own, awaited.
async fn own_runtime<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tidegate-testing".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || run_on_own_runtime(make)));
            let _ = tx.send(result);
        })
        .map_err(|e| Error::io("starting a thread for the job", e))?;
    match rx.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(Error::runtime("running the job", "its thread ended without a result")),
    }
}

/// How a job run by [`run_job`] or [`Replay::run`] ended.
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
    let sink = crate::assembly::sink_of(&config, resuming, opened.sink_slot())?;
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
struct Ended {
    summary: JobSummary,
    stopped: bool,
    unfinished: Vec<String>,
}

async fn run_source<S: Source<Output = Record>>(
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
