//! tidegate in your own integration tests (the `testing` feature): reach a Kafka broker (yours,
//! or a container started for the test process), seed topics with any tidegate job written as
//! TOML (a data generator, say), and replay a topic into memory, bounded, until an end-of-stream
//! expression, or until a Rust closure says so, with the same checkpoints as the daemon when
//! wanted.
//!
//! ```no_run
//! use tidegate::testing::{Kafka, Replay};
//!
//! let kafka = Kafka::get()?;
//! kafka.create_topic("trades", 3)?;
//! tidegate::testing::run_job(&format!(
//!     r#"
//!     [source]
//!     type = "datagen"
//!     count = 100
//!     format = "json"
//!     [source.fields]
//!     seq = {{ sequence = {{}} }}
//!     [source.end_marker]
//!     value = {{ type = "CLOSE" }}
//!     [sink]
//!     type = "kafka"
//!     bootstrap_servers = "{}"
//!     topic = "trades"
//!     "#,
//!     kafka.bootstrap()
//! ))?;
//! // waits for the CLOSE record in every partition (up to Replay::timeout, then an error)
//! let records = Replay::topic(kafka.bootstrap(), "trades")
//!     .json()
//!     .until_eof(r#"value.type == "CLOSE""#)?
//!     .collect()?;
//! assert_eq!(records.len(), 100);
//! # Ok::<(), tidegate::Error>(())
//! ```
//!
//! Every call blocks its thread and is safe within an async runtime; in a `#[tokio::test]`
//! the `_async` forms await instead ([`Replay::collect_async`], [`run_job_async`],
//! [`Kafka::create_topic_async`]). Jobs run on a runtime and thread of their own either way: they
//! need a multi-threaded runtime, which a `#[tokio::test]` is not by default.
//!
//! Which containers are removed when is said at [`Kafka::get`] and [`Kafka::start`].
#![deny(missing_docs)]

mod job;
mod kafka;
mod kafka_image;
mod replay;
mod runtime;

pub use job::{run_job, run_job_async, JobSummary};
pub use kafka::{Kafka, KafkaContainer};
pub use replay::{Replay, DEFAULT_TIMEOUT};
