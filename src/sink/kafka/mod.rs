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
mod settings;
mod state_writer;
mod targets;
mod transaction;
mod writer;

pub use config::KafkaSinkConfig;
pub use settings::KafkaSinkSettings;
pub use writer::KafkaSink;

#[cfg(test)]
mod tests;
