//! What the periodic source runs with, built from its config section: the supplier of events,
//! the discovery timing, the catch-up policy and the value format.

use std::time::Duration;

use super::schedule::CatchUp;
use super::supplier::Supplier;
use crate::record::ValueFormat;

/// Settings of a [`PeriodicSource`].
#[derive(Debug, Clone)]
pub struct PeriodicSettings {
    pub supplier: Supplier,
    /// Time between supplier reads (files only).
    pub discover_interval: Duration,
    /// Delay of the first supplier read, after every reader registered.
    pub initial_delay: Duration,
    pub catch_up: CatchUp,
    pub format: ValueFormat,
    pub avro: Option<crate::format::AvroConfig>,
    /// Protobuf or JSON Schema settings.
    pub wire_schema: Option<crate::format::WireSchema>,
    /// Encodes values for `avro`, `protobuf`, `json_schema` (set by the daemon, which knows the
    /// sink's topic).
    pub encoder: Option<crate::format::EncoderHandle>,
    /// Keep the JSON beside the encoded bytes (for sinks that print Avro values).
    pub keep_decoded: bool,
    /// This process's share when the job runs as several instances.
    pub instance: crate::core::Instance,
}
