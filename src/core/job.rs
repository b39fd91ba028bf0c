//! The job runtime (Flink's `SourceCoordinator` and the `SourceOperator` tasks, in one process):
//! one coordinator task hosting the enumerator and the checkpoints, `parallelism` reader tasks,
//! and a sink thread, wired by channels.
//!
//! Checkpoint k (aligned barriers, at-least-once):
//! 1. the coordinator snapshots the enumerator, then sends `TriggerCheckpoint(k)` to every reader
//!    on the same ordered channel as split assignments, so a split is in exactly one of the two
//!    snapshots;
//! 2. each reader snapshots its splits after sending everything it emitted to the sink channel,
//!    and acknowledges;
//! 3. with every acknowledgement in, the coordinator puts barrier k on the sink channel, behind
//!    every record the snapshots cover; the sink makes everything before it durable and answers;
//! 4. the coordinator writes the state file, then tells readers and enumerator k is complete.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, info_span, warn, Instrument};

use super::enumerator::{EnumeratorContext, ReaderCommand, SplitEnumerator};
use super::fetcher::FetchStats;
use super::reader::{InputStatus, ReaderRequest, SourceReader};
use super::sink::{Sink, SinkMessage};
use super::source::{ReaderContext, Source, SourceSplit, SplitSnapshot};
use super::state::StateStore;
use crate::error::{Error, Result, StateError};

/// The id under which a reader's last snapshot (end of input, or stop) is taken; it is part of
/// whichever checkpoint completes next.
pub const FINAL_SNAPSHOT: u64 = u64::MAX;

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobOptions {
    pub name: String,
    /// Number of reader tasks.
    pub parallelism: usize,
    /// Time between checkpoints; `None` checkpoints only at the end.
    pub checkpoint_interval: Option<Duration>,
    /// Stop gracefully (final checkpoint) after this long.
    pub max_duration: Option<Duration>,
    /// Capacity of the channel to the sink, in record batches.
    pub sink_capacity: usize,
}

impl JobOptions {
    pub fn new(name: impl Into<String>, parallelism: usize) -> Self {
        JobOptions {
            name: name.into(),
            parallelism,
            checkpoint_interval: None,
            max_duration: None,
            sink_capacity: 2,
        }
    }
}

/// What the state file holds: the enumerator's checkpoint and every split's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "E: Serialize, S: SourceSplit",
    deserialize = "E: serde::de::DeserializeOwned, S: SourceSplit"
))]
pub struct Checkpoint<E, S: SourceSplit> {
    pub job: String,
    /// The source kind that wrote it ([`Source::kind`]).
    pub source: String,
    pub checkpoint_id: u64,
    /// When the checkpoint completed, RFC 3339.
    pub completed_at: String,
    pub enumerator: E,
    pub splits: Vec<SplitSnapshot<S>>,
    /// The job reached the end of its input (not a stop): a restart has nothing left to do.
    #[serde(default)]
    pub end_of_input: bool,
}

/// Live counters of a running job, shared with metrics and progress reporting.
#[derive(Debug, Default)]
pub struct JobStats {
    pub records_emitted: AtomicU64,
    pub records_written: AtomicU64,
    pub checkpoints_completed: AtomicU64,
    pub checkpoint_failures: AtomicU64,
    /// Duration of the last completed checkpoint, in milliseconds.
    pub last_checkpoint_ms: AtomicU64,
    /// Records the assigned bounded splits hold (an upper bound), for progress and ETA.
    pub expected_records: AtomicU64,
    pub readers: Mutex<Vec<Arc<FetchStats>>>,
}

/// How a job ended.
#[derive(Debug)]
pub struct JobReport<S: SourceSplit> {
    pub records_emitted: u64,
    pub records_written: u64,
    pub checkpoints: u64,
    /// The state of every split at the last checkpoint.
    pub splits: Vec<SplitSnapshot<S>>,
    /// The job was stopped (signal or `max_duration`) rather than reaching the end of input.
    pub stopped: bool,
    pub elapsed: Duration,
}

enum ReaderEvent<S: SourceSplit> {
    Registered,
    Request(ReaderRequest),
    CheckpointAck { id: u64, splits: Vec<SplitSnapshot<S>> },
    Finished { splits: Vec<SplitSnapshot<S>> },
    Failed(Error),
}

enum SinkEvent {
    Durable(u64),
    Closed,
    Failed(Error),
}

type EnumState<S> = <S as Source>::EnumeratorState;
type CallResult<S> = <<S as Source>::Enumerator as SplitEnumerator>::CallResult;
type SourceCheckpoint<S> = Checkpoint<EnumState<S>, <S as Source>::Split>;

struct Pending<S: Source> {
    id: u64,
    started: Instant,
    enumerator: EnumState<S>,
    acks: HashMap<usize, Vec<SplitSnapshot<S::Split>>>,
    barrier_sent: bool,
    /// The final checkpoint after every split ended on its own.
    end_of_input: bool,
}

/// A job: a source, a sink, options, and optionally a state file to restore from and write to.
pub struct Job<S: Source> {
    source: Arc<S>,
    options: JobOptions,
    store: Option<Arc<StateStore>>,
    stats: Arc<JobStats>,
    stop: Option<watch::Receiver<bool>>,
}

impl<S: Source> Job<S> {
    pub fn new(source: S, options: JobOptions) -> Self {
        Job {
            source: Arc::new(source),
            options,
            store: None,
            stats: Arc::new(JobStats::default()),
            stop: None,
        }
    }

    /// Restore from and checkpoint to this state file.
    pub fn with_state(mut self, store: StateStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Share live counters.
    pub fn with_stats(mut self, stats: Arc<JobStats>) -> Self {
        self.stats = stats;
        self
    }

    /// Stop gracefully when this becomes `true`.
    pub fn with_stop_signal(mut self, stop: watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    pub fn stats(&self) -> Arc<JobStats> {
        Arc::clone(&self.stats)
    }

    /// The checkpoint in the state file, if any; a damaged file is an [`Error::State`].
    pub fn load_checkpoint(&self) -> Result<Option<SourceCheckpoint<S>>> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let checkpoint: Option<SourceCheckpoint<S>> = store.load()?;
        if let Some(cp) = &checkpoint {
            if cp.source != self.source.kind() {
                return Err(Error::State {
                    path: store.path().to_path_buf(),
                    source: StateError::SourceMismatch {
                        expected: self.source.kind().into(),
                        found: cp.source.clone(),
                    },
                });
            }
        }
        Ok(checkpoint)
    }

    /// Run to the end of input, or until stopped; then a final checkpoint.
    /// Needs a multi-threaded tokio runtime (readers close their fetchers with `block_in_place`).
    pub async fn run(self, sink: Box<dyn Sink<S::Output>>) -> Result<JobReport<S::Split>> {
        if self.options.parallelism == 0 {
            return Err(Error::config("job.parallelism", "must be at least 1"));
        }
        let restored = self.load_checkpoint()?;
        let started = Instant::now();
        let parallelism = self.options.parallelism;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (sink_tx, sink_rx) = mpsc::channel(self.options.sink_capacity.max(1));
        let (sink_events_tx, sink_events_rx) = mpsc::unbounded_channel();
        let (calls_tx, calls_rx) = mpsc::unbounded_channel();

        let sink_stats = Arc::clone(&self.stats);
        let sink_thread = std::thread::Builder::new()
            .name("sink".into())
            .spawn(move || run_sink(sink, sink_rx, sink_events_tx, sink_stats))
            .map_err(|e| Error::io("cannot start the sink thread", e))?;

        let mut reader_txs = Vec::with_capacity(parallelism);
        let mut reader_aborts = Vec::with_capacity(parallelism);
        let mut reader_watchers = Vec::with_capacity(parallelism);
        let mut fetch_stats = Vec::with_capacity(parallelism);
        for index in 0..parallelism {
            let (tx, rx) = mpsc::unbounded_channel();
            reader_txs.push(tx);
            let stats = Arc::new(FetchStats::default());
            fetch_stats.push(Arc::clone(&stats));
            let reader = self.source.create_reader(ReaderContext {
                index,
                parallelism,
                fetch_stats: stats,
            })?;
            let driver = ReaderDriver {
                index,
                events: events_tx.clone(),
                sink: sink_tx.clone(),
                stats: Arc::clone(&self.stats),
            };
            let task = tokio::spawn(driver.run(reader, rx).instrument(info_span!("reader", reader = index)));
            reader_aborts.push(task.abort_handle());
            // a panicking reader must fail the job, not leave the coordinator waiting for it
            let panics = events_tx.clone();
            reader_watchers.push(tokio::spawn(async move {
                if let Err(e) = task.await {
                    if e.is_panic() {
                        let message = format!("reader {index} panicked");
                        let _ = panics.send((index, ReaderEvent::Failed(Error::runtime("job", message))));
                    }
                }
            }));
        }
        *self.stats.readers.lock().unwrap_or_else(|p| p.into_inner()) = fetch_stats;

        let mut ctx = EnumeratorContext::new(reader_txs, calls_tx, Arc::clone(&self.stats));
        let mut restored_finished = Vec::new();
        let mut restored_end_of_input = false;
        let mut next_checkpoint_id = 1;
        let mut enumerator = match restored {
            Some(cp) => {
                info!(checkpoint = cp.checkpoint_id, completed_at = %cp.completed_at, splits = cp.splits.len(), "restoring from the state file");
                next_checkpoint_id = cp.checkpoint_id + 1;
                restored_end_of_input = cp.end_of_input;
                let mut enumerator = self.source.restore_enumerator(cp.enumerator)?;
                let mut unfinished = Vec::new();
                for snap in cp.splits {
                    if snap.finished.is_some() {
                        restored_finished.push(snap);
                    } else {
                        unfinished.push(snap.split);
                    }
                }
                enumerator.add_splits_back(&mut ctx, unfinished)?;
                enumerator
            }
            None => self.source.create_enumerator()?,
        };
        enumerator.start(&mut ctx)?;

        let mut coordinator = Coordinator::<S> {
            job: self.options.name.clone(),
            kind: self.source.kind(),
            parallelism,
            enumerator,
            ctx,
            sink: sink_tx,
            sink_events: sink_events_rx,
            store: self.store.clone(),
            stats: Arc::clone(&self.stats),
            finished_readers: HashMap::new(),
            restored_finished,
            pending: None,
            next_checkpoint_id,
            final_id: None,
            last_splits: Vec::new(),
            stopping: false,
            restored_end_of_input,
        };
        let outcome = coordinator
            .run(events_rx, calls_rx, self.stop.clone(), &self.options)
            .await;
        drop(events_tx);
        if outcome.is_err() {
            for task in &reader_aborts {
                task.abort();
            }
        }
        let Coordinator {
            sink,
            mut enumerator,
            last_splits,
            ctx,
            ..
        } = coordinator;
        drop(sink);
        // closing the command channels lets finished readers end
        drop(ctx);
        let drained = tokio::time::timeout(Duration::from_secs(30), async {
            for watcher in reader_watchers {
                let _ = watcher.await;
            }
        })
        .await;
        if drained.is_err() {
            warn!("readers did not end within 30s of the job; aborting them");
            for task in &reader_aborts {
                task.abort();
            }
        }
        if let Err(e) = enumerator.close() {
            warn!(error = %e, "closing the enumerator failed");
        }
        let sink_result = tokio::task::spawn_blocking(move || sink_thread.join()).await;
        if !matches!(sink_result, Ok(Ok(()))) {
            warn!("the sink thread ended abnormally");
        }
        let stopped = outcome?;
        Ok(JobReport {
            records_emitted: self.stats.records_emitted.load(Ordering::Relaxed),
            records_written: self.stats.records_written.load(Ordering::Relaxed),
            checkpoints: self.stats.checkpoints_completed.load(Ordering::Relaxed),
            splits: last_splits,
            stopped,
            elapsed: started.elapsed(),
        })
    }
}

struct Coordinator<S: Source> {
    job: String,
    kind: &'static str,
    parallelism: usize,
    enumerator: S::Enumerator,
    ctx: EnumeratorContext<S::Split, CallResult<S>>,
    sink: mpsc::Sender<SinkMessage<S::Output>>,
    sink_events: mpsc::UnboundedReceiver<SinkEvent>,
    store: Option<Arc<StateStore>>,
    stats: Arc<JobStats>,
    finished_readers: HashMap<usize, Vec<SplitSnapshot<S::Split>>>,
    restored_finished: Vec<SplitSnapshot<S::Split>>,
    pending: Option<Pending<S>>,
    next_checkpoint_id: u64,
    final_id: Option<u64>,
    last_splits: Vec<SplitSnapshot<S::Split>>,
    /// A stop was requested (signal or `max_duration`).
    stopping: bool,
    /// The restored state says the input had already ended.
    restored_end_of_input: bool,
}

impl<S: Source> Coordinator<S> {
    /// The event loop; returns whether the job was stopped (rather than ending on its own).
    async fn run(
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

/// Drives one reader: commands from the coordinator first, then polling, waiting on the
/// reader's availability instead of spinning.
struct ReaderDriver<S: SourceSplit, T> {
    index: usize,
    events: mpsc::UnboundedSender<(usize, ReaderEvent<S>)>,
    sink: mpsc::Sender<SinkMessage<T>>,
    stats: Arc<JobStats>,
}

enum Flow {
    Continue,
    /// Stop requested: finish now with the current state.
    Stop,
}

impl<S: SourceSplit, T: Send + 'static> ReaderDriver<S, T> {
    async fn run<R: SourceReader<Split = S, Output = T>>(
        self,
        mut reader: R,
        mut commands: mpsc::UnboundedReceiver<ReaderCommand<S>>,
    ) {
        let result = self.drive(&mut reader, &mut commands).await;
        let close = tokio::task::block_in_place(|| reader.close());
        let outcome = result.and_then(|finished| close.map(|_| finished));
        match outcome {
            Ok(Some(splits)) => {
                let _ = self.events.send((self.index, ReaderEvent::Finished { splits }));
            }
            Ok(None) => return,
            Err(e) => {
                let _ = self.events.send((self.index, ReaderEvent::Failed(e)));
                return;
            }
        }
        // A finished reader still hears which checkpoint made its last state durable (the Kafka
        // source commits its final offsets then), until the job closes the channel.
        drop(self.sink);
        while let Some(command) = commands.recv().await {
            if let ReaderCommand::CheckpointComplete(id) = command {
                if let Err(e) = tokio::task::block_in_place(|| reader.notify_checkpoint_complete(id)) {
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
        loop {
            // commands first: assignments and checkpoint triggers must not wait behind data
            loop {
                match commands.try_recv() {
                    Ok(command) => {
                        if let Flow::Stop = self.handle(reader, command)? {
                            return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT)));
                        }
                        status = InputStatus::MoreAvailable;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return Ok(None),
                }
            }
            match status {
                InputStatus::MoreAvailable => {
                    status = reader.poll_next(&mut output)?;
                    for request in reader.take_requests() {
                        self.send(ReaderEvent::Request(request));
                    }
                    if !output.is_empty() {
                        let records = output.take_records();
                        self.stats
                            .records_emitted
                            .fetch_add(records.len() as u64, Ordering::Relaxed);
                        if self.sink.send(SinkMessage::Records(records)).await.is_err() {
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
                            if let Flow::Stop = self.handle(reader, command)? {
                                return Ok(Some(reader.snapshot_state(FINAL_SNAPSHOT)));
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

    fn handle<R: SourceReader<Split = S, Output = T>>(
        &self,
        reader: &mut R,
        command: ReaderCommand<S>,
    ) -> Result<Flow> {
        match command {
            ReaderCommand::AddSplits(splits) => reader.add_splits(splits)?,
            ReaderCommand::NoMoreSplits => reader.notify_no_more_splits(),
            ReaderCommand::SourceEvent(event) => reader.handle_source_event(event)?,
            ReaderCommand::TriggerCheckpoint(id) => {
                // everything emitted so far is already on the sink channel
                let splits = reader.snapshot_state(id);
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

fn run_sink<T: 'static>(
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
