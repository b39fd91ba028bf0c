//! The `kafka` sink: an idempotent producer (`acks=all`) with many sends in flight. At least once
//! (default): a checkpoint waits until every send before it is acknowledged. Exactly once: the
//! records of each checkpoint go out in one Kafka transaction, committed after the checkpoint is
//! in the state file (its `transaction` module says how a restart knows whether it was), or, with
//! the Kafka checkpoint store on the same cluster, with the checkpoint's state records in the same
//! transaction (KIP-618). The first failed delivery fails the job.

pub mod config;
mod delivery;
mod retry;
pub mod routing;
mod state_writer;
mod targets;
mod transaction;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::client::client_config;
use crate::client::cluster::{self, ClientSpec, Outgoing, Producer};
use crate::client::exactly_once::StateInTransaction;
use crate::core::{sim, Sink, SinkState};
use crate::error::{Error, Result};
use crate::record::Record;
pub use config::KafkaSinkConfig;
use delivery::check_failure;
use retry::retried;
use routing::{HeaderRules, TopicTemplate};
use state_writer::SinkStateWriter;
use transaction::Transactions;

pub use crate::client::exactly_once::Delivery;

/// Settings of the Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkSettings {
    pub bootstrap_servers: String,
    /// The topic, or a template over the record ([`TopicTemplate`]).
    pub topic: String,
    /// What happens to the headers on the way (shared: the config enum stays small).
    pub headers: Arc<HeaderRules>,
    /// Partitions and replication factor of a topic a template resolves to and which does not
    /// exist yet (a literal topic is created when the sink is built).
    pub create_topic: Option<(i32, i32)>,
    /// Write each record to the partition it came from (else the key decides).
    pub preserve_partition: bool,
    pub properties: BTreeMap<String, String>,
    /// How long a checkpoint waits for acknowledgements (and a transaction call for its answer).
    pub flush_timeout: Duration,
    pub delivery: Delivery,
    /// The producer's `transactional.id` for exactly-once delivery: derived from the job's name
    /// (and instance), so a second process running the same job fences the first.
    pub transactional_id: Option<String>,
    /// librdkafka's `transaction.timeout.ms`: an open transaction older than this is aborted by
    /// the broker, so it must outlast a checkpoint interval.
    pub transaction_timeout: Duration,
    /// Stamp records with the time they are written, not their source timestamp.
    pub stamp_now: bool,
}

impl KafkaSinkSettings {
    /// At-least-once settings for `topic`.
    pub fn new(bootstrap_servers: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSinkSettings {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            headers: Arc::default(),
            create_topic: None,
            preserve_partition: false,
            properties: BTreeMap::new(),
            flush_timeout: Duration::from_secs(60),
            delivery: Delivery::AtLeastOnce,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            stamp_now: false,
        }
    }
}

/// The sink's producer: tidegate's settings, then the user's properties.
pub fn producer_spec(settings: &KafkaSinkSettings) -> Result<ClientSpec<'_>> {
    let mut spec = ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "sink")
        // no duplicates from retries, no reordering, and every replica has it
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("client.id", "tidegate-sink")
        // batch for throughput; the checkpoint's flush bounds the latency anyway
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        // what librdkafka holds before the broker has it, bounded in messages and in bytes so a
        // generator faster than the broker waits instead of growing (with 1,000,000 messages and
        // librdkafka's 1 GiB, 100-byte records peaked at 286 MiB, bench/results-20261202005946.json);
        // 100,000 messages are still 150 ms of the fastest producing measured
        .set("queue.buffering.max.messages", "100000")
        .set("queue.buffering.max.kbytes", "16384")
        // the delivery callback acts on failures only (the checkpoint's flush waits for every
        // acknowledgement): a report per delivered record cost the poll thread 7 % of the data
        // generator's CPU (perf, docs/performance.md)
        .set("delivery.report.only.error", "true");
    if settings.delivery == Delivery::ExactlyOnce {
        let id = settings.transactional_id.as_deref().ok_or_else(|| {
            Error::config(
                "sink.delivery",
                "exactly_once needs a transactional id (the job's name)",
            )
        })?;
        spec = spec.set("transactional.id", id).set(
            "transaction.timeout.ms",
            settings.transaction_timeout.as_millis().to_string(),
        );
    }
    Ok(spec)
}

/// [`producer_spec`] as librdkafka's config (to check its properties).
pub fn producer_config(settings: &KafkaSinkSettings) -> Result<rdkafka::config::ClientConfig> {
    let spec = producer_spec(settings)?;
    let defaults: Vec<(&str, &str)> = spec.defaults.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Ok(client_config(spec.bootstrap_servers, &defaults, spec.properties))
}

/// Produces records to a topic.
pub struct KafkaSink {
    /// Shared with a commit-marker call that may outlive its timeout (see `transaction.rs`).
    producer: Arc<dyn Producer>,
    settings: KafkaSinkSettings,
    end_marker: Option<Record>,
    /// Exactly-once delivery: the transaction in progress and its commit marker (shared with the
    /// Kafka checkpoint store when the checkpoints travel in the sink's transactions; it writes
    /// only while the sink waits between a prepare and its commit).
    transactions: Option<Arc<Mutex<Transactions>>>,
    /// A transaction is open (this thread began it; the next commit or abort ends it): records
    /// go in without a look at the shared transaction state each.
    begun: bool,
    /// `settings.topic`, parsed.
    route: Arc<TopicTemplate>,
    /// The partition count of each topic written so far (when it matters: templates and
    /// `preserve_partition`).
    targets: std::collections::HashMap<String, i32>,
}

impl KafkaSink {
    pub fn new(settings: KafkaSinkSettings, end_marker: Option<Record>) -> Result<Self> {
        let producer = cluster::of(&settings.bootstrap_servers).producer(&producer_spec(&settings)?)?;
        let transactional_id = match settings.delivery {
            Delivery::AtLeastOnce => None,
            Delivery::ExactlyOnce => settings.transactional_id.clone(),
        };
        let transactions = transactional_id
            .map(|id| Transactions::new(&settings, id).map(|t| Arc::new(Mutex::new(t))))
            .transpose()?;
        let route = Arc::new(TopicTemplate::parse(&settings.topic)?);
        Ok(KafkaSink {
            producer,
            settings,
            end_marker,
            transactions,
            begun: false,
            route,
            targets: std::collections::HashMap::new(),
        })
    }

    /// The exactly-once sink's transactions as the Kafka checkpoint store writes into them
    /// (`None`: the sink is not transactional). The checkpoints then need no commit marker.
    pub fn state_in_transaction(&self) -> Option<Arc<dyn StateInTransaction>> {
        let transactions = self.transactions.as_ref()?;
        lock(transactions).carry_state();
        Some(Arc::new(SinkStateWriter {
            producer: Arc::clone(&self.producer),
            transactions: Arc::clone(transactions),
            properties: self.settings.properties.clone(),
            timeout: self.settings.flush_timeout,
        }))
    }

    fn check_failure(&self) -> Result<()> {
        check_failure(self.producer.as_ref(), &self.settings.properties, || self.fenced())
    }

    fn fenced(&self) -> Error {
        match &self.transactions {
            Some(t) => lock(t).fenced(),
            None => Error::runtime("kafka sink", "the producer was fenced"),
        }
    }

    /// A Kafka error of a call, as the job's error (a fencing names the other process's job).
    /// A producer in a fatal state answers every call with the generic `Fatal`; the cause is
    /// librdkafka's fatal error (a fencing, when another process took over).
    fn kafka_error(&self, context: String, e: KafkaError) -> Error {
        let code = match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::Fatal) => self.producer.fatal_error().map(|(code, _)| code),
            code => code,
        };
        match code {
            Some(code) if cluster::is_fencing(code) => self.fenced(),
            _ => crate::error::kafka(context, e),
        }
    }

    fn send(&mut self, record: &Record, topic: &str, partition: Option<i32>) -> Result<()> {
        if !self.begun {
            if let Some(t) = &self.transactions {
                lock(t).begin_if_needed(&self.producer, topic)?;
                self.begun = true;
            }
        }
        let ruled;
        let record_headers = if self.settings.headers.is_empty() {
            &record.headers
        } else {
            ruled = self.settings.headers.apply(&record.headers);
            &ruled
        };
        let timestamp = if self.settings.stamp_now {
            Some(crate::core::event_time::wall_millis())
        } else {
            record.timestamp
        };
        let message = Outgoing {
            topic,
            partition,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: record_headers,
            timestamp,
        };
        loop {
            match self.producer.send(&message) {
                Ok(()) => return Ok(()),
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                    // librdkafka's queue is full: wait for deliveries to make room
                    self.check_failure()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    let context = format!("producing to {topic}");
                    return Err(self.kafka_error(context, e));
                }
            }
        }
    }

    /// `topic`'s metadata, up to `timeout`; a refused authentication or TLS handshake ends the
    /// wait at once.
    fn metadata(&self, topic: &str, timeout: Duration, what: &str) -> Result<cluster::Metadata> {
        self.producer
            .metadata(Some(topic), timeout, &self.settings.properties, what)
    }

    /// Whether the sink's topic exists (a metadata request, up to `timeout`).
    pub fn topic_exists(&self, timeout: Duration) -> Result<bool> {
        let what = format!("looking up topic {}", self.settings.topic);
        let metadata = self.metadata(&self.settings.topic, timeout, &what)?;
        Ok(metadata.partitions_of(&self.settings.topic).is_some())
    }

    /// `topic`'s partitions, from one metadata request of up to `timeout`. A topic error,
    /// or a topic without partitions, is an error: never "no partition to write to".
    fn partitions_of(&self, topic: &str, timeout: Duration) -> Result<Vec<i32>> {
        let context = format!("reading the partitions of {topic}");
        let metadata = self.metadata(topic, timeout, &context)?;
        let Some(found) = metadata.topics.iter().find(|t| t.name == topic) else {
            return Err(Error::runtime(context, "the broker's metadata does not list the topic"));
        };
        if let Some(code) = found.error {
            return Err(Error::runtime(context, RDKafkaErrorCode::from(code)));
        }
        if found.partitions.is_empty() {
            return Err(Error::runtime(context, "the topic has no partitions"));
        }
        Ok(found.partitions.clone())
    }

    /// Wait until every send is acknowledged, up to `flush_timeout`, in short slices so a
    /// refused authentication or a failed delivery ends the wait at once.
    fn flush(&mut self) -> Result<()> {
        let deadline = sim::now() + self.settings.flush_timeout;
        loop {
            let slice = deadline
                .saturating_duration_since(sim::now())
                .min(Duration::from_millis(500));
            let result = self.producer.flush(slice);
            self.check_failure()?;
            match result {
                Ok(()) => return Ok(()),
                Err(e) if sim::now() >= deadline || sim::active() => {
                    let context = format!("waiting for acknowledgements from {}", self.settings.topic);
                    return Err(self.kafka_error(context, e));
                }
                Err(_) => {}
            }
        }
    }
}

impl Sink<Record> for KafkaSink {
    /// Its topic (or topic template), header rules, delivery and transactional id: a state file
    /// is resumed only by the same (an exactly-once checkpoint is settled through its
    /// transactional id's commit marker; a changed routing would split a replay between two
    /// destinations).
    fn fingerprint(&self) -> Option<SinkState> {
        let delivery = match self.settings.delivery {
            Delivery::AtLeastOnce => "at_least_once",
            Delivery::ExactlyOnce => "exactly_once",
        };
        let transactional_id = self
            .transactions
            .as_ref()
            .map(|_| self.settings.transactional_id.clone());
        let mut fingerprint = serde_json::json!({
            "type": "kafka",
            "topic": self.settings.topic,
            "delivery": delivery,
            "transactional_id": transactional_id.flatten(),
        });
        // only when set: a state file written before header rules existed still matches
        if !self.settings.headers.is_empty() {
            fingerprint["headers"] = self.settings.headers.to_json();
        }
        Some(fingerprint)
    }

    fn write(&mut self, records: Vec<Record>) -> Result<()> {
        self.check_failure()?;
        let route = Arc::clone(&self.route);
        for r in &records {
            let partition = if self.settings.preserve_partition {
                r.partition
            } else {
                None
            };
            let topic = targets::topic_of(&route, r)?;
            self.target_ready(&topic, partition, r)?;
            self.send(r, &topic, partition)?;
        }
        Ok(())
    }

    fn prepare_commit(&mut self, checkpoint_id: u64) -> Result<Option<SinkState>> {
        let marker = match &self.transactions {
            // the commit marker goes into the transaction, beside the records
            Some(t) => Some(lock(t).prepare(&self.producer, checkpoint_id)?),
            None => None,
        };
        self.flush()?;
        Ok(marker)
    }

    fn is_transactional(&self) -> bool {
        self.transactions.is_some()
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let Some(t) = &self.transactions else {
            return Ok(());
        };
        self.begun = false;
        let result = lock(t).commit(&self.producer, checkpoint_id);
        result.and_then(|_| self.check_failure())
    }

    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        match &self.transactions {
            Some(t) => lock(t).recover(&self.producer, last),
            None => Ok(true),
        }
    }

    fn end_of_input(&mut self) -> Result<()> {
        let Some(marker) = self.end_marker.take() else {
            return Ok(());
        };
        // every generated record first, then one marker per partition
        self.flush()?;
        let route = Arc::clone(&self.route);
        let topic = targets::topic_of(&route, &marker)?;
        let what = format!("writing the end markers to {topic}");
        let partitions = retried(&what, self.settings.flush_timeout, |left| {
            self.partitions_of(&topic, left)
        })?;
        for p in &partitions {
            self.send(&marker, &topic, Some(*p))?;
        }
        tracing::info!(topic = %topic, partitions = partitions.len(), "end markers written");
        self.flush()
    }

    fn close(&mut self) -> Result<()> {
        if let Some(t) = &self.transactions {
            self.begun = false;
            lock(t).abort_open(&self.producer);
        }
        self.flush()
    }
}

fn lock(transactions: &Mutex<Transactions>) -> std::sync::MutexGuard<'_, Transactions> {
    transactions.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
