//! The sink driver: the sink's own thread, taking records and barriers in order from the
//! readers' channel. At a barrier it prepares the sink's commit and tells the coordinator; a
//! transactional sink then waits for the coordinator's go (the state file is written) before it
//! commits and takes the records after the barrier, which belong to the next transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::info_span;

use super::checkpoint::JobStats;
use super::failpoint;
use super::sink::{Sink, SinkMessage, SinkState};
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

pub(crate) fn run_sink<T: 'static>(mut sink: Box<dyn Sink<T>>, mut channels: SinkChannels<T>, stats: Arc<JobStats>) {
    let span = info_span!("sink");
    let _entered = span.enter();
    let transactional = sink.is_transactional();
    let events = channels.events.clone();
    let outcome = (|| -> Result<Option<SinkEvent>, Error> {
        while let Some(message) = channels.messages.blocking_recv() {
            match message {
                SinkMessage::Records(records) => {
                    let n = records.len() as u64;
                    sink.write(records)?;
                    stats.records_written.fetch_add(n, Ordering::Relaxed);
                    failpoint::hit("sink.after_write");
                }
                SinkMessage::Barrier(id) => {
                    failpoint::hit("checkpoint.before_prepare");
                    let state = sink.prepare_commit(id)?;
                    failpoint::hit("checkpoint.after_prepare");
                    let _ = events.send(SinkEvent::Prepared { id, state });
                    if transactional {
                        // no record after the barrier may enter this transaction: wait for the go
                        match channels.commits.blocking_recv() {
                            Some(go) if go == id => {
                                sink.commit(id)?;
                                failpoint::hit("checkpoint.after_commit");
                                let _ = events.send(SinkEvent::Committed(id));
                            }
                            // the job failed before the state file was written: the transaction
                            // stays open and the next start aborts it
                            _ => return Ok(None),
                        }
                    }
                }
                SinkMessage::EndOfInput => sink.end_of_input()?,
                SinkMessage::End => {
                    sink.close()?;
                    return Ok(Some(SinkEvent::Closed));
                }
            }
        }
        Ok(None)
    })();
    match outcome {
        Ok(Some(event)) => {
            let _ = events.send(event);
        }
        Ok(None) => {}
        Err(e) => {
            let _ = events.send(SinkEvent::Failed(e));
        }
    }
}
