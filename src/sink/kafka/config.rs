//! The Kafka sink's config: the `[sink]` table as written, its validation (every error names its
//! key), what `validate` prints, and the sink it builds.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::routing::{HeaderRules, RawHeaders, TopicTemplate};
use super::settings::{CreateTopic, KafkaSinkSettings};
use super::targets::{check_exists, create_topic_if_missing, exists};
use super::writer::KafkaSink;
use crate::client::exactly_once::Delivery;
use crate::connector::values::{duration_at, keyword, positive, properties, PropertyValue};
use crate::connector::{JobConfig, RecordCheck, SinkConnector, SinkContext};
use crate::core::Sink;
use crate::error::{Error, Result};
use crate::record::Record;

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
    /// The topic to write, or a template over each record: `{topic}`, `{partition}`, `{key}`
    /// and `{headers.NAME}` (the header's first value, as read: before the `headers` rules) are
    /// replaced, e.g.
    /// `"{headers.tidegate-source-topic}"` sends dead letters back to their source topics,
    /// `"{topic}-replay"` writes beside them. A record the template gives no valid topic for (a
    /// missing or null header, a key or header that is not UTF-8, an empty or invalid name) is
    /// handled by the Kafka source's `decode_errors` policy (other sources fail the job naming
    /// it); a resolved topic that does not exist is created with `create_topic`, else the job
    /// fails naming it. With "exactly_once", one transaction spans every topic written.
    pub topic: String,
    /// Write each record to the partition number it was read from (else the key decides). A
    /// record whose partition the target topic does not have fails the job, naming the topic and
    /// its partition count.
    #[serde(default)]
    pub preserve_partition: bool,
    /// Create the topic if it does not exist: `{ partitions = 3, replication_factor = 1 }` (each
    /// topic a `topic` template resolves to, the first time it is written).
    pub create_topic: Option<RawCreateTopic>,
    /// Header rules, applied in order: `drop = ["x-replicator-*"]` (names or `*` patterns),
    /// `rename = { "old" = "new" }`, `set = { "x-replayed-by" = "tidegate" }` (replaces any
    /// header of that name). Without rules, headers are written as read: order, repeated names,
    /// null and binary values kept.
    pub headers: Option<RawHeaders>,
    /// "at_least_once" (default: works with any consumer; a crash repeats the records written
    /// after the last checkpoint) or "exactly_once" (each checkpoint's records in one Kafka
    /// transaction, committed with the checkpoint; consumers must read with
    /// `isolation.level = read_committed`). The transactional id is `tidegate-<job.name>`
    /// (`-<instance index>` with several instances): a second process running the same job
    /// fences the first.
    pub delivery: Option<String>,
    /// With "exactly_once": how long the broker keeps a transaction open (librdkafka's
    /// `transaction.timeout.ms`, which `sink.properties` may not set); at least twice
    /// `checkpoint.interval`, at most 2 minutes for a group's members. A transaction that times
    /// out fails the job, which then resumes exactly from its last checkpoint.
    #[serde(default = "sixty_seconds")]
    pub transaction_timeout: String,
    /// How long a checkpoint waits for every send to be acknowledged.
    #[serde(default = "sixty_seconds")]
    pub flush_timeout: String,
    /// The timestamp of each written record: "source" (default: the one it was read with) or
    /// "now" (when it is written: for a paced replay into a topic a live system reads).
    pub timestamps: Option<String>,
    /// librdkafka producer properties, passed through. Under its default `partitioner`, each
    /// write's records without a key go to one partition, the next in turn (librdkafka's sticky
    /// spread, chosen by the sink); with another `partitioner`, or `linger.ms = 0`, librdkafka's
    /// partitioner places them.
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

/// `sink.create_topic`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCreateTopic {
    /// Partitions of the new topic (or `like_source`).
    pub partitions: Option<i64>,
    /// Create it like the Kafka source's topics: their largest partition count and
    /// `max.message.bytes`, and the first one's `cleanup.policy`, `retention.ms` and
    /// `retention.bytes` (the values in effect; `configs` given here win). Not its
    /// `message.timestamp.type`: the copy keeps the records' timestamps. A topic that exists is
    /// used as it is. What `tidegate replay --create-topic` sets.
    #[serde(default)]
    pub like_source: bool,
    /// Replication factor of the new topic.
    #[serde(default = "one")]
    pub replication_factor: i64,
    /// Topic configs of the new topic, e.g. `{ "cleanup.policy" = "compact", "retention.ms" =
    /// "-1" }` (`tidegate replay --create-topic` copies the source topic's).
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// The validated Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub settings: KafkaSinkSettings,
    /// How to create the topic if it is missing.
    pub create_topic: Option<CreateTopic>,
}

/// `create` as it is made: with the source's partitions and topic configs when it is
/// `like_source` (its own configs win).
fn resolved(create: &CreateTopic, ctx: &SinkContext<'_>) -> Result<CreateTopic> {
    if !create.like_source {
        return Ok(create.clone());
    }
    let layout = (ctx.source_layout)()?.ok_or_else(|| {
        Error::config(
            "sink.create_topic.like_source",
            "the source has no topics to copy the layout of: give partitions",
        )
    })?;
    let mut configs = layout.configs;
    configs.extend(create.configs.clone());
    Ok(CreateTopic {
        partitions: layout.partitions,
        replication: create.replication,
        configs,
        like_source: false,
    })
}

/// The transactional id of a job's exactly-once Kafka sink.
pub fn transactional_id(job: &JobConfig) -> String {
    crate::client::exactly_once::transactional_id(&job.name, job.member.as_deref(), job.instance)
}

impl SinkConnector for KafkaSinkConfig {
    const TYPE: &'static str = "kafka";
    type Raw = RawKafkaSink;

    fn validate(raw: RawKafkaSink) -> Result<Self> {
        let route = TopicTemplate::parse(&raw.topic)?;
        let headers = HeaderRules::validate(raw.headers.unwrap_or_default())?;
        let create_topic = match raw.create_topic {
            None => None,
            Some(c) => {
                let p = match (c.partitions, c.like_source) {
                    (Some(p), false) => positive("sink.create_topic.partitions", p)?,
                    (None, true) => 0,
                    (Some(_), true) => {
                        return Err(Error::config(
                            "sink.create_topic.partitions",
                            "give partitions or like_source = true, not both",
                        ))
                    }
                    (None, false) => {
                        return Err(Error::config(
                            "sink.create_topic.partitions",
                            "missing: give the new topic's partitions, or like_source = true",
                        ))
                    }
                };
                let r = positive("sink.create_topic.replication_factor", c.replication_factor)?;
                if let Some(k) = c
                    .configs
                    .keys()
                    .find(|k| k.trim().is_empty() || k.contains(char::is_whitespace))
                {
                    return Err(Error::config(
                        "sink.create_topic.configs",
                        format!("{k:?} is not a topic config name"),
                    ));
                }
                Some(CreateTopic {
                    partitions: i32::try_from(p)
                        .map_err(|_| Error::config("sink.create_topic.partitions", "too many"))?,
                    replication: i32::try_from(r)
                        .map_err(|_| Error::config("sink.create_topic.replication_factor", "too many"))?,
                    configs: c.configs,
                    like_source: c.like_source,
                })
            }
        };
        let delivery = keyword(
            "sink.delivery",
            raw.delivery.as_deref(),
            Delivery::AtLeastOnce,
            &[
                ("at_least_once", Delivery::AtLeastOnce),
                ("exactly_once", Delivery::ExactlyOnce),
            ],
        )?;
        let properties = properties("sink", raw.properties)?;
        if properties.contains_key("transaction.timeout.ms") {
            return Err(Error::config(
                "sink.properties.\"transaction.timeout.ms\"",
                "is set from sink.transaction_timeout, which is checked against checkpoint.interval (and capped \
                 for a group's members); set that instead",
            ));
        }
        if delivery == Delivery::ExactlyOnce {
            if let Some(key) = ["transactional.id", "enable.idempotence"]
                .into_iter()
                .find(|k| properties.contains_key(*k))
            {
                return Err(Error::config(
                    format!("sink.properties.\"{key}\""),
                    "is set by tidegate with delivery = \"exactly_once\"; remove it",
                ));
            }
        }
        let mut settings = KafkaSinkSettings::new(raw.bootstrap_servers, raw.topic);
        settings.preserve_partition = raw.preserve_partition;
        settings.headers = std::sync::Arc::new(headers);
        // a literal topic is created when the sink is built; a template's, when first resolved
        settings.create_topic = create_topic.clone().filter(|_| route.literal().is_none());
        settings.properties = properties;
        settings.flush_timeout = duration_at("sink.flush_timeout", &raw.flush_timeout)?;
        settings.delivery = delivery;
        settings.stamp_now = keyword(
            "sink.timestamps",
            raw.timestamps.as_deref(),
            false,
            &[("source", false), ("now", true)],
        )?;
        settings.transaction_timeout = duration_at("sink.transaction_timeout", &raw.transaction_timeout)?;
        // librdkafka checks properties only when a client is created: every client a run makes
        // of these properties is created once when the whole config is loaded (super::probes)
        Ok(KafkaSinkConfig { settings, create_topic })
    }

    fn check_checkpoint_interval(&self, interval: Duration) -> Result<()> {
        let s = &self.settings;
        // a transaction stays open for one interval (plus its flush): the broker must not abort it
        if s.delivery == Delivery::ExactlyOnce && interval * 2 > s.transaction_timeout {
            return Err(Error::config(
                "sink.transaction_timeout",
                format!(
                    "{:?} is too short for checkpoint.interval {interval:?}: a transaction stays open for \
                     an interval and its flush; make it at least twice the interval",
                    s.transaction_timeout
                ),
            ));
        }
        Ok(())
    }

    fn check_connection(&self) -> Result<Vec<String>> {
        let s = &self.settings;
        // an idempotent producer reaches the cluster as the job's would, without a transaction
        let mut probe = s.clone();
        probe.delivery = Delivery::AtLeastOnce;
        let sink = KafkaSink::new(probe, None)?;
        let found = match TopicTemplate::parse(&s.topic)?.literal() {
            None => format!("topics from the template {:?} are looked up as records arrive", s.topic),
            Some(topic) => match sink.topic_exists(s.flush_timeout)? {
                true => format!("topic {topic} exists"),
                false => format!("topic {topic} does not exist"),
            },
        };
        Ok(vec![crate::client::connected_line(
            "sink",
            &s.bootstrap_servers,
            &s.properties,
            &found,
        )])
    }

    fn describe(&self) -> Vec<String> {
        let s = &self.settings;
        let delivery = match s.delivery {
            Delivery::AtLeastOnce => "at least once".to_string(),
            Delivery::ExactlyOnce => format!(
                "exactly once (a transaction per checkpoint, timing out after {})",
                humantime::format_duration(s.transaction_timeout)
            ),
        };
        let mut lines = vec![format!(
            "sink kafka {}, topic {}, {delivery}{}",
            s.bootstrap_servers,
            s.topic,
            if s.preserve_partition {
                ", each record to the partition it came from"
            } else {
                ""
            }
        )];
        if let Some(c) = self.create_topic.as_ref().filter(|c| c.like_source) {
            lines.push(format!(
                "  the topic is created if missing like the source's topics (their partitions and retention), replication factor {}",
                c.replication
            ));
        } else if let Some(c) = &self.create_topic {
            let configs: Vec<String> = c.configs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            lines.push(format!(
                "  the topic is created if missing: {} partitions, replication factor {}{}",
                c.partitions,
                c.replication,
                if configs.is_empty() {
                    String::new()
                } else {
                    format!(", {}", configs.join(", "))
                }
            ));
        }
        if TopicTemplate::parse(&s.topic).is_ok_and(|t| t.literal().is_none()) {
            lines.push(format!(
                "  the topic is resolved per record from {:?}; a record without one follows source.decode_errors",
                s.topic
            ));
        }
        if !s.headers.is_empty() {
            lines.push(format!(
                "  headers: {} (drop, then rename, then set)",
                s.headers.to_json()
            ));
        }
        if s.stamp_now {
            lines.push("  records are stamped with the time they are written".to_string());
        }
        if !s.properties.is_empty() {
            let props: Vec<String> = crate::client::redacted(&s.properties)
                .into_iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            lines.push(format!("  properties {}", props.join(", ")));
        }
        lines
    }

    /// A literal topic only: a template names no one topic (Avro subjects need one).
    fn topic(&self) -> Option<&str> {
        TopicTemplate::parse(&self.settings.topic)
            .ok()
            .filter(|t| t.literal().is_some())
            .map(|_| self.settings.topic.as_str())
    }

    fn record_check(&self) -> Option<RecordCheck> {
        TopicTemplate::parse(&self.settings.topic).ok()?.record_check()
    }

    fn build(&self, ctx: SinkContext<'_>) -> Result<Box<dyn Sink<Record>>> {
        let mut settings = self.settings.clone();
        match (&self.create_topic, self.topic()) {
            // a topic that exists needs no layout of the source's (nor its lookup at each start)
            (Some(c), Some(topic)) if c.like_source && exists(&settings, topic)? => {}
            (Some(c), Some(topic)) => create_topic_if_missing(&settings, topic, &resolved(c, &ctx)?)?,
            (Some(c), None) => settings.create_topic = Some(resolved(c, &ctx)?),
            // a missing topic named now, not after every record's delivery timed out
            (None, Some(topic)) => check_exists(&settings, topic)?,
            (None, None) => {}
        }
        // the checkpoint store that carries its checkpoints in the sink's transactions names the id
        // (it follows the job's instance count across changes of it)
        settings.transactional_id = Some(match &ctx.state_in_transaction {
            Some(slot) => slot.transactional_id.clone(),
            None => transactional_id(ctx.job),
        });
        let sink = KafkaSink::new(settings, ctx.end_marker)?;
        if let Some(slot) = &ctx.state_in_transaction {
            let writer = sink.state_in_transaction().ok_or_else(|| {
                Error::runtime(
                    "kafka sink",
                    "the checkpoint store expects an exactly-once sink to carry its checkpoints",
                )
            })?;
            if !slot.attach(writer) {
                return Err(Error::runtime(
                    "kafka sink",
                    "a second sink attached to the checkpoint store",
                ));
            }
        }
        Ok(Box::new(sink))
    }
}
