//! A job's session in a process: its counters, the metrics endpoint and the signals, and running
//! the configured job once on them (a group member runs it again on each assignment).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::build::source_context;
use crate::config::{Config, LogFormat};
use crate::connector::{JobFuture, SourceVisitor};
use crate::core::{
    CheckpointStore, Job, JobEnd, JobOptions, JobReport, JobStats, Sink, Source, SourceSplit, SplitHandover,
};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::record::Record;

/// How long a graceful stop may take before the process gives up and exits 1.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// What outlives one run of the job in a process: its counters, the metrics endpoint, and the
/// signals (a group member runs its job again on each new assignment).
pub struct Session {
    stats: Arc<JobStats>,
    /// `None` in a simulation (its members share one process, and the recorder is global).
    metrics: Option<Arc<Metrics>>,
    _server: Option<tokio::task::JoinHandle<()>>,
    /// `metrics.linger`: how long the endpoint serves on after the job ends.
    linger: Duration,
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
        let (stop_tx, stop) = watch::channel(false);
        let _server = match config.metrics.listen {
            Some(addr) => {
                let endpoint = crate::metrics::Endpoint {
                    metrics: Arc::clone(&metrics),
                    status: Arc::new(crate::metrics::StatusBoard::new(
                        config.job.name.clone(),
                        Arc::clone(&stats),
                    )),
                    control: config.metrics.control,
                    stop: stop.clone(),
                    limits: crate::metrics::Limits::default(),
                };
                Some(crate::metrics::serve(&config.metrics, addr, endpoint).await?)
            }
            None => None,
        };
        tokio::spawn(handle_signals(stop_tx));
        Ok(Session {
            stats,
            metrics: Some(metrics),
            linger: if _server.is_some() {
                config.metrics.linger
            } else {
                Duration::ZERO
            },
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
            linger: Duration::ZERO,
            stop,
        }
    }

    /// After the job's end, `result`, keep the endpoint serving for `metrics.linger`, or until a
    /// signal: the last scrape then sees the final counts, and `/status` how the job ended.
    pub(crate) async fn linger(&self, result: &Result<()>) {
        let end = match result {
            Err(e) => JobEnd::Failed(e.chain_text()),
            Ok(()) if self.stats.stopped_short.load(Ordering::SeqCst) => JobEnd::Stopped,
            Ok(()) => JobEnd::Finished,
        };
        let _ = self.stats.ended.set(end);
        if self.linger.is_zero() || *self.stop.borrow() {
            return;
        }
        info!(
            "the job has ended; /metrics and /status are served for {} more (metrics.linger), or until SIGTERM",
            humantime::format_duration(self.linger)
        );
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(self.linger) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// Run the configured job once, stopping it gracefully when `stop` turns true.
    pub(crate) async fn run_job(
        &self,
        config: &Config,
        store: Option<Arc<dyn CheckpointStore>>,
        sink: Box<dyn Sink<Record>>,
        steering: Steering,
        no_progress: bool,
        resuming: bool,
    ) -> Result<()> {
        let Steering { stop, handovers } = steering;
        let mut options = JobOptions::new(config.job.name.clone(), config.job.parallelism);
        options.checkpoint_interval = Some(config.checkpoint.interval);
        options.max_duration = config.job.max_duration;
        options.instance = config.job.instance;
        info!(job = %config.job.name, source = config.source.kind(), parallelism = config.job.parallelism, resuming, "starting");
        if let Some(hint) = config.source.unbounded_hint() {
            info!("{hint}");
        }

        let source_ctx = source_context(config);
        let job = RunJob {
            sink,
            options,
            store,
            stats: Arc::clone(&self.stats),
            stop,
            handovers,
            no_progress,
            log_format: config.log.format,
        };
        let outcome = config.source.visit(&source_ctx, job)?.await;
        if let Some(metrics) = &self.metrics {
            metrics.sync();
        }
        outcome
    }
}

/// What steers a job from outside while it runs: its stop signal, and a group member's
/// partitions given up or taken in (see [`SplitHandover`]).
pub(crate) struct Steering {
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) handovers: Option<mpsc::UnboundedReceiver<SplitHandover>>,
}

/// Runs the configured source's job (the visitor the registry hands the built source to).
struct RunJob {
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<Arc<dyn CheckpointStore>>,
    stats: Arc<JobStats>,
    stop: watch::Receiver<bool>,
    handovers: Option<mpsc::UnboundedReceiver<SplitHandover>>,
    no_progress: bool,
    log_format: LogFormat,
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
            handovers,
            no_progress,
            log_format,
        } = self;
        let bounded = source.boundedness() == crate::core::Boundedness::Bounded;
        let name = options.name.clone();
        let mut job = Job::new(source, options)
            .with_stats(Arc::clone(&stats))
            .with_stop_signal(stop);
        if let Some(store) = store {
            job = job.with_store(store);
        }
        if let Some(handovers) = handovers {
            job = job.with_handovers(handovers);
        }
        let (progress, progress_task) = Progress::start(Arc::clone(&stats), bounded, !no_progress);
        let result = job.run(sink).await;
        progress_task.abort();
        progress.finish();
        let mut report = result?;
        stats.stopped_short.store(report.stopped, Ordering::SeqCst);
        if !bounded {
            // an unbounded source has no total (a generator's ranges are all of u64's)
            report.records_expected = 0;
        }
        // (a simulation's many members would fill its log with them)
        if !crate::core::sim::active() {
            print_summary(&name, &report, bounded, log_format);
        }
        Ok(())
    }
}

/// The summary as lines of text, or under `log.format = "json"` as log events whose fields
/// are its counts: one for the job, one per split.
fn print_summary<S: SourceSplit>(job: &str, report: &JobReport<S>, bounded: bool, format: LogFormat) {
    if format == LogFormat::Text {
        for line in crate::summary::lines(job, report) {
            crate::say!("{line}");
        }
        return;
    }
    let read = crate::summary::Counts::of(report).read;
    info!(
        job,
        outcome = if report.stopped { "stopped" } else { "finished" },
        elapsed_seconds = report.elapsed.as_secs_f64(),
        records_read = read,
        // what it could read ("up to" while stopped short), what it read once done; none when
        // the source is unbounded
        records_expected = bounded.then_some(report.records_expected),
        records_written = report.records_written,
        records_filtered = report.records_filtered,
        records_diverted = report.records_diverted,
        records_skipped = report.records_skipped,
        checkpoints = report.checkpoints,
        "summary"
    );
    for (name, status, describe) in crate::summary::splits(report) {
        info!(job, split = name, status, position = describe, "summary of a split");
    }
}
