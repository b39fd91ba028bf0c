//! The Kafka source (Flink's `KafkaSource`): settings, the builder, and the `Source` that ties
//! the partition-discovery enumerator, the split readers and the record emitter together.

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

#[cfg(test)]
mod tests;
