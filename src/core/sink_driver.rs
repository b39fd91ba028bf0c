//! The sink driver: the sink's own thread, taking records and barriers in order from the
//! readers' channel and answering the coordinator when a checkpoint is durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::info_span;

use super::checkpoint::JobStats;
use super::sink::{Sink, SinkMessage};
use crate::error::Error;

/// What the sink thread tells the coordinator.
pub(crate) enum SinkEvent {
    Durable(u64),
    Closed,
    Failed(Error),
}

pub(crate) fn run_sink<T: 'static>(
    mut sink: Box<dyn Sink<T>>,
    mut messages: mpsc::Receiver<SinkMessage<T>>,
    events: mpsc::UnboundedSender<SinkEvent>,
    stats: Arc<JobStats>,
) {
    let span = info_span!("sink");
    let _entered = span.enter();
    while let Some(message) = messages.blocking_recv() {
        let outcome = match message {
            SinkMessage::Records(records) => {
                let n = records.len() as u64;
                sink.write(records).map(|_| {
                    stats.records_written.fetch_add(n, Ordering::Relaxed);
                    None
                })
            }
            SinkMessage::Barrier(id) => sink.flush().map(|_| Some(SinkEvent::Durable(id))),
            SinkMessage::EndOfInput => sink.end_of_input().map(|_| None),
            SinkMessage::End => {
                let event = match sink.close() {
                    Ok(()) => SinkEvent::Closed,
                    Err(e) => SinkEvent::Failed(e),
                };
                let _ = events.send(event);
                return;
            }
        };
        match outcome {
            Ok(Some(event)) => {
                let _ = events.send(event);
            }
            Ok(None) => {}
            Err(e) => {
                let _ = events.send(SinkEvent::Failed(e));
                return;
            }
        }
    }
}
