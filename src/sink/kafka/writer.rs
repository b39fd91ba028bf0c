//! The Kafka sink's writer (Flink's `KafkaWriter`): sends each record to its topic, waits for
//! the acknowledgements at a checkpoint, and with exactly-once delivery opens, prepares and
//! commits the checkpoint's transaction.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::delivery::check_failure;
use super::keyless::KeylessPartitions;
use super::routing::TopicTemplate;
use super::settings::{producer_spec, KafkaSinkSettings};
use super::state_writer::SinkStateWriter;
use super::targets::{self, Targets};
use super::transaction::{lock, Transactions};
use crate::client::cluster::{self, Outgoing, Producer};
use crate::client::exactly_once::{Delivery, StateInTransaction};
use crate::client::retry::retried;
use crate::core::{sim, Sink, SinkState};
use crate::error::{Error, Result};
use crate::record::Record;

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
    targets: Targets,
    /// The partition of each write's records without a key.
    keyless: KeylessPartitions,
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
        let keyless = KeylessPartitions::new(&settings.properties);
        Ok(KafkaSink {
            producer,
            settings,
            end_marker,
            transactions,
            begun: false,
            route,
            targets: Targets::default(),
            keyless,
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

    /// Open the checkpoint's transaction before its first record (exactly once).
    fn begin(&mut self, topic: &str) -> Result<()> {
        if !self.begun {
            if let Some(t) = &self.transactions {
                lock(t).begin_if_needed(&self.producer, topic)?;
                self.begun = true;
            }
        }
        Ok(())
    }

    /// Wait for deliveries to make room in librdkafka's full queue (or for a failed one).
    fn queue_full(&self) -> Result<()> {
        self.check_failure()?;
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }

    /// `records`, all to `topic` with the records' own headers and timestamps, handed over in
    /// batches (librdkafka's batch call where a record allows it).
    fn send_all(&mut self, records: &[Record], topic: &str) -> Result<()> {
        if records.is_empty() {
            // no transaction opened for nothing (a write whose records all went to the
            // dead-letter topic)
            return Ok(());
        }
        let preserve = self.settings.preserve_partition;
        let partition_of = |r: &Record| if preserve { r.partition } else { None };
        for r in records {
            let partition = partition_of(r);
            self.targets
                .ready(self.producer.as_ref(), &self.settings, &self.route, topic, partition, r)?;
        }
        self.begin(topic)?;
        let keyless = if preserve || records.iter().all(|r| r.key.is_some()) {
            None
        } else {
            self.keyless
                .next(self.producer.as_ref(), &self.settings.properties, topic)
        };
        let messages: Vec<Outgoing<'_>> = records
            .iter()
            .map(|r| Outgoing {
                topic,
                partition: partition_of(r).or(keyless.filter(|_| r.key.is_none())),
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers: &r.headers,
                timestamp: r.timestamp,
            })
            .collect();
        let mut done = 0;
        while done < messages.len() {
            match self.producer.send_batch(&messages[done..]) {
                (queued, None) => done += queued,
                (queued, Some(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))) => {
                    done += queued;
                    self.queue_full()?;
                }
                (_, Some(e)) => return Err(self.kafka_error(format!("producing to {topic}"), e)),
            }
        }
        Ok(())
    }

    fn send(&mut self, record: &Record, topic: &str, partition: Option<i32>) -> Result<()> {
        self.begin(topic)?;
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
                Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => self.queue_full()?,
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
        let own = self.settings.headers.is_empty() && !self.settings.stamp_now;
        if let (Some(topic), true) = (route.literal(), own) {
            // one topic, the records' own headers and timestamps: the whole write in batches
            return self.send_all(&records, topic);
        }
        for r in &records {
            let partition = if self.settings.preserve_partition {
                r.partition
            } else {
                None
            };
            let topic = targets::topic_of(&route, r)?;
            self.targets
                .ready(self.producer.as_ref(), &self.settings, &route, &topic, partition, r)?;
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
            targets::partitions_of(self.producer.as_ref(), &self.settings.properties, &topic, left)
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
