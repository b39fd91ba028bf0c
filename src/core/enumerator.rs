//! The split enumerator contract (Flink's `SplitEnumerator`) and the context the coordinator
//! gives it (Flink's `SplitEnumeratorContext`): assignments, no-more-splits, events to readers
//! and periodic asynchronous calls such as partition discovery.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::split::SourceSplit;
use crate::error::{Error, Result};

/// A custom message between the enumerator and a reader (Flink's `SourceEvent`).
pub struct SourceEvent(pub Box<dyn Any + Send>);

impl fmt::Debug for SourceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SourceEvent(..)")
    }
}

/// The event an enumerator sends to finish splits on a reader (a deleted partition, a removed
/// periodic event); readers built on `SourceReaderBase` handle it with an event handler.
#[derive(Debug)]
pub struct RemoveSplits(pub Vec<super::split::SplitId>);

/// The event the coordinator sends every reader to give splits up mid-run (a group member's
/// revoked partitions, see [`SplitHandover`]): each stops being read, and its snapshot
/// from then on says it was released at the position of the last record emitted. Readers
/// built on `SourceReaderBase` handle it themselves; one that does not hold a split ignores it.
#[derive(Debug)]
pub struct ReleaseSplits(pub Vec<super::split::SplitId>);

/// Splits handed over between processes while the job runs on (a group member's partitions
/// revoked or assigned, under Kafka's consumer protocol), on one channel so they apply in order.
pub enum SplitHandover {
    /// Give splits up: the enumerator says whether it can
    /// ([`SplitEnumerator::release_splits`]), the readers stop reading them, and the next
    /// checkpoint holds where each stopped, marked released. `done` hears `true` once that
    /// checkpoint is complete (committed, with a transactional sink), or `false` at once when
    /// the job cannot release them in place and must be stopped instead; a job that fails first
    /// drops it.
    Release {
        /// The splits to give up.
        splits: Vec<super::split::SplitId>,
        /// Whether they were released in place (see above).
        done: tokio::sync::oneshot::Sender<bool>,
    },
    /// Take splits in, each as its owner before checkpointed it (the source's split, as JSON):
    /// `done` hears at once whether the enumerator took them
    /// ([`SplitEnumerator::take_splits`]); `false`: the job must be stopped and run on them.
    Take {
        /// The splits, as the source's split type serializes.
        splits: Vec<serde_json::Value>,
        /// Whether they were taken in.
        done: tokio::sync::oneshot::Sender<bool>,
    },
}

/// Runs on the coordinator: discovers splits and assigns them to readers.
///
/// Every method runs on the coordinator task and must not block; slow work (metadata requests)
/// goes through [`EnumeratorContext::call_async`].
pub trait SplitEnumerator: Send + 'static {
    /// The splits it assigns.
    type Split: SourceSplit;
    /// The enumerator's checkpoint.
    type State;
    /// What a [`EnumeratorContext::call_async`] callable returns to
    /// [`SplitEnumerator::handle_call_result`].
    type CallResult: Send + 'static;

    /// Called once, after restored splits were added back and before any reader registers.
    fn start(&mut self, ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>) -> Result<()>;

    /// A reader asks for a split (pull-based sources).
    fn handle_split_request(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _reader: usize,
    ) -> Result<()> {
        Ok(())
    }

    /// Splits that must be assigned again: at restore, the unfinished splits of the state file.
    fn add_splits_back(
        &mut self,
        ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        splits: Vec<Self::Split>,
    ) -> Result<()>;

    /// A reader registered and can take splits.
    fn add_reader(&mut self, ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>, reader: usize) -> Result<()>;

    /// The enumerator's checkpoint; taken before the readers are asked for theirs.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Self::State>;

    /// Checkpoint `checkpoint_id` is durable. The context lets an enumerator assign splits it
    /// held until then (see [`EnumeratorContext::request_checkpoint`]).
    fn notify_checkpoint_complete(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _checkpoint_id: u64,
    ) -> Result<()> {
        Ok(())
    }

    /// A custom event from a reader.
    fn handle_source_event(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _reader: usize,
        _event: SourceEvent,
    ) -> Result<()> {
        Ok(())
    }

    /// The result of a callable registered with [`EnumeratorContext::call_async`].
    fn handle_call_result(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _result: Result<Self::CallResult>,
    ) -> Result<()> {
        Ok(())
    }

    /// Splits to be given up mid-run ([`SplitHandover::Release`]): whether the enumerator can
    /// (each assigned to a reader, none waiting on it), after which the readers release them.
    /// An enumerator that cannot returns false, and the job's owner stops the job instead.
    fn release_splits(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _splits: &[super::split::SplitId],
    ) -> Result<bool> {
        Ok(false)
    }

    /// Splits to be taken in mid-run ([`SplitHandover::Take`]), where their previous owner's
    /// checkpoint left them: whether the enumerator took them (and assigns them as it assigns its
    /// own). One that cannot returns false, and the job's owner stops the job instead.
    fn take_splits(
        &mut self,
        _ctx: &mut EnumeratorContext<Self::Split, Self::CallResult>,
        _splits: Vec<Self::Split>,
    ) -> Result<bool> {
        Ok(false)
    }

    /// The job ends.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// What the coordinator tells a reader, in order, on one channel per reader.
#[derive(Debug)]
pub enum ReaderCommand<S> {
    /// Take these splits.
    AddSplits(Vec<S>),
    /// No split will come any more: the reader ends once its splits are finished.
    NoMoreSplits,
    /// A custom event from the enumerator.
    SourceEvent(SourceEvent),
    /// Snapshot split states and answer; everything assigned before this is included.
    TriggerCheckpoint(u64),
    /// This checkpoint is durable.
    CheckpointComplete(u64),
    /// Graceful shutdown: stop emitting, report the final state, end.
    Stop,
}

/// The enumerator's handle on the job (Flink's `SplitEnumeratorContext`).
pub struct EnumeratorContext<S, C> {
    parallelism: usize,
    registered: BTreeSet<usize>,
    readers: Vec<mpsc::UnboundedSender<ReaderCommand<S>>>,
    calls: mpsc::UnboundedSender<Result<C>>,
    call_tasks: Vec<JoinHandle<()>>,
    no_more_splits_sent: BTreeSet<usize>,
    /// Readers told to stop: splits for them are kept in `undeliverable`, not sent.
    closed: BTreeSet<usize>,
    undeliverable: Vec<S>,
    stats: std::sync::Arc<super::stats::JobStats>,
    /// Each split as last assigned, when a transactional job needs them (see
    /// `Coordinator::fallback_checkpoint`).
    assigned: Option<std::collections::BTreeMap<super::split::SplitId, S>>,
    /// The enumerator asked for a checkpoint as soon as one can start.
    checkpoint_requested: bool,
    /// The splits sent to each reader (see [`super::reader::ReaderRequest::SplitRequest`]).
    sent: std::collections::BTreeMap<usize, u64>,
}

impl<S: SourceSplit, C: Send + 'static> EnumeratorContext<S, C> {
    pub(crate) fn new(
        readers: Vec<mpsc::UnboundedSender<ReaderCommand<S>>>,
        calls: mpsc::UnboundedSender<Result<C>>,
        stats: std::sync::Arc<super::stats::JobStats>,
    ) -> Self {
        EnumeratorContext {
            parallelism: readers.len(),
            registered: BTreeSet::new(),
            readers,
            calls,
            call_tasks: Vec::new(),
            no_more_splits_sent: BTreeSet::new(),
            closed: BTreeSet::new(),
            undeliverable: Vec::new(),
            stats,
            assigned: None,
            checkpoint_requested: false,
            sent: Default::default(),
        }
    }

    /// Ask for a checkpoint as soon as one can start (after the one in progress, if any),
    /// rather than at the next interval: an enumerator that must make something durable before
    /// its readers go on (the Kafka source's first discovery in a consumer group, whose resolved
    /// starting offsets hold the splits back until a checkpoint has them). No checkpoint comes
    /// once the job is stopping.
    pub fn request_checkpoint(&mut self) {
        self.checkpoint_requested = true;
    }

    /// Whether a checkpoint was asked for and not yet started.
    pub(crate) fn checkpoint_requested(&self) -> bool {
        self.checkpoint_requested
    }

    /// A requested checkpoint starts.
    pub(crate) fn clear_checkpoint_request(&mut self) {
        self.checkpoint_requested = false;
    }

    /// Keep each split as last assigned (a transactional job's fallback checkpoints need them).
    pub(crate) fn record_assignments(&mut self) {
        self.assigned = Some(Default::default());
    }

    /// Each split as last assigned, if recorded.
    pub(crate) fn assignments(&self) -> Option<&std::collections::BTreeMap<super::split::SplitId, S>> {
        self.assigned.as_ref()
    }

    /// A context outside a job, for an enumerator's unit tests: what the enumerator sends each
    /// of the `parallelism` readers arrives on the returned receivers; results of
    /// [`EnumeratorContext::call_async`] go nowhere (hand them to the enumerator directly).
    #[doc(hidden)]
    pub fn detached(parallelism: usize) -> (Self, Vec<mpsc::UnboundedReceiver<ReaderCommand<S>>>) {
        let (senders, receivers) = (0..parallelism).map(|_| mpsc::unbounded_channel()).unzip();
        let (calls, _) = mpsc::unbounded_channel();
        (Self::new(senders, calls, Default::default()), receivers)
    }

    /// The number of readers in the job.
    pub fn current_parallelism(&self) -> usize {
        self.parallelism
    }

    /// The job's event-time clock, when it has one (pacing, rate limits, a source-wide stop).
    pub fn event_time(&self) -> Option<std::sync::Arc<super::event_time::EventTimeClock>> {
        self.stats.event_time.get()
    }

    /// The readers that have registered so far.
    pub fn registered_readers(&self) -> &BTreeSet<usize> {
        &self.registered
    }

    #[doc(hidden)]
    pub fn register_reader(&mut self, reader: usize) {
        // a reader told to stop before it registered stays out
        if !self.closed.contains(&reader) {
            self.registered.insert(reader);
        }
    }

    /// A reader was told to stop: splits assigned to it from now on are kept for the
    /// coordinator to give back to the enumerator (see [`EnumeratorContext::take_undeliverable`]).
    #[doc(hidden)]
    pub fn close_reader(&mut self, reader: usize) {
        self.closed.insert(reader);
        // it no longer counts as registered: an enumerator that assigns to the registered
        // readers keeps the split for a later start instead of assigning it to a stopped reader
        self.registered.remove(&reader);
    }

    /// Splits assigned to stopped readers since the last call.
    #[doc(hidden)]
    pub fn take_undeliverable(&mut self) -> Vec<S> {
        std::mem::take(&mut self.undeliverable)
    }

    /// Assign splits to one reader.
    pub fn assign_splits(&mut self, reader: usize, splits: Vec<S>) -> Result<()> {
        if splits.is_empty() {
            return Ok(());
        }
        if self.closed.contains(&reader) {
            self.undeliverable.extend(splits);
            return Ok(());
        }
        if let Some(assigned) = self.assigned.as_mut() {
            for split in &splits {
                assigned.insert(split.split_id(), split.clone());
            }
        }
        let expected: u64 = splits.iter().filter_map(SourceSplit::remaining).sum();
        self.stats
            .expected_records
            .fetch_add(expected, std::sync::atomic::Ordering::Relaxed);
        *self.sent.entry(reader).or_default() += splits.len() as u64;
        self.send(reader, ReaderCommand::AddSplits(splits))
    }

    /// Whether a reader's request for a split, sent having been given `received` splits, was
    /// overtaken by splits sent to it since.
    pub(crate) fn overtaken(&self, reader: usize, received: u64) -> bool {
        self.sent.get(&reader).is_some_and(|sent| *sent > received)
    }

    /// Tell a reader it will get no more splits (bounded sources).
    pub fn signal_no_more_splits(&mut self, reader: usize) -> Result<()> {
        if self.no_more_splits_sent.insert(reader) {
            self.send(reader, ReaderCommand::NoMoreSplits)?;
        }
        Ok(())
    }

    /// Send a custom event to a reader.
    pub fn send_event_to_reader(&mut self, reader: usize, event: SourceEvent) -> Result<()> {
        self.send(reader, ReaderCommand::SourceEvent(event))
    }

    pub(crate) fn send(&self, reader: usize, command: ReaderCommand<S>) -> Result<()> {
        let tx = self.readers.get(reader).ok_or_else(|| {
            Error::runtime(
                "enumerator",
                format!("reader {reader} does not exist (parallelism {})", self.parallelism),
            )
        })?;
        // A reader that already ended has dropped its receiver; nothing is lost by ignoring it,
        // since a reader only ends after it was told there are no more splits.
        let _ = tx.send(command);
        Ok(())
    }

    /// Run `callable` off the coordinator (it may block), first after `initial_delay`, then
    /// every `period` if one is given (fixed delay between the end of one call and the next);
    /// each result goes to [`SplitEnumerator::handle_call_result`].
    pub fn call_async<F>(&mut self, mut callable: F, initial_delay: Duration, period: Option<Duration>)
    where
        F: FnMut() -> Result<C> + Send + 'static,
    {
        let results = self.calls.clone();
        let task = super::sim::spawn(async move {
            tokio::time::sleep(initial_delay).await;
            loop {
                let joined = super::rt::unblock(move || {
                    let result = callable();
                    (callable, result)
                })
                .await;
                let (returned, result) = match joined {
                    Ok(pair) => pair,
                    Err(e) => {
                        let _ = results.send(Err(e));
                        return;
                    }
                };
                callable = returned;
                if results.send(result).is_err() {
                    return;
                }
                match period {
                    Some(p) => tokio::time::sleep(p).await,
                    None => return,
                }
            }
        });
        self.call_tasks.push(task);
    }
}

impl<S, C> Drop for EnumeratorContext<S, C> {
    fn drop(&mut self) {
        for task in &self.call_tasks {
            task.abort();
        }
    }
}
