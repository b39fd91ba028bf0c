//! The job runtime (Flink's `SourceCoordinator` and the `SourceOperator` tasks, in one process):
//! one coordinator task hosting the enumerator and the checkpoints, `parallelism` reader tasks,
//! and a sink thread, wired by channels. (Under a simulation, see [`crate::sim`], all of it
//! runs on one thread.)
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
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::{info, info_span, warn, Instrument};

use super::checkpoint::{Checkpoint, JobReport, SourceCheckpoint};
use super::coordinator::Coordinator;
use super::enumerator::{EnumeratorContext, SplitEnumerator, SplitHandover};
use super::event_time::EventTimeClock;
use super::fetcher::FetchStats;
use super::job_options::JobOptions;
use super::reader_driver::{ReaderDriver, ReaderEvent};
pub use super::restore::checkpoint_of;
use super::restore::{check_writer, recover_sink};
use super::rt;
use super::sink::Sink;
use super::sink_driver::{run_sink, SinkChannels};
use super::source::{ReaderContext, Source};
use super::split::SourceSplit;
use super::stats::JobStats;
use super::store::CheckpointStore;
use crate::error::{Error, Result, StateError};

/// A job: a source, a sink, options, and optionally a state file to restore from and write to.
pub struct Job<S: Source> {
    source: Arc<S>,
    options: JobOptions,
    store: Option<Arc<dyn CheckpointStore>>,
    stats: Arc<JobStats>,
    stop: Option<watch::Receiver<bool>>,
    handovers: Option<mpsc::UnboundedReceiver<SplitHandover>>,
}

impl<S: Source> Job<S> {
    /// A job reading `source`; without [`Job::with_state`] nothing is restored or written.
    pub fn new(source: S, options: JobOptions) -> Self {
        Job {
            source: Arc::new(source),
            options,
            store: None,
            stats: Arc::new(JobStats::default()),
            stop: None,
            handovers: None,
        }
    }

    /// Restore from and checkpoint to this store (a state file, [`crate::StateStore`], or any
    /// other [`CheckpointStore`]).
    pub fn with_state(self, store: impl CheckpointStore + 'static) -> Self {
        self.with_store(Arc::new(store))
    }

    /// Restore from and checkpoint to a shared store.
    pub fn with_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.store = Some(store);
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

    /// Give splits up and take them in mid-run on request (see [`SplitHandover`]).
    pub fn with_handovers(mut self, handovers: mpsc::UnboundedReceiver<SplitHandover>) -> Self {
        self.handovers = Some(handovers);
        self
    }

    /// The job's live counters.
    pub fn stats(&self) -> Arc<JobStats> {
        Arc::clone(&self.stats)
    }

    /// The checkpoint in the state file, if any; a damaged file is an [`Error::State`].
    pub fn load_checkpoint(&self) -> Result<Option<SourceCheckpoint<S>>> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let Some(raw) = store.load()? else {
            return Ok(None);
        };
        checkpoint_of(&*self.source, &self.options.name, Path::new(&store.location()), raw).map(Some)
    }

    /// With no checkpoint of this instance, and the instance count changed since the job's state
    /// was written: this instance's share cut from the last checkpoints of every instance of the
    /// run before ([`CheckpointStore::load_reshare`], [`Source::reshare`]), as one checkpoint.
    /// Each part must have been written by the same sink (its transactional id aside: each
    /// instance has its own) and leave it nothing to recover: only the instance that wrote a
    /// checkpoint can cut its file back or settle its transaction.
    fn load_reshare(&self, sink: Option<&serde_json::Value>) -> Result<Option<SourceCheckpoint<S>>> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let raws = store.load_reshare()?;
        if raws.is_empty() {
            return Ok(None);
        }
        let location = store.location();
        let without_id = |v: Option<&serde_json::Value>| {
            v.cloned().map(|mut v| {
                if let Some(fields) = v.as_object_mut() {
                    fields.remove("transactional_id");
                }
                v
            })
        };
        let mut checkpoints = Vec::with_capacity(raws.len());
        for raw in raws {
            let mut cp = checkpoint_of(&*self.source, &self.options.name, Path::new(&location), raw)?;
            let was = cp.instance.unwrap_or_default();
            if let Some(state) = cp.sink.as_ref().filter(|s| s["state_in_transaction"] != true) {
                return Err(Error::config(
                    "job.instance.count",
                    format!(
                        "changed since the job's state was written (was {}), but the last checkpoint of instance {} \
                         left its sink something to recover ({state}) that only that instance can (cut its file \
                         back, settle its transaction): a count can change with an at-least-once sink, or an \
                         exactly-once Kafka sink carrying the checkpoints (checkpoint.store = \"kafka\" on the \
                         sink's cluster); finish the job with job.instance.count = {}, or start over with \
                         --reset-state",
                        was.count, was.index, was.count
                    ),
                ));
            }
            cp.sink_settings = without_id(cp.sink_settings.as_ref());
            check_writer(&cp, without_id(sink).as_ref(), was)?;
            checkpoints.push(cp);
        }
        let mut seen = std::collections::HashSet::new();
        for cp in checkpoints.iter().filter(|_| !store.parts_may_overlap()) {
            for snap in &cp.splits {
                let id = snap.split.split_id();
                if !seen.insert(id.clone()) {
                    return Err(Error::State {
                        path: location.clone().into(),
                        source: StateError::Malformed(format!(
                            "split {id} is in the checkpoints of two instances: the state was not written by one \
                             run of the job"
                        )),
                    });
                }
            }
        }
        let was = checkpoints[0].instance.unwrap_or_default();
        let checkpoint_id = checkpoints.iter().map(|c| c.checkpoint_id).max().unwrap_or(0);
        let completed_at = checkpoints
            .iter()
            .map(|c| c.completed_at.clone())
            .max()
            .unwrap_or_default();
        let end_of_input = checkpoints.iter().all(|c| c.end_of_input);
        // every part's changes by hand, once each, oldest first
        let mut history: Vec<serde_json::Value> = Vec::new();
        for entry in checkpoints.iter().flat_map(|c| &c.history) {
            if !history.contains(entry) {
                history.push(entry.clone());
            }
        }
        history.sort_by(|a, b| a["at"].as_str().cmp(&b["at"].as_str()));
        let stop_timestamp = checkpoints.iter().filter_map(|c| c.stop_timestamp).min();
        let source_settings = checkpoints[0].source_settings.clone();
        let (job, source) = (checkpoints[0].job.clone(), checkpoints[0].source.clone());
        let parts_count = checkpoints.len();
        let parts = checkpoints.into_iter().map(|c| (c.enumerator, c.splits)).collect();
        let (enumerator, splits) = self.source.reshare(parts, self.options.parallelism)?;
        // parts whose input had ended say so only while every split they hand on is finished (a
        // group member's run that released a split mid-run, then finished the rest, did not
        // read it to its end)
        let end_of_input = end_of_input && splits.iter().all(|s| s.finished.is_some());
        if store.parts_may_overlap() {
            info!(
                parts = parts_count,
                splits = splits.len(),
                "group member: its assignment's splits restored from the newest checkpoints that hold them"
            );
        } else {
            info!(
                was = was.count,
                now = self.options.instance.count,
                index = self.options.instance.index,
                splits = splits.len(),
                "job.instance.count changed: this instance's share cut from the last checkpoints of the instances before"
            );
        }
        Ok(Some(Checkpoint {
            job,
            source,
            checkpoint_id,
            completed_at,
            enumerator,
            splits,
            end_of_input,
            source_settings,
            stop_timestamp,
            sink: None,
            sink_settings: None,
            instance: Some(self.options.instance),
            previous: None,
            history,
        }))
    }

    /// [`Job::run`] on a multi-threaded tokio runtime of its own, for a program without one.
    pub fn run_blocking(self, sink: Box<dyn Sink<S::Output>>) -> Result<JobReport<S::Split>> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the job's runtime", e))?
            .block_on(self.run(sink))
    }

    /// Run to the end of input, or until stopped; then a final checkpoint.
    /// On a multi-threaded tokio runtime readers close their fetchers with `block_in_place`; on
    /// a current-thread runtime they close them in place.
    pub async fn run(self, sink: Box<dyn Sink<S::Output>>) -> Result<JobReport<S::Split>> {
        if self.options.parallelism == 0 {
            return Err(Error::config("job.parallelism", "must be at least 1"));
        }
        let latest = self.load_checkpoint()?;
        let sink_settings = sink.fingerprint();
        let latest = match latest {
            Some(cp) => {
                check_writer(&cp, sink_settings.as_ref(), self.options.instance)?;
                Some(cp)
            }
            None => self.load_reshare(sink_settings.as_ref())?,
        };
        let (sink, restored) = recover_sink::<S>(sink, latest).await?;
        let started = Instant::now();
        let parallelism = self.options.parallelism;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (sink_tx, sink_rx) = mpsc::channel(self.options.sink_capacity.max(1));
        let (sink_events_tx, sink_events_rx) = mpsc::unbounded_channel();
        let (commits_tx, commits_rx) = mpsc::unbounded_channel();
        let (calls_tx, calls_rx) = mpsc::unbounded_channel();
        let transactional = sink.is_transactional();

        let sink_stats = Arc::clone(&self.stats);
        let channels = SinkChannels {
            messages: sink_rx,
            events: sink_events_tx,
            commits: commits_rx,
        };
        let sink_thread = rt::spawn_worker(
            "sink".into(),
            run_sink(sink, channels, sink_stats).instrument(info_span!("sink")),
        )?;

        // one clock for all readers (pacing, a source-wide stop), with the stop a state kept
        let event_time = self
            .source
            .event_time()
            .filter(|o| o.is_active())
            .map(|o| Arc::new(EventTimeClock::new(o)));
        if let (Some(clock), Some(cp)) = (&event_time, &restored.checkpoint) {
            clock.restore_stop(cp.stop_timestamp);
        }
        if event_time.is_none() {
            self.stats.event_time.clear();
        }
        if let Some(clock) = &event_time {
            // a speed changed while the session's run before this one went on (POST /control)
            // carries over, as the throttle's limits do
            if let Some(before) = self.stats.event_time.set(Arc::clone(clock)) {
                if before.speed() != before.options().speed {
                    clock.set_speed(before.speed());
                }
            }
        }
        let _ = (self.stats.bounded).set(self.source.boundedness() == super::source::Boundedness::Bounded);
        let (rate, bytes_rate) = self.source.rate_limits();
        self.stats.throttle.configure(rate, bytes_rate);
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
                event_time: event_time.clone(),
                throttle: Arc::clone(&self.stats.throttle),
            })?;
            let driver = ReaderDriver {
                index,
                events: events_tx.clone(),
                sink: sink_tx.clone(),
                stats: Arc::clone(&self.stats),
            };
            let task = crate::sim::spawn(driver.run(reader, rx).instrument(info_span!("reader", reader = index)));
            reader_aborts.push(task.abort_handle());
            // a panicking reader must fail the job, not leave the coordinator waiting for it
            let panics = events_tx.clone();
            reader_watchers.push(crate::sim::spawn(async move {
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
        // a transactional job keeps its splits' assignments, for its fallback checkpoints (see
        // `Coordinator::fallback_checkpoint`)
        if transactional {
            ctx.record_assignments();
        }
        let mut restored_finished = Vec::new();
        let mut restored_end_of_input = false;
        let mut restored_history = Vec::new();
        let next_checkpoint_id = restored.next_checkpoint_id;
        let last_committed = restored.checkpoint.clone().map(|mut cp| {
            cp.previous = None;
            cp
        });
        let mut enumerator = match restored.checkpoint {
            Some(cp) => {
                info!(checkpoint = cp.checkpoint_id, completed_at = %cp.completed_at, splits = cp.splits.len(), "restoring from the last checkpoint");
                restored_end_of_input = cp.end_of_input;
                restored_history = cp.history;
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
        self.stats.running.store(true, Ordering::Relaxed);

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
            restored_history,
            commits: transactional.then_some(commits_tx),
            last_committed,
            final_due: false,
            source_settings: self.source.settings_fingerprint(),
            sink_settings,
            instance: self.options.instance,
            event_time,
            releasing: Vec::new(),
        };
        let outcome = coordinator
            .run(events_rx, calls_rx, self.stop.clone(), self.handovers, &self.options)
            .await;
        self.stats.running.store(false, Ordering::Relaxed);
        drop(events_tx);
        // its readers hold nothing from here on (what other processes see of it: their fronts)
        if let Some(clock) = self.stats.event_time.get() {
            clock.close();
        }
        if outcome.is_err() {
            for task in &reader_aborts {
                task.abort();
            }
        }
        let Coordinator {
            sink,
            commits,
            mut enumerator,
            last_splits,
            ctx,
            ..
        } = coordinator;
        // the sink ends when its channels close: a transactional sink waiting for the go to
        // commit (the job failed before the state file was written) hears there will be none
        drop(sink);
        drop(commits);
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
        if !sink_thread.wait().await {
            warn!("the sink thread ended abnormally");
        }
        let stopped = outcome?;
        if !stopped {
            // the whole input read and written: the expected total is what it held
            self.stats.settle_expected();
        }
        Ok(JobReport {
            records_emitted: self.stats.records_emitted.load(Ordering::Relaxed),
            records_written: self.stats.records_written.load(Ordering::Relaxed),
            records_filtered: self.stats.records_filtered.load(Ordering::Relaxed),
            records_diverted: self.stats.records_diverted.load(Ordering::Relaxed),
            records_skipped: self.stats.records_skipped.load(Ordering::Relaxed),
            records_expected: self.stats.expected(),
            checkpoints: self.stats.checkpoints_completed.load(Ordering::Relaxed),
            splits: last_splits,
            stopped,
            elapsed: started.elapsed(),
        })
    }
}
