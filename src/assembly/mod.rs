//! Job assembly: a validated [`Config`] in, a running job out. The one place that knows every
//! part a job is made of: the source (through the connector registry), the sink, the checkpoint
//! store, the group coordination, the metrics endpoint, the progress display and the signals.
//! The commands above it parse their flags and call it; the features below it never call back.

pub mod group;
pub mod logging;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::Config;
use crate::connector::{JobFuture, SinkContext, SourceContext, SourceVisitor};
use crate::core::{CheckpointStore, Job, JobOptions, JobReport, JobStats, Sink, Source, SourceSplit};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::record::Record;

/// How long a graceful stop may take before the process gives up and exits 1.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// How long work still running once the job has ended may take before the process exits
/// anyway. By then the final checkpoint is durable and the sink closed; what is left (a
/// partition discovery, a progress commit to the consumer group) waits on a broker and is not
/// part of the job's result, so a broker that does not answer must not hold the exit for its
/// request timeout.
pub const LEFTOVER_WAIT: Duration = Duration::from_secs(2);

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
    let sink = sink_of(&config, resuming, opened.sink_slot())?;
    let store = opened.store;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate")
        .build()
        .map_err(|e| Error::io("starting the async runtime", e))?;
    let result = runtime.block_on(run_config(&config, store, sink, no_progress, resuming));
    shut_down(runtime);
    result
}

/// Drop the runtime once the job has ended, waiting at most [`LEFTOVER_WAIT`] for blocking
/// work still running (a runtime's drop would wait for it without a bound).
pub(crate) fn shut_down(runtime: tokio::runtime::Runtime) {
    let started = Instant::now();
    runtime.shutdown_timeout(LEFTOVER_WAIT);
    if started.elapsed() >= LEFTOVER_WAIT {
        info!(
            waited_ms = started.elapsed().as_millis() as u64,
            "work left after the job (waiting on a broker) abandoned at exit; the final checkpoint is unaffected"
        );
    }
}

/// What the configured source is built with.
pub fn source_context(config: &Config) -> SourceContext<'_> {
    SourceContext {
        job: &config.job,
        sink_prints_values: config.sink.prints_values(),
        sink_topic: config.sink.topic(),
        sink_check: config.sink.record_check(),
    }
}

/// The configured sink, as the source wants it (its end marker written at the end of input,
/// undecodable records diverted to a dead-letter topic); `resuming`: a state file is restored;
/// `state_slot`: the open store's [`crate::checkpoint_store::OpenStore::sink_slot`].
pub fn sink_of(
    config: &Config,
    resuming: bool,
    state_slot: Option<crate::client::exactly_once::SinkTransactionSlot>,
) -> Result<Box<dyn Sink<Record>>> {
    let end_marker = config.source.end_marker(&source_context(config))?;
    let sink = config.sink.build(SinkContext {
        job: &config.job,
        resuming,
        end_marker,
        state_in_transaction: state_slot,
    })?;
    config.source.wrap_sink(sink)
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
    session.run_job(config, store, sink, stop, no_progress, resuming).await
}

/// What outlives one run of the job in a process: its counters, the metrics endpoint, and the
/// signals (a group member runs its job again on each new assignment).
pub(crate) struct Session {
    stats: Arc<JobStats>,
    /// `None` in a simulation (its members share one process, and the recorder is global).
    metrics: Option<Arc<Metrics>>,
    _server: Option<tokio::task::JoinHandle<()>>,
    /// Set by the first SIGTERM or SIGINT.
    pub(crate) stop: watch::Receiver<bool>,
}

impl Session {
    /// The job's counters, over every run of it in this process.
    pub(crate) fn stats(&self) -> &Arc<JobStats> {
        &self.stats
    }

    /// Install the metrics (serving them when `metrics.listen` says so) and the signal handlers.
    pub(crate) async fn start(config: &Config) -> Result<Session> {
        let stats = Arc::new(JobStats::default());
        let metrics = Metrics::install(Arc::clone(&stats), &config.job.name)?;
        let _server = match config.metrics.listen {
            Some(addr) => {
                let endpoint = crate::metrics::Endpoint {
                    metrics: Arc::clone(&metrics),
                    status: Arc::new(crate::metrics::StatusBoard::new(
                        config.job.name.clone(),
                        Arc::clone(&stats),
                    )),
                    control: config.metrics.control,
                };
                Some(crate::metrics::serve(addr, endpoint).await?)
            }
            None => None,
        };
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(handle_signals(stop_tx));
        Ok(Session {
            stats,
            metrics: Some(metrics),
            _server,
            stop,
        })
    }

    /// A session of a simulated process: no metrics, no endpoint, and `stop` for its signals.
    #[cfg(test)]
    pub(crate) fn simulated(stop: watch::Receiver<bool>) -> Session {
        Session {
            stats: Arc::new(JobStats::default()),
            metrics: None,
            _server: None,
            stop,
        }
    }

    /// Run the configured job once, stopping it gracefully when `stop` turns true.
    pub(crate) async fn run_job(
        &self,
        config: &Config,
        store: Option<Arc<dyn CheckpointStore>>,
        sink: Box<dyn Sink<Record>>,
        stop: watch::Receiver<bool>,
        no_progress: bool,
        resuming: bool,
    ) -> Result<()> {
        let mut options = JobOptions::new(config.job.name.clone(), config.job.parallelism);
        options.checkpoint_interval = Some(config.checkpoint.interval);
        options.max_duration = config.job.max_duration;
        options.instance = config.job.instance;
        info!(job = %config.job.name, source = config.source.kind(), parallelism = config.job.parallelism, resuming, "starting");

        let source_ctx = source_context(config);
        let job = RunJob {
            sink,
            options,
            store,
            stats: Arc::clone(&self.stats),
            stop,
            no_progress,
        };
        let outcome = config.source.visit(&source_ctx, job)?.await;
        if let Some(metrics) = &self.metrics {
            metrics.sync();
        }
        outcome
    }
}

/// Runs the configured source's job (the visitor the registry hands the built source to).
struct RunJob {
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<Arc<dyn CheckpointStore>>,
    stats: Arc<JobStats>,
    stop: watch::Receiver<bool>,
    no_progress: bool,
}

impl<'a> SourceVisitor<'a> for RunJob {
    fn visit<S: Source<Output = Record>>(self, source: S) -> JobFuture<'a> {
        Box::pin(self.run(source))
    }
}

/// First SIGTERM/SIGINT: stop gracefully; a second one: exit at once (the state file is only
/// ever replaced by an atomic rename, so it cannot be damaged).
async fn handle_signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        warn!("cannot install signal handlers");
        return;
    };
    let first = tokio::select! { _ = term.recv() => "SIGTERM", _ = int.recv() => "SIGINT" };
    info!(signal = first, "stopping: final checkpoint, then exit");
    let _ = stop.send(true);
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = tokio::time::sleep(SHUTDOWN_TIMEOUT) => {
            crate::say!("tidegate: the graceful stop took longer than {SHUTDOWN_TIMEOUT:?}; exiting without a final checkpoint");
            std::process::exit(1);
        }
    }
    crate::say!("tidegate: second signal: exiting now, without a final checkpoint (the last completed one stands)");
    std::process::exit(1);
}

impl RunJob {
    async fn run<S: Source<Output = Record>>(self, source: S) -> Result<()> {
        let RunJob {
            sink,
            options,
            store,
            stats,
            stop,
            no_progress,
        } = self;
        let bounded = source.boundedness() == crate::core::Boundedness::Bounded;
        let name = options.name.clone();
        let mut job = Job::new(source, options)
            .with_stats(Arc::clone(&stats))
            .with_stop_signal(stop);
        if let Some(store) = store {
            job = job.with_store(store);
        }
        let (progress, progress_task) = Progress::start(Arc::clone(&stats), bounded, !no_progress);
        let result = job.run(sink).await;
        progress_task.abort();
        progress.finish();
        let report = result?;
        // (a simulation's many members would fill its log with them)
        if !crate::core::sim::active() {
            print_summary(&name, &report);
        }
        Ok(())
    }
}

fn print_summary<S: SourceSplit>(job: &str, report: &JobReport<S>) {
    for line in crate::summary::lines(job, report) {
        crate::say!("{line}");
    }
}
