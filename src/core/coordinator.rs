//! The coordinator task (Flink's `SourceCoordinator` with its checkpoint coordinator): hosts the
//! enumerator, serves reader events and discovery results, triggers checkpoints, and writes the
//! state file once the sink made a checkpoint durable.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info};

use super::checkpoint::{Checkpoint, JobStats, Pending};
use super::enumerator::{EnumeratorContext, ReaderCommand, SplitEnumerator};
use super::job::JobOptions;
use super::reader::ReaderRequest;
use super::reader_driver::ReaderEvent;
use super::sink::SinkMessage;
use super::sink_driver::SinkEvent;
use super::source::{Source, SourceSplit, SplitSnapshot};
use super::state::StateStore;
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
    pub(crate) store: Option<Arc<StateStore>>,
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
}

impl<S: Source> Coordinator<S> {
    /// The event loop; returns whether the job was stopped (rather than ending on its own).
    pub(crate) async fn run(
        &mut self,
        mut events: mpsc::UnboundedReceiver<(usize, ReaderEvent<S::Split>)>,
        mut calls: mpsc::UnboundedReceiver<Result<CallResult<S>>>,
        stop: Option<watch::Receiver<bool>>,
        options: &JobOptions,
    ) -> Result<bool> {
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
                    Some(SinkEvent::Durable(id)) => {
                        if self.complete_checkpoint(id).await? && self.final_id == Some(id) {
                            let _ = self.sink.send(SinkMessage::End).await;
                        }
                    }
                    Some(SinkEvent::Closed) => return Ok(self.stopping),
                    Some(SinkEvent::Failed(e)) => return Err(e),
                    None => return Err(Error::runtime("sink", "the sink thread ended unexpectedly")),
                },
                event = events.recv() => {
                    // the job keeps a sender, so the channel stays open
                    let Some((reader, event)) = event else { continue };
                    self.handle_reader_event(reader, event).await?;
                }
                result = calls.recv() => {
                    if let Some(result) = result {
                        self.enumerator.handle_call_result(&mut self.ctx, result)?;
                    }
                }
                _ = tick(&mut ticker), if self.pending.is_none() && self.final_id.is_none() && !self.stopping => {
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

    fn stop_readers(&mut self) {
        for reader in 0..self.parallelism {
            if !self.finished_readers.contains_key(&reader) {
                let _ = self.ctx.send(reader, ReaderCommand::Stop);
            }
        }
    }

    async fn handle_reader_event(&mut self, reader: usize, event: ReaderEvent<S::Split>) -> Result<()> {
        match event {
            ReaderEvent::Registered => {
                debug!(reader, "reader registered");
                self.ctx.register_reader(reader);
                self.enumerator.add_reader(&mut self.ctx, reader)?;
            }
            ReaderEvent::Request(ReaderRequest::SplitRequest) => {
                self.enumerator.handle_split_request(&mut self.ctx, reader)?;
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
                    self.start_final_checkpoint().await?;
                }
                self.maybe_send_barrier().await?;
            }
            ReaderEvent::Failed(e) => return Err(e),
        }
        Ok(())
    }

    fn trigger_checkpoint(&mut self) -> Result<()> {
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
            enumerator,
            acks: HashMap::new(),
            barrier_sent: false,
            end_of_input: false,
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
                return Err(self.sink_failure());
            }
        }
        // an unfinished periodic checkpoint is superseded by this one
        self.pending = Some(Pending {
            id,
            started: Instant::now(),
            enumerator: self.enumerator.snapshot_state(id)?,
            acks: HashMap::new(),
            barrier_sent: false,
            end_of_input: end_of_input || self.restored_end_of_input,
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
        if self.sink.send(SinkMessage::Barrier(id)).await.is_err() {
            return Err(self.sink_failure());
        }
        Ok(())
    }

    /// Why the sink thread stopped taking messages.
    fn sink_failure(&mut self) -> Error {
        while let Ok(event) = self.sink_events.try_recv() {
            if let SinkEvent::Failed(e) = event {
                return e;
            }
        }
        Error::runtime("sink", "the sink thread ended unexpectedly")
    }

    /// The sink made checkpoint `id` durable: write the state file and notify. Returns false
    /// for a barrier of a superseded checkpoint.
    async fn complete_checkpoint(&mut self, id: u64) -> Result<bool> {
        if self.pending.as_ref().map(|p| p.id) != Some(id) {
            return Ok(false);
        }
        let Some(mut p) = self.pending.take() else {
            return Ok(false);
        };
        let mut splits: Vec<SplitSnapshot<S::Split>> = self.restored_finished.clone();
        for reader in 0..self.parallelism {
            if let Some(s) = self.finished_readers.get(&reader) {
                splits.extend(s.iter().cloned());
            } else if let Some(s) = p.acks.remove(&reader) {
                splits.extend(s);
            }
        }
        splits.sort_by_key(|s| s.split.split_id());
        let checkpoint = Checkpoint {
            job: self.job.clone(),
            source: self.kind.to_string(),
            checkpoint_id: id,
            completed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            enumerator: p.enumerator,
            splits,
            end_of_input: p.end_of_input,
        };
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let bytes = super::state::encode(&checkpoint)?;
            let written = tokio::task::spawn_blocking(move || store.write_encoded(&bytes))
                .await
                .map_err(|e| Error::runtime("checkpoint", e))?;
            if let Err(e) = written {
                self.stats.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
        let took = p.started.elapsed();
        self.stats.checkpoints_completed.fetch_add(1, Ordering::Relaxed);
        self.stats
            .last_checkpoint_ms
            .store(took.as_millis() as u64, Ordering::Relaxed);
        info!(
            checkpoint = id,
            splits = checkpoint.splits.len(),
            took_ms = took.as_millis() as u64,
            "checkpoint complete"
        );
        for reader in 0..self.parallelism {
            let _ = self.ctx.send(reader, ReaderCommand::CheckpointComplete(id));
        }
        self.enumerator.notify_checkpoint_complete(id)?;
        self.last_splits = checkpoint.splits;
        Ok(true)
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
