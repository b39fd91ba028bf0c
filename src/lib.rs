//! tidegate: Apache Flink's FLIP-27 source model in one Rust daemon. Bounded and stop-on-record
//! Kafka reads, a data generator and a periodic source, checkpointed to a local state file.

/// The generic FLIP-27 runtime, its own crate (`tidegate-core`, under `src/core`): no Kafka in it.
pub use tidegate_core as core;

pub mod error;

pub use error::{Error, Result};
pub mod cli;
pub mod config;
pub mod connector;
pub mod daemon;
pub mod datagen;
pub mod expr;
pub mod format;
pub mod kafka;
pub mod metrics;
pub mod oneliner;
pub mod periodic;
pub mod progress;
pub mod record;
pub mod sink;
pub mod summary;
#[cfg(feature = "testing")]
pub mod testing;
