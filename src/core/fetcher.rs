//! Split fetchers on OS threads and their manager (Flink's `SplitFetcher` and
//! `SplitFetcherManager`): each fetcher drives one blocking [`SplitReader`] and puts its batches
//! into the reader's bounded [`ElementQueue`]. (Under a simulation, a fetcher is a task: see
//! `rt`.)

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tracing::{debug, error, info_span, Instrument};

use super::queue::ElementQueue;
use super::rt::{self, CatchUnwind, Worker};
use super::sim;
use super::split::{FinishReason, SourceSplit, SplitId};
use super::split_reader::{RecordsWithSplitIds, SplitReader, SplitsChange, WakeUpHandle};
use crate::error::{Error, Result};

/// How splits map to fetcher threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FetcherMode {
    /// One fetcher (one split reader, one Kafka consumer) for all splits of a reader.
    #[default]
    Single,
    /// One fetcher per split; a fetcher ends when its split finishes.
    PerSplit,
}

/// Counters shared by a reader's fetchers and the reader, to observe the hand-off.
#[derive(Debug, Default)]
pub struct FetchStats {
    /// Non-empty batches returned by split readers.
    pub batches_fetched: AtomicU64,
    /// The most batches ever fetched but not yet taken from the queue by the reader.
    pub max_batches_in_flight: AtomicU64,
    /// Records fetched.
    pub records_fetched: AtomicU64,
    /// Fetched batches dropped before reaching the queue (all their splits were removed).
    pub batches_dropped: AtomicU64,
    /// Splits this reader finished, by [`FinishReason`] (indexed as [`FinishReason::ALL`]).
    pub splits_finished: [AtomicU64; 6],
    /// Its splits as `GET /status` shows them.
    pub splits: super::status::SplitBoard,
    /// Offsets of its finished splits that no record came from (past an end-of-stream record,
    /// past the source-wide stop, of a removed split): [`super::JobStats::expected`] takes them
    /// off the assigned total.
    pub offsets_unread: AtomicU64,
}

impl FetchStats {
    /// Count a finished split.
    pub fn split_finished(&self, reason: FinishReason) {
        self.splits_finished[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Splits finished for `reason`.
    pub fn finished(&self, reason: FinishReason) -> u64 {
        self.splits_finished[reason as usize].load(Ordering::Relaxed)
    }
}

type Batch<R> = RecordsWithSplitIds<<R as SplitReader>::Element>;

enum FetcherTask<S> {
    Change(SplitsChange<S>),
    PauseResume(Vec<SplitId>, Vec<SplitId>),
    Shutdown,
}

struct FetcherHandle<S> {
    tasks: UnboundedSender<FetcherTask<S>>,
    /// Raised to interrupt this fetcher's waiting `put`.
    put_wake: Arc<AtomicBool>,
    fetch_wake: Option<WakeUpHandle>,
    thread: Option<Worker>,
    splits: HashSet<SplitId>,
}

impl<S> FetcherHandle<S> {
    fn send(&self, task: FetcherTask<S>) -> bool {
        let sent = self.tasks.send(task).is_ok();
        if let Some(wake) = &self.fetch_wake {
            wake();
        }
        sent
    }
}

/// Creates split readers for new fetchers, given how many splits the new fetcher starts with (a
/// sizing hint: a reader may share a memory budget among them, as the Kafka reader shares its
/// prefetch budget among its partitions).
pub type SplitReaderFactory<R> = Box<dyn Fn(usize) -> Result<R> + Send>;

/// Starts fetchers, routes split changes to them, and collects their failures.
pub struct SplitFetcherManager<R: SplitReader> {
    factory: SplitReaderFactory<R>,
    mode: FetcherMode,
    queue: Arc<ElementQueue<Batch<R>>>,
    // ordered maps: the order fetchers are told things in is the same in every run (a seeded
    // simulation replays exactly)
    fetchers: BTreeMap<usize, FetcherHandle<R::Split>>,
    split_fetcher: BTreeMap<SplitId, usize>,
    next_fetcher: usize,
    error: Arc<Mutex<Option<Error>>>,
    stats: Arc<FetchStats>,
    reader_index: usize,
}

impl<R: SplitReader> SplitFetcherManager<R> {
    /// Fetchers for reader `reader_index`, running split readers made by `factory`, handing
    /// batches to `queue`.
    pub fn new(
        factory: SplitReaderFactory<R>,
        mode: FetcherMode,
        queue: Arc<ElementQueue<Batch<R>>>,
        stats: Arc<FetchStats>,
        reader_index: usize,
    ) -> Self {
        SplitFetcherManager {
            factory,
            mode,
            queue,
            fetchers: BTreeMap::new(),
            split_fetcher: BTreeMap::new(),
            next_fetcher: 0,
            error: Arc::new(Mutex::new(None)),
            stats,
            reader_index,
        }
    }

    /// The first failure of any fetcher, once.
    pub fn check_errors(&self) -> Result<()> {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        match slot.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hand new splits to fetchers, starting fetchers as the mode requires.
    pub fn add_splits(&mut self, splits: Vec<R::Split>) -> Result<()> {
        self.reap_finished_fetchers();
        match self.mode {
            FetcherMode::Single => {
                let id = match self.fetchers.keys().next() {
                    Some(id) => *id,
                    None => self.start_fetcher(splits.len())?,
                };
                self.send_splits(id, splits);
            }
            FetcherMode::PerSplit => {
                for split in splits {
                    let id = self.start_fetcher(1)?;
                    self.send_splits(id, vec![split]);
                }
            }
        }
        Ok(())
    }

    fn send_splits(&mut self, fetcher: usize, splits: Vec<R::Split>) {
        let Some(handle) = self.fetchers.get_mut(&fetcher) else {
            return;
        };
        for s in &splits {
            let id = s.split_id();
            handle.splits.insert(id.clone());
            self.split_fetcher.insert(id, fetcher);
        }
        handle.send(FetcherTask::Change(SplitsChange::Add(splits)));
    }

    /// Stop fetching these splits; records of theirs still queued are the reader's to drop.
    pub fn remove_splits(&mut self, ids: &[SplitId]) {
        let mut by_fetcher: BTreeMap<usize, Vec<SplitId>> = BTreeMap::new();
        for id in ids {
            if let Some(f) = self.split_fetcher.remove(id) {
                by_fetcher.entry(f).or_default().push(id.clone());
            }
        }
        for (f, ids) in by_fetcher {
            if let Some(handle) = self.fetchers.get_mut(&f) {
                for id in &ids {
                    handle.splits.remove(id);
                }
                handle.send(FetcherTask::Change(SplitsChange::Remove(ids)));
                // a fetcher blocked on a full queue must see the removal now
                self.queue.wake_up_putting(&handle.put_wake);
            }
        }
    }

    /// Forget a split that its fetcher reported finished.
    pub fn split_finished(&mut self, id: &SplitId) {
        if let Some(f) = self.split_fetcher.remove(id) {
            if let Some(handle) = self.fetchers.get_mut(&f) {
                handle.splits.remove(id);
            }
        }
    }

    /// Pause and resume splits on the fetchers that own them.
    pub fn pause_or_resume(&mut self, pause: &[SplitId], resume: &[SplitId]) {
        for handle in self.fetchers.values() {
            let p: Vec<_> = pause.iter().filter(|s| handle.splits.contains(*s)).cloned().collect();
            let r: Vec<_> = resume.iter().filter(|s| handle.splits.contains(*s)).cloned().collect();
            if !p.is_empty() || !r.is_empty() {
                handle.send(FetcherTask::PauseResume(p, r));
            }
        }
    }

    /// The number of live fetcher threads.
    pub fn fetcher_count(&self) -> usize {
        self.fetchers
            .values()
            .filter(|h| h.thread.as_ref().is_some_and(|t| !t.is_finished()))
            .count()
    }

    fn reap_finished_fetchers(&mut self) {
        self.fetchers.retain(|_, h| {
            let done = h.thread.as_ref().is_none_or(|t| t.is_finished());
            if done {
                if let Some(t) = h.thread.take() {
                    t.join();
                }
            }
            !done
        });
    }

    fn start_fetcher(&mut self, splits: usize) -> Result<usize> {
        let id = self.next_fetcher;
        self.next_fetcher += 1;
        let reader = (self.factory)(splits)?;
        let fetch_wake = reader.wake_up_handle();
        let (tx, rx) = mpsc::unbounded_channel();
        let put_wake = Arc::new(AtomicBool::new(false));
        let fetcher = SplitFetcher {
            reader,
            tasks: rx,
            queue: Arc::clone(&self.queue),
            put_wake: Arc::clone(&put_wake),
            stats: Arc::clone(&self.stats),
            exit_when_empty: self.mode == FetcherMode::PerSplit,
        };
        let error = Arc::clone(&self.error);
        let queue = Arc::clone(&self.queue);
        let reader_index = self.reader_index;
        let span = info_span!("fetcher", reader = reader_index, fetcher = id);
        let work = async move {
            let failure = match CatchUnwind(Box::pin(fetcher.run())).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(panic) => Some(Error::runtime(
                    format!("fetcher {id} of reader {reader_index}"),
                    panic_message(&panic),
                )),
            };
            if let Some(e) = failure {
                error!(error = %e, "fetcher failed");
                let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
            // the reader re-checks its splits and errors when a fetcher ends
            queue.notify_available();
        };
        let thread = rt::spawn_worker(format!("fetcher-{reader_index}-{id}"), work.instrument(span))?;
        self.fetchers.insert(
            id,
            FetcherHandle {
                tasks: tx,
                put_wake,
                fetch_wake,
                thread: Some(thread),
                splits: HashSet::new(),
            },
        );
        Ok(id)
    }

    /// Shut every fetcher down and wait for the threads.
    pub fn close(&mut self) {
        self.signal_shutdown();
        for (_, mut h) in std::mem::take(&mut self.fetchers) {
            if let Some(t) = h.thread.take() {
                t.join();
            }
        }
    }

    fn signal_shutdown(&self) {
        for h in self.fetchers.values() {
            h.send(FetcherTask::Shutdown);
            self.queue.wake_up_putting(&h.put_wake);
        }
    }
}

impl<R: SplitReader> Drop for SplitFetcherManager<R> {
    fn drop(&mut self) {
        // Without a join: a dropped reader (a failed job) must not wait on a blocked fetch.
        self.signal_shutdown();
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

/// One fetcher thread's loop (Flink's `SplitFetcher.runOnce`): apply tasks, fetch, hand over.
struct SplitFetcher<R: SplitReader> {
    reader: R,
    tasks: UnboundedReceiver<FetcherTask<R::Split>>,
    queue: Arc<ElementQueue<Batch<R>>>,
    put_wake: Arc<AtomicBool>,
    stats: Arc<FetchStats>,
    exit_when_empty: bool,
}

impl<R: SplitReader> SplitFetcher<R> {
    async fn run(mut self) -> Result<()> {
        let mut assigned: HashSet<SplitId> = HashSet::new();
        let mut pending: Option<Batch<R>> = None;
        let mut had_splits = false;
        loop {
            // Apply every waiting task; block for one when there is nothing else to do.
            loop {
                let idle = assigned.is_empty() && pending.is_none();
                if idle && had_splits && self.exit_when_empty {
                    debug!("fetcher has no more splits; exiting");
                    self.reader.close()?;
                    return Ok(());
                }
                let task = if idle {
                    match self.tasks.recv().await {
                        Some(t) => t,
                        None => return self.reader.close(),
                    }
                } else {
                    match self.tasks.try_recv() {
                        Ok(t) => t,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => return self.reader.close(),
                    }
                };
                sim::point("fetcher.task").await;
                match task {
                    FetcherTask::Change(SplitsChange::Add(splits)) => {
                        had_splits = true;
                        assigned.extend(splits.iter().map(|s| s.split_id()));
                        self.reader.handle_splits_changes(SplitsChange::Add(splits))?;
                    }
                    FetcherTask::Change(SplitsChange::Remove(ids)) => {
                        for id in &ids {
                            assigned.remove(id);
                        }
                        if let Some(batch) = pending.as_mut() {
                            batch.records.retain(|(id, _)| !ids.contains(id));
                            batch.finished.retain(|(id, _)| !ids.contains(id));
                            if batch.is_empty() {
                                pending = None;
                                self.stats.batches_dropped.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        self.reader.handle_splits_changes(SplitsChange::Remove(ids))?;
                    }
                    FetcherTask::PauseResume(pause, resume) => {
                        self.reader.pause_or_resume_splits(&pause, &resume)?;
                    }
                    FetcherTask::Shutdown => return self.reader.close(),
                }
            }

            if let Some(batch) = pending.take() {
                sim::point("fetcher.put").await;
                if let Err(back) = self.queue.put(batch, &self.put_wake).await {
                    pending = Some(back); // woken: look at the tasks, then try again
                }
                continue;
            }

            sim::point("fetcher.fetch").await;
            let batch = self.reader.fetch()?;
            for (id, _) in &batch.finished {
                assigned.remove(id);
            }
            if !batch.is_empty() {
                let fetched = self.stats.batches_fetched.fetch_add(1, Ordering::Relaxed) + 1;
                self.stats
                    .records_fetched
                    .fetch_add(batch.record_count() as u64, Ordering::Relaxed);
                let gone = self.queue.popped() + self.stats.batches_dropped.load(Ordering::Relaxed);
                let in_flight = fetched.saturating_sub(gone);
                self.stats.max_batches_in_flight.fetch_max(in_flight, Ordering::Relaxed);
                pending = Some(batch);
            } else if sim::active() {
                // nothing there: wait a moment of virtual time, as a real fetch waits for records
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    }
}
