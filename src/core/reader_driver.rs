//! The reader driver (the task half of Flink's `SourceOperator`): runs one reader, commands from
//! the coordinator first, then polling, waiting on the reader's availability instead of spinning.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::checkpoint::FINAL_SNAPSHOT;
use super::enumerator::ReaderCommand;
use super::reader::{InputStatus, ReaderRequest, SourceReader};
use super::sink::SinkMessage;
use super::split::{SourceSplit, SplitSnapshot};
use super::stats::JobStats;
use super::{rt, sim};
use crate::error::{Error, Result};

/// What a reader tells the coordinator.
pub(crate) enum ReaderEvent<S: SourceSplit> {
    Registered,
    Request(ReaderRequest),
    CheckpointAck { id: u64, splits: Vec<SplitSnapshot<S>> },
    Finished { splits: Vec<SplitSnapshot<S>> },
    Failed(Error),
}

/// Drives one reader: commands from the coordinator first, then polling, waiting on the
/// reader's availability instead of spinning.
pub(crate) struct ReaderDriver<S: SourceSplit, T> {
    pub(crate) index: usize,
    pub(crate) events: mpsc::UnboundedSender<(usize, ReaderEvent<S>)>,
    pub(crate) sink: mpsc::Sender<SinkMessage<T>>,
    pub(crate) stats: Arc<JobStats>,
}

enum Flow {
    Continue,
    /// Stop requested: finish now with the current state.
    Stop,
    /// The sink is gone (the job is failing).
    Gone,
}

impl<S: SourceSplit, T: Send + 'static> ReaderDriver<S, T> {
    pub(crate) async fn run<R: SourceReader<Split = S, Output = T>>(
        self,
        mut reader: R,
        mut commands: mpsc::UnboundedReceiver<ReaderCommand<S>>,
    ) {
        let result = self.drive(&mut reader, &mut commands).await;
        sim::point("reader.end").await;
        match result {
            Ok(Some(splits)) => {
                // its final state is taken and nothing more is read: the final checkpoint need
                // not wait for the fetchers to shut down (a consumer's close takes a while)
                let _ = self.events.send((self.index, ReaderEvent::Finished { splits }));
                if let Err(e) = rt::block_here(|| reader.close()) {
                    warn!(reader = self.index, error = %e, "closing the reader failed after it finished");
                }
            }
            Ok(None) => {
                let _ = rt::block_here(|| reader.close());
                return;
            }
            Err(e) => {
                let _ = rt::block_here(|| reader.close());
                let _ = self.events.send((self.index, ReaderEvent::Failed(e)));
                return;
            }
        }
        // A finished reader still hears which checkpoint made its last state durable (the Kafka
        // source commits its final offsets then), until the job closes the channel.
        drop(self.sink);
        while let Some(command) = commands.recv().await {
            if let ReaderCommand::CheckpointComplete(id) = command {
                if let Err(e) = rt::block_here(|| reader.notify_checkpoint_complete(id)) {
                    warn!(reader = self.index, error = %e, "after-checkpoint action failed");
                }
            }
        }
    }

    fn send(&self, event: ReaderEvent<S>) {
        let _ = self.events.send((self.index, event));
    }

    /// Returns the final snapshot, or `None` when the coordinator is gone.
    async fn drive<R: SourceReader<Split = S, Output = T>>(
        &self,
        reader: &mut R,
        commands: &mut mpsc::UnboundedReceiver<ReaderCommand<S>>,
    ) -> Result<Option<Vec<SplitSnapshot<S>>>> {
        for request in reader.start()? {
            self.send(ReaderEvent::Request(request));
        }
        self.send(ReaderEvent::Registered);
        let mut output = reader.create_output();
        let mut status = InputStatus::MoreAvailable;
        let mut polls_since_yield = 0u32;
        let mut throttle = self.stats.throttle.subscribe();
        loop {
            // commands first: assignments and checkpoint triggers must not wait behind data
            loop {
                match commands.try_recv() {
                    Ok(command) => {
                        match self.handle(reader, command).await? {
                            Flow::Stop => return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT))),
                            Flow::Gone => return Ok(None),
                            Flow::Continue => {}
                        }
                        status = InputStatus::MoreAvailable;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return Ok(None),
                }
            }
            // paused (`POST /control`): emit nothing, but keep serving commands, so checkpoints
            // complete and a stop ends the job; the end of input is not held up
            throttle.borrow_and_update();
            if status != InputStatus::EndOfInput && self.stats.throttle.is_paused() {
                tokio::select! {
                    biased;
                    command = commands.recv() => {
                        let Some(command) = command else { return Ok(None) };
                        match self.handle(reader, command).await? {
                            Flow::Stop => return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT))),
                            Flow::Gone => return Ok(None),
                            Flow::Continue => {}
                        }
                    }
                    _ = throttle.changed() => {}
                }
                status = InputStatus::MoreAvailable;
                continue;
            }
            match status {
                InputStatus::MoreAvailable => {
                    sim::point("reader.poll").await;
                    status = reader.poll_next(&mut output)?;
                    let filtered = output.take_filtered();
                    if filtered > 0 {
                        self.stats.records_filtered.fetch_add(filtered, Ordering::Relaxed);
                    }
                    let skipped = output.take_skipped();
                    if skipped > 0 {
                        self.stats.records_skipped.fetch_add(skipped, Ordering::Relaxed);
                    }
                    for request in reader.take_requests() {
                        self.send(ReaderEvent::Request(request));
                    }
                    if !output.is_empty() {
                        let records = output.take_records();
                        self.stats
                            .records_emitted
                            .fetch_add(records.len() as u64, Ordering::Relaxed);
                        let message = SinkMessage::Records {
                            reader: self.index,
                            records,
                        };
                        sim::point("reader.emit").await;
                        if self.sink.send(message).await.is_err() {
                            return Ok(None);
                        }
                    }
                    polls_since_yield += 1;
                    if polls_since_yield >= 64 {
                        polls_since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
                InputStatus::NothingAvailable => {
                    let available = reader.is_available();
                    tokio::select! {
                        biased;
                        command = commands.recv() => {
                            let Some(command) = command else { return Ok(None) };
                            match self.handle(reader, command).await? {
                                Flow::Stop => return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT))),
                                Flow::Gone => return Ok(None),
                                Flow::Continue => {}
                            }
                        }
                        _ = available => {}
                    }
                    status = InputStatus::MoreAvailable;
                }
                InputStatus::EndOfInput => {
                    debug!("end of input");
                    return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT)));
                }
            }
        }
    }

    async fn handle<R: SourceReader<Split = S, Output = T>>(
        &self,
        reader: &mut R,
        command: ReaderCommand<S>,
    ) -> Result<Flow> {
        sim::point("reader.command").await;
        match command {
            ReaderCommand::AddSplits(splits) => reader.add_splits(splits)?,
            ReaderCommand::NoMoreSplits => reader.notify_no_more_splits(),
            ReaderCommand::SourceEvent(event) => reader.handle_source_event(event)?,
            ReaderCommand::TriggerCheckpoint(id) => {
                // everything emitted so far is already on the sink channel; this reader's barrier
                // goes right behind it, so the sink can tell its records before the snapshot from
                // those after (Flink's aligned barriers)
                let splits = reader.snapshot_state(id);
                let barrier = SinkMessage::ReaderBarrier {
                    reader: self.index,
                    checkpoint: id,
                };
                if self.sink.send(barrier).await.is_err() {
                    return Ok(Flow::Gone);
                }
                sim::point("reader.ack").await;
                self.send(ReaderEvent::CheckpointAck { id, splits });
            }
            ReaderCommand::CheckpointComplete(id) => reader.notify_checkpoint_complete(id)?,
            ReaderCommand::Stop => return Ok(Flow::Stop),
        }
        for request in reader.take_requests() {
            self.send(ReaderEvent::Request(request));
        }
        Ok(Flow::Continue)
    }
}
