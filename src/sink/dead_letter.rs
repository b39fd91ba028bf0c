//! Routes records that could not be decoded (policy `dead_letter`) to a dead-letter topic, raw,
//! with the error and their origin in headers; everything else goes to the job's sink. Both are
//! made durable at each checkpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::{Sink, SinkState};
use crate::error::{Error, Result};
use crate::record::{Header, Record};

use super::kafka::KafkaSink;

/// Header names on dead-letter records.
pub const ERROR_HEADER: &str = "tidegate-error";
pub const TOPIC_HEADER: &str = "tidegate-source-topic";
pub const PARTITION_HEADER: &str = "tidegate-source-partition";
pub const OFFSET_HEADER: &str = "tidegate-source-offset";

/// The job's sink, with a side exit for dead letters.
pub struct DeadLetterSink {
    inner: Box<dyn Sink<Record>>,
    dead_letters: KafkaSink,
    /// Dead letters sent so far.
    diverted: u64,
}

impl DeadLetterSink {
    pub fn new(inner: Box<dyn Sink<Record>>, dead_letters: KafkaSink) -> Self {
        DeadLetterSink {
            inner,
            dead_letters,
            diverted: 0,
        }
    }

    /// `inner`, with dead letters produced to `topic` by a producer that reaches the cluster as
    /// the source does (`properties`: SASL, TLS). A missing topic is found now (a request of up to
    /// `timeout`), not at the first undecodable record.
    pub fn to_topic(
        inner: Box<dyn Sink<Record>>,
        bootstrap_servers: &str,
        properties: &BTreeMap<String, String>,
        topic: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let mut settings = super::kafka::KafkaSinkSettings::new(bootstrap_servers, topic);
        settings.properties = crate::client::connection_properties(properties);
        let dead = KafkaSink::new(settings, None)?;
        if !dead.topic_exists(timeout)? {
            return Err(Error::config(
                "source.dead_letter_topic",
                format!("topic {topic} does not exist: create it first"),
            ));
        }
        Ok(Self::new(inner, dead))
    }
}

fn with_error_headers(mut r: Record) -> Record {
    let error = r.dead_letter.take().unwrap_or_default();
    let mut extra = vec![Header {
        key: ERROR_HEADER.into(),
        value: Some(error.into_bytes()),
    }];
    if let Some(t) = &r.topic {
        extra.push(Header {
            key: TOPIC_HEADER.into(),
            value: Some(t.as_bytes().to_vec()),
        });
    }
    if let Some(p) = r.partition {
        extra.push(Header {
            key: PARTITION_HEADER.into(),
            value: Some(p.to_string().into_bytes()),
        });
    }
    if let Some(o) = r.offset {
        extra.push(Header {
            key: OFFSET_HEADER.into(),
            value: Some(o.to_string().into_bytes()),
        });
    }
    r.headers.extend(extra);
    r
}

impl Sink<Record> for DeadLetterSink {
    fn write(&mut self, records: Vec<Record>) -> Result<()> {
        if records.iter().all(|r| r.dead_letter.is_none()) {
            return self.inner.write(records);
        }
        let (dead, good): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| r.dead_letter.is_some());
        self.diverted += dead.len() as u64;
        self.dead_letters
            .write(dead.into_iter().map(with_error_headers).collect())?;
        self.inner.write(good)
    }

    fn prepare_commit(&mut self, checkpoint_id: u64) -> Result<Option<SinkState>> {
        // dead letters are durable (acknowledged) with the checkpoint, at least once
        self.dead_letters.prepare_commit(checkpoint_id)?;
        self.inner.prepare_commit(checkpoint_id)
    }

    fn is_transactional(&self) -> bool {
        self.inner.is_transactional()
    }

    fn fingerprint(&self) -> Option<SinkState> {
        self.inner.fingerprint()
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.commit(checkpoint_id)
    }

    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        self.inner.recover(last)
    }

    fn end_of_input(&mut self) -> Result<()> {
        self.inner.end_of_input()
    }

    fn diverted(&self) -> u64 {
        self.diverted
    }

    fn close(&mut self) -> Result<()> {
        self.dead_letters.close()?;
        self.inner.close()
    }
}
