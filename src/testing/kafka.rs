//! The Kafka broker of a test process: the one `KAFKA_BOOTSTRAP_SERVERS` names, else a container
//! started with testcontainers, whose own lifecycle removes it (see [`Kafka::get`] for when).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use testcontainers_modules::kafka::apache::KAFKA_PORT;
use testcontainers_modules::testcontainers::core::logs::LogFrame;
use testcontainers_modules::testcontainers::Container;

use super::kafka_image::KafkaImage;
use super::runtime::{block_on_own, off_runtime};
use crate::error::{Error, Result};

/// A Kafka broker for tests.
///
/// [`Kafka::get`] gives the process's broker: the one `KAFKA_BOOTSTRAP_SERVERS` names, else a
/// container it starts with testcontainers (the image `TIDEGATE_KAFKA_IMAGE` names, by default
/// the testcontainers module's `apache/kafka-native`), shared by every test of the process.
/// [`Kafka::start`] gives a container of your own. Containers carry the label `tidegate.test=1`.
#[derive(Debug, Clone)]
pub struct Kafka {
    bootstrap: String,
}

/// A Kafka container of a test's own ([`Kafka::start`]): testcontainers removes it when this is
/// dropped (at the end of the test's scope, also when the test panics).
pub struct KafkaContainer {
    kafka: Kafka,
    id: String,
    container: Option<Container<KafkaImage>>,
}

impl KafkaContainer {
    /// The broker in the container.
    pub fn kafka(&self) -> &Kafka {
        &self.kafka
    }

    /// The container's Docker id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::fmt::Debug for KafkaContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaContainer")
            .field("id", &self.id)
            .field("bootstrap", &self.kafka.bootstrap)
            .finish()
    }
}

impl Drop for KafkaContainer {
    fn drop(&mut self) {
        // testcontainers' blocking `Container` removes itself on its own runtime, which cannot
        // be entered from within another one (a `#[tokio::test]`)
        if let Some(container) = self.container.take() {
            off_runtime(move || remove(container));
        }
    }
}

/// The process's broker, reached or started once.
static SHARED: OnceLock<std::result::Result<String, String>> = OnceLock::new();
/// The process's shared container, dropped (so removed by testcontainers) when the process exits.
static SHARED_CONTAINER: Mutex<Option<Container<KafkaImage>>> = Mutex::new(None);

extern "C" fn drop_shared_container() {
    let container = match SHARED_CONTAINER.lock() {
        Ok(mut slot) => slot.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    // on a thread of its own: by now the exiting thread's thread-locals (tokio's runtime
    // context among them) may be destroyed
    if let Some(container) = container {
        let _ = std::thread::Builder::new()
            .name("tidegate-kafka-removal".into())
            .spawn(move || remove(container))
            .map(|removal| removal.join());
    }
}

/// Remove `container` now, and say so on stderr when Docker refuses: testcontainers' own drop
/// only logs a failure (through `log`, which a test process does not print) and leaves the
/// container running. (A failed `rm` drops the handle, which tries once more.)
fn remove(container: Container<KafkaImage>) {
    let id = container.id().to_string();
    if let Err(e) = container.rm() {
        eprintln!("tidegate tests: removing Kafka container {id} failed: {e}");
    }
}

impl Kafka {
    /// The process's broker: reached or started on first use, then shared.
    ///
    /// When it is a container, testcontainers removes it (through the Docker API: no `docker`
    /// command needed) when the process exits normally, which is how `cargo test` ends a test
    /// binary, also after failed tests; and on SIGINT, SIGTERM or SIGQUIT (Ctrl-C on
    /// `cargo test`), through testcontainers' watchdog, before the process ends. A process
    /// killed with SIGKILL, or one that aborts, leaves it running:
    /// `docker rm -f $(docker ps -aq --filter label=tidegate.test=1)` removes such leftovers
    /// (`scripts/docker test` does). `TESTCONTAINERS_COMMAND=keep` keeps containers on purpose.
    pub fn get() -> Result<Kafka> {
        let shared = SHARED.get_or_init(|| {
            if let Ok(servers) = std::env::var("KAFKA_BOOTSTRAP_SERVERS") {
                if !servers.trim().is_empty() {
                    eprintln!("tidegate tests: the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS)");
                    return Ok(servers);
                }
            }
            let (bootstrap, id, container) = off_runtime(start_container)?;
            eprintln!("tidegate tests: shared Kafka container {id} at {bootstrap}, removed when the process exits");
            *SHARED_CONTAINER.lock().unwrap_or_else(|p| p.into_inner()) = Some(container);
            // SAFETY: registers a plain `extern "C"` function without arguments, run once when
            // the process exits: a static is never dropped, so this is where the container is.
            unsafe {
                libc::atexit(drop_shared_container);
            }
            Ok(bootstrap)
        });
        match shared {
            Ok(bootstrap) => Ok(Kafka {
                bootstrap: bootstrap.clone(),
            }),
            Err(e) => Err(Error::runtime("starting a Kafka for the tests", e.clone())),
        }
    }

    /// A Kafka container of the caller's own (never `KAFKA_BOOTSTRAP_SERVERS`), removed when the
    /// returned [`KafkaContainer`] is dropped; on SIGINT, SIGTERM or SIGQUIT as in [`Kafka::get`].
    pub fn start() -> Result<KafkaContainer> {
        let (bootstrap, id, container) =
            off_runtime(start_container).map_err(|e| Error::runtime("starting a Kafka container", e))?;
        Ok(KafkaContainer {
            kafka: Kafka { bootstrap },
            id,
            container: Some(container),
        })
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
    /// an error. Safe to call from within an async runtime (it blocks the calling thread);
    /// [`Kafka::create_topic_async`] awaits instead.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let kafka = self.clone();
        let topic = topic.to_string();
        block_on_own(move || async move { kafka.create_topic_async(&topic, partitions).await })
    }

    /// [`Kafka::create_topic`], awaited.
    pub async fn create_topic_async(&self, topic: &str, partitions: i32) -> Result<()> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| crate::error::kafka("creating an admin client", e))?;
        let topics = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin
            .create_topics(&topics, &options)
            .await
            .map_err(|e| crate::error::kafka(format!("creating topic {topic}"), e))?;
        for result in results {
            if let Err((name, code)) = result {
                return Err(Error::runtime(format!("creating topic {name}"), code.to_string()));
            }
        }
        Ok(())
    }
}

/// How long testcontainers' start of a Kafka container may take, and the broker's start after it.
const CONTAINER_STARTUP: Duration = Duration::from_secs(180);

/// How many times a container is started before the tests give up on Docker.
const CONTAINER_STARTS: u32 = 2;

/// Start a Kafka container: its bootstrap address, id and handle.
///
/// A start that fails is tried once more, on a new container, after saying on stderr why the
/// first failed (with what the container wrote): a CI run once saw every container of a test
/// process time out at once, where every other run on machines of its kind started one in
/// seconds.
fn start_container() -> std::result::Result<(String, String, Container<KafkaImage>), String> {
    let mut attempt = 1;
    loop {
        // a start that times out before testcontainers holds the container leaves it running:
        // the label finds it
        // (with the clock: processes of other pid namespaces may share the Docker engine)
        let since_epoch = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap_or_default();
        let start = format!(
            "{}-{}-{}",
            std::process::id(),
            since_epoch.as_nanos(),
            START_TOKENS.fetch_add(1, Ordering::Relaxed)
        );
        let failed = match start_container_once(&start) {
            Ok(started) => return Ok(started),
            // kept on purpose, as testcontainers keeps its own
            Err(e) if std::env::var("TESTCONTAINERS_COMMAND").is_ok_and(|c| c == "keep") => {
                format!("{e}; kept (TESTCONTAINERS_COMMAND=keep): label tidegate.start={start}")
            }
            Err(e) => match block_on_own(|| remove_started(start)) {
                Ok(()) => e,
                Err(removal) => format!("{e}; removing it failed: {removal}"),
            },
        };
        if attempt == CONTAINER_STARTS {
            return Err(format!("no KAFKA_BOOTSTRAP_SERVERS, and {failed} ({attempt} tries)"));
        }
        eprintln!("tidegate tests: {failed}\ntidegate tests: starting another Kafka container");
        attempt += 1;
    }
}

/// Tells this process's container starts apart (with its pid) in their `tidegate.start` label.
static START_TOKENS: AtomicU64 = AtomicU64::new(0);

/// Remove the containers labelled `tidegate.start=<start>`, those of a start that failed. (The
/// engine is the one `DOCKER_HOST` names, else the local socket: testcontainers' own settings
/// file, `~/.testcontainers.properties`, is not read here.)
async fn remove_started(start: String) -> Result<()> {
    use testcontainers_modules::testcontainers::bollard::query_parameters::{
        ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    };
    use testcontainers_modules::testcontainers::bollard::Docker;
    let docker = Docker::connect_with_defaults().map_err(|e| Error::runtime("reaching Docker", e.to_string()))?;
    let filters = HashMap::from([("label", vec![format!("tidegate.start={start}")])]);
    let listed = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new().all(true).filters(&filters).build(),
        ))
        .await
        .map_err(|e| Error::runtime("listing the containers of a failed start", e.to_string()))?;
    for id in listed.iter().filter_map(|container| container.id.as_deref()) {
        docker
            .remove_container(
                id,
                Some(RemoveContainerOptionsBuilder::new().force(true).v(true).build()),
            )
            .await
            .map_err(|e| Error::runtime(format!("removing container {id}"), e.to_string()))?;
    }
    Ok(())
}

/// One try of [`start_container`].
fn start_container_once(start: &str) -> std::result::Result<(String, String, Container<KafkaImage>), String> {
    use testcontainers_modules::testcontainers::runners::SyncRunner;
    use testcontainers_modules::testcontainers::{ContainerRequest, ImageExt};
    let kafka = KafkaImage::default();
    let mut image = "apache/kafka-native (the testcontainers module's default)".to_string();
    let request: ContainerRequest<_> = match std::env::var("TIDEGATE_KAFKA_IMAGE") {
        Ok(wanted) if !wanted.trim().is_empty() => {
            let (name, tag) = wanted.rsplit_once(':').unwrap_or((wanted.as_str(), "latest"));
            image = wanted.clone();
            kafka.with_name(name).with_tag(tag)
        }
        _ => kafka.into(),
    };
    // what the container wrote, so that a start that fails says why: testcontainers' own error
    // is only "container startup timeout", and the container is gone by the time anyone looks
    let output = OutputTail::default();
    // testcontainers' default of 60 s was too short on a busy two-core machine (CI runs this
    // beside two other lanes); the broker has as long again from there (an image pulled first
    // is not counted in either)
    let container = request
        .with_label("tidegate.test", "1")
        .with_label("tidegate.start", start)
        .with_startup_timeout(CONTAINER_STARTUP)
        .with_log_consumer(output.consumer())
        .start()
        .map_err(|e| format!("a Kafka container ({image}) did not start: {e}; {}", output.describe()))?;
    let port = container
        .get_host_port_ipv4(KAFKA_PORT)
        .map_err(|e| format!("the Kafka container's port: {e}"))?;
    let bootstrap = format!("127.0.0.1:{port}");
    await_broker(&container, &bootstrap, Instant::now() + CONTAINER_STARTUP)
        .map_err(|e| format!("the broker of a Kafka container ({image}) {e}; {}", output.describe()))?;
    let id = container.id().to_string();
    Ok((bootstrap, id, container))
}

/// Wait until the broker at `bootstrap` answers a metadata request, for as long as `container`
/// runs and `deadline` is ahead.
fn await_broker(
    container: &Container<KafkaImage>,
    bootstrap: &str,
    deadline: Instant,
) -> std::result::Result<(), String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("could not be asked: {e}"))?;
    loop {
        // (waits up to a second for an answer; a refusal that comes sooner waits the rest)
        let asked_at = Instant::now();
        let asked = client.fetch_metadata(None, Duration::from_secs(1));
        if asked.as_ref().is_ok_and(|metadata| !metadata.brokers().is_empty()) {
            return Ok(());
        }
        if !container.is_running().unwrap_or(true) {
            let code = container.exit_code().ok().flatten();
            return Err(format!("stopped (exit code {code:?}) before it answered"));
        }
        if Instant::now() >= deadline {
            let last = asked
                .err()
                .map_or("no brokers in its metadata".to_string(), |e| e.to_string());
            return Err(format!("did not answer within {CONTAINER_STARTUP:?} ({last})"));
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(asked_at.elapsed()));
    }
}

/// The last lines a container wrote (stdout and stderr), for the error of a start that failed.
#[derive(Clone, Default)]
struct OutputTail(Arc<Mutex<VecDeque<String>>>);

impl OutputTail {
    /// How many lines are kept.
    const LINES: usize = 40;

    /// A testcontainers log consumer that keeps the lines here.
    fn consumer(&self) -> impl Fn(&LogFrame) + Send + Sync + 'static {
        let tail = self.clone();
        move |frame: &LogFrame| {
            let (stream, bytes) = match frame {
                LogFrame::StdOut(bytes) => ("stdout", bytes),
                LogFrame::StdErr(bytes) => ("stderr", bytes),
            };
            let mut lines = tail.0.lock().unwrap_or_else(|p| p.into_inner());
            for line in String::from_utf8_lossy(bytes).lines() {
                if lines.len() == Self::LINES {
                    lines.pop_front();
                }
                lines.push_back(format!("  {stream}: {line}"));
            }
        }
    }

    /// The lines kept, or that there were none.
    fn describe(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.is_empty() {
            return "the container wrote nothing".to_string();
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("the last {} lines it wrote:\n{}", lines.len(), lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_start_says_the_last_lines_the_container_wrote() {
        let tail = OutputTail::default();
        assert_eq!(tail.describe(), "the container wrote nothing");
        let consumer = tail.consumer();
        for i in 0..50 {
            consumer(&LogFrame::StdOut(format!("line {i}\nline {i}b\n").into_bytes().into()));
        }
        consumer(&LogFrame::StdErr(b"Exception in thread main".to_vec().into()));
        let described = tail.describe();
        let lines: Vec<&str> = described.lines().collect();
        assert_eq!(lines[0], "the last 40 lines it wrote:");
        assert_eq!(lines.len(), 41, "{described}");
        assert_eq!(lines[1], "  stdout: line 30b");
        assert_eq!(lines[39], "  stdout: line 49b");
        assert_eq!(lines[40], "  stderr: Exception in thread main");
    }
}
