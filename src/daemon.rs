//! The daemon: turns a validated config into a running job (source, sink, state file, metrics,
//! progress, signals) and reports how it ended.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::config::{Config, LogFormat, SinkConfig, SourceConfig};
use crate::core::{Job, JobOptions, JobReport, JobStats, Sink, Source, SourceSplit, StateStore};
use crate::datagen::{DataGeneratorSource, DatagenSettings};
use crate::error::{Error, Result};
use crate::kafka::KafkaSource;
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::record::Record;

/// How long a graceful stop may take before the process gives up and exits 1.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// Set up `tracing`: level from `RUST_LOG` (default `info`), text or JSON on stderr.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
    init_logging(config.log.format);
    let state_path = args.state.clone().or_else(|| config.checkpoint.path.clone());
    let store = match &state_path {
        Some(path) => {
            let store = StateStore::open(path)?;
            if args.reset_state {
                if let Some(aside) = move_aside(path)? {
                    warn!(state = %path.display(), moved_to = %aside.display(), "--reset-state: starting from scratch");
                }
            }
            Some(store)
        }
        None => None,
    };
    // read (and check) the state before anything starts: a damaged file stops us here, untouched
    let resuming = match &store {
        Some(s) => s.load::<serde_json::Value>()?.is_some(),
        None => false,
    };
    let end_marker = match &config.source {
        SourceConfig::Datagen(d) => match (&d.end_marker, d.generator.format) {
            (Some(marker), crate::record::ValueFormat::Avro) => {
                // the marker is written in the topic's format too
                let encoder = crate::format::encoder_for(
                    crate::record::ValueFormat::Avro,
                    d.avro.as_ref(),
                    "source.avro",
                    sink_topic(&config),
                )?;
                let mut marker = marker.clone();
                if let (Some(encoder), Some(value)) = (encoder, &marker.decoded) {
                    marker.value = Some(
                        encoder
                            .0
                            .encode(value)
                            .map_err(|m| Error::config("source.end_marker.value", m))?,
                    );
                }
                Some(marker)
            }
            (marker, _) => marker.clone(),
        },
        SourceConfig::Kafka(_) | SourceConfig::Periodic(_) => None,
    };
    let mut sink = crate::sink::build(&config.sink, resuming, end_marker)?;
    if let SourceConfig::Kafka(k) = &config.source {
        if let Some(topic) = &k.dead_letter_topic {
            let dead = crate::sink::kafka::KafkaSink::new(
                crate::sink::kafka::KafkaSinkSettings {
                    bootstrap_servers: k.settings.bootstrap_servers.clone(),
                    topic: topic.clone(),
                    preserve_partition: false,
                    properties: Default::default(),
                    flush_timeout: Duration::from_secs(60),
                },
                None,
            )?;
            sink = Box::new(crate::sink::dead_letter::DeadLetterSink::new(sink, dead));
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate")
        .build()
        .map_err(|e| Error::io("starting the async runtime", e))?;
    runtime.block_on(run_config(config, store, sink, args.no_progress, resuming))
}

async fn run_config(
    config: Config,
    store: Option<StateStore>,
    sink: Box<dyn Sink<Record>>,
    no_progress: bool,
    resuming: bool,
) -> Result<()> {
    let stats = Arc::new(JobStats::default());
    let metrics = Metrics::install(Arc::clone(&stats), &config.job.name)?;
    let _server = match config.metrics.listen {
        Some(addr) => Some(crate::metrics::serve(addr, Arc::clone(&metrics)).await?),
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(handle_signals(stop_tx));

    let mut options = JobOptions::new(config.job.name.clone(), config.job.parallelism);
    options.checkpoint_interval = Some(config.checkpoint.interval);
    options.max_duration = config.job.max_duration;
    info!(job = %config.job.name, source = config.source.kind(), parallelism = config.job.parallelism, resuming, "starting");

    let outcome = match &config.source {
        SourceConfig::Kafka(k) => {
            let source = kafka_source(&config, k)?;
            run_job(source, sink, options, store, stats, stop_rx, no_progress).await
        }
        SourceConfig::Datagen(d) => {
            let mut generator = d.generator.clone();
            // the Kafka and null sinks never print the generated JSON: skip keeping it
            generator.keep_decoded = matches!(config.sink, SinkConfig::File { .. } | SinkConfig::Stdout);
            generator.encoder =
                crate::format::encoder_for(generator.format, d.avro.as_ref(), "source.avro", sink_topic(&config))?;
            let settings = DatagenSettings {
                count: d.count,
                rate: d.rate,
                splits: config.job.parallelism,
                batch_size: d.batch_size,
            };
            let source = DataGeneratorSource::new(settings, Arc::new(move || Box::new(generator.clone())));
            run_job(source, sink, options, store, stats, stop_rx, no_progress).await
        }
        SourceConfig::Periodic(p) => {
            let mut settings = p.clone();
            settings.keep_decoded = matches!(config.sink, SinkConfig::File { .. } | SinkConfig::Stdout);
            settings.encoder = crate::format::encoder_for(
                settings.format,
                settings.avro.as_ref(),
                "source.avro",
                sink_topic(&config),
            )?;
            let source = crate::periodic::PeriodicSource {
                settings: Arc::new(settings),
            };
            run_job(source, sink, options, store, stats, stop_rx, no_progress).await
        }
    };
    metrics.sync();
    outcome
}

/// The topic of a Kafka sink, if that is the sink.
fn sink_topic(config: &Config) -> Option<&str> {
    match &config.sink {
        SinkConfig::Kafka(k) => Some(k.settings.topic.as_str()),
        _ => None,
    }
}

/// The Kafka source of a config.
pub fn kafka_source(config: &Config, k: &crate::config::KafkaSourceConfig) -> Result<KafkaSource> {
    // only the file and stdout sinks print decoded values
    let keep_decoded = matches!(config.sink, SinkConfig::File { .. } | SinkConfig::Stdout);
    let expression = k
        .eof
        .as_deref()
        .map(crate::expr::RecordExpression::compile)
        .transpose()
        .map_err(|e| Error::config("source.eof", e))?;
    let decoder = match (
        k.format,
        keep_decoded,
        expression.as_ref().and_then(|e| e.value_fields()),
    ) {
        // nothing prints the value and the expression reads a few fields: decode just those
        (crate::record::ValueFormat::Json, false, Some(fields)) => {
            let fields = fields.to_vec();
            let factory: crate::format::DecoderFactory = Arc::new(move || {
                Ok(Box::new(crate::format::JsonFieldsDecoder::new(fields.clone()))
                    as Box<dyn crate::format::ValueDecoder>)
            });
            factory
        }
        _ => crate::format::decoder_factory(k.format, k.avro.as_ref())?,
    };
    let mut builder = KafkaSource::builder()
        .settings(k.settings.clone())
        .format(k.format)
        .decoder(decoder)
        .decode_errors(k.decode_errors)
        .eof_emit_marker(k.eof_emit_marker)
        .fetcher_mode(config.job.fetcher_mode);
    if let Some(expression) = expression {
        builder = builder.eof_evaluator(Arc::new(expression));
    }
    let mut source = builder.build()?;
    source.queue_capacity = config.job.queue_capacity;
    source.keep_decoded = keep_decoded;
    Ok(source)
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
            eprintln!("tidegate: the graceful stop took longer than {SHUTDOWN_TIMEOUT:?}; exiting without a final checkpoint");
            std::process::exit(1);
        }
    }
    eprintln!("tidegate: second signal: exiting now, without a final checkpoint (the last completed one stands)");
    std::process::exit(1);
}

#[derive(Serialize)]
struct SplitLine<'a, S: Serialize> {
    split: &'a S,
    finished: Option<crate::core::Finished>,
}

async fn run_job<S: Source<Output = Record>>(
    source: S,
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<StateStore>,
    stats: Arc<JobStats>,
    stop: watch::Receiver<bool>,
    no_progress: bool,
) -> Result<()> {
    let bounded = source.boundedness() == crate::core::Boundedness::Bounded;
    let name = options.name.clone();
    let mut job = Job::new(source, options)
        .with_stats(Arc::clone(&stats))
        .with_stop_signal(stop);
    if let Some(store) = store {
        job = job.with_state(store);
    }
    let (progress, progress_task) = Progress::start(Arc::clone(&stats), bounded, !no_progress);
    let result = job.run(sink).await;
    progress_task.abort();
    progress.finish();
    let report = result?;
    print_summary(&name, &report);
    Ok(())
}

fn print_summary<S: SourceSplit>(job: &str, report: &JobReport<S>) {
    let secs = report.elapsed.as_secs_f64().max(1e-6);
    let how = if report.stopped { "stopped" } else { "finished" };
    eprintln!(
        "tidegate: job {job} {how} after {:.1}s: {} records emitted, {} written ({:.0}/s), {} checkpoints",
        secs,
        report.records_emitted,
        report.records_written,
        report.records_written as f64 / secs,
        report.checkpoints
    );
    for s in &report.splits {
        let line = SplitLine {
            split: &s.split,
            finished: s.finished,
        };
        let status = match s.finished {
            Some(f) => {
                let reason = serde_json::to_value(f.reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                match f.at {
                    Some(at) => format!("{reason} at {at}"),
                    None => reason,
                }
            }
            None => "unfinished".to_string(),
        };
        eprintln!(
            "  split {:<24} {:<22} {}",
            s.split.split_id(),
            status,
            serde_json::to_string(&line.split).unwrap_or_default()
        );
    }
}

/// `tidegate validate`.
pub fn validate(config: &Path, sets: &[String]) -> Result<()> {
    let c = crate::config::load(config, sets)?;
    println!("config {} is valid", config.display());
    println!(
        "  job {} (parallelism {}, checkpoints every {:?}{})",
        c.job.name,
        c.job.parallelism,
        c.checkpoint.interval,
        c.checkpoint
            .path
            .as_ref()
            .map(|p| format!(" to {}", p.display()))
            .unwrap_or_default()
    );
    match &c.source {
        SourceConfig::Kafka(k) => {
            println!(
                "  source kafka {} {:?}",
                k.settings.bootstrap_servers, k.settings.subscription
            );
            println!(
                "    starting {:?}, stopping {:?}, format {:?}",
                k.settings.starting, k.settings.stopping, k.format
            );
            if let Some(e) = &k.eof {
                println!("    eof {e}");
            }
            if !k.settings.properties.is_empty() {
                println!(
                    "    properties {:?}",
                    crate::kafka::client::redacted(&k.settings.properties)
                );
            }
        }
        SourceConfig::Datagen(d) => {
            println!(
                "  source datagen: count {:?}, rate {:?}/s, format {:?}",
                d.count, d.rate, d.generator.format
            );
        }
        SourceConfig::Periodic(p) => match &p.supplier {
            crate::periodic::supplier::Supplier::Inline(events) => {
                println!(
                    "  source periodic: {} inline events, catch-up {:?}",
                    events.len(),
                    p.catch_up
                )
            }
            crate::periodic::supplier::Supplier::File { path, max_events } => {
                println!(
                    "  source periodic: events from {} every {:?}, catch-up {:?}",
                    path.display(),
                    p.discover_interval,
                    p.catch_up
                );
                match crate::periodic::supplier::read_file(path, *max_events) {
                    Ok(events) => println!("    the file holds {} valid events", events.len()),
                    Err(e) => println!("    warning: the file cannot be used now ({e}); the job would wait for it"),
                }
            }
        },
    }
    match &c.sink {
        SinkConfig::Kafka(k) => {
            println!(
                "  sink kafka {} topic {}",
                k.settings.bootstrap_servers, k.settings.topic
            );
            if !k.settings.properties.is_empty() {
                println!(
                    "    properties {:?}",
                    crate::kafka::client::redacted(&k.settings.properties)
                );
            }
        }
        SinkConfig::File { path } => println!("  sink file {}", path.display()),
        SinkConfig::Stdout => println!("  sink stdout"),
        SinkConfig::Null => println!("  sink null"),
    }
    Ok(())
}

/// `tidegate state show`.
pub fn show_state(path: &Path) -> Result<()> {
    let state: serde_json::Value = crate::core::state::read_state(path)?.ok_or_else(|| Error::State {
        path: path.to_path_buf(),
        source: crate::error::StateError::Unreadable(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")),
    })?;
    println!("{}", serde_json::to_string_pretty(&state).unwrap_or_default());
    Ok(())
}
