//! The Prometheus registry: metrics-exporter-prometheus renders the `metrics` facade's registry
//! (its own listener is not used: [`super::http`] serves `/metrics` beside the other routes).
//!
//! Metric names (all documented in the README):
//! `tidegate_records_emitted_total`, `tidegate_records_written_total`,
//! `tidegate_checkpoints_completed_total`, `tidegate_checkpoint_failures_total`,
//! `tidegate_last_checkpoint_duration_seconds`, `tidegate_expected_records`,
//! `tidegate_fetch_batches_total{reader}`, `tidegate_fetch_records_total{reader}`,
//! plus the ones sources register themselves (see the README).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use metrics::{Counter, Gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::core::JobStats;
use crate::error::{Error, Result};

/// Every metric, its kind and its `# HELP` text (the README's metrics table says the same).
const DESCRIPTIONS: &[(&str, &str, &str)] = &[
    ("tidegate_up", "gauge", "1 while the daemon runs"),
    ("tidegate_records_emitted_total", "counter", "records the readers emitted (records in)"),
    ("tidegate_records_written_total", "counter", "records the sink took (records out)"),
    ("tidegate_records_filtered_total", "counter", "records source.where rejected: read (their position advanced), never emitted"),
    ("tidegate_expected_records", "gauge", "records the job is expected to read in all: an upper bound while it runs (offsets of its bounded partitions, less those past an end-of-stream record), what it read once its input is done"),
    ("tidegate_checkpoints_completed_total", "counter", "checkpoints completed (written to the state file or the Kafka store)"),
    ("tidegate_checkpoint_failures_total", "counter", "checkpoints that could not be written"),
    ("tidegate_last_checkpoint_duration_seconds", "gauge", "trigger-to-durable time of the last checkpoint"),
    ("tidegate_fetch_batches_total", "counter", "batches the fetcher threads handed over"),
    ("tidegate_fetch_records_total", "counter", "records the fetcher threads handed over"),
    ("tidegate_splits_finished_total", "counter", "splits finished, by reason"),
    ("tidegate_kafka_records_in_total", "counter", "records fetched per partition"),
    ("tidegate_kafka_bytes_in_total", "counter", "key and value bytes fetched per partition"),
    ("tidegate_kafka_records_remaining", "gauge", "offsets left to the stopping offset"),
    ("tidegate_kafka_fetch_lag_seconds", "gauge", "now minus the timestamp of the last fetched record"),
    ("tidegate_kafka_emit_lag_seconds", "gauge", "now minus the timestamp of the last emitted record"),
    ("tidegate_kafka_consumer_errors_total", "counter", "transient consumer errors (librdkafka retries them)"),
    ("tidegate_kafka_fetch_restarts_total", "counter", "partition fetches restarted after 15 s without records while the partition had more (a librdkafka stall after a reconnect)"),
    ("tidegate_kafka_discovery_failures_total", "counter", "partition discoveries that failed after the first"),
    ("tidegate_eof_evaluation_errors_total", "counter", "end-of-stream evaluations that failed (no match)"),
    ("tidegate_filter_evaluation_errors_total", "counter", "source.where evaluations that failed (the record is not emitted)"),
    ("tidegate_decode_errors_skipped_total", "counter", "undecodable records skipped"),
    ("tidegate_decode_errors_dead_lettered_total", "counter", "undecodable records sent to the dead-letter topic"),
    ("tidegate_replay_event_time_seconds", "gauge", "event time replayed to: the largest record timestamp emitted (with replay_speed or eof_scope = \"source\")"),
    ("tidegate_replay_late_records_total", "counter", "records emitted at once because they were older than one already emitted of their partition"),
    ("tidegate_periodic_events", "gauge", "events assigned by the periodic source"),
    ("tidegate_periodic_fires_total", "counter", "records the periodic source fired"),
    ("tidegate_periodic_supplier_failures_total", "counter", "supplier reads that failed (the old events kept firing)"),
];

/// The job's counters as Prometheus metrics, registered once.
pub struct Metrics {
    handle: PrometheusHandle,
    stats: Arc<JobStats>,
    emitted: Counter,
    written: Counter,
    filtered: Counter,
    checkpoints: Counter,
    checkpoint_failures: Counter,
    last_checkpoint: Gauge,
    expected: Gauge,
}

impl Metrics {
    /// Install the recorder (once per process) and register the job metrics.
    pub fn install(stats: Arc<JobStats>, job: &str) -> Result<Arc<Metrics>> {
        let handle = PrometheusBuilder::new()
            .add_global_label("job", job)
            .install_recorder()
            .map_err(|e| Error::runtime("installing the metrics recorder", e))?;
        for (name, kind, help) in DESCRIPTIONS {
            if *kind == "counter" {
                metrics::describe_counter!(*name, *help);
            } else {
                metrics::describe_gauge!(*name, *help);
            }
        }
        metrics::gauge!("tidegate_up").set(1.0);
        Ok(Arc::new(Metrics {
            handle,
            stats,
            emitted: metrics::counter!("tidegate_records_emitted_total"),
            written: metrics::counter!("tidegate_records_written_total"),
            filtered: metrics::counter!("tidegate_records_filtered_total"),
            checkpoints: metrics::counter!("tidegate_checkpoints_completed_total"),
            checkpoint_failures: metrics::counter!("tidegate_checkpoint_failures_total"),
            last_checkpoint: metrics::gauge!("tidegate_last_checkpoint_duration_seconds"),
            expected: metrics::gauge!("tidegate_expected_records"),
        }))
    }

    /// A registry of its own, not installed (tests of the endpoint: the recorder is global).
    #[cfg(test)]
    pub(crate) fn detached(stats: Arc<JobStats>) -> Arc<Metrics> {
        let recorder = PrometheusBuilder::new().build_recorder();
        Arc::new(Metrics {
            handle: recorder.handle(),
            stats,
            emitted: Counter::noop(),
            written: Counter::noop(),
            filtered: Counter::noop(),
            checkpoints: Counter::noop(),
            checkpoint_failures: Counter::noop(),
            last_checkpoint: Gauge::noop(),
            expected: Gauge::noop(),
        })
    }

    /// Copy the job's live counters into the registry (so a scrape sees exact values).
    pub fn sync(&self) {
        let s = &self.stats;
        self.emitted.absolute(s.records_emitted.load(Ordering::Relaxed));
        self.written.absolute(s.records_written.load(Ordering::Relaxed));
        self.filtered.absolute(s.records_filtered.load(Ordering::Relaxed));
        self.checkpoints
            .absolute(s.checkpoints_completed.load(Ordering::Relaxed));
        self.checkpoint_failures
            .absolute(s.checkpoint_failures.load(Ordering::Relaxed));
        self.last_checkpoint
            .set(s.last_checkpoint_ms.load(Ordering::Relaxed) as f64 / 1000.0);
        self.expected.set(s.expected() as f64);
        if let Some(clock) = s.event_time.get() {
            if let Some(t) = clock.replayed_to() {
                metrics::gauge!("tidegate_replay_event_time_seconds").set(t as f64 / 1000.0);
            }
            metrics::counter!("tidegate_replay_late_records_total").absolute(clock.late_records());
        }
        let readers = s.readers.lock().unwrap_or_else(|p| p.into_inner());
        for reason in crate::core::FinishReason::ALL {
            let finished: u64 = readers.iter().map(|r| r.finished(reason)).sum();
            metrics::counter!("tidegate_splits_finished_total", "reason" => reason.as_str()).absolute(finished);
        }
        for (i, r) in readers.iter().enumerate() {
            let label = [("reader", i.to_string())];
            metrics::counter!("tidegate_fetch_batches_total", &label)
                .absolute(r.batches_fetched.load(Ordering::Relaxed));
            metrics::counter!("tidegate_fetch_records_total", &label)
                .absolute(r.records_fetched.load(Ordering::Relaxed));
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.sync();
        self.handle.render()
    }
}
