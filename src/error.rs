//! The crate's error type is the runtime's ([`tidegate_core::Error`]): one enum for config,
//! state, I/O, decode and runtime failures, with exit codes. Kafka errors enter it through
//! [`kafka`], with what was being done.

pub use tidegate_core::error::{Error, Result, StateError};

/// A Kafka client error, with what was being done.
pub fn kafka(context: impl std::fmt::Display, source: rdkafka::error::KafkaError) -> Error {
    Error::client(format!("kafka: {context}"), source)
}
