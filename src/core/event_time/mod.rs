//! Event time across all readers of a job: the shared clock of a paced replay
//! (`replay_speed`) and the alignment behind a source-wide stop (`eof_scope = "source"`).
//!
//! Flink's watermark alignment (FLIP-182) has readers report watermarks to the coordinator and
//! pause splits that run ahead. Every tidegate reader lives in one process, so the "coordinator"
//! is this shared, locked state: each split's watermark, the anchor of the pacing clock, and the
//! source-wide stop once a marker is found. Readers hold evaluated records (see
//! `SourceReaderBase`) until [`EventTimeClock::release`] lets them go: at their scheduled instant
//! when paced, and only once no split can still hold an end-of-stream record at or before them
//! when the stop is source-wide.
//!
//! A split's watermark is a lower bound of every timestamp it may still evaluate, the larger of
//! two:
//! - the largest timestamp it evaluated, less `max_out_of_orderness` (how far a partition's
//!   timestamps may run back; zero for partitions in timestamp order);
//! - the instant its fetcher last confirmed its log holds nothing past its position (see
//!   [`super::split_reader::RecordsWithSplitIds::confirmed_caught_up`]), less `idle_grace` (how
//!   long a record may take from its timestamp to the log).
//!
//! A split without either holds every other back. The wall clock alone moves nothing: a
//! partition whose broker does not answer is never taken as done, nor one with an open
//! transaction, whose records are in the log (so not confirmed) but become visible only at the
//! commit, however late: the grace need not cover a transaction's length.
//!
//! With these bounds the source-wide stop is exact: a record is emitted only once no split can
//! still evaluate a marker at or before it (its own split included), so the stop is the
//! earliest marker of any split wherever it lies in its split; and a split ends only once its
//! watermark is at the stop (no record before the stop can follow), not at its first record at
//! or after the stop. A record further out of order than `max_out_of_orderness` is logged and
//! counted ([`EventTimeClock::disordered_records`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
// the runtime's clock: the system's, virtual under a simulation (sim::now)
use tokio::time::Instant;

use tokio::sync::watch;
use tracing::{info, warn};

use super::split::SplitId;

mod options;
mod peers;
pub use options::EventTimeOptions;
pub use peers::{Peers, PublishedSplit};

/// What to do with a held record now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Emit it.
    Now,
    /// Not before this instant (pacing), or until the clock changes, whichever is first.
    At(Instant),
    /// Wait for the clock to change (a split's watermark, the anchor, the stop). `Some` is no
    /// longer produced: watermarks do not move with the wall clock alone.
    Wait(Option<Instant>),
    /// At or after the source-wide stop: drop it (its split reads on while records before the
    /// stop may follow).
    Drop,
}

#[derive(Debug, Default)]
struct SplitClock {
    /// The timestamp of the first record evaluated since this process started.
    first: Option<i64>,
    /// The largest timestamp evaluated.
    seen: Option<i64>,
    /// At the end of its log, nothing evaluated since (for the pacing clock's start).
    idle: bool,
    /// Wall-clock milliseconds at which its fetcher last confirmed the log holds nothing past
    /// its position: no record, no open transaction.
    confirmed: Option<i64>,
    /// Its fetching is paused (it holds too much).
    paused: bool,
    /// A record further out of order than `max_out_of_orderness` was reported.
    disorder_logged: bool,
}

#[derive(Debug, Default)]
struct State {
    splits: HashMap<SplitId, SplitClock>,
    /// The first timestamp of the replay and the instant it is emitted at.
    anchor: Option<(i64, Instant)>,
    stop_at: Option<i64>,
    /// The stop was logged as final: no split could still find an earlier marker.
    stop_settled: bool,
    /// The timestamp of the first record each reader holds per split, finished splits too:
    /// what the next release waits for.
    fronts: HashMap<SplitId, i64>,
    /// The pacing factor now (`options.speed` at the start; changeable while running).
    speed: Option<f64>,
    /// Splits this process finished (or found finished in its state): they hold no one back,
    /// and other processes learn so from [`EventTimeClock::local_view`].
    finished: std::collections::HashSet<SplitId>,
    /// With `peers`: what the other processes published, once known.
    peers: Option<Peers>,
    /// The job that used it ended: its readers hold nothing any more.
    closed: bool,
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
    /// Records further out of their split's timestamp order than `max_out_of_orderness`.
    disordered: AtomicU64,
}

impl EventTimeClock {
    /// A clock with these options, at no event time yet.
    pub fn new(options: EventTimeOptions) -> Self {
        EventTimeClock {
            state: Mutex::new(State {
                speed: options.speed,
                ..State::default()
            }),
            options,
            version: watch::channel(0).0,
            released: AtomicI64::new(i64::MIN),
            late: AtomicU64::new(0),
            disordered: AtomicU64::new(0),
        }
    }

    /// The options it was made with.
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
        let mut state = self.lock();
        state.finished.remove(id);
        state.splits.entry(id.clone()).or_default();
        drop(state);
        self.changed();
    }

    /// A split that finished: it holds no one back any more.
    pub fn remove(&self, id: &SplitId) {
        let mut state = self.lock();
        if state.splits.remove(id).is_some() {
            state.finished.insert(id.clone());
            self.settle_stop(&mut state);
            drop(state);
            self.changed();
        }
    }

    /// Log the source-wide stop once it is final: every split still read is past it, so no
    /// earlier end-of-stream record can move it (a marker found first may not be the earliest).
    fn settle_stop(&self, state: &mut State) {
        let Some(stop) = state.stop_at.filter(|_| !state.stop_settled) else {
            return;
        };
        // with peers, not before they are known: a split another process reads may be behind
        let peers_past = match &state.peers {
            None => !self.options.peers,
            Some(peers) => peers
                .splits
                .iter()
                .filter(|id| !state.splits.contains_key(*id) && !state.finished.contains(*id))
                .all(|id| peers.watermarks.get(id).is_some_and(|w| *w >= stop)),
        };
        if peers_past && state.splits.values().all(|s| self.watermark(s) >= stop) {
            state.stop_settled = true;
            info!(timestamp = stop, at = %format_millis(stop), "source-wide stop: every partition ends before this timestamp");
        }
    }

    /// A reader evaluated records of `id`, the first of them (in the split's order) stamped
    /// `first`, the latest `max`; `disorder`: how far the furthest of them ran back behind an
    /// earlier record of the split (0 if in order).
    pub fn observe(&self, id: &SplitId, first: i64, max: i64, disorder: i64) {
        let mut state = self.lock();
        let Some(split) = state.splits.get_mut(id) else {
            return;
        };
        // the split's first record read, not the earliest of the batch it came in: how far a
        // fetch reads ahead must not move the clock's start
        split.first.get_or_insert(first);
        split.seen = Some(split.seen.map_or(max, |s| s.max(max)));
        split.idle = false;
        let bound = self.options.max_out_of_orderness.as_millis() as i64;
        if self.options.source_wide_stop && disorder > bound {
            self.disordered.fetch_add(1, Ordering::Relaxed);
            if !split.disorder_logged {
                split.disorder_logged = true;
                warn!(split_id = %id, disorder_ms = disorder, max_out_of_orderness_ms = bound,
                      "a record is further out of timestamp order than max_out_of_orderness: the source-wide stop is exact only within it (logged once per split)");
            }
        }
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

    /// `id`'s fetcher confirmed, at wall-clock milliseconds `at`, that its log held nothing past
    /// its position (no record, no open transaction): whatever it reads later was written after
    /// `at`, so is stamped no earlier than `at - idle_grace`.
    pub fn confirmed_caught_up(&self, id: &SplitId, at: i64) {
        if let Some(split) = self.lock().splits.get_mut(id) {
            split.idle = true;
            split.confirmed = Some(split.confirmed.map_or(at, |c| c.max(at)));
        }
        self.changed();
    }

    /// The timestamp of the first record `id`'s reader holds, if any (for flow control). While
    /// a split is paused, a change wakes the readers: the pause may have to end.
    pub fn set_front(&self, id: &SplitId, front: Option<i64>) {
        let mut state = self.lock();
        if state.fronts.get(id).copied() == front {
            return;
        }
        match front {
            Some(t) => state.fronts.insert(id.clone(), t),
            None => state.fronts.remove(id),
        };
        let any_paused = state.splits.values().any(|s| s.paused);
        drop(state);
        if any_paused {
            self.changed();
        }
    }

    /// `id`'s fetching was paused or resumed.
    pub fn set_paused(&self, id: &SplitId, paused: bool) {
        if let Some(split) = self.lock().splits.get_mut(id) {
            split.paused = paused;
        }
    }

    /// An end-of-stream record at `timestamp` was found: with a source-wide stop, every split
    /// ends there (the earliest such record wins).
    pub fn found_stop(&self, timestamp: i64) {
        if !self.options.source_wide_stop {
            return;
        }
        let mut state = self.lock();
        if state.stop_at.is_none_or(|t| timestamp < t) {
            let earlier = state.stop_at.replace(timestamp);
            // the stop itself is logged once final (see settle_stop): a split not read that far
            // yet may still hold an earlier marker
            match earlier {
                None => {
                    info!(timestamp, at = %format_millis(timestamp), "end-of-stream record found: every partition is read up to it, in case one holds an earlier one")
                }
                Some(was) => {
                    info!(timestamp, at = %format_millis(timestamp), was, "an earlier end-of-stream record found: it moves the source-wide stop")
                }
            }
            self.settle_stop(&mut state);
            drop(state);
            self.changed();
        }
    }

    /// The source-wide stop restored from a checkpoint.
    pub fn restore_stop(&self, timestamp: Option<i64>) {
        if let Some(t) = timestamp {
            info!(timestamp = t, at = %format_millis(t), "restored the source-wide stop from the last checkpoint");
            self.lock().stop_at = Some(t);
        }
    }

    /// The source-wide stop, once known.
    pub fn stop_at(&self) -> Option<i64> {
        self.lock().stop_at
    }

    /// Whether split `id` can evaluate no record before the source-wide stop any more: its
    /// watermark is at the stop. The reader then ends it (`source_stop`).
    pub fn is_past_stop(&self, id: &SplitId) -> bool {
        let mut state = self.lock();
        self.settle_stop(&mut state);
        let (Some(stop), Some(split)) = (state.stop_at, state.splits.get(id)) else {
            return false;
        };
        self.watermark(split) >= stop
    }

    /// Whether split `id` must keep fetching because the next release waits for it: with a
    /// source-wide stop, its watermark is not past the earliest record any reader holds. Other
    /// splits may pause, paced or not.
    pub fn holds_others_back(&self, id: &SplitId) -> bool {
        if !self.options.source_wide_stop {
            return false;
        }
        let state = self.lock();
        let Some(mine) = state.splits.get(id).map(|s| self.watermark(s)) else {
            return false;
        };
        let remote = state.peers.as_ref().and_then(|p| p.fronts.values().min().copied());
        state
            .fronts
            .values()
            .min()
            .copied()
            .into_iter()
            .chain(remote)
            .min()
            .is_some_and(|f| mine <= f)
    }

    /// A lower bound of every timestamp the split may still evaluate (see the module docs).
    fn watermark(&self, split: &SplitClock) -> i64 {
        let by_records = split.seen.map_or(i64::MIN, |s| {
            s.saturating_sub(self.options.max_out_of_orderness.as_millis() as i64)
        });
        let by_log = split.confirmed.map_or(i64::MIN, |c| {
            c.saturating_sub(self.options.idle_grace.as_millis() as i64)
        });
        by_records.max(by_log)
    }

    /// May a held record with `timestamp` be emitted now? `marker`: it is an end-of-stream
    /// record kept by `eof_emit_marker`; the one the stop is at goes out with the records before
    /// it.
    pub fn release(&self, timestamp: i64, now: Instant, marker: bool) -> Release {
        let mut state = self.lock();
        if let Some(stop) = state.stop_at {
            if timestamp > stop || (timestamp == stop && !marker) {
                return Release::Drop;
            }
        }
        if self.options.source_wide_stop {
            // a marker at or before this record may still come from any split whose watermark
            // is not past it, its own included (its next records may run back)
            if state.splits.values().any(|split| self.watermark(split) <= timestamp) {
                return Release::Wait(None);
            }
            if self.options.peers && !self.peers_past(&state, timestamp) {
                return Release::Wait(None);
            }
        }
        let Some(speed) = state.speed else {
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
                return self.release(timestamp, now, marker);
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

    /// The pacing factor now (`None`: as fast as possible).
    pub fn speed(&self) -> Option<f64> {
        self.lock().speed
    }

    /// Change the pacing factor while the replay runs (`None`: as fast as possible).
    pub fn set_speed(&self, speed: Option<f64>) {
        let mut state = self.lock();
        state.speed = speed;
        self.rebase(&mut state, Instant::now());
        drop(state);
        self.changed();
    }

    /// Restart the pacing clock at the event time emitted last, from now: after a pause, a
    /// change of speed or of a rate limit, the replay neither jumps ahead nor bursts to catch
    /// up with a schedule it was held behind.
    pub fn restart_pacing(&self) {
        let mut state = self.lock();
        self.rebase(&mut state, Instant::now());
        drop(state);
        self.changed();
    }

    fn rebase(&self, state: &mut State, now: Instant) {
        if let Some((t0, _)) = state.anchor {
            let t = self.replayed_to().map_or(t0, |t| t.max(t0));
            state.anchor = Some((t, now));
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

    /// Records evaluated further out of their split's timestamp order than
    /// `max_out_of_orderness` (with a source-wide stop).
    pub fn disordered_records(&self) -> u64 {
        self.disordered.load(Ordering::Relaxed)
    }
}

/// The clock's view of the other processes reading the source (group coordination).
impl EventTimeClock {
    /// Whether every split read by another process is past `timestamp`: its published
    /// watermark is (this process's own splits are judged by their local watermarks; a split it
    /// read before, from a position another process has since gone past, by its own too).
    fn peers_past(&self, state: &State, timestamp: i64) -> bool {
        let Some(peers) = &state.peers else {
            return false;
        };
        peers
            .splits
            .iter()
            .filter(|id| !state.splits.contains_key(*id) && !state.finished.contains(*id))
            .all(|id| peers.watermarks.get(id).is_some_and(|w| *w > timestamp))
    }

    /// A split this process will not read, finished before (its state says so): it holds no
    /// one back, and the other processes learn so.
    pub fn finished_before(&self, id: &SplitId) {
        let mut state = self.lock();
        if !state.splits.contains_key(id) && state.finished.insert(id.clone()) {
            drop(state);
            self.changed();
        }
    }

    /// What the other processes reading the source published (group coordination); their
    /// stop moves this one's like a marker found here.
    pub fn set_peers(&self, peers: Peers) {
        let mut state = self.lock();
        if state.peers.as_ref() == Some(&peers) {
            return;
        }
        // the stop under the same lock as the watermarks that came with it: no release may see
        // a peer's watermark past its stop without the stop
        if let Some(t) = peers.stop.filter(|_| self.options.source_wide_stop) {
            if state.stop_at.is_none_or(|s| t < s) {
                let was = state.stop_at.replace(t);
                info!(timestamp = t, at = %format_millis(t), was, "an end-of-stream record found by another process: every partition is read up to it");
            }
        }
        state.peers = Some(peers);
        self.settle_stop(&mut state);
        drop(state);
        self.changed();
    }

    /// The job whose readers used it ended: [`Self::local_view`] shows no fronts any more (its
    /// watermarks stay true).
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Whether the job whose readers used it ended.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// This process's splits as the others need them: each one's watermark and front (finished
    /// ones at `i64::MAX`), and the stop, taken at one instant, so that a watermark past an
    /// end-of-stream record never goes out without the stop it found.
    pub fn local_view(&self) -> (Vec<PublishedSplit>, Option<i64>) {
        let state = self.lock();
        let closed = state.closed;
        let mut splits: Vec<PublishedSplit> = state
            .splits
            .iter()
            .map(|(id, split)| PublishedSplit {
                id: id.clone(),
                watermark: self.watermark(split),
                front: state.fronts.get(id).copied().filter(|_| !closed),
            })
            .collect();
        splits.extend(state.finished.iter().map(|id| PublishedSplit {
            id: id.clone(),
            watermark: i64::MAX,
            front: None,
        }));
        (splits, state.stop_at)
    }
}

/// Milliseconds since the epoch, now (virtual under a simulation: [`super::sim::wall_millis`]).
pub fn wall_millis() -> i64 {
    super::sim::wall_millis()
}

/// A timestamp in milliseconds as RFC 3339.
pub fn format_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

#[cfg(test)]
mod tests;
