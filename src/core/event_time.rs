//! Event time across all readers of a job: the shared clock of a paced replay
//! (`replay_speed`) and the alignment behind a source-wide stop (`eof_scope = "source"`).
//!
//! Flink's watermark alignment (FLIP-182) has readers report watermarks to the coordinator and
//! pause splits that run ahead. Every tidegate reader lives in one process, so the "coordinator"
//! is this shared, locked state: each split's watermark (the largest timestamp its reader has
//! evaluated), the anchor of the pacing clock, and the source-wide stop once a marker is found.
//! Readers hold evaluated records (see `SourceReaderBase`) until [`EventTimeClock::release`] lets
//! them go: at their scheduled instant when paced, and only once no other split can still hold an
//! earlier end-of-stream record when the stop is source-wide.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::info;

use super::source::SplitId;

/// What a job's event time does.
#[derive(Debug, Clone, PartialEq)]
pub struct EventTimeOptions {
    /// Emit each record when `(its timestamp - the first timestamp) / speed` has passed since
    /// the replay started (`None`: as fast as possible).
    pub speed: Option<f64>,
    /// The first end-of-stream record of any split ends every split at its timestamp.
    pub source_wide_stop: bool,
    /// How far behind the wall clock the next record of a caught-up split (one at the end of its
    /// log) may be stamped: producer clock skew plus the time from produce to fetch.
    pub idle_grace: Duration,
}

impl EventTimeOptions {
    /// Whether anything needs the clock.
    pub fn is_active(&self) -> bool {
        self.speed.is_some() || self.source_wide_stop
    }
}

/// What to do with a held record now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Emit it.
    Now,
    /// Not before this instant (pacing), or until the clock changes, whichever is first.
    At(Instant),
    /// Wait for the clock to change (another split's watermark, the anchor); `Some`: also wake
    /// then, when a caught-up split's watermark passes the record by the wall clock alone.
    Wait(Option<Instant>),
    /// At or after the source-wide stop: drop it, and end its split.
    Drop,
}

#[derive(Debug, Default)]
struct SplitClock {
    /// The first timestamp evaluated since this process started.
    first: Option<i64>,
    /// The largest timestamp evaluated.
    seen: Option<i64>,
    /// At the end of its log, nothing newer evaluated since.
    idle: bool,
}

#[derive(Debug, Default)]
struct State {
    splits: HashMap<SplitId, SplitClock>,
    /// The first timestamp of the replay and the instant it is emitted at.
    anchor: Option<(i64, Instant)>,
    stop_at: Option<i64>,
}

/// The event-time state shared by the readers of one job.
#[derive(Debug)]
pub struct EventTimeClock {
    options: EventTimeOptions,
    state: Mutex<State>,
    /// Bumped whenever something a waiting reader may depend on changes.
    version: watch::Sender<u64>,
    /// The largest timestamp released, for progress ("market time").
    released: AtomicI64,
    /// Records emitted at once because they were older than one already emitted in their split.
    late: AtomicU64,
}

impl EventTimeClock {
    pub fn new(options: EventTimeOptions) -> Self {
        EventTimeClock {
            options,
            state: Mutex::new(State::default()),
            version: watch::channel(0).0,
            released: AtomicI64::new(i64::MIN),
            late: AtomicU64::new(0),
        }
    }

    pub fn options(&self) -> &EventTimeOptions {
        &self.options
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver whose `changed()` completes at the next change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// A split a reader took on.
    pub fn register(&self, id: &SplitId) {
        self.lock().splits.entry(id.clone()).or_default();
        self.changed();
    }

    /// A split that finished: it holds no one back any more.
    pub fn remove(&self, id: &SplitId) {
        if self.lock().splits.remove(id).is_some() {
            self.changed();
        }
    }

    /// A reader evaluated records of `id` with timestamps from `min` to `max`.
    pub fn observe(&self, id: &SplitId, min: i64, max: i64) {
        let mut state = self.lock();
        let Some(split) = state.splits.get_mut(id) else {
            return;
        };
        split.first.get_or_insert(min);
        split.seen = Some(split.seen.map_or(max, |s| s.max(max)));
        split.idle = false;
        drop(state);
        self.changed();
    }

    /// `id` reached the end of its log, and nothing after it has been evaluated yet.
    pub fn caught_up(&self, id: &SplitId) {
        if let Some(split) = self.lock().splits.get_mut(id) {
            split.idle = true;
        }
        self.changed();
    }

    /// An end-of-stream record at `timestamp` was found: with a source-wide stop, every split
    /// ends there (the earliest such record wins).
    pub fn found_stop(&self, timestamp: i64) {
        if !self.options.source_wide_stop {
            return;
        }
        let mut state = self.lock();
        if state.stop_at.is_none_or(|t| timestamp < t) {
            state.stop_at = Some(timestamp);
            drop(state);
            info!(timestamp, at = %format_millis(timestamp), "source-wide stop: every partition ends before this timestamp");
            self.changed();
        }
    }

    /// The source-wide stop restored from a checkpoint.
    pub fn restore_stop(&self, timestamp: Option<i64>) {
        if let Some(t) = timestamp {
            info!(timestamp = t, at = %format_millis(t), "restored the source-wide stop from the state file");
            self.lock().stop_at = Some(t);
        }
    }

    /// The source-wide stop, once known.
    pub fn stop_at(&self) -> Option<i64> {
        self.lock().stop_at
    }

    /// Whether split `id`, holding nothing, is known to have no record before the source-wide
    /// stop left (it is caught up and the wall clock has passed the stop by the grace).
    pub fn is_past_stop(&self, id: &SplitId) -> bool {
        let state = self.lock();
        let (Some(stop), Some(split)) = (state.stop_at, state.splits.get(id)) else {
            return false;
        };
        self.watermark(split, wall_millis()) >= stop
    }

    /// When the wall clock alone moves caught-up split `id` past the source-wide stop (the
    /// reader then ends it); `None` if it is not caught up or there is no stop.
    pub fn past_stop_at(&self, id: &SplitId, now: Instant) -> Option<Instant> {
        let state = self.lock();
        let (stop, split) = (state.stop_at?, state.splits.get(id)?);
        if !split.idle {
            return None;
        }
        let short = stop.saturating_sub(self.watermark(split, wall_millis())).max(0);
        now.checked_add(Duration::from_millis(short as u64))
    }

    /// Whether split `id` may be what holds the others back (alignment without pacing, and no
    /// other split's watermark is lower): it must keep fetching, or every split would wait.
    /// With pacing, records wait for their time, not for this split: any split may pause.
    pub fn holds_others_back(&self, id: &SplitId) -> bool {
        if !self.options.source_wide_stop || self.options.speed.is_some() {
            return false;
        }
        let state = self.lock();
        let now_wall = wall_millis();
        let Some(mine) = state.splits.get(id).map(|s| self.watermark(s, now_wall)) else {
            return false;
        };
        let mut others = state.splits.iter().filter(|(other, _)| *other != id).peekable();
        others.peek().is_some() && others.all(|(_, s)| self.watermark(s, now_wall) >= mine)
    }

    /// A split's watermark: no record it evaluates from now on is older (in-order partitions).
    fn watermark(&self, split: &SplitClock, now_wall: i64) -> i64 {
        let seen = split.seen.unwrap_or(i64::MIN);
        if split.idle {
            seen.max(now_wall.saturating_sub(self.options.idle_grace.as_millis() as i64))
        } else {
            seen
        }
    }

    /// May the held record of split `id` with `timestamp` be emitted now? `marker`: it is the
    /// end-of-stream record itself (kept by `eof_emit_marker`), which goes out at the stop.
    pub fn release(&self, id: &SplitId, timestamp: i64, now: Instant, marker: bool) -> Release {
        let mut state = self.lock();
        if !marker && state.stop_at.is_some_and(|t| timestamp >= t) {
            return Release::Drop;
        }
        if self.options.source_wide_stop {
            // an earlier end-of-stream record may still come from any split whose watermark is
            // not past this record
            let now_wall = wall_millis();
            let mut wake: Option<Instant> = None;
            for (other, split) in &state.splits {
                if other == id {
                    continue;
                }
                let wm = self.watermark(split, now_wall);
                if wm <= timestamp {
                    if split.idle {
                        // the wall clock alone moves it past the record
                        let after = Duration::from_millis(timestamp.saturating_sub(wm).saturating_add(1).max(1) as u64);
                        if let Some(at) = now.checked_add(after) {
                            wake = Some(wake.map_or(at, |w: Instant| w.min(at)));
                        }
                        continue;
                    }
                    return Release::Wait(None);
                }
            }
            if wake.is_some() {
                return Release::Wait(wake);
            }
        }
        let Some(speed) = self.options.speed else {
            return Release::Now;
        };
        let (t0, start) = match state.anchor {
            Some(anchor) => anchor,
            None => {
                // start the clock at the earliest first record of all splits, once each has one
                // (or is known empty at the end of its log)
                if state.splits.values().any(|s| s.first.is_none() && !s.idle) {
                    return Release::Wait(None);
                }
                let t0 = state.splits.values().filter_map(|s| s.first).min().unwrap_or(timestamp);
                state.anchor = Some((t0.min(timestamp), now));
                drop(state);
                self.changed();
                return self.release(id, timestamp, now, marker);
            }
        };
        // saturating: timestamps are anything a producer wrote; a due instant past what an
        // `Instant` can hold is never reached (it waits for a change instead)
        let after = timestamp.saturating_sub(t0).max(0) as f64 / 1000.0 / speed;
        match Duration::try_from_secs_f64(after)
            .ok()
            .and_then(|d| start.checked_add(d))
        {
            Some(due) if due > now => Release::At(due),
            Some(_) => Release::Now,
            None => Release::Wait(None),
        }
    }

    /// A record at `timestamp` was emitted; `late`: older than one already emitted of its split.
    pub fn emitted(&self, timestamp: i64, late: bool) {
        self.released.fetch_max(timestamp, Ordering::Relaxed);
        if late {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The largest timestamp emitted so far.
    pub fn replayed_to(&self) -> Option<i64> {
        let t = self.released.load(Ordering::Relaxed);
        (t != i64::MIN).then_some(t)
    }

    /// Records emitted out of their split's timestamp order.
    pub fn late_records(&self) -> u64 {
        self.late.load(Ordering::Relaxed)
    }
}

/// Milliseconds since the epoch, now.
pub fn wall_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A timestamp in milliseconds as RFC 3339.
pub fn format_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn id(s: &str) -> SplitId {
        Arc::from(s)
    }

    fn clock(speed: Option<f64>, source_wide_stop: bool) -> EventTimeClock {
        EventTimeClock::new(EventTimeOptions {
            speed,
            source_wide_stop,
            idle_grace: Duration::from_secs(2),
        })
    }

    #[test]
    fn pacing_starts_at_the_earliest_first_record_once_every_split_has_one() {
        let c = clock(Some(10.0), false);
        let (a, b) = (id("a"), id("b"));
        c.register(&a);
        c.register(&b);
        let now = Instant::now();
        c.observe(&a, 5_000, 6_000);
        // b has shown nothing yet: its first record may be earlier
        assert_eq!(c.release(&a, 5_000, now, false), Release::Wait(None));
        c.observe(&b, 4_000, 4_000);
        assert_eq!(c.release(&b, 4_000, now, false), Release::Now);
        // 1 s of event time at 10x is 100 ms
        assert_eq!(
            c.release(&a, 5_000, now, false),
            Release::At(now + Duration::from_millis(100))
        );
        assert_eq!(
            c.release(&a, 5_000, now + Duration::from_millis(100), false),
            Release::Now
        );
        // older than the anchor: at once
        assert_eq!(c.release(&a, 1_000, now, false), Release::Now);
    }

    #[test]
    fn a_caught_up_split_does_not_hold_the_clock() {
        let c = clock(Some(1.0), false);
        let (a, b) = (id("a"), id("b"));
        c.register(&a);
        c.register(&b);
        c.observe(&a, 1_000, 1_000);
        c.caught_up(&b);
        assert_eq!(c.release(&a, 1_000, Instant::now(), false), Release::Now);
    }

    #[test]
    fn alignment_holds_a_record_until_every_other_split_is_past_it() {
        let c = clock(None, true);
        let (a, b) = (id("a"), id("b"));
        c.register(&a);
        c.register(&b);
        c.observe(&a, 100, 200);
        let now = Instant::now();
        assert_eq!(
            c.release(&a, 100, now, false),
            Release::Wait(None),
            "b has shown nothing"
        );
        c.observe(&b, 100, 150);
        // b may still hold a marker at 150
        assert_eq!(c.release(&a, 150, now, false), Release::Wait(None));
        assert_eq!(c.release(&a, 149, now, false), Release::Now);
        // b's marker at 150: nothing at or after it goes out
        c.found_stop(150);
        assert_eq!(c.release(&a, 150, now, false), Release::Drop);
        assert_eq!(
            c.release(&b, 150, now, true),
            Release::Now,
            "the marker itself goes out"
        );
        assert_eq!(c.release(&a, 149, now, false), Release::Now);
        // an earlier marker wins, a later one does not
        c.found_stop(170);
        assert_eq!(c.stop_at(), Some(150));
        c.found_stop(120);
        assert_eq!(c.stop_at(), Some(120));
        // a finished split holds no one back
        c.remove(&b);
        assert_eq!(c.release(&a, 119, now, false), Release::Now);
    }

    #[test]
    fn a_caught_up_split_holds_records_newer_than_the_wall_clock_less_the_grace() {
        let c = clock(None, true);
        let (a, b) = (id("a"), id("b"));
        c.register(&a);
        c.register(&b);
        c.caught_up(&b);
        let now = Instant::now();
        let wall = wall_millis();
        // historical: long before the wall clock
        assert_eq!(c.release(&a, 1_000, now, false), Release::Now);
        // live: b may still receive a record stamped a moment ago
        match c.release(&a, wall, now, false) {
            Release::Wait(Some(at)) => assert!(at > now && at <= now + Duration::from_millis(2_100)),
            other => panic!("expected a timed wait, got {other:?}"),
        }
        c.found_stop(wall - 10_000);
        assert!(c.is_past_stop(&b));
        assert!(!c.is_past_stop(&a), "a is not caught up");
    }

    #[test]
    fn only_the_lowest_split_of_an_unpaced_alignment_holds_others_back() {
        let (a, b) = (id("a"), id("b"));
        let aligned = clock(None, true);
        aligned.register(&a);
        assert!(!aligned.holds_others_back(&a), "alone, it holds no one back");
        aligned.register(&b);
        aligned.observe(&a, 100, 100);
        aligned.observe(&b, 200, 200);
        assert!(aligned.holds_others_back(&a));
        assert!(!aligned.holds_others_back(&b));
        // paced, records wait for their time: any split may pause
        let paced = clock(Some(1.0), true);
        paced.register(&a);
        paced.register(&b);
        paced.observe(&a, 100, 100);
        assert!(!paced.holds_others_back(&a));
    }

    #[test]
    fn a_stop_is_ignored_unless_source_wide() {
        let c = clock(None, false);
        c.found_stop(10);
        assert_eq!(c.stop_at(), None);
        assert_eq!(c.release(&id("a"), 20, Instant::now(), false), Release::Now);
    }

    #[test]
    fn pacing_never_overflows_on_extreme_timestamps() {
        let c = clock(Some(1e-6), false);
        let a = id("a");
        c.register(&a);
        c.observe(&a, 0, 0);
        let now = Instant::now();
        assert_eq!(c.release(&a, 0, now, false), Release::Now);
        assert_eq!(
            c.release(&a, i64::MIN, now, false),
            Release::Now,
            "older than the anchor"
        );
        // further than any instant: it waits (for a change of the clock), it does not panic
        assert_eq!(c.release(&a, i64::MAX, now, false), Release::Wait(None));
        // the anchor at the far end of time, a record at the other
        let c = clock(Some(1000.0), false);
        c.register(&a);
        c.observe(&a, i64::MIN, i64::MIN);
        assert_eq!(c.release(&a, i64::MIN, now, false), Release::Now);
        // the whole range of milliseconds at 1000x: 292,000 years on
        match c.release(&a, i64::MAX, now, false) {
            Release::At(due) => assert!(due > now + Duration::from_secs(3600 * 24 * 365 * 1000)),
            other => panic!("expected a due instant, got {other:?}"),
        }
    }
}
