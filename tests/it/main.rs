//! Integration tests against a real Apache Kafka broker (see `common`): one test binary, so the
//! crate and librdkafka are linked once.

mod broker;
mod common;
mod kafka_source;
