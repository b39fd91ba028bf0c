//! What `GET /status` reports and what `POST /control` changes: the same numbers as the progress
//! bar (records done of expected, rate, ETA, event time) plus each split's position, and the
//! job's [`crate::core::Throttle`] and pacing clock, changed while it runs.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::info;

use crate::core::{JobEnd, JobStats};

/// The window the reported rate is averaged over.
const RATE_WINDOW: Duration = Duration::from_secs(5);
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The job's live numbers, for `/status`.
pub struct StatusBoard {
    pub job: String,
    pub stats: Arc<JobStats>,
    started: Instant,
    /// (when, records done), the last [`RATE_WINDOW`] of them.
    samples: Mutex<VecDeque<(Instant, u64)>>,
    /// One control request at a time: each reads the settings and writes them back whole.
    applying: Mutex<()>,
}

/// Why a control request was refused.
#[derive(Debug)]
pub enum ControlError {
    /// A body or value that makes no sense (400).
    Bad(String),
    /// A control this job does not have (409).
    Unavailable(String),
}

impl StatusBoard {
    pub fn new(job: String, stats: Arc<JobStats>) -> Self {
        StatusBoard {
            job,
            stats,
            started: Instant::now(),
            samples: Mutex::new(VecDeque::new()),
            applying: Mutex::new(()),
        }
    }

    /// Records done: written, and read but never written (filtered out, dead letters), as the
    /// progress bar counts them.
    pub fn done(&self) -> u64 {
        self.stats.done()
    }

    /// A run of the job is going on (restored, its sink and source started).
    pub fn running(&self) -> bool {
        self.stats.running.load(Ordering::Relaxed)
    }

    pub(crate) async fn sample_forever(&self) {
        loop {
            self.sample(Instant::now());
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    }

    fn sample(&self, now: Instant) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.push_back((now, self.done()));
        while samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            samples.pop_front();
        }
    }

    /// Records per second over the last few seconds.
    fn rate(&self, done: u64) -> f64 {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        match samples.front() {
            Some((t, first)) if t.elapsed() >= Duration::from_millis(200) => {
                done.saturating_sub(*first) as f64 / t.elapsed().as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// The settings `/control` changes, as they are now.
    pub fn settings(&self) -> Value {
        let (max_rate, max_bytes_rate) = self.stats.throttle.limits();
        let clock = self.stats.event_time.get();
        json!({
            "paused": self.stats.throttle.is_paused(),
            "max_rate": max_rate,
            "max_bytes_rate": max_bytes_rate,
            "replay_speed": clock.and_then(|c| c.speed()),
        })
    }

    /// `GET /status` (the schema is in the README).
    pub fn status(&self) -> Value {
        let s = &self.stats;
        let done = self.done();
        // an unbounded source has no total (a generator's range is all of u64)
        let bounded = s.bounded.get().copied().unwrap_or(false);
        let expected = if bounded { s.expected() } else { 0 };
        let rate = self.rate(done);
        let readers = s.readers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut splits: Vec<Value> = readers
            .iter()
            .flat_map(|r| r.splits.get())
            .map(|split| {
                let field = |name: &str| split.split.get(name).cloned().unwrap_or(Value::Null);
                json!({
                    "id": &*split.id,
                    "topic": field("topic"),
                    "partition": field("partition"),
                    "position": field("next_offset"),
                    // a Kafka split's stopping offset, a generator's range end (both exclusive)
                    "stop": match field("stop_offset") {
                        Value::Null if bounded => field("end"),
                        stop => stop,
                    },
                    "records_left": split.remaining.filter(|_| bounded),
                    "finished": split.finished.is_some(),
                    "reason": split.finished.map(|f| f.reason.as_str()),
                })
            })
            .collect();
        splits.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        let finished = !splits.is_empty() && splits.iter().all(|s| s["finished"] == true);
        let (state, error) = match s.ended.get() {
            Some(JobEnd::Failed(error)) => ("failed", Some(error.as_str())),
            // ended short of its input: `job.max_duration`, a group member's departure
            Some(JobEnd::Stopped) => ("stopped", None),
            Some(JobEnd::Finished) => ("finished", None),
            None if finished => ("finished", None),
            None if s.throttle.is_paused() => ("paused", None),
            None => ("running", None),
        };
        let left = expected.saturating_sub(done);
        let eta = (expected > 0 && rate > 0.0).then(|| (left as f64 / rate).round());
        let event_time = s.event_time.get().and_then(|c| c.replayed_to());
        json!({
            "job": self.job,
            "state": state,
            "error": error,
            "elapsed_seconds": self.started.elapsed().as_secs_f64(),
            "records": {
                "done": done,
                "expected": (expected > 0).then_some(expected),
                "read": s.records_emitted.load(Ordering::Relaxed)
                    + s.records_filtered.load(Ordering::Relaxed)
                    + s.records_skipped.load(Ordering::Relaxed),
                "emitted": s.records_emitted.load(Ordering::Relaxed),
                "written": s.records_written.load(Ordering::Relaxed),
                "filtered": s.records_filtered.load(Ordering::Relaxed),
                "diverted": s.records_diverted.load(Ordering::Relaxed),
                "skipped": s.records_skipped.load(Ordering::Relaxed),
            },
            "rate": (rate * 10.0).round() / 10.0,
            "eta_seconds": eta,
            "event_time": event_time.map(crate::core::event_time::format_millis),
            "event_time_ms": event_time,
            "checkpoints": s.checkpoints_completed.load(Ordering::Relaxed),
            "group": s.group_protocol.lock().unwrap_or_else(|p| p.into_inner()).map(|protocol| json!({
                "protocol": protocol,
                "runs": s.group_runs.load(Ordering::Relaxed),
                "released": s.group_released.load(Ordering::Relaxed),
                "taken": s.group_taken.load(Ordering::Relaxed),
            })),
            "control": self.settings(),
            "splits": splits,
        })
    }
}

/// A positive finite number or `null` (unlimited / as fast as possible).
fn limit(key: &str, value: &Value) -> Result<Option<f64>, ControlError> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_f64() {
            Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
            _ => Err(ControlError::Bad(format!(
                "{key} must be a number above 0 or null, not {n}"
            ))),
        },
        other => Err(ControlError::Bad(format!(
            "{key} must be a number above 0 or null, not {other}"
        ))),
    }
}

/// Apply a `POST /control` body: a JSON object with any of `paused` (bool), `max_rate`,
/// `max_bytes_rate`, `replay_speed` (a number above 0, or null). Either all of it applies, or
/// none. Returns the settings now.
pub fn apply_control(board: &StatusBoard, body: &[u8]) -> Result<Value, ControlError> {
    let request: Map<String, Value> = serde_json::from_slice(body).map_err(|e| {
        ControlError::Bad(format!(
            "the body must be a JSON object like {{\"max_rate\": 500}} or {{\"paused\": true}}: {e}"
        ))
    })?;
    // two requests at once (one the rate, one the bytes rate) must not each undo the other's
    let _one_at_a_time = board.applying.lock().unwrap_or_else(|p| p.into_inner());
    let stats = &board.stats;
    let clock = stats.event_time.get();
    let (mut rate, mut bytes_rate) = stats.throttle.limits();
    let (mut paused, mut speed) = (None, None);
    for (key, value) in &request {
        match key.as_str() {
            "paused" => {
                paused = Some(
                    value
                        .as_bool()
                        .ok_or_else(|| ControlError::Bad(format!("paused must be true or false, not {value}")))?,
                )
            }
            "max_rate" | "max_bytes_rate" => {
                let v = limit(key, value)?;
                if !clock.as_ref().is_some_and(|c| c.options().rate_limited) {
                    return Err(ControlError::Unavailable(format!(
                        "{key} can change only on a Kafka source started with source.max_rate or source.max_bytes_rate"
                    )));
                }
                if key == "max_rate" {
                    rate = v;
                } else {
                    bytes_rate = v;
                }
            }
            "replay_speed" => {
                speed = Some(limit(key, value)?);
                if clock.as_ref().is_none_or(|c| c.options().speed.is_none()) {
                    return Err(ControlError::Unavailable(
                        "replay_speed can change only on a replay started with source.replay_speed".into(),
                    ));
                }
            }
            other => {
                return Err(ControlError::Bad(format!(
                    "unknown control {other:?} (paused, max_rate, max_bytes_rate, replay_speed)"
                )))
            }
        }
    }
    if paused == Some(true) {
        stats.throttle.set_paused(true);
    }
    if let Some(clock) = clock {
        // a pause, a resume or a new limit restarts the pacing clock where the replay stands:
        // no burst to catch up with a schedule it was held behind
        match speed {
            Some(s) => clock.set_speed(s),
            None => clock.restart_pacing(),
        }
    }
    // limits change and the switch opens only once the clock has restarted: a reader that saw
    // them while the clock still counted from before would release at once everything "due"
    if request.contains_key("max_rate") || request.contains_key("max_bytes_rate") {
        stats.throttle.set_limits(rate, bytes_rate);
    }
    if paused == Some(false) {
        stats.throttle.set_paused(false);
    }
    let settings = board.settings();
    let request = Value::Object(request);
    info!(request = %request, settings = %settings, "control applied");
    Ok(settings)
}

#[cfg(test)]
#[path = "control_tests.rs"]
mod tests;
