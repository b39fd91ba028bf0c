//! The checks a group-coordinated job (`job.coordination = "group"`) makes across its sections:
//! a Kafka source subscribed by topic names (or partitions), state in the Kafka store (any member
//! may take any split), and a sink whose output does not stay on one machine or with one
//! transactional id.

use crate::checkpoint_store::StoreConfig;
use crate::connector::registry::{SinkConfig, SourceConfig};
use crate::connector::JobConfig;
use crate::error::{Error, Result};

/// The longest `sink.transaction_timeout` of a group member: a killed member's transaction must
/// end (time out) before the others' restore gives up waiting for it.
const MAX_TRANSACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Check a group-coordinated job against its source, sink and store: a Kafka source subscribed
/// by topic names (or partitions), state in the Kafka store (any member may take any split), and
/// a sink whose output does not stay on one machine or with one transactional id.
pub(super) fn validate(job: &JobConfig, source: &SourceConfig, sink: &SinkConfig, store: &StoreConfig) -> Result<()> {
    if job.member.is_none() {
        return Ok(());
    }
    let SourceConfig::Kafka(k) = source else {
        return Err(Error::config(
            "job.coordination",
            format!(
                "\"group\" assigns a Kafka source's partitions, not a {} source's work: use job.instance",
                source.kind()
            ),
        ));
    };
    crate::client::cluster::native::protocol_of(&k.settings.properties)?;
    if matches!(k.settings.subscription, crate::kafka::Subscription::Pattern(_)) {
        return Err(Error::config(
            "source.topic_pattern",
            "not used with job.coordination = \"group\" (the group subscribes by topic name): list source.topics",
        ));
    }
    let StoreConfig::Kafka(store) = store else {
        return Err(Error::config(
            "checkpoint.store",
            "must be \"kafka\" with job.coordination = \"group\": a member takes over partitions another member \
             checkpointed, so the state must be where every member can read it",
        ));
    };
    match sink {
        SinkConfig::File(_) => Err(Error::config(
            "sink.type",
            "\"file\" is not used with job.coordination = \"group\": a file's output (and its recovery) stays on \
             the machine that wrote it; write to Kafka",
        )),
        SinkConfig::Kafka(s)
            if s.settings.delivery == crate::client::exactly_once::Delivery::ExactlyOnce
                && s.settings.bootstrap_servers != k.settings.bootstrap_servers =>
        {
            Err(Error::config(
                "sink.bootstrap_servers",
                "with job.coordination = \"group\" and an exactly-once Kafka sink, the sink must be on the \
                 source's cluster (the same bootstrap_servers): each transaction commits its positions to the \
                 job's consumer group there (KIP-447); use an at-least-once sink to write to another cluster",
            ))
        }
        SinkConfig::Kafka(s)
            if s.settings.delivery == crate::client::exactly_once::Delivery::ExactlyOnce
                && s.settings.transaction_timeout > MAX_TRANSACTION_TIMEOUT =>
        {
            Err(Error::config(
                "sink.transaction_timeout",
                format!(
                    "must be at most {} with job.coordination = \"group\": a killed member's open transaction \
                     holds the checkpoint topic until it times out, and the other members wait for it at most {}",
                    humantime::format_duration(MAX_TRANSACTION_TIMEOUT),
                    humantime::format_duration(crate::checkpoint_store::RESTORE_WAIT),
                ),
            ))
        }
        SinkConfig::Kafka(s)
            if s.settings.delivery == crate::client::exactly_once::Delivery::ExactlyOnce
                && store.sink_transactional_id.is_none() =>
        {
            Err(Error::config(
                "checkpoint.bootstrap_servers",
                "with job.coordination = \"group\" and an exactly-once Kafka sink, the checkpoints must travel in the \
                 sink's transactions (KIP-618): keep the Kafka store on the sink's cluster",
            ))
        }
        _ => Ok(()),
    }
}
