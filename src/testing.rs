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
//! let records = Replay::topic(kafka.bootstrap(), "trades")
//!     .json()
//!     .until_eof(r#"value.type == "CLOSE""#)?
//!     .collect()?;
//! assert_eq!(records.len(), 100);
//! # Ok::<(), tidegate::Error>(())
//! ```
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use crate::connector::{JobFuture, SourceVisitor};
use crate::core::{CollectSink, Job, JobOptions, Sink, Source, SourceSplit, StateStore};
use crate::error::{Error, Result};
use crate::kafka::offsets::StoppingOffsets;
use crate::kafka::{KafkaSource, KafkaSourceSettings, Subscription};
use crate::record::{Record, ValueFormat};

/// A Kafka broker for tests: the one `KAFKA_BOOTSTRAP_SERVERS` names, else a container this
/// process starts with testcontainers (the image `TIDEGATE_KAFKA_IMAGE` names, by default the
/// official `apache/kafka-native`), shared by every test of the process and removed when it exits.
#[derive(Debug, Clone)]
pub struct Kafka {
    bootstrap: String,
}

struct Started {
    bootstrap: String,
    /// Kept alive for the life of the process (a static is never dropped: see `remove_container`).
    _container:
        Option<Box<testcontainers_modules::testcontainers::Container<testcontainers_modules::kafka::apache::Kafka>>>,
}

static STARTED: OnceLock<std::result::Result<Started, String>> = OnceLock::new();
static CONTAINER_ID: OnceLock<String> = OnceLock::new();

extern "C" fn remove_container() {
    if let Some(id) = CONTAINER_ID.get() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", id])
            .output();
    }
}

impl Kafka {
    /// The process's broker: reached or started on first use, then shared.
    pub fn get() -> Result<Kafka> {
        let started = STARTED.get_or_init(|| {
            if let Ok(servers) = std::env::var("KAFKA_BOOTSTRAP_SERVERS") {
                if !servers.trim().is_empty() {
                    eprintln!("tidegate tests: the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS)");
                    return Ok(Started {
                        bootstrap: servers,
                        _container: None,
                    });
                }
            }
            start_container()
        });
        match started {
            Ok(s) => Ok(Kafka {
                bootstrap: s.bootstrap.clone(),
            }),
            Err(e) => Err(Error::runtime("starting a Kafka for the tests", e.clone())),
        }
    }

    /// A broker at `bootstrap` (one you run yourself).
    pub fn at(bootstrap: impl Into<String>) -> Kafka {
        Kafka {
            bootstrap: bootstrap.into(),
        }
    }

    /// Its bootstrap servers, for clients and configs.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Create `topic` with `partitions` partitions (replication factor 1); an existing topic is
    /// an error.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| crate::error::kafka("creating an admin client", e))?;
        let topics = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let runtime = runtime()?;
        let results = runtime
            .block_on(admin.create_topics(&topics, &options))
            .map_err(|e| crate::error::kafka(format!("creating topic {topic}"), e))?;
        for result in results {
            if let Err((name, code)) = result {
                return Err(Error::runtime(format!("creating topic {name}"), code.to_string()));
            }
        }
        Ok(())
    }
}

fn start_container() -> std::result::Result<Started, String> {
    use testcontainers_modules::testcontainers::runners::SyncRunner;
    use testcontainers_modules::testcontainers::{ContainerRequest, ImageExt};
    let kafka = testcontainers_modules::kafka::apache::Kafka::default();
    let mut image = "apache/kafka-native (the testcontainers module's default)".to_string();
    let request: ContainerRequest<_> = match std::env::var("TIDEGATE_KAFKA_IMAGE") {
        Ok(wanted) if !wanted.trim().is_empty() => {
            let (name, tag) = wanted.rsplit_once(':').unwrap_or((wanted.as_str(), "latest"));
            image = wanted.clone();
            kafka.with_name(name).with_tag(tag)
        }
        _ => kafka.into(),
    };
    let container = request
        .with_label("tidegate.test", "1")
        .start()
        .map_err(|e| format!("no KAFKA_BOOTSTRAP_SERVERS, and a Kafka container ({image}) did not start: {e}"))?;
    let port = container
        .get_host_port_ipv4(testcontainers_modules::kafka::apache::KAFKA_PORT)
        .map_err(|e| format!("the Kafka container's port: {e}"))?;
    let bootstrap = format!("127.0.0.1:{port}");
    // the harness reports the broker on stderr: which one a test run used matters when it fails
    eprintln!(
        "tidegate tests: Kafka container {} ({image}) at {bootstrap}",
        container.id()
    );
    let _ = CONTAINER_ID.set(container.id().to_string());
    // SAFETY: registers a plain `extern "C"` function, run once when the process exits (also
    // after failed tests), so the container does not outlive its tests.
    unsafe {
        libc::atexit(remove_container);
    }
    Ok(Started {
        bootstrap,
        _container: Some(Box::new(container)),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting an async runtime", e))
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
    let result = run_config_file(&file.0);
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

fn run_config_file(path: &Path) -> Result<JobSummary> {
    let config = crate::config::load(path, &[])?;
    let store = config.checkpoint.path.as_ref().map(StateStore::open).transpose()?;
    let resuming = match &store {
        Some(s) => s.load::<serde_json::Value>()?.is_some(),
        None => false,
    };
    let sink = crate::daemon::sink_of(&config, resuming)?;
    let source_ctx = crate::daemon::source_context(&config);
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
    runtime()?.block_on(async { config.source.visit(&source_ctx, runner)?.await })?;
    let summary = summary.lock().unwrap_or_else(|p| p.into_inner()).take();
    summary.ok_or_else(|| Error::runtime("running the job", "it ended without a summary"))
}

/// Runs the configured source's job to its end (the visitor the connector registry hands the
/// built source to), keeping its summary.
struct RunToEnd {
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<StateStore>,
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
            let done = run_source(source, sink, options, store).await?;
            *summary.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
            Ok(())
        })
    }
}

async fn run_source<S: Source<Output = Record>>(
    source: S,
    sink: Box<dyn Sink<Record>>,
    options: JobOptions,
    store: Option<StateStore>,
) -> Result<JobSummary> {
    let mut job = Job::new(source, options);
    if let Some(store) = store {
        job = job.with_state(store);
    }
    let report = job.run(sink).await?;
    Ok(JobSummary {
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
    })
}

/// A replay of Kafka topics into memory: a [`KafkaSource`] (the daemon's) run to its end into a
/// collecting sink.
pub struct Replay {
    settings: KafkaSourceSettings,
    format: ValueFormat,
    eof: Option<Arc<dyn crate::core::EofOnRecordEvaluator<Record>>>,
    parallelism: usize,
    state: Option<PathBuf>,
    checkpoint_interval: Duration,
}

impl Replay {
    /// Read `topic` from its beginning, to the end each partition has when the replay starts
    /// (change it with the `until_*` methods), values as bytes.
    pub fn topic(bootstrap: &str, topic: &str) -> Replay {
        let mut settings = KafkaSourceSettings::new(bootstrap, Subscription::Topics(vec![topic.to_string()]));
        settings.stopping = StoppingOffsets::Latest;
        Replay {
            settings,
            format: ValueFormat::Bytes,
            eof: None,
            parallelism: 1,
            state: None,
            checkpoint_interval: Duration::from_secs(1),
        }
    }

    /// Decode values as JSON (the records' `decoded` value; `value.x` in expressions).
    pub fn json(mut self) -> Self {
        self.format = ValueFormat::Json;
        self
    }

    /// Decode values as UTF-8 text.
    pub fn string(mut self) -> Self {
        self.format = ValueFormat::String;
        self
    }

    /// Keep reading past the end each partition had at the start: only an end-of-stream record
    /// (or a closure) ends a partition.
    pub fn unbounded(mut self) -> Self {
        self.settings.stopping = StoppingOffsets::None;
        self
    }

    /// End each partition at its first record matching the CEL expression (the daemon's
    /// `source.eof`); that record is not collected.
    pub fn until_eof(mut self, expression: &str) -> Result<Self> {
        let compiled =
            crate::expr::RecordExpression::compile(expression).map_err(|e| Error::config("source.eof", e))?;
        self.eof = Some(Arc::new(compiled));
        Ok(self)
    }

    /// End each partition at its first record for which `end` is true; that record is not
    /// collected.
    pub fn until(mut self, end: impl Fn(&Record) -> bool + Send + Sync + 'static) -> Self {
        self.eof = Some(Arc::new(end));
        self
    }

    /// Readers in parallel (default 1).
    pub fn parallelism(mut self, readers: usize) -> Self {
        self.parallelism = readers.max(1);
        self
    }

    /// Checkpoint to `path` (and resume from it), as the daemon's `checkpoint.path` does.
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state = Some(path.into());
        self
    }

    /// How often to checkpoint (default 1 s).
    pub fn checkpoint_interval(mut self, every: Duration) -> Self {
        self.checkpoint_interval = every;
        self
    }

    /// Run the replay to its end and return the records, in the order the sink took them.
    pub fn collect(self) -> Result<Vec<Record>> {
        Ok(self.run()?.0)
    }

    /// Run the replay to its end: the records and how it ended.
    pub fn run(self) -> Result<(Vec<Record>, JobSummary)> {
        let mut builder = KafkaSource::builder().settings(self.settings).format(self.format);
        if let Some(eof) = self.eof {
            builder = builder.eof_evaluator(eof);
        }
        let source = builder.build()?;
        let store = self.state.as_ref().map(StateStore::open).transpose()?;
        let (sink, collected) = CollectSink::new();
        let mut options = JobOptions::new("replay", self.parallelism);
        options.checkpoint_interval = Some(self.checkpoint_interval);
        let summary = runtime()?.block_on(run_source(source, Box::new(sink), options, store))?;
        let records = std::mem::take(&mut *collected.lock().unwrap_or_else(|p| p.into_inner()));
        Ok((records, summary))
    }
}
