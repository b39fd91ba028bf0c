//! Progress of a running job: an indicatif bar (records done of the expected total, rate, ETA)
//! when stderr is a terminal and the job is bounded; a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{HumanCount, ProgressBar, ProgressState, ProgressStyle};
use tracing::info;

use crate::core::JobStats;

/// How progress is shown.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Start reporting on `stats`; `enabled` is false with `--no-progress`.
    pub fn start(stats: Arc<JobStats>, bounded: bool, enabled: bool) -> (Progress, tokio::task::JoinHandle<()>) {
        let bar = (enabled && bounded && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} records ({rate}, ETA {eta}){msg}",
                )
                .map(|style| {
                    // indicatif's {per_sec} prints four decimals (490,047.5071/s): whole records
                    style.with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}/s", HumanCount(state.per_sec().round() as u64));
                    })
                })
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        let shown = bar.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut last_log = Instant::now();
            let mut last_count = 0u64;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                // records done: written, and read but never written (filtered out, dead letters),
                // so the bar reaches its end with a filter too
                let done = stats.records_written.load(Ordering::Relaxed)
                    + stats.records_filtered.load(Ordering::Relaxed)
                    + stats.records_diverted.load(Ordering::Relaxed);
                let expected = stats.expected_records.load(Ordering::Relaxed);
                // a paced replay shows the event time it has replayed to (the market's clock)
                let replayed = stats
                    .event_time
                    .get()
                    .and_then(|c| c.replayed_to())
                    .map(crate::core::event_time::format_millis);
                match &shown {
                    Some(bar) => {
                        bar.set_length(expected.max(done));
                        bar.set_position(done);
                        if let Some(t) = &replayed {
                            bar.set_message(format!(", event time {t}"));
                        }
                    }
                    None if enabled && last_log.elapsed() >= Duration::from_secs(10) => {
                        let rate = (done - last_count) as f64 / last_log.elapsed().as_secs_f64();
                        let expected = (bounded && expected > 0).then_some(expected);
                        info!(
                            records = done,
                            expected,
                            rate = rate.round(),
                            elapsed_s = started.elapsed().as_secs(),
                            event_time = replayed,
                            "progress"
                        );
                        last_log = Instant::now();
                        last_count = done;
                    }
                    None => {}
                }
            }
        });
        (Progress { bar }, task)
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
