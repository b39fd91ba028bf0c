//! The records one reader has evaluated but holds back for event time (pacing, a source-wide
//! stop), per split in fetch order, released oldest first as the shared [`EventTimeClock`]
//! allows. Held records are not yet emitted: a checkpoint's split state is rewound to the first
//! of them, so a restart reads them again. Once the source-wide stop is known, a record at or
//! after it is dropped as it is evaluated (or, if the stop moves earlier, when it is reached);
//! its split reads on until the reader ends it (see [`EventTimeClock::is_past_stop`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
// the runtime's clock: the system's, virtual under a simulation (sim::now)
use tokio::time::Instant;

use tokio::sync::watch;
use tracing::warn;

use super::emitter::{FilteredAt, ReaderOutput, RecordPosition};
use super::event_time::{EventTimeClock, Release};
use super::queue::AvailabilityFuture;
use super::split::{FinishReason, Finished, SourceSplit, SplitId, SplitSnapshot};
use super::throttle::{Admit, Throttle};

/// Remember `position` as where the source-wide stop ended split `id`, if it is the first.
fn note_stopped(stopped: &mut HashMap<SplitId, i64>, id: &SplitId, position: Option<i64>) {
    if let Some(p) = position {
        let at = stopped.entry(id.clone()).or_insert(p);
        *at = (*at).min(p);
    }
}

/// Held records per split above which the split's fetching pauses (resumed below half): memory
/// stays bounded while a paced replay waits, or a split runs ahead of the others.
pub(crate) const PAUSE_ABOVE: usize = 8192;
/// Records released per poll at most, so commands and checkpoints are not kept waiting.
const RELEASE_PER_POLL: usize = 4096;

struct Held<T> {
    /// `None`: a record the filter rejected. It is held in its place all the same, so that it
    /// goes by the clock and the stop exactly as it would unfiltered (the split's progress and
    /// where a source-wide stop ends it do not depend on the filter), and is never emitted.
    record: Option<T>,
    /// Its position (the record's own, or the rejected record's).
    position: Option<i64>,
    /// Its own timestamp, or the one of the record before it in its split; `None` when neither
    /// exists (it goes out at once, see [`HeldRecords::hold`]).
    timestamp: Option<i64>,
    /// The end-of-stream record itself (kept with `eof_emit_marker`): it goes out at the stop.
    marker: bool,
}

/// What [`HeldRecords::release`] did.
#[derive(Default)]
pub(crate) struct Released {
    /// Records emitted.
    pub(crate) count: usize,
    /// Records dropped at or after the source-wide stop.
    pub(crate) dropped: usize,
}

pub(crate) struct HeldRecords<T> {
    clock: Arc<EventTimeClock>,
    version: watch::Receiver<u64>,
    /// The job's pause switch and rate limits: a record the clock releases waits for them too.
    throttle: Arc<Throttle>,
    throttle_version: watch::Receiver<u64>,
    held: HashMap<SplitId, VecDeque<Held<T>>>,
    last_emitted: HashMap<SplitId, i64>,
    /// The timestamp of the last record held per split (its own or inherited): what the next
    /// record without a timestamp takes.
    previous: HashMap<SplitId, i64>,
    /// The largest timestamp evaluated per split, to tell how far a record runs back behind it.
    highest: HashMap<SplitId, i64>,
    /// The source-wide stop the held records were last purged at.
    purged_at: Option<i64>,
    paused: HashSet<SplitId>,
    wake_at: Option<Instant>,
    /// Per split, the position of the first record dropped at or after the source-wide stop:
    /// where the stop ended it, whatever was fetched past it.
    stopped_at: HashMap<SplitId, i64>,
    /// Per split, the timestamp of the end-of-stream record that ended it.
    marker_times: HashMap<SplitId, i64>,
}

impl<T: RecordPosition> HeldRecords<T> {
    pub(crate) fn new(clock: Arc<EventTimeClock>, throttle: Arc<Throttle>) -> Self {
        HeldRecords {
            version: clock.subscribe(),
            clock,
            throttle_version: throttle.subscribe(),
            throttle,
            held: HashMap::new(),
            last_emitted: HashMap::new(),
            previous: HashMap::new(),
            highest: HashMap::new(),
            purged_at: None,
            paused: HashSet::new(),
            wake_at: None,
            stopped_at: HashMap::new(),
            marker_times: HashMap::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn new_unthrottled(clock: Arc<EventTimeClock>) -> Self {
        Self::new(clock, Arc::default())
    }

    pub(crate) fn clock(&self) -> &Arc<EventTimeClock> {
        &self.clock
    }

    /// Hold `records` of split `id`, just evaluated; `filtered`: where records the filter
    /// rejected were among them (their timestamps move the split's event time as they would
    /// unfiltered: a filter changes what is emitted, not when or where anything stops);
    /// `marker`: the split ended at an end-of-stream record with this timestamp (the last of
    /// `records` if it was kept). Returns the marker's event time.
    ///
    /// A record without a timestamp takes the one of the record before it in its split, so it
    /// keeps its place: paced with it, and stopped with it. One with no record before it in this
    /// run (at the start of its split's read) has no event time: it goes out at once, neither
    /// waiting for the clock nor starting or moving it, and a source-wide stop never drops it.
    pub(crate) fn hold(
        &mut self,
        id: &SplitId,
        records: Vec<T>,
        filtered: &[FilteredAt],
        marker: Option<Option<i64>>,
        marker_kept: bool,
    ) -> Option<i64> {
        let stop = self.clock.stop_at();
        let queue = self.held.entry(id.clone()).or_default();
        let mut previous = self.previous.get(id).copied();
        let mut highest = self.highest.get(id).copied().unwrap_or(i64::MIN);
        let (mut first, mut high, mut disorder) = (None, i64::MIN, 0i64);
        let n = records.len();
        let mut observe = |t: i64| {
            first.get_or_insert(t);
            high = high.max(t);
            disorder = disorder.max(highest.saturating_sub(t));
            highest = highest.max(t);
        };
        // an end-of-stream record without a timestamp takes its predecessor's too
        let mut marker_time = None;
        let mut rejected = filtered.iter().peekable();
        let mut records = records.into_iter().enumerate().peekable();
        loop {
            // in their split's order: the rejected records before the next kept one first
            let next_kept = records.peek().map(|(i, _)| *i);
            let (record, timestamp, position, is_marker) =
                match rejected.next_if(|f| next_kept.is_none_or(|i| f.after <= i)) {
                    Some(f) => (None, f.timestamp.or(previous), f.position, false),
                    None => match records.next() {
                        Some((i, record)) => {
                            let timestamp = record.timestamp().or(previous);
                            let position = record.position();
                            (
                                Some(record),
                                timestamp,
                                position,
                                marker_kept && marker.is_some() && i + 1 == n,
                            )
                        }
                        None => break,
                    },
                };
            if let Some(t) = timestamp {
                previous = Some(t);
                observe(t);
                if is_marker {
                    marker_time = Some(t);
                }
            }
            if let (Some(t), Some(stop)) = (timestamp, stop) {
                if t > stop || (t == stop && !is_marker) {
                    // at or after the stop: never emitted
                    note_stopped(&mut self.stopped_at, id, position);
                    continue;
                }
            }
            queue.push_back(Held {
                record,
                position,
                timestamp,
                marker: is_marker,
            });
        }
        if let Some(m) = marker.filter(|_| !marker_kept) {
            marker_time = m.or(previous);
            if let Some(t) = marker_time {
                previous = Some(t);
                observe(t);
            }
        }
        let front = queue.front().and_then(|h| h.timestamp);
        if queue.is_empty() {
            self.held.remove(id);
        }
        if let Some(t) = previous {
            self.previous.insert(id.clone(), t);
        }
        if highest != i64::MIN {
            self.highest.insert(id.clone(), highest);
        }
        self.clock.set_front(id, front);
        if let Some(t) = marker_time {
            self.marker_times.insert(id.clone(), t);
        }
        // the stop before the watermark the batch moves: whoever sees that watermark (a reader,
        // another process through `local_view`) sees the stop too
        match marker_time {
            Some(t) => self.clock.found_stop(t),
            None if marker.is_some() && self.clock.options().source_wide_stop => {
                warn!(split_id = %id, "an end-of-stream record without a timestamp, and none before it in its split: it ends its own split only");
            }
            None => {}
        }
        if let Some(first) = first {
            self.clock.observe(id, first, high, disorder);
        }
        marker_time
    }

    /// Release what the clock allows into `output`, oldest first across this reader's splits.
    pub(crate) fn release(&mut self, output: &mut ReaderOutput<T>) -> Released {
        let mut done = Released::default();
        let now = Instant::now();
        self.wake_at = None;
        self.purge_past_stop(&mut done);
        let mut touched: Vec<SplitId> = Vec::new();
        while done.count < RELEASE_PER_POLL {
            let Some((id, timestamp, marker, size)) = self
                .held
                .iter()
                .filter_map(|(id, q)| {
                    q.front().map(|h| {
                        (
                            id,
                            h.timestamp,
                            h.marker,
                            h.record.as_ref().map(RecordPosition::size_bytes),
                        )
                    })
                })
                .min_by_key(|(_, t, _, _)| *t)
                .map(|(id, t, m, s)| (id.clone(), t, m, s))
            else {
                break;
            };
            if !touched.contains(&id) {
                touched.push(id.clone());
            }
            // a record (not a rejected one) waits for the pause switch and the rate limits too,
            // asked once it is due (when the clock lets it go)
            let admit = |throttle: &Throttle| size.map_or(Admit::Now, |s| throttle.admit(s, now));
            let Some(timestamp) = timestamp else {
                match admit(&self.throttle) {
                    Admit::Now => {}
                    Admit::At(at) => {
                        self.wake_at = Some(at);
                        break;
                    }
                    Admit::Wait => break,
                }
                // no event time: at once, the clock untouched
                if let Some(record) = self.pop_front(&id).and_then(|h| h.record) {
                    output.collect_unevaluated(record);
                    done.count += 1;
                }
                continue;
            };
            // the pause before the clock: a resume restarts the clock before it opens the switch
            // (`POST /control`), so a reader that sees the switch open sees the restarted clock
            if size.is_some() && self.throttle.is_paused() {
                self.wake_at = None;
                break;
            }
            let release = match self.clock.release(timestamp, now, marker) {
                Release::Now => match admit(&self.throttle) {
                    Admit::Now => Release::Now,
                    Admit::At(at) => Release::At(at),
                    Admit::Wait => Release::Wait(None),
                },
                other => other,
            };
            match release {
                Release::Now => {
                    let Some(h) = self.pop_front(&id) else { break };
                    // a rejected record: its time has come, and it goes nowhere
                    let Some(record) = h.record else { continue };
                    let last = self.last_emitted.entry(id).or_insert(i64::MIN);
                    let late = timestamp < *last;
                    *last = (*last).max(timestamp);
                    self.clock.emitted(timestamp, late);
                    output.collect_unevaluated(record);
                    done.count += 1;
                }
                Release::At(at) => {
                    self.wake_at = Some(at);
                    break;
                }
                Release::Wait(at) => {
                    self.wake_at = at;
                    break;
                }
                Release::Drop => {
                    // at or after the stop (which moved earlier since it was held)
                    if let Some(h) = self.pop_front(&id) {
                        note_stopped(&mut self.stopped_at, &id, h.position);
                    }
                    done.dropped += 1;
                }
            }
        }
        for id in touched {
            let front = self.held.get(&id).and_then(|q| q.front()).and_then(|h| h.timestamp);
            self.clock.set_front(&id, front);
        }
        done
    }

    /// Once the source-wide stop is known or moves earlier, drop every held record at or after
    /// it at once, not only as each reaches the front (memory, and the pause decisions).
    fn purge_past_stop(&mut self, done: &mut Released) {
        let stop = self.clock.stop_at();
        let Some(stop) = stop.filter(|s| self.purged_at.is_none_or(|p| *s < p)) else {
            return;
        };
        self.purged_at = Some(stop);
        for (id, queue) in &mut self.held {
            let before = queue.len();
            let stopped = &mut self.stopped_at;
            queue.retain(|h| {
                let keep = h.timestamp.is_none_or(|t| t < stop || (t == stop && h.marker));
                if !keep {
                    note_stopped(stopped, id, h.position);
                }
                keep
            });
            done.dropped += before - queue.len();
            self.clock.set_front(id, queue.front().and_then(|h| h.timestamp));
        }
        self.held.retain(|_, q| !q.is_empty());
    }

    fn pop_front(&mut self, id: &SplitId) -> Option<Held<T>> {
        let queue = self.held.get_mut(id)?;
        let h = queue.pop_front();
        if queue.is_empty() {
            self.held.remove(id);
        }
        h
    }

    /// A finished split as a checkpoint (and the end-of-run report) shows it. One that the
    /// source-wide stop ended, that read on to its stopping offset past records the stop
    /// dropped, or whose own end-of-stream record lies after the stop, reports `source_stop` at
    /// its first record at or after the stop, its progress there: the same in every run,
    /// however far its fetch read past the stop.
    /// Without event time (`held` is `None`), the split as it is.
    pub(crate) fn finished_snapshot<S: SourceSplit>(
        held: Option<&Self>,
        mut split: S,
        finished: Option<Finished>,
    ) -> SplitSnapshot<S> {
        let Some(this) = held else {
            return SplitSnapshot { split, finished };
        };
        let id = split.split_id();
        let revised = match (finished, this.clock.stop_at()) {
            (Some(f), Some(stop)) => {
                let own_marker_later =
                    f.reason == FinishReason::EofRecord && this.marker_times.get(&id).is_some_and(|t| *t > stop);
                let marker = f.at.filter(|_| own_marker_later);
                let first = match (this.stopped_at.get(&id).copied(), marker) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                // a split that read on to its stopping offset past dropped records was ended by
                // the stop too: how far it read is the fetch's timing
                let by_stop = matches!(f.reason, FinishReason::SourceStop | FinishReason::StoppingOffset);
                match first {
                    Some(at) if by_stop || own_marker_later => {
                        if !split.rewind_to(at) {
                            warn!(split_id = %id, at, "cannot move the split to where the source-wide stop ended it");
                        }
                        Some(Finished {
                            reason: FinishReason::SourceStop,
                            at: Some(at),
                        })
                    }
                    _ => Some(f),
                }
            }
            (f, _) => f,
        };
        SplitSnapshot {
            split,
            finished: revised,
        }
    }

    /// Position of the first held record of `id`: where its progress stands for a checkpoint.
    pub(crate) fn first_position(&self, id: &SplitId) -> Option<i64> {
        self.held.get(id)?.front()?.position
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Drop what a removed split held.
    pub(crate) fn forget(&mut self, id: &SplitId) {
        self.held.remove(id);
        self.clock.set_front(id, None);
        self.previous.remove(id);
        self.highest.remove(id);
        self.paused.remove(id);
    }

    /// Splits to pause (holding too much) and to resume (drained, or ended). A split the next
    /// release waits for ([`EventTimeClock::holds_others_back`]) is never paused, so alignment
    /// cannot deadlock; any other pauses, so a slow replay never buffers a topic.
    pub(crate) fn flow_control(&mut self) -> (Vec<SplitId>, Vec<SplitId>) {
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        for (id, queue) in &self.held {
            if queue.len() > PAUSE_ABOVE && !self.paused.contains(id) && !self.clock.holds_others_back(id) {
                pause.push(id.clone());
            }
        }
        for id in &self.paused {
            let len = self.held.get(id).map_or(0, VecDeque::len);
            if len < PAUSE_ABOVE / 2 || self.clock.holds_others_back(id) {
                resume.push(id.clone());
            }
        }
        for id in &pause {
            self.paused.insert(id.clone());
            self.clock.set_paused(id, true);
        }
        for id in &resume {
            self.paused.remove(id);
            self.clock.set_paused(id, false);
        }
        (pause, resume)
    }

    /// Note the clock's current version: [`HeldRecords::changed`] waits for a newer one.
    pub(crate) fn mark_seen(&mut self) {
        self.version.borrow_and_update();
        self.throttle_version.borrow_and_update();
    }

    /// Completes when the clock changes or the next held record is due.
    pub(crate) fn changed(&self) -> AvailabilityFuture {
        let mut version = self.version.clone();
        let mut throttle = self.throttle_version.clone();
        let wake_at = self.wake_at;
        Box::pin(async move {
            let sleep = async {
                match wake_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = version.changed() => {}
                _ = throttle.changed() => {}
                _ = sleep => {}
            }
        })
    }
}

#[cfg(test)]
#[path = "held_tests.rs"]
mod tests;
