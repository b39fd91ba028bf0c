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

use schemars::JsonSchema;
use serde::Deserialize;

use crate::connector::values::{duration_at, positive, properties, PropertyValue};
use crate::connector::{SinkConnector, SinkContext};
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
            .map_err(|e| crate::error::kafka("creating the sink's producer", e))?;
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
                    return Err(crate::error::kafka(format!("producing to {}", self.settings.topic), e));
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
        self.producer.flush(self.settings.flush_timeout).map_err(|e| {
            crate::error::kafka(format!("waiting for acknowledgements from {}", self.settings.topic), e)
        })?;
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
            .map_err(|e| crate::error::kafka(format!("reading the partitions of {}", self.settings.topic), e))?;
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

fn one() -> i64 {
    1
}

fn sixty_seconds() -> String {
    "60s".into()
}

/// `[sink]` with `type = "kafka"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaSink {
    /// Brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// The topic to write.
    pub topic: String,
    /// Write each record to the partition number it was read from (else the key decides).
    #[serde(default)]
    pub preserve_partition: bool,
    /// Create the topic if it does not exist: `{ partitions = 3, replication_factor = 1 }`.
    pub create_topic: Option<RawCreateTopic>,
    /// How long a checkpoint waits for every send to be acknowledged.
    #[serde(default = "sixty_seconds")]
    pub flush_timeout: String,
    /// librdkafka producer properties, passed through.
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// `sink.create_topic`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCreateTopic {
    /// Partitions of the new topic.
    pub partitions: i64,
    /// Replication factor of the new topic.
    #[serde(default = "one")]
    pub replication_factor: i64,
}

/// The validated Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub settings: KafkaSinkSettings,
    /// Partitions and replication factor, to create the topic if missing.
    pub create_topic: Option<(i32, i32)>,
}

impl SinkConnector for KafkaSinkConfig {
    const TYPE: &'static str = "kafka";
    type Raw = RawKafkaSink;

    fn validate(raw: RawKafkaSink) -> Result<Self> {
        if raw.topic.trim().is_empty() {
            return Err(Error::config("sink.topic", "must not be empty"));
        }
        let create_topic = match raw.create_topic {
            None => None,
            Some(c) => {
                let p = positive("sink.create_topic.partitions", c.partitions)?;
                let r = positive("sink.create_topic.replication_factor", c.replication_factor)?;
                Some((p as i32, r as i32))
            }
        };
        Ok(KafkaSinkConfig {
            settings: KafkaSinkSettings {
                bootstrap_servers: raw.bootstrap_servers,
                topic: raw.topic,
                preserve_partition: raw.preserve_partition,
                properties: properties(raw.properties),
                flush_timeout: duration_at("sink.flush_timeout", &raw.flush_timeout)?,
            },
            create_topic,
        })
    }

    fn describe(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "sink kafka {} topic {}",
            self.settings.bootstrap_servers, self.settings.topic
        )];
        if !self.settings.properties.is_empty() {
            lines.push(format!(
                "  properties {:?}",
                crate::kafka::client::redacted(&self.settings.properties)
            ));
        }
        lines
    }

    fn topic(&self) -> Option<&str> {
        Some(&self.settings.topic)
    }

    fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
        if let Some((partitions, replication)) = self.create_topic {
            super::create_topic_if_missing(&self.settings, partitions, replication)?;
        }
        Ok(Box::new(KafkaSink::new(self.settings.clone(), ctx.end_marker)?))
    }
}
