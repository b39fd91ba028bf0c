//! The Kafka source (Flink's `KafkaSource`): settings, the builder, and the `Source` that ties
//! the partition-discovery enumerator, the split readers and the record emitter together.

pub(crate) mod alter;
pub(crate) mod batch_queue;
mod builder;
mod caught_up;
mod committer;
pub(crate) mod config;
mod config_checks;
mod config_offsets;
mod connector;
pub(crate) mod consumer;
mod describe;
mod discovery;
pub(crate) mod emitter;
pub(crate) mod enumerator;
mod live_split;
pub(crate) mod offsets;
pub(crate) mod plan;
pub(crate) mod plan_exact;
mod restore;
mod settings;
mod source;
pub(crate) mod split;
pub(crate) mod split_reader;
mod subscription;

pub use builder::KafkaSourceBuilder;
pub use enumerator::{KafkaEnumeratorState, KafkaSourceEnumerator};
pub use offsets::{CommittedReset, StartingOffsets, StoppingOffsets, TopicPartition};
pub(crate) use settings::KafkaSourceSettings;
pub use source::KafkaSource;
pub use split::KafkaPartitionSplit;
pub use split_reader::{KafkaPartitionSplitReader, PartitionReader};
pub(crate) use subscription::Subscription;

pub use crate::format::DecoderFactory;

/// Every client the Kafka source makes, as it makes it (for `validate`): the readers' consumer,
/// the enumerator's, the admin client that reads its topics' configs, a reader's committer (with
/// `group_id`) and the dead-letter producer (with `dead_letter_topic`).
pub(crate) fn probes(source: &config::KafkaSourceConfig) -> crate::error::Result<Vec<crate::client::probe::Probe>> {
    use crate::client::probe::Probe;
    let settings = &source.settings;
    let mut probes = vec![
        Probe::consumer_config(
            "reader",
            "source",
            consumer::consumer_config(settings, 0, 1, 1),
            &settings.properties,
        ),
        Probe::consumer("source", &discovery::admin_spec(settings)),
        Probe::admin("source", &discovery::source_admin_spec(settings)),
    ];
    if let Some(group) = &settings.group_id {
        probes.push(Probe::consumer_config(
            "committer",
            "source",
            committer::committer_config(settings, group, 0),
            &settings.properties,
        ));
    }
    if let Some(topic) = &source.dead_letter_topic {
        let mut dead = crate::sink::kafka::KafkaSinkSettings::new(&settings.bootstrap_servers, topic);
        dead.properties = crate::client::connection_properties(&settings.properties);
        probes.push(Probe::producer("source", &crate::sink::kafka::producer_spec(&dead)?));
    }
    Ok(probes)
}

#[cfg(test)]
mod tests;
