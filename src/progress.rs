//! Progress of a running job: an indicatif bar (records done of the expected total, rate, ETA)
//! when stderr is a terminal and the job is bounded; a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{HumanCount, HumanDuration, ProgressBar, ProgressState, ProgressStyle};
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
            bar.set_style(bar_style(false));
            bar
        });
        let shown = bar.clone();
        let task = crate::core::spawn(async move {
            let started = Instant::now();
            let mut last_log = Instant::now();
            let mut last_count = 0u64;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                // records done: written, and read but never written (filtered out, dead letters),
                // so the bar reaches its end with a filter too
                let done = stats.done();
                let expected = stats.expected();
                // a paced replay shows the event time it has replayed to (the market's clock)
                let replayed = stats
                    .event_time
                    .get()
                    .and_then(|c| c.replayed_to())
                    .map(crate::core::event_time::format_millis);
                match &shown {
                    Some(bar) => show(bar, done, expected, replayed.as_deref()),
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

    /// Clear the bar (the end-of-run summary follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The bar's look: records done of the expected total (an upper bound while the job runs: see
/// [`JobStats::expected`]), the rate and the time left; a paced
/// replay's event time on a line of its own, so the bar keeps its width on a narrow terminal.
fn bar_style(event_time: bool) -> ProgressStyle {
    let template = if event_time {
        "{spinner} [{elapsed_precise}] {wide_bar} {human_pos} of up to {human_len} records ({rate}, ETA {eta})\n  event time {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {wide_bar} {human_pos} of up to {human_len} records ({rate}, ETA {eta})"
    };
    ProgressStyle::with_template(template)
        .map(|style| {
            style
                // indicatif's {per_sec} prints four decimals (490,047.5071/s): whole records
                .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{}/s", HumanCount(state.per_sec().round() as u64));
                })
                // indicatif's {eta} says 0s before anything is done: unknown until a rate is
                // measured
                .with_key("eta", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    if state.pos() == 0 || state.elapsed() < Duration::from_secs(1) {
                        let _ = write!(w, "-");
                    } else {
                        let _ = write!(w, "{:#}", HumanDuration(state.eta()));
                    }
                })
        })
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// Show `done` of `expected` records, and the event time replayed to once there is one.
fn show(bar: &ProgressBar, done: u64, expected: u64, replayed: Option<&str>) {
    bar.set_length(expected.max(done));
    bar.set_position(done);
    if let Some(t) = replayed {
        if bar.message().is_empty() {
            bar.set_style(bar_style(true));
        }
        bar.set_message(t.to_string());
    }
}

#[cfg(test)]
mod tests {
    use indicatif::{InMemoryTerm, ProgressDrawTarget};

    use super::*;

    /// What `bar` shows on a 100-column terminal after `update`.
    fn rendered(update: impl Fn(&ProgressBar)) -> Vec<String> {
        let term = InMemoryTerm::new(4, 100);
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::term_like(Box::new(term.clone())));
        bar.set_style(bar_style(false));
        update(&bar);
        bar.force_draw();
        term.contents().lines().map(str::to_string).collect()
    }

    #[test]
    fn the_time_left_is_unknown_before_anything_is_done() {
        let lines = rendered(|bar| show(bar, 0, 1_000_000, None));
        assert!(lines[0].contains("0 of up to 1,000,000 records"), "{lines:?}");
        assert!(lines[0].contains("ETA -)"), "{lines:?}");
    }

    #[test]
    fn the_bar_keeps_its_width_with_the_event_time_shown() {
        let half = |bar: &ProgressBar| show(bar, 500_000, 1_000_000, None);
        let bar_width = |line: &str| line.chars().filter(|c| !c.is_ascii() && *c != '·').count();
        let without = rendered(half);
        let with = rendered(|bar| {
            half(bar);
            show(bar, 500_000, 1_000_000, Some("2026-11-30T14:30:00.000Z"));
        });
        // (not equal widths: the rate's digits follow the elapsed time, which differs by a hair)
        assert!(bar_width(&without[0]) >= 10, "{without:?}");
        assert!(bar_width(&with[0]) >= 10, "{with:?}");
        assert_eq!(with[1].trim(), "event time 2026-11-30T14:30:00.000Z", "{with:?}");
    }
}
