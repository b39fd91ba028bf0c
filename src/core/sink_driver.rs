//! The sink driver: the sink's own thread (a task under a simulation), taking records and
//! barriers in order from the readers' channel. At a barrier it prepares the sink's commit and tells the coordinator; a
//! transactional sink then waits for the coordinator's go (the state file is written) before it
//! commits and takes the records after the barrier, which belong to the next transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::failpoint;
use super::sim;
use super::sink::{Sink, SinkMessage, SinkState};
use super::stats::JobStats;
use crate::error::Error;

/// What the sink thread tells the coordinator.
pub(crate) enum SinkEvent {
    /// Everything before barrier `id` is durable, or ready to commit.
    Prepared {
        id: u64,
        state: Option<SinkState>,
    },
    /// A transactional sink committed checkpoint `id`.
    Committed(u64),
    Closed,
    Failed(Error),
}

/// The sink's channels.
pub(crate) struct SinkChannels<T> {
    pub(crate) messages: mpsc::Receiver<SinkMessage<T>>,
    pub(crate) events: mpsc::UnboundedSender<SinkEvent>,
    /// The coordinator's go to commit a prepared checkpoint (transactional sinks only).
    pub(crate) commits: mpsc::UnboundedReceiver<u64>,
}

/// The sink's loop: returns when the job ends or fails (the coordinator hears which).
pub(crate) async fn run_sink<T: 'static>(sink: Box<dyn Sink<T>>, channels: SinkChannels<T>, stats: Arc<JobStats>) {
    let events = channels.events.clone();
    match drive(sink, channels, stats).await {
        Ok(Some(event)) => {
            let _ = events.send(event);
        }
        Ok(None) => {}
        Err(e) => {
            let _ = events.send(SinkEvent::Failed(e));
        }
    }
}

async fn drive<T: 'static>(
    mut sink: Box<dyn Sink<T>>,
    mut channels: SinkChannels<T>,
    stats: Arc<JobStats>,
) -> Result<Option<SinkEvent>, Error> {
    let transactional = sink.is_transactional();
    let events = channels.events.clone();
    let mut held = Alignment::default();
    let mut diverted = 0;
    let mut write = |sink: &mut Box<dyn Sink<T>>, records: Vec<T>| -> Result<(), Error> {
        let n = records.len() as u64;
        sink.write(records)?;
        let now = sink.diverted();
        let elsewhere = now.saturating_sub(diverted);
        diverted = now;
        stats.records_written.fetch_add(n - elsewhere.min(n), Ordering::Relaxed);
        stats.records_diverted.fetch_add(elsewhere, Ordering::Relaxed);
        failpoint::hit("sink.after_write");
        Ok(())
    };
    while let Some(message) = channels.messages.recv().await {
        sim::point("sink.message").await;
        match message {
            SinkMessage::Records { reader, records } => {
                if let Some(records) = held.hold(reader, records) {
                    write(&mut sink, records)?;
                }
            }
            SinkMessage::ReaderBarrier { reader, checkpoint } => {
                // a barrier of a newer checkpoint: the one held for was superseded
                for records in held.start(reader, checkpoint) {
                    write(&mut sink, records)?;
                }
            }
            SinkMessage::Barrier(id) => {
                let superseded = held.checkpoint.is_some_and(|c| c != id);
                if superseded {
                    for records in held.release() {
                        write(&mut sink, records)?;
                    }
                }
                failpoint::hit("checkpoint.before_prepare");
                let state = sink.prepare_commit(id)?;
                failpoint::hit("checkpoint.after_prepare");
                sim::point("checkpoint.after_prepare").await;
                let _ = events.send(SinkEvent::Prepared { id, state });
                if transactional {
                    // no record after the barrier may enter this transaction: wait for the go
                    match channels.commits.recv().await {
                        Some(go) if go == id => {
                            sim::point("sink.commit").await;
                            sink.commit(id)?;
                            failpoint::hit("checkpoint.after_commit");
                            sim::point("checkpoint.after_commit").await;
                            let _ = events.send(SinkEvent::Committed(id));
                        }
                        // the job failed before the state file was written: the transaction
                        // stays open and the next start aborts it
                        _ => return Ok(None),
                    }
                }
                // the records held back belong to the next checkpoint
                for records in held.release() {
                    write(&mut sink, records)?;
                }
            }
            SinkMessage::EndOfInput => {
                for records in held.release() {
                    write(&mut sink, records)?;
                }
                sink.end_of_input()?
            }
            SinkMessage::End => {
                sink.close()?;
                return Ok(Some(SinkEvent::Closed));
            }
        }
    }
    Ok(None)
}

/// Barrier alignment (Flink's `CheckpointBarrierHandler`, for one input per reader): the
/// records a reader sends after its barrier for the checkpoint in progress are held back until
/// the sink has prepared that checkpoint, so a checkpoint's records are exactly those before the
/// readers' snapshots. Only the time between the first reader's barrier and the coordinator's
/// is held, a few milliseconds of records.
struct Alignment<T> {
    /// The checkpoint whose reader barriers are arriving.
    checkpoint: Option<u64>,
    /// Readers past their barrier, with what they sent since, in order.
    readers: Vec<(usize, Vec<Vec<T>>)>,
}

impl<T> Default for Alignment<T> {
    fn default() -> Self {
        Alignment {
            checkpoint: None,
            readers: Vec::new(),
        }
    }
}

impl<T> Alignment<T> {
    /// Keep `records` if their reader is past its barrier; give them back otherwise.
    fn hold(&mut self, reader: usize, records: Vec<T>) -> Option<Vec<T>> {
        match self.readers.iter_mut().find(|(r, _)| *r == reader) {
            Some((_, held)) => {
                held.push(records);
                None
            }
            None => Some(records),
        }
    }

    /// `reader` passed its barrier for `checkpoint`; returns what a superseded checkpoint held.
    fn start(&mut self, reader: usize, checkpoint: u64) -> Vec<Vec<T>> {
        let released = if self.checkpoint.is_some_and(|c| c != checkpoint) {
            self.release()
        } else {
            Vec::new()
        };
        self.checkpoint = Some(checkpoint);
        self.readers.push((reader, Vec::new()));
        released
    }

    /// End the alignment: everything held, reader by reader, each in its order.
    fn release(&mut self) -> Vec<Vec<T>> {
        self.checkpoint = None;
        self.readers.drain(..).flat_map(|(_, held)| held).collect()
    }
}
