//! The `kafka` sink: an idempotent producer (`acks=all`) with many sends in flight; a checkpoint
//! barrier waits until every send before it is acknowledged, and the first failed delivery fails
//! the job.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::Message;

use crate::core::Sink;
use crate::error::{Error, Result};
use crate::kafka::client::{client_config, TracingContext};
use crate::record::Record;

/// Records the first failed delivery; librdkafka calls it from its own thread.
struct DeliveryContext {
    log: TracingContext,
    failure: Arc<Mutex<Option<String>>>,
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        self.log.log(level, fac, message)
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.error(error, reason)
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        if let Err((e, message)) = result {
            let mut slot = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(format!(
                    "delivery to {}:{} failed: {e}",
                    message.topic(),
                    message.partition()
                ));
            }
        }
    }
}

/// Settings of the Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkSettings {
    pub bootstrap_servers: String,
    pub topic: String,
    /// Write each record to the partition it came from (else the key decides).
    pub preserve_partition: bool,
    pub properties: BTreeMap<String, String>,
    /// How long a checkpoint waits for acknowledgements.
    pub flush_timeout: Duration,
}

/// Produces records to a topic.
pub struct KafkaSink {
    producer: ThreadedProducer<DeliveryContext>,
    settings: KafkaSinkSettings,
    failure: Arc<Mutex<Option<String>>>,
    end_marker: Option<Record>,
}

impl KafkaSink {
    pub fn new(settings: KafkaSinkSettings, end_marker: Option<Record>) -> Result<Self> {
        let failure = Arc::new(Mutex::new(None));
        let defaults = [
            // no duplicates from retries, no reordering, and every replica has it
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("client.id", "tidegate-sink"),
            // batch for throughput; the checkpoint's flush bounds the latency anyway
            ("linger.ms", "5"),
            ("compression.type", "lz4"),
            ("queue.buffering.max.messages", "1000000"),
        ];
        let producer = client_config(&settings.bootstrap_servers, &defaults, &settings.properties)
            .create_with_context(DeliveryContext {
                log: TracingContext::new("sink"),
                failure: Arc::clone(&failure),
            })
            .map_err(|e| Error::kafka("creating the sink's producer", e))?;
        Ok(KafkaSink {
            producer,
            settings,
            failure,
            end_marker,
        })
    }

    fn check_failure(&self) -> Result<()> {
        match self.failure.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(message) => Err(Error::runtime("kafka sink", message)),
            None => Ok(()),
        }
    }

    fn send(&self, record: &Record, partition: Option<i32>) -> Result<()> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for h in &record.headers {
            headers = headers.insert(KafkaHeader {
                key: &h.key,
                value: h.value.as_deref(),
            });
        }
        let mut message: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(&self.settings.topic).headers(headers);
        if let Some(k) = record.key.as_deref() {
            message = message.key(k);
        }
        if let Some(v) = record.value.as_deref() {
            message = message.payload(v);
        }
        if let Some(ts) = record.timestamp {
            message = message.timestamp(ts);
        }
        if let Some(p) = partition {
            message = message.partition(p);
        }
        loop {
            match self.producer.send(message) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // librdkafka's queue is full: wait for deliveries to make room
                    message = back;
                    self.check_failure()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    return Err(Error::kafka(format!("producing to {}", self.settings.topic), e));
                }
            }
        }
    }
}

impl Sink<Record> for KafkaSink {
    fn write(&mut self, records: Vec<Record>) -> Result<()> {
        self.check_failure()?;
        for r in &records {
            let partition = if self.settings.preserve_partition {
                r.partition
            } else {
                None
            };
            self.send(r, partition)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.producer
            .flush(self.settings.flush_timeout)
            .map_err(|e| Error::kafka(format!("waiting for acknowledgements from {}", self.settings.topic), e))?;
        self.check_failure()
    }

    fn end_of_input(&mut self) -> Result<()> {
        let Some(marker) = self.end_marker.take() else {
            return Ok(());
        };
        // every generated record first, then one marker per partition
        self.flush()?;
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(&self.settings.topic), Duration::from_secs(30))
            .map_err(|e| Error::kafka(format!("reading the partitions of {}", self.settings.topic), e))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .first()
            .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            .unwrap_or_default();
        for p in &partitions {
            self.send(&marker, Some(*p))?;
        }
        tracing::info!(topic = %self.settings.topic, partitions = partitions.len(), "end markers written");
        self.flush()
    }
}
