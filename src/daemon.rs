//! The daemon: turns a validated config into a running job (source, sink, state file, metrics,
//! progress, signals) and reports how it ended.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::cli::{PlanArgs, RunArgs};
use crate::config::{Config, LogFormat};
use crate::connector::{JobFuture, SinkContext, SourceConfig, SourceConnector, SourceContext, SourceVisitor};
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

/// Standard error for the logs and the daemon's own lines, ignoring write errors: a reader that
/// went away (`tidegate run … 2>&1 | head -1`) must not end the job. (`eprintln!` panics on a
/// closed pipe, and tracing-subscriber reports a failed write with `eprintln!`.)
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // the line is lost where nobody reads it; the job goes on
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// `eprintln!` that never panics: writes through [`QuietStderr`].
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(QuietStderr, $($arg)*);
    }};
}

/// Set up `tracing`: level from `RUST_LOG` (default `info`), text or JSON on stderr (write
/// errors ignored, see [`QuietStderr`]).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| QuietStderr)
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

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

/// `tidegate run`.
pub fn run(args: RunArgs) -> Result<()> {
    let config = crate::config::load(&args.config, &args.sets)?;
    run_loaded(config, args.state.as_deref(), args.reset_state, args.no_progress)
}

/// Run a loaded config (`run`, and the one-liners of [`crate::oneliner`]); `state` overrides
/// `checkpoint.path`.
pub fn run_loaded(config: Config, state: Option<&Path>, reset_state: bool, no_progress: bool) -> Result<()> {
    init_logging(config.log.format);
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
        return crate::coordination::run(config, reset_state, no_progress);
    }
    let state_path = state.map(Path::to_path_buf).or_else(|| config.checkpoint.path.clone());
    let opened = crate::checkpoint_store::open(&config, state)?;
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
    state_slot: Option<crate::checkpoint_store::SinkTransactionSlot>,
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
            say!("tidegate: the graceful stop took longer than {SHUTDOWN_TIMEOUT:?}; exiting without a final checkpoint");
            std::process::exit(1);
        }
    }
    say!("tidegate: second signal: exiting now, without a final checkpoint (the last completed one stands)");
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
        say!("{line}");
    }
}

/// `tidegate validate`: the config as it would run, in its own words.
pub fn validate(config: &Path, sets: &[String], connect: bool) -> Result<()> {
    let c = crate::config::load(config, sets)?;
    let mut out = std::io::stdout().lock();
    let job = &c.job;
    let mut lines = vec![format!("config {} is valid", config.display())];
    let instance = if job.instance.count > 1 {
        format!(", instance {} of {}", job.instance.index, job.instance.count)
    } else {
        String::new()
    };
    let state = match (&c.checkpoint.store, &c.checkpoint.path) {
        (crate::checkpoint_store::StoreConfig::Kafka(k), _) => format!(
            " to kafka topic {} at {} (keys {}/…, from {}.bootstrap_servers)",
            k.topic, k.bootstrap_servers, k.owner, k.cluster_of
        ),
        (_, Some(p)) => format!(" to {}", p.display()),
        (_, None) => " (no state file: every run starts from scratch)".to_string(),
    };
    lines.push(format!(
        "  job {}: {} reader{}{instance}, a checkpoint every {}{state}",
        job.name,
        job.parallelism,
        if job.parallelism == 1 { "" } else { "s" },
        humantime::format_duration(c.checkpoint.interval)
    ));
    if let Some(d) = job.max_duration {
        lines.push(format!("  stops after {}", humantime::format_duration(d)));
    }
    lines.extend(
        c.source
            .describe()
            .into_iter()
            .chain(c.sink.describe())
            .map(|l| format!("  {l}")),
    );
    lines.push(match c.metrics.listen {
        Some(addr) => format!("  metrics on http://{addr}/metrics"),
        None => "  no metrics endpoint".to_string(),
    });
    if connect {
        init_logging(c.log.format);
        lines.extend(
            c.source
                .check_connection()?
                .into_iter()
                .chain(c.sink.check_connection()?)
                .map(|l| format!("  {l}")),
        );
        // the registry is contacted (reachable, credentials accepted, certificate trusted): a
        // mistake there would otherwise show only at the first record
        for registry in c.source.schema_registries() {
            let subjects = crate::format::registry::check(registry)?;
            let plural = if subjects == 1 { "" } else { "s" };
            lines.push(format!(
                "  schema registry {registry}: reachable, {subjects} subject{plural}"
            ));
        }
    }
    for line in lines {
        // a closed pipe (`validate | head`) ends the output, it is not a failure
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(())
}

/// `tidegate plan`: what a Kafka replay will read, resolved as a run would resolve it.
pub fn plan(args: PlanArgs) -> Result<()> {
    let config = crate::config::load(&args.config, &args.sets)?;
    init_logging(config.log.format);
    let SourceConfig::Kafka(kafka) = &config.source else {
        return Err(Error::config(
            "source.type",
            format!(
                "`plan` shows what a Kafka source will read; a {} source writes what `tidegate validate` describes",
                config.source.kind()
            ),
        ));
    };
    let source = kafka.build(&source_context(&config))?;
    let state_path = args.state.clone().or_else(|| config.checkpoint.path.clone());
    // only read: a running job may hold the state file's lock
    let restored = match (&config.checkpoint.store, &state_path) {
        // read only, as a running job's store is (its transactional id is not taken over)
        (crate::checkpoint_store::StoreConfig::Kafka(k), _) => match crate::checkpoint_store::kafka::read_only(k)? {
            Some(raw) => {
                let location = PathBuf::from(format!("kafka topic {} at {}", k.topic, k.bootstrap_servers));
                Some(crate::core::checkpoint_of(&source, &config.job.name, &location, raw)?)
            }
            None => None,
        },
        (_, Some(path)) => match crate::core::state::read_state::<serde_json::Value>(path)? {
            Some(raw) => Some(crate::core::checkpoint_of(&source, &config.job.name, path, raw)?),
            None => None,
        },
        (_, None) => None,
    };
    let checkpoint_id = restored.as_ref().map(|c| c.checkpoint_id);
    let may_resume_from_previous = restored.as_ref().is_some_and(|c| c.previous.is_some());
    let mut partitions = crate::kafka::plan::plan(&source, restored)?;
    if args.exact {
        crate::kafka::plan_exact::count_records(&source, &mut partitions)?;
    }
    let total_records = partitions
        .iter()
        .map(|p| p.records)
        .sum::<Option<u64>>()
        .filter(|_| args.exact);
    let report = crate::kafka::plan::PlanReport {
        job: config.job.name.clone(),
        state: checkpoint_id.and(state_path.map(|p| p.display().to_string())),
        checkpoint_id,
        may_resume_from_previous,
        eof: kafka.eof.clone(),
        eof_scope: kafka.eof.as_ref().map(|_| {
            if kafka.event_time.source_wide_stop {
                "source"
            } else {
                "partition"
            }
        }),
        replay_speed: kafka.event_time.speed,
        paced_seconds: kafka
            .event_time
            .speed
            .and_then(|speed| crate::kafka::plan::paced_seconds(&partitions, speed)),
        total_offsets: crate::kafka::plan::total_offsets(&partitions),
        total_records,
        partitions,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).map_err(|e| Error::runtime("printing the plan", e.to_string()))? + "\n"
    } else {
        report.text()
    };
    // a closed pipe (`plan | head`) ends the output; it is not a failure
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// `tidegate state show`.
pub fn show_state(path: &Path) -> Result<()> {
    let state: serde_json::Value = crate::core::state::read_state(path)?.ok_or_else(|| Error::State {
        path: path.to_path_buf(),
        source: crate::error::StateError::Unreadable(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")),
    })?;
    let text = serde_json::to_string_pretty(&state).unwrap_or_default();
    // a closed pipe (`state show | head`) ends the output; it is not a failure
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    Ok(())
}
