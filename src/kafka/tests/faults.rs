//! Broker-free tests of how the Kafka source lives through faults, on librdkafka's mock cluster:
//! topic errors in discovery (transient, or unknown for a while), paused splits that must not look
//! stalled, and how often discovery asks the cluster; with the helpers the other mock-cluster test
//! modules share (partition errors live in `partition_errors`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientConfig;
use tokio::sync::watch;

use crate::core::{
    CollectSink, FinishReason, Job, JobOptions, JobReport, JobStats, SourceSplit, SplitId, SplitReader, SplitsChange,
    StateStore,
};
use crate::kafka::batch_queue::BatchLimit;
use crate::kafka::split::KafkaPartitionSplit;
use crate::kafka::split_reader::KafkaPartitionSplitReader;
use crate::kafka::{KafkaSource, KafkaSourceSettings, StoppingOffsets, Subscription};
use crate::metrics::KafkaMetrics;
use crate::record::Record;

/// Metadata requests, as librdkafka numbers them.
const METADATA: i16 = 3;

/// A mock cluster that also counts the requests it receives (rust-rdkafka's `MockCluster` does
/// not expose librdkafka's request tracking): owned by a producer created with
/// `test.mock.num.brokers`, driven through librdkafka's mock API.
pub(super) struct TrackedCluster {
    owner: BaseProducer,
}

impl TrackedCluster {
    pub(super) fn new() -> Self {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", "1")
            .create()
            .expect("a producer with a mock cluster");
        let cluster = TrackedCluster { owner };
        // SAFETY: the pointer is the owner's mock cluster, alive as long as the owner
        unsafe { rd::rd_kafka_mock_start_request_tracking(cluster.raw()) };
        cluster
    }

    fn raw(&self) -> *mut rd::rd_kafka_mock_cluster_t {
        use rdkafka::client::Client;
        let client: &Client<DefaultProducerContext> = self.owner.client();
        // SAFETY: a valid client handle; the mock cluster lives as long as the client
        let raw = unsafe { rd::rd_kafka_handle_mock_cluster(client.native_ptr()) };
        assert!(!raw.is_null(), "the producer has a mock cluster");
        raw
    }

    pub(super) fn cluster(&self) -> MockCluster<'_, DefaultProducerContext> {
        self.owner.client().mock_cluster().expect("mock cluster")
    }

    pub(super) fn servers(&self) -> String {
        self.cluster().bootstrap_servers()
    }

    /// Metadata requests received since tracking started or was last cleared.
    fn metadata_requests(&self) -> usize {
        self.requests(METADATA)
    }

    /// Requests of `api_key` (librdkafka's numbering) received since tracking started or was last
    /// cleared.
    pub(super) fn requests(&self, api_key: i16) -> usize {
        let mut count = 0usize;
        // SAFETY: the array and its requests are ours to destroy, after reading them
        unsafe {
            let requests = rd::rd_kafka_mock_get_requests(self.raw(), &mut count);
            if requests.is_null() || count == 0 {
                return 0;
            }
            let slice = std::slice::from_raw_parts(requests, count);
            let n = slice
                .iter()
                .filter(|r| rd::rd_kafka_mock_request_api_key(**r) == api_key)
                .count();
            rd::rd_kafka_mock_request_destroy_array(requests, count);
            n
        }
    }

    pub(super) fn clear_requests(&self) {
        // SAFETY: as above
        unsafe { rd::rd_kafka_mock_clear_requests(self.raw()) }
    }
}

pub(super) fn produce(servers: &str, topic: &str, partitions: i32, from: usize, n: usize) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("producer");
    for i in from..from + n {
        let value = format!("{i}");
        let partition = (i % partitions as usize) as i32;
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value).partition(partition))
            .expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

/// Poll `condition` until it holds, or panic naming `what` after `timeout`.
pub(super) fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A job running on its own thread until told to stop.
pub(super) struct Running {
    stop: watch::Sender<bool>,
    out: Arc<Mutex<Vec<Record>>>,
    stats: Arc<JobStats>,
    handle: std::thread::JoinHandle<crate::Result<JobReport<KafkaPartitionSplit>>>,
}

impl Running {
    pub(super) fn start(source: KafkaSource, state: Option<&std::path::Path>) -> Running {
        let (sink, out) = CollectSink::new();
        let (stop, stopped) = watch::channel(false);
        let stats = Arc::new(JobStats::default());
        let mut job = Job::new(source, JobOptions::new("mock-faults", 1))
            .with_stop_signal(stopped)
            .with_stats(Arc::clone(&stats));
        if let Some(path) = state {
            job = job.with_state(StateStore::open(path).expect("state store"));
        }
        let handle = std::thread::spawn(move || job.run_blocking(Box::new(sink)));
        Running {
            stop,
            out,
            stats,
            handle,
        }
    }

    /// Splits the readers finished as removed so far.
    fn removed(&self) -> u64 {
        let readers = self.stats.readers.lock().unwrap();
        readers.iter().map(|r| r.finished(FinishReason::Removed)).sum()
    }

    pub(super) fn records(&self) -> usize {
        self.out.lock().unwrap().len()
    }

    fn values(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .out
            .lock()
            .unwrap()
            .iter()
            .map(|r| {
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
                    .parse()
                    .unwrap()
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// The job's end on its own, within `timeout`.
    pub(super) fn join(self, timeout: Duration) -> (JobReport<KafkaPartitionSplit>, Vec<u64>) {
        wait_until("the job to end", timeout, || self.handle.is_finished());
        let values = self.values();
        let report = self.handle.join().expect("job thread").expect("the job ends cleanly");
        (report, values)
    }

    pub(super) fn stop(self) -> (JobReport<KafkaPartitionSplit>, Vec<u64>) {
        let values = self.values();
        let _ = self.stop.send(true);
        let report = self.handle.join().expect("job thread").expect("the job ends cleanly");
        (report, values)
    }
}

pub(super) fn removed(report: &JobReport<KafkaPartitionSplit>) -> Vec<String> {
    report
        .splits
        .iter()
        .filter(|s| s.finished.is_some_and(|f| f.reason == FinishReason::Removed))
        .map(|s| s.split.split_id().to_string())
        .collect()
}

pub(super) fn settings(servers: &str, topic: &str) -> KafkaSourceSettings {
    KafkaSourceSettings::new(servers, Subscription::Topics(vec![topic.to_string()]))
}

pub(super) fn source(settings: KafkaSourceSettings) -> KafkaSource {
    KafkaSource::builder().settings(settings).build().expect("source")
}

/// A topic error while the job runs (a broker restart's LEADER_NOT_AVAILABLE, or its
/// UNKNOWN_TOPIC_OR_PART for less than the request timeout) must not end the topic's splits.
#[test]
fn a_transient_topic_error_in_discovery_keeps_the_splits() {
    for (n, error) in [
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
    ]
    .into_iter()
    .enumerate()
    {
        let mock = TrackedCluster::new();
        let topic = format!("mock-blip-{n}");
        mock.cluster().create_topic(&topic, 2, 1).expect("topic");
        produce(&mock.servers(), &topic, 2, 0, 20);
        let mut s = settings(&mock.servers(), &topic);
        s.discovery_interval = Some(Duration::from_millis(100));
        let job = Running::start(source(s), None);
        wait_until("the first records", Duration::from_secs(30), || job.records() >= 20);
        mock.cluster().topic_error(&topic, error).expect("inject");
        mock.clear_requests();
        // several discoveries meet the error
        wait_until("discoveries during the error", Duration::from_secs(30), || {
            mock.metadata_requests() >= 5
        });
        mock.cluster()
            .topic_error(&topic, RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
            .expect("clear");
        produce(&mock.servers(), &topic, 2, 20, 20);
        let deadline = Instant::now() + Duration::from_secs(30);
        while job.records() < 40 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let (report, values) = job.stop();
        assert_eq!(
            removed(&report),
            Vec::<String>::new(),
            "{error:?}: no split may end for a transient error"
        );
        assert_eq!(
            values,
            (0..40).collect::<Vec<_>>(),
            "{error:?}: every record, after the error too"
        );
    }
}

/// A topic the broker calls unknown for longer than the request timeout is gone: its splits end,
/// not before.
#[test]
fn a_topic_unknown_for_longer_than_the_request_timeout_is_gone() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-gone", 2, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), "mock-gone", 2, 0, 10);
    let mut s = settings(&cluster.bootstrap_servers(), "mock-gone");
    s.discovery_interval = Some(Duration::from_millis(100));
    s.request_timeout = Duration::from_secs(1);
    let job = Running::start(source(s), None);
    wait_until("the records", Duration::from_secs(30), || job.records() >= 10);
    cluster
        .topic_error("mock-gone", RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        .expect("inject");
    let injected = Instant::now();
    wait_until("the splits to be removed", Duration::from_secs(30), || {
        job.removed() == 2
    });
    assert!(
        injected.elapsed() >= Duration::from_secs(1),
        "the splits were removed {:?} after the error, before the request timeout",
        injected.elapsed()
    );
    let (report, _) = job.stop();
    assert_eq!(removed(&report), vec!["mock-gone-0", "mock-gone-1"]);
}

/// A bounded replay restarted while the broker calls its topic unknown (it is coming back)
/// waits for it instead of finishing with its splits removed.
#[test]
fn a_restore_while_the_topic_is_briefly_unknown_reads_everything() {
    let mock = TrackedCluster::new();
    mock.cluster().create_topic("mock-restore", 2, 1).expect("topic");
    produce(&mock.servers(), "mock-restore", 2, 0, 20);
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("job.state");
    // first run: unbounded, stopped after everything was read (its splits stay open)
    let job = Running::start(source(settings(&mock.servers(), "mock-restore")), Some(&state));
    wait_until("the first records", Duration::from_secs(30), || job.records() >= 20);
    let (_, first) = job.stop();
    assert_eq!(first, (0..20).collect::<Vec<_>>());
    produce(&mock.servers(), "mock-restore", 2, 20, 20);
    mock.cluster()
        .topic_error("mock-restore", RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        .expect("inject");
    mock.clear_requests();
    // second run: bounded now, restored while the topic is unknown
    let mut s = settings(&mock.servers(), "mock-restore");
    s.stopping = StoppingOffsets::Latest;
    let job = Running::start(source(s), Some(&state));
    wait_until("discoveries during the error", Duration::from_secs(30), || {
        mock.metadata_requests() >= 3
    });
    mock.cluster()
        .topic_error("mock-restore", RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
        .expect("clear");
    let (report, values) = job.join(Duration::from_secs(60));
    assert_eq!(removed(&report), Vec::<String>::new());
    assert_eq!(
        values,
        (20..40).collect::<Vec<_>>(),
        "the records written after the first run"
    );
}

/// With `wait_for_topics` and discovery off, discovery retries until the topics exist, then stops
/// asking the cluster.
#[test]
fn discovery_stops_once_the_awaited_topic_exists() {
    let mock = TrackedCluster::new();
    let mut s = settings(&mock.servers(), "mock-late");
    s.wait_for_topics = true;
    let job = Running::start(source(s), None);
    wait_until("a first look for the topic", Duration::from_secs(30), || {
        mock.metadata_requests() >= 1
    });
    mock.cluster().create_topic("mock-late", 1, 1).expect("topic");
    produce(&mock.servers(), "mock-late", 1, 0, 10);
    wait_until("the records", Duration::from_secs(30), || job.records() >= 10);
    mock.clear_requests();
    // four of the old one-second retries' worth
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = mock.metadata_requests();
    let (report, values) = job.stop();
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    assert!(removed(&report).is_empty());
    assert!(
        asked <= 1,
        "discovery is off once the topic exists, yet the cluster got {asked} metadata requests in 4 s"
    );
}

pub(super) fn reader(settings: &KafkaSourceSettings) -> KafkaPartitionSplitReader {
    let limit = BatchLimit {
        records: 1000,
        bytes: 1 << 20,
    };
    KafkaPartitionSplitReader::new(settings, (0, 1), 1, limit, KafkaMetrics::noop()).expect("reader")
}

/// A split paused for pacing or alignment fetches nothing on purpose: it must not be restarted as
/// stalled, neither while paused nor right after it resumes.
#[test]
fn a_paused_split_is_not_restarted_as_stalled() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-paused", 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), "mock-paused", 1, 0, 100);
    let s = settings(&cluster.bootstrap_servers(), "mock-paused");
    let mut reader = reader(&s);
    // wide margins: a loaded machine (CI) must not make the slow answers below look like a stall
    let stall = Duration::from_secs(3);
    reader.set_stall_after(stall);
    let split = KafkaPartitionSplit::new("mock-paused", 0, 0, Some(100));
    let id = split.split_id();
    reader
        .handle_splits_changes(SplitsChange::Add(vec![split]))
        .expect("assign");
    reader
        .pause_or_resume_splits(std::slice::from_ref(&id), &[])
        .expect("pause");
    let paused = Instant::now();
    while paused.elapsed() < 2 * stall {
        let batch = reader.fetch().expect("fetch while paused");
        assert_eq!(batch.record_count(), 0, "a paused split fetches nothing");
    }
    assert_eq!(reader.restarts(), 0, "a paused split was restarted as stalled");
    // slower answers than a fetch waits (100 ms), so the first fetch after resuming brings nothing
    // yet: a stall clock still running from before the pause would restart the fetch right then
    cluster.broker_round_trip_time(1, stall / 10).expect("round trip time");
    reader
        .pause_or_resume_splits(&[], std::slice::from_ref(&id))
        .expect("resume");
    let read = read_until_finished(&mut reader, &id, "the records after resuming", Duration::from_secs(30));
    assert_eq!(read, 100);
    assert_eq!(reader.restarts(), 0, "the stall clock restarts on resume");
}

/// A bounded split whose broker stops answering: neither its records nor its partition's end can
/// be read. After a stall its fetch is restarted all the same (a fetch stuck in librdkafka after
/// a reconnect answers to nothing else, and the watchdog that said nothing then left a replay
/// waiting forever), and once the broker is back the split reads to its stop.
#[test]
fn a_stalled_bounded_split_whose_end_cannot_be_read_is_restarted() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-away", 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), "mock-away", 1, 0, 100);
    let s = settings(&cluster.bootstrap_servers(), "mock-away");
    let mut reader = reader(&s);
    reader.set_stall_after(Duration::from_secs(2));
    let split = KafkaPartitionSplit::new("mock-away", 0, 0, Some(100));
    let id = split.split_id();
    cluster.broker_down(1).expect("broker down");
    reader
        .handle_splits_changes(SplitsChange::Add(vec![split]))
        .expect("assign");
    wait_until("a restart while the broker is away", Duration::from_secs(60), || {
        let batch = reader.fetch().expect("fetch while the broker is away");
        assert_eq!(batch.record_count(), 0, "records from a broker that is down");
        reader.restarts() >= 1
    });
    cluster.broker_up(1).expect("broker up");
    let read = read_until_finished(
        &mut reader,
        &id,
        "the records once the broker is back",
        Duration::from_secs(60),
    );
    assert_eq!(read, 100);
}

/// A reader's consumer reports its broker troubles to its context, as every other client does
/// (and so to the logs, once per cause), not through librdkafka's own printer on stderr, which
/// printed "1/1 brokers are down" raw every few hundred milliseconds of an outage: with its broker
/// gone, the reader knows why it cannot fetch.
#[test]
fn a_readers_broker_troubles_reach_its_context() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-troubles", 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), "mock-troubles", 1, 0, 10);
    let s = settings(&cluster.bootstrap_servers(), "mock-troubles");
    let mut reader = reader(&s);
    let split = KafkaPartitionSplit::new("mock-troubles", 0, 0, None);
    reader
        .handle_splits_changes(SplitsChange::Add(vec![split]))
        .expect("assign");
    let mut read = 0;
    wait_until("the 10 records", Duration::from_secs(30), || {
        read += reader.fetch().expect("fetch").record_count();
        read == 10
    });
    assert_eq!(reader.transport_trouble(), None, "no trouble yet");
    cluster.broker_down(1).expect("broker down");
    wait_until(
        "the reader's context to hear of the broker",
        Duration::from_secs(30),
        || {
            reader.fetch().expect("fetch while the broker is down");
            reader.transport_trouble().is_some()
        },
    );
}

/// Fetch until split `id` finishes (panicking after `timeout`, naming `what`): the records read.
fn read_until_finished(reader: &mut KafkaPartitionSplitReader, id: &SplitId, what: &str, timeout: Duration) -> usize {
    let mut read = 0;
    let mut finished = false;
    wait_until(what, timeout, || {
        let batch = reader.fetch().expect("fetch");
        read += batch.record_count();
        finished |= batch.finished.iter().any(|(f, _)| f == id);
        finished
    });
    read
}
