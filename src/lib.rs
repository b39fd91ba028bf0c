#![deny(missing_docs)]
//! tidegate: Apache Flink's FLIP-27 source model in one Rust daemon. Bounded and stop-on-record
//! Kafka reads, a data generator and a periodic source, checkpointed to a local state file.

/// The generic FLIP-27 runtime, its own crate (`tidegate-core`, under `src/core`): no Kafka in it.
pub use tidegate_core as core;

pub mod error;

pub use error::{Error, Result};
pub(crate) mod assembly;
pub(crate) mod checkpoint_store;
pub mod cli;
pub(crate) mod client;
pub(crate) mod commands;
pub(crate) mod config;
pub(crate) mod connector;
pub(crate) mod coordination;
pub(crate) mod datagen;
pub(crate) mod expr;
pub mod format;
pub mod kafka;
pub(crate) mod metrics;
#[cfg(test)]
mod module_graph;
pub(crate) mod periodic;
pub(crate) mod progress;
pub mod record;
#[cfg(test)]
mod simulation;
pub(crate) mod sink;
pub(crate) mod summary;
#[cfg(feature = "testing")]
pub mod testing;
