//! The job's metrics as typed handles: each family is registered once, when the component that
//! updates it is built, and handed to it (no metric names scattered through the code). Handles
//! registered before the Prometheus recorder is installed, or without one (a library user's
//! job), are no-ops. Every metric is listed in the README; [`exporter`] serves them.

pub mod control;
pub mod exporter;
pub mod guard;
pub mod http;
pub mod settings;

use metrics::{Counter, Gauge};

pub use control::StatusBoard;
pub use exporter::Metrics;
pub use http::{serve, Endpoint, Limits};
pub use settings::MetricsConfig;

/// The Kafka source's metrics.
#[derive(Clone)]
pub struct KafkaMetrics {
    /// Transient consumer errors (librdkafka retries them).
    pub consumer_errors: Counter,
    /// Partition discoveries that failed after the first.
    pub discovery_failures: Counter,
    /// End-of-stream evaluations that failed (counted as no match).
    pub eof_evaluation_errors: Counter,
    /// Filter evaluations that failed (the record is not emitted).
    pub filter_evaluation_errors: Counter,
    /// Fetches restarted because a partition stalled with records left.
    pub fetch_restarts: Counter,
}

impl KafkaMetrics {
    /// Register the source-wide counters (at 0, so a scrape shows them before anything happens).
    pub fn register() -> Self {
        let m = KafkaMetrics {
            consumer_errors: metrics::counter!("tidegate_kafka_consumer_errors_total"),
            discovery_failures: metrics::counter!("tidegate_kafka_discovery_failures_total"),
            eof_evaluation_errors: metrics::counter!("tidegate_eof_evaluation_errors_total"),
            filter_evaluation_errors: metrics::counter!("tidegate_filter_evaluation_errors_total"),
            fetch_restarts: metrics::counter!("tidegate_kafka_fetch_restarts_total"),
        };
        for c in [
            &m.consumer_errors,
            &m.discovery_failures,
            &m.eof_evaluation_errors,
            &m.filter_evaluation_errors,
            &m.fetch_restarts,
        ] {
            c.increment(0);
        }
        m
    }

    /// Handles that go nowhere (tests, or a source built without the daemon).
    pub fn noop() -> Self {
        KafkaMetrics {
            consumer_errors: Counter::noop(),
            discovery_failures: Counter::noop(),
            eof_evaluation_errors: Counter::noop(),
            filter_evaluation_errors: Counter::noop(),
            fetch_restarts: Counter::noop(),
        }
    }

    /// One partition's fetch metrics; `bounded`: it has a stopping offset, so offsets remain.
    pub fn partition(&self, topic: &str, partition: i32, bounded: bool) -> PartitionMetrics {
        let labels = [("topic", topic.to_string()), ("partition", partition.to_string())];
        PartitionMetrics {
            records_in: metrics::counter!("tidegate_kafka_records_in_total", &labels),
            bytes_in: metrics::counter!("tidegate_kafka_bytes_in_total", &labels),
            // an unbounded partition has no "remaining": a 0 there would read as "done"
            remaining: bounded.then(|| metrics::gauge!("tidegate_kafka_records_remaining", &labels)),
            fetch_lag: metrics::gauge!("tidegate_kafka_fetch_lag_seconds", &labels),
        }
    }

    /// One reader's emit metrics.
    pub fn reader(&self, reader: usize) -> ReaderMetrics {
        let labels = [("reader", reader.to_string())];
        ReaderMetrics {
            decode_skipped: metrics::counter!("tidegate_decode_errors_skipped_total", &labels),
            dead_lettered: metrics::counter!("tidegate_decode_errors_dead_lettered_total", &labels),
            emit_lag: metrics::gauge!("tidegate_kafka_emit_lag_seconds", &labels),
        }
    }
}

/// What one Kafka partition's fetches look like.
pub struct PartitionMetrics {
    pub records_in: Counter,
    /// Key and value bytes.
    pub bytes_in: Counter,
    /// Offsets left to the stopping offset (bounded splits only).
    pub remaining: Option<Gauge>,
    /// Now minus the timestamp of the last fetched record.
    pub fetch_lag: Gauge,
}

/// What one reader's emitter does with undecodable records, and how far behind it emits.
pub struct ReaderMetrics {
    pub decode_skipped: Counter,
    pub dead_lettered: Counter,
    /// Now minus the timestamp of the last emitted record.
    pub emit_lag: Gauge,
}

/// The periodic source's metrics.
#[derive(Clone)]
pub struct PeriodicMetrics {
    /// Events assigned.
    pub events: Gauge,
    /// Records fired.
    pub fires: Counter,
    /// Supplier reads that failed (the old events kept firing).
    pub supplier_failures: Counter,
}

impl PeriodicMetrics {
    /// Register them (at 0).
    pub fn register() -> Self {
        let m = PeriodicMetrics {
            events: metrics::gauge!("tidegate_periodic_events"),
            fires: metrics::counter!("tidegate_periodic_fires_total"),
            supplier_failures: metrics::counter!("tidegate_periodic_supplier_failures_total"),
        };
        m.events.set(0.0);
        m.fires.increment(0);
        m.supplier_failures.increment(0);
        m
    }
}
