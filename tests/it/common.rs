//! The integration-test harness: a real Kafka broker (`KAFKA_BOOTSTRAP_SERVERS`, or a
//! testcontainers Kafka when a Docker engine is reachable), unique topics, and helpers to create
//! topics, produce (plain and transactional, with keys, headers and timestamps) and read back.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// The broker the tests run against.
pub struct TestKafka {
    pub bootstrap: String,
    /// Client properties of the harness's own clients (SASL credentials, say).
    pub properties: Vec<(String, String)>,
}

impl TestKafka {
    /// The tests' broker, from [`tidegate::testing::Kafka::get`]: `KAFKA_BOOTSTRAP_SERVERS` if
    /// set, else a Kafka container (`TIDEGATE_KAFKA_IMAGE`) when Docker answers; else a failure
    /// that says how to start the local broker.
    pub fn get() -> TestKafka {
        match tidegate::testing::Kafka::get() {
            Ok(kafka) => TestKafka::at(kafka.bootstrap()),
            Err(e) => panic!(
                "no Kafka broker for the integration tests ({e}): start the local one with \
                 `scripts/kafka start` and export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 \
                 (or make a Docker engine reachable for testcontainers)"
            ),
        }
    }

    /// The broker at `bootstrap`, with no client properties.
    pub fn at(bootstrap: &str) -> TestKafka {
        TestKafka {
            bootstrap: bootstrap.to_string(),
            properties: Vec::new(),
        }
    }

    /// The same broker, with the harness's clients using `properties` (credentials).
    pub fn with_properties(&self, properties: &[(&str, &str)]) -> TestKafka {
        TestKafka {
            bootstrap: self.bootstrap.clone(),
            properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.config().create().expect("admin client")
    }

    /// A topic name no other test uses.
    pub fn unique_topic(&self, prefix: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "{prefix}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_micros() % 1_000_000_000
        )
    }

    /// Create a fresh topic with `partitions` partitions and return its name.
    pub fn create_topic(&self, prefix: &str, partitions: i32) -> String {
        let name = self.unique_topic(prefix);
        self.create_named_topic(&name, partitions);
        name
    }

    pub fn create_named_topic(&self, name: &str, partitions: i32) {
        self.create_named_topic_with(name, partitions, 1, &[]);
    }

    /// A topic with `replication` replicas and more topic configs (a cluster's `min.insync.replicas`).
    pub fn create_named_topic_with(&self, name: &str, partitions: i32, replication: i32, configs: &[(&str, &str)]) {
        let admin = self.admin();
        // Records in tests carry fixed historical timestamps: time-based retention must not delete them.
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(replication)).set("retention.ms", "-1");
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = block_on(admin.create_topics([&topic], &options)).expect("create_topics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        self.wait_for_partitions(name, partitions);
    }

    /// `name`'s topic configs, as the broker describes them (defaults included).
    pub fn topic_configs(&self, name: &str) -> BTreeMap<String, String> {
        let admin = self.admin();
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
        let described = block_on(admin.describe_configs([&rdkafka::admin::ResourceSpecifier::Topic(name)], &options))
            .expect("describe_configs");
        let resource = described
            .into_iter()
            .next()
            .expect("one resource")
            .unwrap_or_else(|e| panic!("describing topic {name}: {e}"));
        resource
            .entries
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)))
            .collect()
    }

    pub fn add_partitions(&self, name: &str, total: usize) {
        let admin = self.admin();
        let np = NewPartitions::new(name, total);
        let results = block_on(admin.create_partitions([&np], &AdminOptions::new())).expect("create_partitions");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("adding partitions to {t}: {e}"));
        }
        self.wait_for_partitions(name, total as i32);
    }

    /// Delete the records of a partition below `offset`, as retention would.
    pub fn delete_records_before(&self, topic: &str, partition: i32, offset: i64) {
        let admin = self.admin();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .unwrap();
        let result = block_on(admin.delete_records(&tpl, &AdminOptions::new())).expect("delete_records");
        for e in result.elements() {
            e.error()
                .unwrap_or_else(|err| panic!("deleting records of {topic}:{partition}: {err}"));
        }
    }

    pub fn delete_topic(&self, name: &str) {
        let admin = self.admin();
        let _ = block_on(admin.delete_topics(&[name], &AdminOptions::new()));
    }

    /// Wait until metadata shows the topic with `partitions` partitions and a leader for each.
    pub fn wait_for_partitions(&self, name: &str, partitions: i32) {
        let consumer: BaseConsumer = self.config().create().expect("consumer");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(md) = consumer.fetch_metadata(Some(name), Duration::from_secs(5)) {
                if let Some(t) = md.topics().first() {
                    if t.error().is_none()
                        && t.partitions().len() as i32 == partitions
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                    {
                        return;
                    }
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "topic {name} never got {partitions} partitions"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn producer(&self, extra: &[(&str, &str)]) -> ThreadedProducer<DefaultProducerContext> {
        let mut c = self.config();
        c.set("linger.ms", "5")
            .set("acks", "all")
            .set("enable.idempotence", "true");
        for (k, v) in extra {
            c.set(*k, *v);
        }
        c.create().expect("producer")
    }

    /// A producer kept open, for tests that produce while a job runs.
    pub fn live_producer(&self) -> LiveProducer {
        LiveProducer(self.producer(&[("linger.ms", "0")]))
    }

    /// Produce records and wait until all are acknowledged.
    pub fn produce(&self, topic: &str, records: &[TestRecord]) {
        let producer = self.producer(&[]);
        for r in records {
            send(&producer, topic, r);
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    }

    /// Produce batches in transactions; `commit = false` aborts that batch.
    pub fn produce_transactions(&self, topic: &str, batches: &[(Vec<TestRecord>, bool)]) {
        let id = format!("tidegate-test-{}", self.unique_topic("tx"));
        let producer = self.producer(&[("transactional.id", &id)]);
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("init_transactions");
        for (records, commit) in batches {
            producer.begin_transaction().expect("begin_transaction");
            for r in records {
                send(&producer, topic, r);
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
            if *commit {
                producer.commit_transaction(Duration::from_secs(30)).expect("commit");
            } else {
                producer.abort_transaction(Duration::from_secs(30)).expect("abort");
            }
        }
    }

    /// A transactional producer whose transactions a test opens and commits by hand (a
    /// transaction left open while a job reads).
    pub fn transactional_producer(&self) -> TransactionalProducer {
        let id = format!("tidegate-test-{}", self.unique_topic("tx"));
        let producer = self.producer(&[("transactional.id", &id), ("linger.ms", "0")]);
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("init_transactions");
        TransactionalProducer(producer)
    }

    /// Set (or, with `None`, remove) a broker-side fetch quota for a client id: Kafka throttles
    /// that client to `bytes_per_second`, whatever the speed of this machine. Fault tests pace a
    /// replay this way, so the work they interrupt lasts long enough on a fast machine too.
    /// Runs Kafka's own `ConfigCommand` from the jars `scripts/kafka` fetched.
    pub fn set_consumer_quota(&self, client_id: &str, bytes_per_second: Option<u64>) {
        let script = format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR"));
        let classpath = std::process::Command::new(&script)
            .arg("classpath")
            .output()
            .expect("scripts/kafka classpath");
        assert!(classpath.status.success(), "scripts/kafka classpath failed");
        let classpath = String::from_utf8_lossy(&classpath.stdout).trim().to_string();
        let change = match bytes_per_second {
            Some(rate) => vec!["--add-config".to_string(), format!("consumer_byte_rate={rate}")],
            None => vec!["--delete-config".to_string(), "consumer_byte_rate".to_string()],
        };
        let out = std::process::Command::new("java")
            .args(["-Xmx128m", "-cp", &classpath, "org.apache.kafka.tools.ConfigCommand"])
            .args(["--bootstrap-server", &self.bootstrap, "--alter"])
            .args(["--entity-type", "clients", "--entity-name", client_id])
            .args(&change)
            .output()
            .expect("running Kafka's ConfigCommand (java)");
        assert!(
            out.status.success(),
            "setting a client quota failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// End offsets of every partition as a read_committed consumer sees them (librdkafka's
    /// default isolation): the last stable offsets, before any transaction not yet settled;
    /// retried while metadata is settling.
    pub fn end_offsets(&self, topic: &str) -> BTreeMap<i32, i64> {
        self.watermarks(topic, "read_committed")
    }

    /// The high watermarks of every partition: past every record appended, committed or not.
    pub fn high_watermarks(&self, topic: &str) -> BTreeMap<i32, i64> {
        self.watermarks(topic, "read_uncommitted")
    }

    fn watermarks(&self, topic: &str, isolation: &str) -> BTreeMap<i32, i64> {
        let consumer: BaseConsumer = self
            .config()
            .set("isolation.level", isolation)
            .create()
            .expect("consumer");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = || -> Option<BTreeMap<i32, i64>> {
                let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).ok()?;
                let t = md.topics().first()?;
                if t.error().is_some() || t.partitions().is_empty() {
                    return None;
                }
                t.partitions()
                    .iter()
                    .map(|p| {
                        consumer
                            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                            .ok()
                            .map(|(_, h)| (p.id(), h))
                    })
                    .collect()
            };
            if let Some(ends) = attempt() {
                return ends;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no metadata or watermarks for {topic}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The high watermarks of every partition once no transaction in it is open: its writers
    /// ended, and the markers of their last transactions are written (a producer's commit
    /// returns before they are). Waited for at most 30 s.
    pub fn settled_ends(&self, topic: &str) -> BTreeMap<i32, i64> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let high = self.high_watermarks(topic);
            if self.end_offsets(topic) == high {
                return high;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{topic} still has an open transaction: high watermarks {high:?}, last stable offsets {:?}",
                self.end_offsets(topic)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where [`TestKafka::read_all`] reads each partition to: its high watermark, so that a
    /// transaction still settling (committed by its producer, its markers not yet written) is
    /// waited for rather than cut off at the last stable offset.
    pub fn read_all_ends(&self, topic: &str) -> BTreeMap<i32, i64> {
        self.high_watermarks(topic)
    }

    /// Every committed record of the topic, per partition in offset order (read_committed), once
    /// every transaction in it has settled: for a topic whose writers ended (a transaction a
    /// killed writer left open is waited for until it times out: see
    /// [`TestKafka::read_committed_now`]).
    pub fn read_all(&self, topic: &str) -> Vec<ReadRecord> {
        self.read_to(topic, self.read_all_ends(topic))
    }

    /// The committed records a read_committed consumer sees now: up to each partition's last
    /// stable offset, before a transaction still open (a writer just killed left it so).
    pub fn read_committed_now(&self, topic: &str) -> Vec<ReadRecord> {
        self.read_to(topic, self.end_offsets(topic))
    }

    fn read_to(&self, topic: &str, ends: BTreeMap<i32, i64>) -> Vec<ReadRecord> {
        let mut c = self.config();
        c.set("group.id", "tidegate-test-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true");
        let consumer: BaseConsumer = c.create().expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in ends.keys() {
            tpl.add_partition_offset(topic, *p, Offset::Beginning).unwrap();
        }
        consumer.assign(&tpl).expect("assign");
        let mut out: Vec<ReadRecord> = Vec::new();
        let mut done: BTreeMap<i32, bool> = ends.iter().map(|(p, e)| (*p, *e == 0)).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while done.values().any(|d| !d) {
            if std::time::Instant::now() > deadline {
                let mut got: BTreeMap<i32, usize> = BTreeMap::new();
                for r in &out {
                    *got.entry(r.partition).or_default() += 1;
                }
                panic!(
                    "reading {topic} back timed out: ends {ends:?}, records read {got:?}, positions {:?}",
                    consumer.position().map(|p| p.to_topic_map())
                );
            }
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    let headers = m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| {
                                    (
                                        h.key.to_string(),
                                        h.value.map(|v| String::from_utf8_lossy(v).into_owned()),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    out.push(ReadRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(|k| k.to_vec()),
                        value: m.payload().map(|v| v.to_vec()),
                        timestamp: m.timestamp().to_millis(),
                        headers,
                    });
                    if m.offset() + 1 >= ends[&m.partition()] {
                        done.insert(m.partition(), true);
                    }
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {
                    // the position, not the EOF event alone: it also moves past transaction markers
                    if let Ok(positions) = consumer.position() {
                        for e in positions.elements() {
                            if let Offset::Offset(pos) = e.offset() {
                                if pos >= ends[&e.partition()] {
                                    done.insert(e.partition(), true);
                                }
                            }
                        }
                    }
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
            }
        }
        out.sort_by_key(|r| (r.partition, r.offset));
        out
    }
}

/// A producer kept open ([`TestKafka::live_producer`]).
pub struct LiveProducer(ThreadedProducer<DefaultProducerContext>);

impl LiveProducer {
    pub fn send(&self, topic: &str, record: &TestRecord) {
        send(&self.0, topic, record);
    }

    pub fn flush(&self) {
        self.0.flush(Duration::from_secs(30)).expect("flush");
    }
}

/// A transactional producer ([`TestKafka::transactional_producer`]).
pub struct TransactionalProducer(ThreadedProducer<DefaultProducerContext>);

impl TransactionalProducer {
    pub fn begin(&self) {
        self.0.begin_transaction().expect("begin_transaction");
    }

    /// Send and wait until the broker has the records (appended, not yet visible to
    /// read_committed consumers).
    pub fn send_and_flush(&self, topic: &str, records: &[TestRecord]) {
        for r in records {
            send(&self.0, topic, r);
        }
        self.0.flush(Duration::from_secs(30)).expect("flush");
    }

    pub fn commit(&self) {
        self.0.commit_transaction(Duration::from_secs(30)).expect("commit");
    }

    pub fn abort(&self) {
        self.0.abort_transaction(Duration::from_secs(30)).expect("abort");
    }
}

fn send(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, r: &TestRecord) {
    let mut headers = OwnedHeaders::new();
    for (k, v) in &r.headers {
        headers = headers.insert(Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    let mut record = BaseRecord::to(topic).payload(&r.value).headers(headers);
    if let Some(k) = &r.key {
        record = record.key(k);
    }
    if let Some(p) = r.partition {
        record = record.partition(p);
    }
    if let Some(ts) = r.timestamp {
        record = record.timestamp(ts);
    }
    let mut pending = record;
    loop {
        match producer.send(pending) {
            Ok(()) => return,
            Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                pending = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => panic!("producing to {topic}: {e}"),
        }
    }
}

/// A record to produce.
#[derive(Debug, Clone, Default)]
pub struct TestRecord {
    pub partition: Option<i32>,
    pub key: Option<String>,
    pub value: String,
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, String)>,
}

impl TestRecord {
    pub fn to(partition: i32, value: impl Into<String>) -> Self {
        TestRecord {
            partition: Some(partition),
            value: value.into(),
            ..Default::default()
        }
    }
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
    pub fn at(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

/// A record read back from a topic.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Option<String>)>,
}

/// Run a future on a small multi-threaded runtime (the job runtime needs one).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Wait for `condition`, polling, up to `timeout`; panics with `what` if it never holds.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Milliseconds since the epoch, now (a record timestamp "as it happens").
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}
