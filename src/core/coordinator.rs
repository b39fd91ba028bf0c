//! The coordinator task (Flink's `SourceCoordinator` with its checkpoint coordinator): hosts the
//! enumerator, serves reader events and discovery results, triggers checkpoints, writes the
//! state file once the sink prepared a checkpoint, and gives a transactional sink its go to commit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::checkpoint::{Checkpoint, Pending, SourceCheckpoint};
use super::enumerator::{EnumeratorContext, ReaderCommand, ReleaseSplits, SplitEnumerator, SplitHandover};
use super::event_time::EventTimeClock;
use super::failpoint;
use super::job_options::JobOptions;
use super::reader::ReaderRequest;
use super::reader_driver::ReaderEvent;
use super::sink::SinkMessage;
use super::sink::SinkState;
use super::sink_driver::SinkEvent;
use super::source::{Instance, Source};
use super::split::{SourceSplit, SplitId, SplitSnapshot};
use super::stats::JobStats;
use super::store::{CheckpointStore, StoredCheckpoint};
use super::{rt, sim};
use crate::error::{Error, Result};

pub(crate) type CallResult<S> = <<S as Source>::Enumerator as SplitEnumerator>::CallResult;

pub(crate) struct Coordinator<S: Source> {
    pub(crate) job: String,
    pub(crate) kind: &'static str,
    pub(crate) parallelism: usize,
    pub(crate) enumerator: S::Enumerator,
    pub(crate) ctx: EnumeratorContext<S::Split, CallResult<S>>,
    pub(crate) sink: mpsc::Sender<SinkMessage<S::Output>>,
    pub(crate) sink_events: mpsc::UnboundedReceiver<SinkEvent>,
    pub(crate) store: Option<Arc<dyn CheckpointStore>>,
    pub(crate) stats: Arc<JobStats>,
    pub(crate) finished_readers: HashMap<usize, Vec<SplitSnapshot<S::Split>>>,
    pub(crate) restored_finished: Vec<SplitSnapshot<S::Split>>,
    pub(crate) pending: Option<Pending<S>>,
    pub(crate) next_checkpoint_id: u64,
    pub(crate) final_id: Option<u64>,
    pub(crate) last_splits: Vec<SplitSnapshot<S::Split>>,
    /// A stop was requested (signal or `max_duration`).
    pub(crate) stopping: bool,
    /// The restored state says the input had already ended.
    pub(crate) restored_end_of_input: bool,
    /// The restored state's changes by hand ([`Checkpoint::history`]), kept in every checkpoint.
    pub(crate) restored_history: Vec<serde_json::Value>,
    /// The go to commit, for a transactional sink.
    pub(crate) commits: Option<mpsc::UnboundedSender<u64>>,
    /// The last checkpoint whose records are committed: a transactional sink's state file keeps
    /// it beside the newest one until that one's commit is done.
    pub(crate) last_committed: Option<SourceCheckpoint<S>>,
    /// Every reader finished while a checkpoint's barrier was in flight: the final checkpoint
    /// starts when that one completes (a barrier the sink has seen is never superseded).
    pub(crate) final_due: bool,
    /// The source's settings fingerprint, stored with every checkpoint.
    pub(crate) source_settings: Option<serde_json::Value>,
    /// The sink's fingerprint and this instance, stored with every checkpoint.
    pub(crate) sink_settings: Option<serde_json::Value>,
    pub(crate) instance: Instance,
    /// The readers' event-time clock, whose source-wide stop each checkpoint keeps.
    pub(crate) event_time: Option<Arc<EventTimeClock>>,
    /// Releases in progress ([`SplitHandover::Release`]): each answered once a checkpoint from the given id on
    /// is complete (the first one triggered after its readers were told).
    pub(crate) releasing: Vec<(u64, tokio::sync::oneshot::Sender<bool>)>,
}

impl<S: Source> Coordinator<S> {
    /// The event loop; returns whether the job was stopped (rather than ending on its own).
    pub(crate) async fn run(
        &mut self,
        mut events: mpsc::UnboundedReceiver<(usize, ReaderEvent<S::Split>)>,
        mut calls: mpsc::UnboundedReceiver<Result<CallResult<S>>>,
        stop: Option<watch::Receiver<bool>>,
        handovers: Option<mpsc::UnboundedReceiver<SplitHandover>>,
        options: &JobOptions,
    ) -> Result<bool> {
        let mut handovers = handovers;
        let mut ticker = options.checkpoint_interval.map(|every| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let deadline = options.max_duration.map(|d| tokio::time::Instant::now() + d);
        let (_keep, idle_stop) = watch::channel(false);
        let mut stop = stop.unwrap_or(idle_stop);
        self.stopping = *stop.borrow();
        if self.stopping {
            self.stop_readers();
        }
        loop {
            tokio::select! {
                biased;
                event = self.sink_events.recv() => match event {
                    // (a point here would sit between the sink's answer and its handling: the
                    // sink waits for the coordinator anyway)
                    Some(SinkEvent::Prepared { id, state }) => self.checkpoint_prepared(id, state).await?,
                    Some(SinkEvent::Committed(id)) => self.checkpoint_committed(id).await?,
                    Some(SinkEvent::Closed) => return Ok(self.stopping),
                    Some(SinkEvent::Failed(e)) => return Err(e),
                    None => return Err(Error::runtime("sink", "the sink thread ended unexpectedly")),
                },
                event = events.recv() => {
                    // the job keeps a sender, so the channel stays open
                    let Some((reader, event)) = event else { continue };
                    sim::point("coordinator.reader_event").await;
                    self.handle_reader_event(reader, event).await?;
                    self.take_back_undeliverable()?;
                }
                handover = next_handover(&mut handovers) => match handover {
                    Some(SplitHandover::Release { splits, done }) => self.release(splits, done)?,
                    Some(SplitHandover::Take { splits, done }) => self.take(splits, done)?,
                    // its owner no longer asks
                    None => handovers = None,
                },
                result = calls.recv() => {
                    if let Some(result) = result {
                        self.enumerator.handle_call_result(&mut self.ctx, result)?;
                        self.take_back_undeliverable()?;
                    }
                }
                // the enumerator asked for one (see EnumeratorContext::request_checkpoint)
                _ = std::future::ready(()), if self.ctx.checkpoint_requested()
                    && self.pending.is_none() && self.final_id.is_none() && !self.stopping => {
                    sim::point("coordinator.trigger").await;
                    self.trigger_checkpoint()?;
                }
                _ = tick(&mut ticker), if self.pending.is_none() && self.final_id.is_none() && !self.stopping => {
                    sim::point("coordinator.trigger").await;
                    self.trigger_checkpoint()?;
                }
                _ = sleep_until(deadline), if !self.stopping => {
                    info!("job.max_duration reached; stopping");
                    self.stopping = true;
                    self.stop_readers();
                }
                changed = stop.changed(), if !self.stopping => {
                    if changed.is_err() || *stop.borrow() {
                        info!("stop requested; taking a final checkpoint");
                        self.stopping = true;
                        self.stop_readers();
                    }
                }
            }
        }
    }

    /// Give splits up mid-run (see [`SplitHandover::Release`]): when the enumerator can, every
    /// reader still reading is told, on the channel its checkpoint triggers come by, and a
    /// checkpoint is asked for; the answer waits for it.
    fn release(&mut self, splits: Vec<SplitId>, done: tokio::sync::oneshot::Sender<bool>) -> Result<()> {
        if self.stopping || self.final_id.is_some() || !self.enumerator.release_splits(&mut self.ctx, &splits)? {
            let _ = done.send(false);
            return Ok(());
        }
        info!(
            splits = splits.len(),
            "releasing splits while the job runs on; a checkpoint holds where each stopped"
        );
        for reader in 0..self.parallelism {
            if !self.finished_readers.contains_key(&reader) {
                let event = super::enumerator::SourceEvent(Box::new(ReleaseSplits(splits.clone())));
                self.ctx.send_event_to_reader(reader, event)?;
            }
        }
        self.ctx.request_checkpoint();
        self.releasing.push((self.next_checkpoint_id, done));
        Ok(())
    }

    /// Take splits in mid-run (see [`SplitHandover::Take`]). Not once a reader has ended (it
    /// would never read them), nor once the job is stopping.
    fn take(&mut self, splits: Vec<serde_json::Value>, done: tokio::sync::oneshot::Sender<bool>) -> Result<()> {
        if self.stopping || self.final_id.is_some() || !self.finished_readers.is_empty() {
            let _ = done.send(false);
            return Ok(());
        }
        let parsed: std::result::Result<Vec<S::Split>, _> = splits.into_iter().map(serde_json::from_value).collect();
        let taken = match parsed {
            Ok(splits) => {
                let count = splits.len();
                let taken = self.enumerator.take_splits(&mut self.ctx, splits)?;
                if taken {
                    info!(splits = count, "taking splits in while the job runs on");
                }
                taken
            }
            Err(e) => {
                warn!(error = %e, "splits to take in do not read as this source's; the job stops instead");
                false
            }
        };
        let _ = done.send(taken);
        Ok(())
    }

    fn stop_readers(&mut self) {
        for reader in 0..self.parallelism {
            if !self.finished_readers.contains_key(&reader) {
                let _ = self.ctx.send(reader, ReaderCommand::Stop);
            }
            // from now on, splits for this reader go back to the enumerator: a stopped reader
            // would never read them, and its final snapshot would not hold them
            self.ctx.close_reader(reader);
        }
    }

    /// Splits the enumerator assigned to stopped readers go back to it, so they stay in its
    /// snapshot and a restart reads them.
    fn take_back_undeliverable(&mut self) -> Result<()> {
        let splits = self.ctx.take_undeliverable();
        if !splits.is_empty() {
            debug!(
                splits = splits.len(),
                "splits for stopped readers go back to the enumerator"
            );
            self.enumerator.add_splits_back(&mut self.ctx, splits)?;
        }
        Ok(())
    }

    async fn handle_reader_event(&mut self, reader: usize, event: ReaderEvent<S::Split>) -> Result<()> {
        match event {
            ReaderEvent::Registered => {
                debug!(reader, "reader registered");
                self.ctx.register_reader(reader);
                self.enumerator.add_reader(&mut self.ctx, reader)?;
            }
            ReaderEvent::Request(ReaderRequest::SplitRequest { received }) => {
                if !self.ctx.overtaken(reader, received) {
                    self.enumerator.handle_split_request(&mut self.ctx, reader)?;
                }
            }
            ReaderEvent::Request(ReaderRequest::SourceEvent(event)) => {
                self.enumerator.handle_source_event(&mut self.ctx, reader, event)?;
            }
            ReaderEvent::CheckpointAck { id, splits } => {
                if let Some(p) = self.pending.as_mut().filter(|p| p.id == id) {
                    p.acks.insert(reader, splits);
                }
                self.maybe_send_barrier().await?;
            }
            ReaderEvent::Finished { splits } => {
                debug!(reader, "reader finished");
                self.finished_readers.insert(reader, splits);
                if self.finished_readers.len() == self.parallelism && self.final_id.is_none() {
                    if self.pending.as_ref().is_some_and(|p| p.barrier_sent) {
                        self.final_due = true;
                    } else {
                        self.start_final_checkpoint().await?;
                    }
                }
                self.maybe_send_barrier().await?;
            }
            ReaderEvent::Failed(e) => return Err(e),
        }
        Ok(())
    }

    fn trigger_checkpoint(&mut self) -> Result<()> {
        self.ctx.clear_checkpoint_request();
        let id = self.next_checkpoint_id;
        self.next_checkpoint_id += 1;
        let enumerator = self.enumerator.snapshot_state(id)?;
        debug!(checkpoint = id, "checkpoint triggered");
        for reader in 0..self.parallelism {
            if !self.finished_readers.contains_key(&reader) {
                let _ = self.ctx.send(reader, ReaderCommand::TriggerCheckpoint(id));
            }
        }
        self.pending = Some(Pending {
            id,
            started: Instant::now(),
            enumerator: Some(enumerator),
            acks: HashMap::new(),
            barrier_sent: false,
            // a restored job whose input had ended keeps saying so: a later start must not
            // signal the end of input again (a second end marker)
            end_of_input: self.restored_end_of_input,
            written: None,
        });
        Ok(())
    }

    async fn start_final_checkpoint(&mut self) -> Result<()> {
        let id = self.next_checkpoint_id;
        self.next_checkpoint_id += 1;
        self.final_id = Some(id);
        let end_of_input = !self.stopping;
        if end_of_input && !self.restored_end_of_input {
            // ahead of the final barrier, so what the sink adds is durable with it
            if self.sink.send(SinkMessage::EndOfInput).await.is_err() {
                return Err(self.sink_failure().await);
            }
        }
        // a periodic checkpoint whose barrier was not sent yet is superseded by this one
        self.pending = Some(Pending {
            id,
            started: Instant::now(),
            enumerator: Some(self.enumerator.snapshot_state(id)?),
            acks: HashMap::new(),
            barrier_sent: false,
            end_of_input: end_of_input || self.restored_end_of_input,
            written: None,
        });
        Ok(())
    }

    async fn maybe_send_barrier(&mut self) -> Result<()> {
        let Some(p) = self.pending.as_mut() else {
            return Ok(());
        };
        if p.barrier_sent {
            return Ok(());
        }
        let all_in = (0..self.parallelism).all(|r| p.acks.contains_key(&r) || self.finished_readers.contains_key(&r));
        if !all_in {
            return Ok(());
        }
        p.barrier_sent = true;
        let id = p.id;
        sim::point("coordinator.barrier").await;
        if self.sink.send(SinkMessage::Barrier(id)).await.is_err() {
            return Err(self.sink_failure().await);
        }
        Ok(())
    }

    /// Why the sink thread stopped taking messages: its `Failed` event, which it sends after
    /// dropping the sink (a Kafka producer's drop takes a while), so it is awaited until the
    /// thread's last sender is gone; only a thread that ended without one "ended unexpectedly".
    async fn sink_failure(&mut self) -> Error {
        while let Some(event) = self.sink_events.recv().await {
            if let SinkEvent::Failed(e) = event {
                return e;
            }
        }
        Error::runtime("sink", "the sink thread ended unexpectedly")
    }

    /// The sink prepared checkpoint `id` (its records are durable, or ready to commit): write
    /// the state file, then give a transactional sink its go, or complete the checkpoint.
    async fn checkpoint_prepared(&mut self, id: u64, sink_state: Option<SinkState>) -> Result<()> {
        let Some(p) = self.pending.as_mut().filter(|p| p.id == id) else {
            // a superseded checkpoint's barrier (never one a transactional sink waits on)
            return Ok(());
        };
        let mut splits: Vec<SplitSnapshot<S::Split>> = self.restored_finished.clone();
        for reader in 0..self.parallelism {
            // A reader's ack for this checkpoint covers exactly the records ahead of its barrier.
            // If it finished after acking, its final snapshot also covers records it sent after
            // the barrier, which the sink holds back for the next checkpoint: that snapshot
            // belongs to the next checkpoint, not this one.
            if let Some(s) = p.acks.remove(&reader) {
                splits.extend(s);
            } else if let Some(s) = self.finished_readers.get(&reader) {
                splits.extend(s.iter().cloned());
            }
        }
        splits.sort_by_key(|s| s.split.split_id());
        let transactional = self.commits.is_some();
        let enumerator = p
            .enumerator
            .take()
            .ok_or_else(|| Error::runtime("checkpoint", "prepared twice"))?;
        let checkpoint = Checkpoint {
            job: self.job.clone(),
            source: self.kind.to_string(),
            checkpoint_id: id,
            completed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            enumerator,
            splits,
            end_of_input: p.end_of_input,
            source_settings: self.source_settings.clone(),
            sink_settings: self.sink_settings.clone(),
            instance: Some(self.instance),
            stop_timestamp: self.event_time.as_ref().and_then(|c| c.stop_at()),
            sink: sink_state,
            previous: None,
            history: self.restored_history.clone(),
        };
        // until this checkpoint's transaction is committed, a restart may need the one before
        // (not when the store's checkpoint is in that transaction: it is restored only committed)
        let commits_with_sink = self.store.as_ref().is_some_and(|s| s.commits_with_sink());
        let checkpoint = if transactional && !commits_with_sink {
            Checkpoint {
                previous: self.fallback_checkpoint(&checkpoint).map(Box::new),
                ..checkpoint
            }
        } else {
            checkpoint
        };
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let stored = StoredCheckpoint {
                checkpoint_id: id,
                value: serde_json::to_value(&checkpoint)
                    .map_err(|e| Error::runtime("serializing the checkpoint", e))?,
                split_ids: checkpoint
                    .splits
                    .iter()
                    .map(|s| s.split.split_id().to_string())
                    .collect(),
            };
            sim::point("checkpoint.before_state").await;
            let written = rt::unblock(move || store.write(&stored)).await?;
            if let Err(e) = written {
                self.stats.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
        failpoint::hit("checkpoint.after_state");
        sim::point("checkpoint.after_state").await;
        match &self.commits {
            Some(commits) => {
                if let Some(p) = self.pending.as_mut() {
                    p.written = Some(checkpoint);
                }
                if commits.send(id).is_err() {
                    return Err(self.sink_failure().await);
                }
                Ok(())
            }
            None => {
                let started = self.pending.take().map(|p| p.started);
                self.checkpoint_complete(id, started, checkpoint).await
            }
        }
    }

    /// What a restart resumes from if checkpoint `k`'s transaction never commits: the progress
    /// of the last committed checkpoint (none yet: checkpoint 0, where nothing was read) under
    /// `k`'s enumerator, so the offsets resolved since (`latest` at a first discovery that came
    /// after a commit, say) are kept rather than resolved again, which would skip what was
    /// produced in between. A split the committed checkpoint does not hold (assigned since)
    /// stands where it was assigned.
    fn fallback_checkpoint(&self, k: &SourceCheckpoint<S>) -> Option<SourceCheckpoint<S>> {
        let committed = self.last_committed.as_ref();
        let progress: BTreeMap<SplitId, &SplitSnapshot<S::Split>> = committed
            .map(|c| c.splits.iter().map(|s| (s.split.split_id(), s)).collect())
            .unwrap_or_default();
        let in_k: BTreeSet<SplitId> = k.splits.iter().map(|s| s.split.split_id()).collect();
        if let Some(lost) = progress.keys().find(|id| !in_k.contains(*id)) {
            warn!(split_id = %lost, checkpoint = k.checkpoint_id, "a committed split is not in the new checkpoint: the fallback stays the committed checkpoint");
            return committed.cloned();
        }
        let assigned = self.ctx.assignments();
        let mut splits = Vec::with_capacity(k.splits.len());
        for snapshot in &k.splits {
            let id = snapshot.split.split_id();
            if let Some(committed) = progress.get(&id) {
                splits.push((*committed).clone());
            } else if let Some(split) = assigned.and_then(|a| a.get(&id)) {
                splits.push(SplitSnapshot {
                    split: split.clone(),
                    finished: None,
                });
            } else {
                warn!(split_id = %id, checkpoint = k.checkpoint_id, "no assignment of the split recorded: the fallback stays the committed checkpoint");
                return committed.cloned();
            }
        }
        Some(Checkpoint {
            job: k.job.clone(),
            source: k.source.clone(),
            checkpoint_id: committed.map_or(0, |c| c.checkpoint_id),
            completed_at: committed.map_or_else(|| k.completed_at.clone(), |c| c.completed_at.clone()),
            enumerator: k.enumerator.clone(),
            splits,
            end_of_input: committed.is_some_and(|c| c.end_of_input),
            source_settings: k.source_settings.clone(),
            sink_settings: k.sink_settings.clone(),
            instance: k.instance,
            stop_timestamp: committed.and_then(|c| c.stop_timestamp),
            sink: committed.and_then(|c| c.sink.clone()),
            previous: None,
            history: k.history.clone(),
        })
    }

    /// A transactional sink committed checkpoint `id`.
    async fn checkpoint_committed(&mut self, id: u64) -> Result<()> {
        let Some(p) = self.pending.take().filter(|p| p.id == id) else {
            return Err(Error::runtime(
                "checkpoint",
                format!("the sink committed {id}, which was not prepared"),
            ));
        };
        let mut checkpoint = p
            .written
            .ok_or_else(|| Error::runtime("checkpoint", format!("checkpoint {id} committed before it was written")))?;
        checkpoint.previous = None;
        self.last_committed = Some(checkpoint.clone());
        self.checkpoint_complete(id, Some(p.started), checkpoint).await
    }

    /// Checkpoint `id` is durable and committed: tell readers and enumerator, and go on (the
    /// final checkpoint ends the job).
    async fn checkpoint_complete(
        &mut self,
        id: u64,
        started: Option<Instant>,
        checkpoint: SourceCheckpoint<S>,
    ) -> Result<()> {
        let took = started.map(|t| t.elapsed()).unwrap_or_default();
        self.stats.checkpoints_completed.fetch_add(1, Ordering::Relaxed);
        self.stats
            .last_checkpoint_ms
            .store(took.as_millis() as u64, Ordering::Relaxed);
        // a checkpoint with no splits yet (the source still looking for its input, a broker
        // not answering) says nothing worth a line every interval
        if checkpoint.splits.is_empty() {
            debug!(
                checkpoint = id,
                took_ms = took.as_millis() as u64,
                "checkpoint complete, no splits yet"
            );
        } else {
            info!(
                checkpoint = id,
                splits = checkpoint.splits.len(),
                took_ms = took.as_millis() as u64,
                "checkpoint complete"
            );
        }
        for reader in 0..self.parallelism {
            let _ = self.ctx.send(reader, ReaderCommand::CheckpointComplete(id));
        }
        self.enumerator.notify_checkpoint_complete(&mut self.ctx, id)?;
        // the releases this checkpoint holds
        let (due, later) = std::mem::take(&mut self.releasing)
            .into_iter()
            .partition::<Vec<_>, _>(|(from, _)| *from <= id);
        self.releasing = later;
        for (_, done) in due {
            let _ = done.send(true);
        }
        self.last_splits = checkpoint.splits;
        if self.final_id == Some(id) {
            let _ = self.sink.send(SinkMessage::End).await;
        } else if self.final_due {
            self.final_due = false;
            self.start_final_checkpoint().await?;
            self.maybe_send_barrier().await?;
        }
        Ok(())
    }
}

/// The next handover asked for, or never without a channel.
async fn next_handover(handovers: &mut Option<mpsc::UnboundedReceiver<SplitHandover>>) -> Option<SplitHandover> {
    match handovers {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
