//! The records one reader has evaluated but holds back for event time (pacing, a source-wide
//! stop), per split in fetch order, released oldest first as the shared [`EventTimeClock`]
//! allows. Held records are not yet emitted: a checkpoint's split state is rewound to the first
//! of them, so a restart reads them again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::emitter::{ReaderOutput, RecordPosition};
use super::event_time::{EventTimeClock, Release};
use super::reader::AvailabilityFuture;
use super::source::SplitId;

/// Held records per split above which the split's fetching pauses (resumed below half): memory
/// stays bounded while a paced replay waits, or a split runs ahead of the others.
pub(crate) const PAUSE_ABOVE: usize = 8192;
/// Records released per poll at most, so commands and checkpoints are not kept waiting.
const RELEASE_PER_POLL: usize = 4096;

struct Held<T> {
    record: T,
    /// Its own timestamp, or the one of the record before it in its split; `None` when neither
    /// exists (it goes out at once, see [`HeldRecords::hold`]).
    timestamp: Option<i64>,
    /// The end-of-stream record itself (kept with `eof_emit_marker`): it goes out at the stop.
    marker: bool,
}

/// What [`HeldRecords::release`] did.
#[derive(Default)]
pub(crate) struct Released {
    pub(crate) count: usize,
    /// Splits that reached the source-wide stop, with the position of their first record at or
    /// after it (their later held records are dropped).
    pub(crate) stopped: Vec<(SplitId, Option<i64>)>,
}

pub(crate) struct HeldRecords<T> {
    clock: Arc<EventTimeClock>,
    version: watch::Receiver<u64>,
    held: HashMap<SplitId, VecDeque<Held<T>>>,
    last_emitted: HashMap<SplitId, i64>,
    /// The timestamp of the last record held per split (its own or inherited): what the next
    /// record without a timestamp takes.
    previous: HashMap<SplitId, i64>,
    paused: HashSet<SplitId>,
    wake_at: Option<Instant>,
}

impl<T: RecordPosition> HeldRecords<T> {
    pub(crate) fn new(clock: Arc<EventTimeClock>) -> Self {
        HeldRecords {
            version: clock.subscribe(),
            clock,
            held: HashMap::new(),
            last_emitted: HashMap::new(),
            previous: HashMap::new(),
            paused: HashSet::new(),
            wake_at: None,
        }
    }

    pub(crate) fn clock(&self) -> &Arc<EventTimeClock> {
        &self.clock
    }

    /// Hold `records` of split `id`, just evaluated; `marker`: the split ended at an
    /// end-of-stream record with this timestamp (the last of `records` if it was kept). Returns
    /// the marker's event time.
    ///
    /// A record without a timestamp takes the one of the record before it in its split, so it
    /// keeps its place: paced with it, and stopped with it. One with no record before it in this
    /// run (at the start of its split's read) has no event time: it goes out at once, neither
    /// waiting for the clock nor starting or moving it, and a source-wide stop never drops it.
    pub(crate) fn hold(
        &mut self,
        id: &SplitId,
        records: Vec<T>,
        marker: Option<Option<i64>>,
        marker_kept: bool,
    ) -> Option<i64> {
        let queue = self.held.entry(id.clone()).or_default();
        let mut previous = self.previous.get(id).copied();
        let (mut low, mut high) = (i64::MAX, i64::MIN);
        let n = records.len();
        for (i, record) in records.into_iter().enumerate() {
            let timestamp = record.timestamp().or(previous);
            if let Some(t) = timestamp {
                previous = Some(t);
                low = low.min(t);
                high = high.max(t);
            }
            queue.push_back(Held {
                record,
                timestamp,
                marker: marker_kept && marker.is_some() && i + 1 == n,
            });
        }
        // an end-of-stream record without a timestamp takes its predecessor's too
        let marker_time = marker.and_then(|m| m.or(previous));
        if let Some(t) = marker_time {
            previous = Some(t);
            low = low.min(t);
            high = high.max(t);
        }
        if let Some(t) = previous {
            self.previous.insert(id.clone(), t);
        }
        if queue.is_empty() {
            self.held.remove(id);
        }
        if low <= high {
            self.clock.observe(id, low, high);
        }
        if let Some(t) = marker_time {
            self.clock.found_stop(t);
        }
        marker_time
    }

    /// Release what the clock allows into `output`, oldest first across this reader's splits.
    pub(crate) fn release(&mut self, output: &mut ReaderOutput<T>) -> Released {
        let mut done = Released::default();
        let now = Instant::now();
        self.wake_at = None;
        while done.count < RELEASE_PER_POLL {
            let Some((id, timestamp, marker)) = self
                .held
                .iter()
                .filter_map(|(id, q)| q.front().map(|h| (id, h.timestamp, h.marker)))
                .min_by_key(|(_, t, _)| *t)
                .map(|(id, t, m)| (id.clone(), t, m))
            else {
                break;
            };
            let Some(timestamp) = timestamp else {
                // no event time: at once, the clock untouched
                if let Some(h) = self.pop_front(&id) {
                    output.collect_unevaluated(h.record);
                    done.count += 1;
                }
                continue;
            };
            match self.clock.release(&id, timestamp, now, marker) {
                Release::Now => {
                    let Some(queue) = self.held.get_mut(&id) else { break };
                    let Some(h) = queue.pop_front() else { break };
                    if queue.is_empty() {
                        self.held.remove(&id);
                    }
                    let last = self.last_emitted.entry(id).or_insert(i64::MIN);
                    let late = timestamp < *last;
                    *last = (*last).max(timestamp);
                    self.clock.emitted(timestamp, late);
                    output.collect_unevaluated(h.record);
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
                    // the split ends at its first record at or after the stop; what follows goes too
                    let queue = self.held.remove(&id);
                    let at = queue.and_then(|mut q| q.pop_front()).and_then(|h| h.record.position());
                    done.stopped.push((id, at));
                }
            }
        }
        done
    }

    fn pop_front(&mut self, id: &SplitId) -> Option<Held<T>> {
        let queue = self.held.get_mut(id)?;
        let h = queue.pop_front();
        if queue.is_empty() {
            self.held.remove(id);
        }
        h
    }

    /// Position of the first held record of `id`: where its progress stands for a checkpoint.
    pub(crate) fn first_position(&self, id: &SplitId) -> Option<i64> {
        self.held.get(id)?.front()?.record.position()
    }

    pub(crate) fn holds(&self, id: &SplitId) -> bool {
        self.held.contains_key(id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Drop what a removed split held.
    pub(crate) fn forget(&mut self, id: &SplitId) {
        self.held.remove(id);
        self.previous.remove(id);
        self.paused.remove(id);
    }

    /// Splits to pause (holding too much) and to resume (drained, or ended). A split the others
    /// wait for ([`EventTimeClock::holds_others_back`]) is never paused, so alignment cannot
    /// deadlock; with pacing every split pauses, so a slow replay never buffers a topic.
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
        }
        for id in &resume {
            self.paused.remove(id);
        }
        (pause, resume)
    }

    /// Wake no later than `at`, whatever [`HeldRecords::release`] found.
    pub(crate) fn wake_by(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    /// Note the clock's current version: [`HeldRecords::changed`] waits for a newer one.
    pub(crate) fn mark_seen(&mut self) {
        self.version.borrow_and_update();
    }

    /// Completes when the clock changes or the next held record is due.
    pub(crate) fn changed(&self) -> AvailabilityFuture {
        let mut version = self.version.clone();
        let wake_at = self.wake_at;
        Box::pin(async move {
            let sleep = async {
                match wake_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = version.changed() => {}
                _ = sleep => {}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_time::EventTimeOptions;
    use std::time::Duration;

    /// A record that is its own timestamp and position.
    #[derive(Debug)]
    struct At(i64);

    impl RecordPosition for At {
        fn position(&self) -> Option<i64> {
            Some(self.0)
        }
        fn timestamp(&self) -> Option<i64> {
            Some(self.0)
        }
    }

    /// A record at a position, with or without a timestamp.
    #[derive(Debug, PartialEq)]
    struct Rec(i64, Option<i64>);

    impl RecordPosition for Rec {
        fn position(&self) -> Option<i64> {
            Some(self.0)
        }
        fn timestamp(&self) -> Option<i64> {
            self.1
        }
    }

    fn held(speed: Option<f64>, source_wide_stop: bool) -> HeldRecords<At> {
        held_of(speed, source_wide_stop)
    }

    fn held_of<T: RecordPosition>(speed: Option<f64>, source_wide_stop: bool) -> HeldRecords<T> {
        HeldRecords::new(Arc::new(EventTimeClock::new(EventTimeOptions {
            speed,
            source_wide_stop,
            idle_grace: Duration::from_secs(2),
        })))
    }

    #[test]
    fn a_slow_paced_split_pauses_its_fetch_and_resumes_when_drained() {
        let mut h = held(Some(1.0), false);
        let id: SplitId = Arc::from("only");
        h.clock().register(&id);
        // an hour of records, one a second: at real time, only the first is due now
        h.hold(&id, (0..3600).map(|s| At(s * 1000)).collect(), None, false);
        h.hold(&id, (3600..10_000).map(|s| At(s * 1000)).collect(), None, false);
        let mut out = ReaderOutput::new(None, false);
        assert_eq!(h.release(&mut out).count, 1);
        assert_eq!(
            h.first_position(&id),
            Some(1000),
            "the checkpoint stands before the held"
        );
        let (pause, resume) = h.flow_control();
        assert_eq!(
            (pause, resume),
            (vec![id.clone()], vec![]),
            "alone and paced, it pauses"
        );
        // drained below half the limit: resumed
        h.held.get_mut(&id).unwrap().truncate(100);
        assert_eq!(h.flow_control(), (vec![], vec![id.clone()]));
    }

    #[test]
    fn the_source_wide_stop_drops_a_split_at_its_first_record_at_or_after_it() {
        let mut h = held(None, true);
        let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
        h.clock().register(&a);
        h.clock().register(&b);
        h.hold(&a, vec![At(10), At(20), At(30), At(40)], None, false);
        // b ends at its marker at 25 (the marker not kept)
        h.hold(&b, vec![At(5)], Some(Some(25)), false);
        h.clock().remove(&b);
        let mut out = ReaderOutput::new(None, false);
        let released = h.release(&mut out);
        let got: Vec<i64> = out.take_records().iter().map(|r| r.0).collect();
        assert_eq!(got, vec![5, 10, 20]);
        assert_eq!(released.stopped, vec![(a.clone(), Some(30))]);
        assert!(h.is_empty());
    }

    #[test]
    fn records_without_a_timestamp_take_their_predecessors_time_and_leading_ones_go_at_once() {
        let mut h = held_of::<Rec>(Some(1.0), false);
        let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
        h.clock().register(&a);
        h.clock().register(&b);
        // a: two records without a timestamp before its first one; one after each timed record
        h.hold(
            &a,
            vec![
                Rec(0, None),
                Rec(1, None),
                Rec(2, Some(10_000)),
                Rec(3, None),
                Rec(4, Some(70_000)),
                Rec(5, None),
            ],
            None,
            false,
        );
        h.hold(&b, vec![Rec(100, Some(10_000))], None, false);
        let mut out = ReaderOutput::new(None, false);
        h.release(&mut out);
        // the leading ones at once, then everything at 10 s (the anchor); 70 s is a minute away
        let got: Vec<(i64, Option<i64>)> = out.take_records().into_iter().map(|r| (r.0, r.1)).collect();
        let of_a: Vec<_> = got.iter().filter(|r| r.0 < 100).copied().collect();
        assert_eq!(
            of_a,
            vec![(0, None), (1, None), (2, Some(10_000)), (3, None)],
            "records without a timestamp keep their place in the partition"
        );
        assert_eq!(got.len(), 5, "and b's record at 10 s: {got:?}");
        assert_eq!(h.first_position(&a), Some(4));
        assert_eq!(h.clock().replayed_to(), Some(10_000));
        // what a: 5 is due with: its predecessor's 70 s, a minute after the anchor
        assert!(h
            .wake_at
            .is_some_and(|at| at > Instant::now() + Duration::from_secs(59)));
    }

    #[test]
    fn a_partition_without_timestamps_does_not_keep_the_pacing_clock_from_starting() {
        let mut h = held_of::<Rec>(Some(1.0), false);
        let (a, b): (SplitId, SplitId) = (Arc::from("a"), Arc::from("b"));
        h.clock().register(&a);
        h.clock().register(&b);
        h.hold(&a, vec![Rec(0, None), Rec(1, None)], None, false);
        h.hold(&b, vec![Rec(0, Some(5_000)), Rec(1, Some(5_000))], None, false);
        let mut out = ReaderOutput::new(None, false);
        assert_eq!(h.release(&mut out).count, 2, "a's records go at once");
        // a has shown no timestamp and is not at the end of its log: b waits for a's first one
        assert_eq!(h.release(&mut out).count, 0);
        h.clock().caught_up(&a);
        assert_eq!(
            h.release(&mut out).count,
            2,
            "a at its end: b's records start the clock"
        );
    }
}
