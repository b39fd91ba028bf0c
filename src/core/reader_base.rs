//! `SourceReaderBase` (Flink's class of that name): the reader every tidegate source uses. It
//! owns the fetcher manager and the element queue, emits fetched batches through the source's
//! [`RecordEmitter`], keeps per-split progress and finishing reasons, and applies the
//! end-of-stream evaluator. With event time (pacing, a source-wide stop) it evaluates records
//! as they arrive and holds them back until the job's clock releases them (the `held` module).

use std::collections::HashMap;
use std::sync::Arc;

use tracing::debug;

use super::checkpoint::FINAL_SNAPSHOT;
use super::emitter::{EofOnRecordEvaluator, ReaderOutput, RecordEmitter, RecordPosition};
use super::enumerator::{ReleaseSplits, SourceEvent};
use super::event_time::EventTimeClock;
use super::fetcher::{FetchStats, FetcherMode, SplitFetcherManager, SplitReaderFactory};
use super::held::HeldRecords;
use super::queue::AvailabilityFuture;
use super::queue::{ElementQueue, DEFAULT_CAPACITY};
use super::reader::{InputStatus, ReaderRequest, SourceReader};
use super::split::{FinishReason, Finished, SourceSplit, SplitId, SplitSnapshot};
use super::split_reader::{RecordsWithSplitIds, SplitReader};
use super::throttle::Throttle;
use crate::error::Result;

/// How a [`SourceReaderBase`] is set up.
pub struct ReaderOptions<T> {
    /// The reader's index, from 0.
    pub index: usize,
    /// One fetcher thread for all splits or one per split.
    pub fetcher_mode: FetcherMode,
    /// Capacity of the element queue, in batches (Flink's default: 2).
    pub queue_capacity: usize,
    /// Pull-based sources ask the enumerator for a split whenever they have none.
    pub request_splits: bool,
    /// With `request_splits`: ask only once every record of the splits went out (nothing queued
    /// or held back), so that a request says the reader is idle (a group member's bounded job
    /// ends when all its readers are; see the Kafka enumerator).
    pub request_when_drained: bool,
    /// Ends a split at the first record it matches (FLIP-208).
    pub eof: Option<Arc<dyn EofOnRecordEvaluator<T>>>,
    /// Emit the record the evaluator matched, then end the split.
    pub eof_emit_marker: bool,
    /// Counters of the fetch hand-off ([`ReaderContext::fetch_stats`](crate::ReaderContext)).
    pub stats: Arc<FetchStats>,
    /// The job's event-time clock ([`super::source::ReaderContext::event_time`]).
    pub event_time: Option<Arc<EventTimeClock>>,
    /// The job's rate limits, which held records obey ([`super::source::ReaderContext::throttle`]).
    pub throttle: Arc<Throttle>,
}

impl<T> ReaderOptions<T> {
    /// Options for reader `index`: one fetcher, Flink's queue capacity, no end-of-stream rule.
    pub fn new(index: usize) -> Self {
        ReaderOptions {
            index,
            fetcher_mode: FetcherMode::Single,
            queue_capacity: DEFAULT_CAPACITY,
            request_splits: false,
            request_when_drained: false,
            eof: None,
            eof_emit_marker: false,
            stats: Arc::new(FetchStats::default()),
            event_time: None,
            throttle: Arc::default(),
        }
    }
}

struct SplitEntry<S> {
    split: S,
    finished: Option<Finished>,
}

/// Called with the split states of a checkpoint once it completed, and whether they are the
/// reader's final states (the Kafka source commits offsets to its consumer group this way).
pub type CheckpointListener<S> = Box<dyn FnMut(u64, &[SplitSnapshot<S>], bool) -> Result<()> + Send>;

/// Handles source events for a reader built on [`SourceReaderBase`] (for example, the periodic
/// source removes events this way). Returns splits to remove.
pub type SourceEventHandler = Box<dyn FnMut(SourceEvent) -> Vec<SplitId> + Send>;

/// The reader every tidegate source is built from.
pub struct SourceReaderBase<R: SplitReader, T, E> {
    manager: SplitFetcherManager<R>,
    queue: Arc<ElementQueue<RecordsWithSplitIds<R::Element>>>,
    emitter: E,
    splits: HashMap<SplitId, SplitEntry<R::Split>>,
    unfinished: usize,
    no_more_splits: bool,
    options: ReaderOptions<T>,
    requests: Vec<ReaderRequest>,
    split_requested: bool,
    /// The splits it was given (see [`ReaderRequest::SplitRequest`]).
    received: u64,
    event_handler: Option<SourceEventHandler>,
    checkpoint_listener: Option<CheckpointListener<R::Split>>,
    /// Snapshots of checkpoints not yet complete, for the listener.
    snapshots: std::collections::BTreeMap<u64, Vec<SplitSnapshot<R::Split>>>,
    /// With event time: where records are evaluated (the driver's output then only collects),
    /// and the records evaluated but not yet released.
    staging: Option<ReaderOutput<T>>,
    held: Option<HeldRecords<T>>,
}

impl<R, T, E> SourceReaderBase<R, T, E>
where
    R: SplitReader,
    T: RecordPosition + Send + 'static,
    E: RecordEmitter<R::Element, T, R::Split> + 'static,
{
    /// A reader whose fetchers run split readers made by `factory` and whose records `emitter` emits.
    pub fn new(factory: SplitReaderFactory<R>, emitter: E, options: ReaderOptions<T>) -> Self {
        let queue = Arc::new(ElementQueue::new(options.queue_capacity));
        let manager = SplitFetcherManager::new(
            factory,
            options.fetcher_mode,
            Arc::clone(&queue),
            Arc::clone(&options.stats),
            options.index,
        );
        SourceReaderBase {
            manager,
            queue,
            emitter,
            splits: HashMap::new(),
            unfinished: 0,
            no_more_splits: false,
            requests: Vec::new(),
            split_requested: false,
            received: 0,
            event_handler: None,
            checkpoint_listener: None,
            snapshots: std::collections::BTreeMap::new(),
            staging: options
                .event_time
                .as_ref()
                .map(|_| ReaderOutput::new(options.eof.clone(), options.eof_emit_marker).tracking_filtered()),
            held: (options.event_time.clone()).map(|clock| HeldRecords::new(clock, Arc::clone(&options.throttle))),
            options,
        }
    }

    /// Call `listener` with each completed checkpoint's split states.
    pub fn with_checkpoint_listener(mut self, listener: CheckpointListener<R::Split>) -> Self {
        self.checkpoint_listener = Some(listener);
        self
    }

    /// Handle source events with `handler` (splits it returns are removed).
    pub fn with_event_handler(mut self, handler: SourceEventHandler) -> Self {
        self.event_handler = Some(handler);
        self
    }

    /// Splits not finished yet.
    pub fn unfinished_splits(&self) -> usize {
        self.unfinished
    }

    fn finish_split(&mut self, id: &SplitId, finished: Finished, from_fetcher: bool) {
        let Some(entry) = self.splits.get_mut(id) else {
            return;
        };
        if entry.finished.is_some() {
            return;
        }
        entry.finished = Some(finished);
        self.unfinished -= 1;
        // what it had left to its stop will never be read (by this job, for a released one):
        // not part of the expected total
        if let Some(left) = entry.split.remaining() {
            self.options
                .stats
                .offsets_unread
                .fetch_add(left, std::sync::atomic::Ordering::Relaxed);
        }
        match finished.at {
            Some(at) => {
                debug!(reader = self.options.index, split_id = %id, reason = finished.reason.as_str(), at, "split finished")
            }
            None => {
                debug!(reader = self.options.index, split_id = %id, reason = finished.reason.as_str(), "split finished")
            }
        }
        self.options.stats.split_finished(finished.reason);
        if let Some(held) = &mut self.held {
            // evaluated records it still holds go out; it holds no one back any more
            held.clock().remove(id);
            if matches!(finished.reason, FinishReason::Removed | FinishReason::Released) {
                held.forget(id);
            }
        }
        if from_fetcher {
            self.manager.split_finished(id);
        } else {
            self.manager.remove_splits(std::slice::from_ref(id));
            // its records still queued will not be emitted
            self.queue.retain(|batch| {
                batch.records.retain(|(sid, _)| sid != id);
                true
            });
        }
        if !self.options.request_when_drained {
            self.maybe_request_split();
        }
    }

    /// Give a split up mid-run ([`ReleaseSplits`]). With event time it stands before the
    /// records it still holds back (its position ran ahead of them as they were evaluated), and
    /// they are dropped: its next owner reads them. A split whose every record went out is
    /// finished for good, and stays so.
    fn release_split(&mut self, id: &SplitId) {
        let released = Finished::new(FinishReason::Released);
        let held_from = self.held.as_ref().and_then(|h| h.first_position(id));
        let Some(entry) = self.splits.get_mut(id) else {
            return;
        };
        if let Some(position) = held_from {
            if !entry.split.rewind_to(position) {
                tracing::warn!(split_id = %id, "cannot rewind the released split to the records it holds back");
            }
        }
        match (entry.finished, held_from) {
            (None, _) => self.finish_split(id, released, false),
            (Some(_), None) => {}
            // it ended as its last records were evaluated (its fetch is done), and some of them
            // are still held back
            (Some(_), Some(_)) => {
                entry.finished = Some(released);
                if let Some(held) = &mut self.held {
                    held.forget(id);
                }
                debug!(reader = self.options.index, split_id = %id, "split released");
            }
        }
    }

    fn maybe_request_split(&mut self) {
        let drained = || self.queue.is_empty() && self.held.as_ref().is_none_or(HeldRecords::is_empty);
        if self.options.request_splits
            && !self.no_more_splits
            && self.unfinished == 0
            && !self.split_requested
            && (!self.options.request_when_drained || drained())
        {
            self.split_requested = true;
            self.requests.push(ReaderRequest::SplitRequest {
                received: self.received,
            });
        }
    }

    fn idle_status(&self) -> InputStatus {
        let nothing_held = self.held.as_ref().is_none_or(HeldRecords::is_empty);
        if self.no_more_splits && self.unfinished == 0 && self.queue.is_empty() && nothing_held {
            InputStatus::EndOfInput
        } else {
            InputStatus::NothingAvailable
        }
    }

    /// With event time: evaluate a fetched batch into the held records, release what the clock
    /// allows into `output`, end the splits past the source-wide stop, pause or resume fetching.
    fn poll_event_time(&mut self, output: &mut ReaderOutput<T>) -> Result<InputStatus> {
        let (Some(mut staging), Some(mut held)) = (self.staging.take(), self.held.take()) else {
            return Ok(self.idle_status());
        };
        held.mark_seen();
        let result = self.stage_and_release(&mut staging, &mut held, output);
        self.staging = Some(staging);
        self.held = Some(held);
        result
    }

    fn stage_and_release(
        &mut self,
        staging: &mut ReaderOutput<T>,
        held: &mut HeldRecords<T>,
        output: &mut ReaderOutput<T>,
    ) -> Result<InputStatus> {
        let mut progressed = false;
        let source_wide = held.clock().options().source_wide_stop;
        if let Some(batch) = self.queue.poll() {
            progressed = true;
            for (id, elements) in batch.records {
                let Some(entry) = self.splits.get_mut(&id) else {
                    continue;
                };
                if entry.finished.is_some() {
                    continue;
                }
                let mut ended = None;
                for element in elements {
                    self.emitter.emit_record(element, staging, &mut entry.split)?;
                    let Some(at) = staging.take_end_of_split() else {
                        continue;
                    };
                    let marker = Some(staging.marker_timestamp());
                    let kept = staging.marker_kept();
                    let (records, filtered) = staging.take_staged();
                    let time = held.hold(&id, records, &filtered, marker, kept);
                    // a marker with an event time stops the whole source there; its own split
                    // reads on while records before the stop may still follow in it
                    if !source_wide || time.is_none() || held.clock().is_past_stop(&id) {
                        ended = Some(at);
                        break;
                    }
                }
                let (records, filtered) = staging.take_staged();
                held.hold(&id, records, &filtered, None, false);
                if let Some(at) = ended {
                    let finished = Finished {
                        reason: FinishReason::EofRecord,
                        at,
                    };
                    self.finish_split_holding(held, &id, finished, false);
                }
            }
            for (id, reason) in batch.finished {
                self.finish_split_holding(held, &id, Finished::new(reason), true);
            }
            for id in &batch.caught_up {
                held.clock().caught_up(id);
            }
            for (id, at) in &batch.confirmed_caught_up {
                held.clock().confirmed_caught_up(id, *at);
            }
        }
        output.add_filtered(staging.take_filtered());
        output.add_skipped(staging.take_skipped());
        let released = held.release(output);
        progressed |= released.count + released.dropped > 0;
        // a split ends at the source-wide stop once no record before it can follow (its
        // watermark is at the stop), whether or not it holds records before the stop still
        if held.clock().stop_at().is_some() {
            let past: Vec<SplitId> = self
                .splits
                .iter()
                .filter(|(id, e)| e.finished.is_none() && held.clock().is_past_stop(id))
                .map(|(id, _)| id.clone())
                .collect();
            for id in past {
                self.finish_split_holding(held, &id, Finished::new(FinishReason::SourceStop), false);
                progressed = true;
            }
        }
        let (pause, resume) = held.flow_control();
        if !pause.is_empty() || !resume.is_empty() {
            debug!(
                reader = self.options.index,
                paused = pause.len(),
                resumed = resume.len(),
                "event time: fetch paused/resumed"
            );
            self.manager.pause_or_resume(&pause, &resume);
        }
        if progressed || !self.queue.is_empty() {
            Ok(InputStatus::MoreAvailable)
        } else if !held.is_empty() {
            // (self.held is taken out while this runs: idle_status cannot see it)
            Ok(InputStatus::NothingAvailable)
        } else {
            Ok(self.idle_status())
        }
    }

    /// [`Self::finish_split`] while the held records are taken out of `self`.
    fn finish_split_holding(
        &mut self,
        held: &mut HeldRecords<T>,
        id: &SplitId,
        finished: Finished,
        from_fetcher: bool,
    ) {
        if self.splits.get(id).is_none_or(|e| e.finished.is_some()) {
            return;
        }
        held.clock().remove(id);
        if matches!(finished.reason, FinishReason::Removed | FinishReason::Released) {
            held.forget(id);
        }
        self.finish_split(id, finished, from_fetcher);
    }
}

impl<R, T, E> SourceReader for SourceReaderBase<R, T, E>
where
    R: SplitReader,
    T: RecordPosition + Send + 'static,
    E: RecordEmitter<R::Element, T, R::Split> + 'static,
{
    type Split = R::Split;
    type Output = T;

    fn create_output(&self) -> ReaderOutput<T> {
        if self.held.is_some() {
            // evaluated in staging already, before being held
            return ReaderOutput::new(None, false);
        }
        ReaderOutput::new(self.options.eof.clone(), self.options.eof_emit_marker)
    }

    fn start(&mut self) -> Result<Vec<ReaderRequest>> {
        self.maybe_request_split();
        Ok(std::mem::take(&mut self.requests))
    }

    fn poll_next(&mut self, output: &mut ReaderOutput<T>) -> Result<InputStatus> {
        self.manager.check_errors()?;
        let status = if self.held.is_some() {
            self.poll_event_time(output)?
        } else {
            match self.queue.poll() {
                Some(batch) => {
                    self.emit_batch(batch, output)?;
                    InputStatus::MoreAvailable
                }
                None => self.idle_status(),
            }
        };
        if self.options.stats.splits.due() {
            self.options.stats.splits.publish(&self.current_snapshot());
        }
        if self.options.request_when_drained {
            // its last records may have gone out since its splits finished (and the held ones
            // are only back in place now)
            self.maybe_request_split();
        }
        Ok(status)
    }

    fn is_available(&self) -> AvailabilityFuture {
        let queue = self.queue.available();
        match &self.held {
            None => queue,
            Some(held) => {
                let clock = held.changed();
                Box::pin(async move {
                    tokio::select! {
                        _ = queue => {}
                        _ = clock => {}
                    }
                })
            }
        }
    }

    fn add_splits(&mut self, splits: Vec<R::Split>) -> Result<()> {
        self.split_requested = false;
        self.received += splits.len() as u64;
        let mut fresh = Vec::with_capacity(splits.len());
        for split in splits {
            let id = split.split_id();
            debug!(reader = self.options.index, split_id = %id, "split added");
            if let Some(old) = self.splits.get(&id) {
                if old.finished.is_none() {
                    // already being read: a duplicate assignment would read it twice
                    continue;
                }
            }
            if let Some(held) = &self.held {
                held.clock().register(&id);
            }
            self.splits.insert(
                id,
                SplitEntry {
                    split: split.clone(),
                    finished: None,
                },
            );
            self.unfinished += 1;
            fresh.push(split);
        }
        if !fresh.is_empty() {
            self.manager.add_splits(fresh)?;
        }
        self.maybe_request_split();
        Ok(())
    }

    fn notify_no_more_splits(&mut self) {
        self.no_more_splits = true;
        // let the driver re-check the end of input
        self.queue.notify_available();
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Vec<SplitSnapshot<R::Split>> {
        let snapshot = self.current_snapshot();
        self.options.stats.splits.publish(&snapshot);
        if self.checkpoint_listener.is_some() {
            self.snapshots.insert(checkpoint_id, snapshot.clone());
        }
        snapshot
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        // the final snapshot belongs to the first checkpoint that completes after it
        let (snapshot, is_final) = match self.snapshots.remove(&checkpoint_id) {
            Some(s) => (s, false),
            None => match self.snapshots.remove(&FINAL_SNAPSHOT) {
                Some(s) => (s, true),
                None => return Ok(()),
            },
        };
        // older checkpoints are subsumed by this one
        self.snapshots.retain(|id, _| *id > checkpoint_id);
        match self.checkpoint_listener.as_mut() {
            Some(listener) => listener(checkpoint_id, &snapshot, is_final),
            None => Ok(()),
        }
    }

    fn handle_source_event(&mut self, event: SourceEvent) -> Result<()> {
        // given up mid-run: not read from here on; its records still queued are dropped, so its
        // position is the last record emitted, which the next checkpoint holds
        let event = match event.0.downcast::<ReleaseSplits>() {
            Ok(release) => {
                for id in release.0 {
                    self.release_split(&id);
                }
                return Ok(());
            }
            Err(other) => SourceEvent(other),
        };
        if let Some(handler) = self.event_handler.as_mut() {
            let removed = handler(event);
            for id in removed {
                self.finish_split(&id, Finished::new(FinishReason::Removed), false);
            }
        }
        Ok(())
    }

    fn take_requests(&mut self) -> Vec<ReaderRequest> {
        std::mem::take(&mut self.requests)
    }

    fn close(&mut self) -> Result<()> {
        self.manager.close();
        Ok(())
    }
}

#[path = "reader_base_emit.rs"]
mod emit;
