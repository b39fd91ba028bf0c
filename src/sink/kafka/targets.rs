//! The topics the Kafka sink writes to, as far as it must know them: a topic a template resolves
//! to is looked up (or created, with `sink.create_topic`) the first time, and with
//! `preserve_partition` each record's partition is checked against the topic's partitions.

use std::borrow::Cow;

use super::routing::TopicTemplate;
use super::{retried, KafkaSink};
use crate::error::{Error, Result};
use crate::record::Record;

/// Where `record` goes. The Kafka source runs the same resolution in its emit path (so its
/// `decode_errors` policy decides about a record without a topic); other sources have no such
/// policy, and the job fails naming the record.
pub(super) fn topic_of<'a>(route: &'a TopicTemplate, record: &Record) -> Result<Cow<'a, str>> {
    route.resolve(record).map_err(|e| {
        Error::runtime(
            format!(
                "kafka sink: no topic for the record {}:{}@{}",
                record.topic.as_deref().unwrap_or("-"),
                record.partition.map_or("-".to_string(), |p| p.to_string()),
                record.offset.map_or("-".to_string(), |o| o.to_string()),
            ),
            format!("sink.topic {:?}: {e}", route.text()),
        )
    })
}

impl KafkaSink {
    /// Make sure `topic` can take a record for `partition`: a literal topic without
    /// `preserve_partition` needs nothing (as before templates); else the topic's partition
    /// count is looked up once (and again when a partition is beyond it: partitions may be added).
    pub(super) fn target_ready(&mut self, topic: &str, partition: Option<i32>, record: &Record) -> Result<()> {
        let templated = self.route.literal().is_none();
        if !templated && !self.settings.preserve_partition {
            return Ok(());
        }
        let fits = |count: i32| partition.is_none_or(|p| p < count);
        if self.targets.get(topic).copied().is_some_and(fits) {
            return Ok(());
        }
        if templated && !self.targets.contains_key(topic) {
            if let Some((partitions, replication)) = self.settings.create_topic {
                crate::sink::create_topic_if_missing(&self.settings, topic, partitions, replication)?;
            }
        }
        let what = if templated {
            format!(
                "looking up topic {topic} (sink.topic {:?} resolved to it; create it, or set sink.create_topic)",
                self.route.text()
            )
        } else {
            format!("looking up the partitions of {topic}")
        };
        let partitions = retried(&what, self.settings.flush_timeout, |left| {
            self.partitions_of(topic, left)
        })?;
        let count = partitions.len() as i32;
        tracing::info!(topic, partitions = count, "sink topic looked up");
        self.targets.insert(topic.to_string(), count);
        match partition {
            Some(p) if p >= count => Err(Error::runtime(
                "sink.preserve_partition",
                format!(
                    "the record {}:{p}@{} goes to partition {p} of {topic}, but {topic} has {count} partitions: \
                     give it as many partitions as the source, or turn preserve_partition off",
                    record.topic.as_deref().unwrap_or("-"),
                    record.offset.map_or("-".to_string(), |o| o.to_string()),
                ),
            )),
            _ => Ok(()),
        }
    }
}
