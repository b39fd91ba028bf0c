//! End-to-end tests of the runtime on the number-sequence source: exact output, end-of-stream
//! evaluation, backpressure, and checkpoint/restore across parallelism changes.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::checkpoint::{Checkpoint, JobReport};
use super::job::Job;
use super::job_options::JobOptions;
use super::number_sequence::{NumberSequenceSource, NumberSequenceSplit};
use super::sink::{CollectSink, Sink};
use super::split::{FinishReason, SplitSnapshot};
use super::state::StateStore;
use super::{EofOnRecordEvaluator, FetcherMode};
use crate::error::{Error, Result};

fn run(
    source: NumberSequenceSource,
    parallelism: usize,
    sink: Box<dyn Sink<u64>>,
    state: Option<StateStore>,
    interval: Option<Duration>,
) -> Result<JobReport<NumberSequenceSplit>> {
    let mut options = JobOptions::new("test", parallelism);
    options.checkpoint_interval = interval;
    let mut job = Job::new(source, options);
    if let Some(s) = state {
        job = job.with_state(s);
    }
    job.run_blocking(sink)
}

/// Output grouped by split range: every value must appear in the order of its split.
fn assert_in_order_per_split(values: &[u64], splits: &[(u64, u64)]) {
    for (start, end) in splits {
        let mine: Vec<u64> = values.iter().copied().filter(|v| v >= start && v < end).collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "split {start}..{end} out of order"
        );
    }
}

#[test]
fn exact_output_for_one_or_many_splits_and_idle_readers() {
    for (count, splits, parallelism) in [(10_000u64, 1usize, 1usize), (10_000, 4, 2), (10_000, 3, 5), (5, 5, 8)] {
        let (sink, out) = CollectSink::new();
        let report = run(
            NumberSequenceSource::new(0, count, splits),
            parallelism,
            Box::new(sink),
            None,
            None,
        )
        .expect("job runs");
        let mut values = out.lock().unwrap().clone();
        let ranges: Vec<(u64, u64)> = super::number_sequence::split_range(0, count, splits)
            .iter()
            .map(|s| (s.next_offset, s.end))
            .collect();
        assert_in_order_per_split(&values, &ranges);
        values.sort_unstable();
        assert_eq!(
            values,
            (0..count).collect::<Vec<_>>(),
            "count {count} splits {splits} p {parallelism}"
        );
        assert_eq!(report.records_written, count);
        assert!(report
            .splits
            .iter()
            .all(|s| s.finished.map(|f| f.reason) == Some(FinishReason::StoppingOffset)));
        assert!(!report.stopped);
    }
}

#[test]
fn an_empty_source_ends_at_once() {
    let (sink, out) = CollectSink::new();
    let report = run(NumberSequenceSource::new(7, 7, 4), 3, Box::new(sink), None, None).expect("job runs");
    assert!(out.lock().unwrap().is_empty());
    assert!(report.splits.is_empty());
}

#[test]
fn per_split_fetchers_give_the_same_output() {
    let (sink, out) = CollectSink::new();
    let mut source = NumberSequenceSource::new(0, 50_000, 6);
    source.fetcher_mode = FetcherMode::PerSplit;
    source.batch_size = 333;
    run(source, 2, Box::new(sink), None, None).expect("job runs");
    let mut values = out.lock().unwrap().clone();
    values.sort_unstable();
    assert_eq!(values, (0..50_000).collect::<Vec<_>>());
}

#[test]
fn eof_evaluator_stops_two_of_four_splits_before_the_marker() {
    // splits: 0..250, 250..500, 500..750, 750..1000; markers at 100 and 600
    let eof: Arc<dyn EofOnRecordEvaluator<u64>> = Arc::new(|v: &u64| *v == 100 || *v == 600);
    let mut source = NumberSequenceSource::new(0, 1000, 4);
    source.eof = Some(eof);
    source.batch_size = 16;
    let (sink, out) = CollectSink::new();
    let report = run(source, 2, Box::new(sink), None, None).expect("job runs");
    let mut values = out.lock().unwrap().clone();
    values.sort_unstable();
    let expected: Vec<u64> = (0..100).chain(250..500).chain(500..600).chain(750..1000).collect();
    assert_eq!(values, expected);
    let reasons: BTreeMap<String, (FinishReason, Option<i64>)> = report
        .splits
        .iter()
        .map(|s| (s.split.id.clone(), s.finished.map(|f| (f.reason, f.at)).unwrap()))
        .collect();
    assert_eq!(reasons["0"], (FinishReason::EofRecord, Some(100)));
    assert_eq!(reasons["1"].0, FinishReason::StoppingOffset);
    assert_eq!(reasons["2"], (FinishReason::EofRecord, Some(600)));
    assert_eq!(reasons["3"].0, FinishReason::StoppingOffset);
}

/// A sink that takes its time, so the queue fills up behind it.
struct SlowSink {
    inner: CollectSink<u64>,
    delay: Duration,
}

impl Sink<u64> for SlowSink {
    fn write(&mut self, records: Vec<u64>) -> Result<()> {
        std::thread::sleep(self.delay);
        self.inner.write(records)
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
}

#[test]
fn backpressure_bounds_the_batches_in_flight() {
    let (inner, out) = CollectSink::new();
    let mut source = NumberSequenceSource::new(0, 20_000, 4);
    source.batch_size = 50;
    source.queue_capacity = 2;
    source.fetcher_mode = FetcherMode::PerSplit; // up to 2 fetchers per reader at parallelism 2
    let mut options = JobOptions::new("bp", 2);
    options.sink_capacity = 1;
    let job = Job::new(source, options);
    let stats = job.stats();
    let sink = SlowSink {
        inner,
        delay: Duration::from_micros(300),
    };
    job.run_blocking(Box::new(sink)).expect("job runs");
    assert_eq!(out.lock().unwrap().len(), 20_000);
    let readers = stats.readers.lock().unwrap();
    for r in readers.iter() {
        let max = r.max_batches_in_flight.load(Ordering::Relaxed);
        let fetched = r.batches_fetched.load(Ordering::Relaxed);
        // a reader's queue holds 2 batches and each of its (at most 2 live) fetchers one more
        assert!(max <= 2 + 2, "{max} batches in flight, bound is 4");
        assert!(max >= 2, "the slow sink should have filled the queue (max {max})");
        assert!(fetched >= 100, "{fetched} batches");
    }
}

/// Fails like a crash once it has seen `after_barriers` checkpoints and `after_records` records.
struct CrashingSink {
    inner: CollectSink<u64>,
    records: usize,
    barriers: usize,
    after_records: usize,
    after_barriers: usize,
}

impl Sink<u64> for CrashingSink {
    fn write(&mut self, records: Vec<u64>) -> Result<()> {
        if self.records >= self.after_records && self.barriers >= self.after_barriers {
            return Err(Error::runtime("test sink", "simulated crash"));
        }
        self.records += records.len();
        std::thread::sleep(Duration::from_micros(200));
        self.inner.write(records)
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<serde_json::Value>> {
        self.barriers += 1;
        Ok(None)
    }
}

type NumberCheckpoint = Checkpoint<Vec<NumberSequenceSplit>, NumberSequenceSplit>;

/// Crash mid-run at parallelism `p1`, restart at `p2`: every number is emitted, and the only
/// duplicates are numbers at or after their split's checkpointed position.
fn crash_and_restore(p1: usize, p2: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let count = 40_000u64;
    let make_source = || {
        let mut s = NumberSequenceSource::new(0, count, 4);
        s.batch_size = 100;
        s
    };

    let (inner, first) = CollectSink::new();
    let sink = CrashingSink {
        inner,
        records: 0,
        barriers: 0,
        after_records: 8_000,
        after_barriers: 2,
    };
    let err = run(
        make_source(),
        p1,
        Box::new(sink),
        Some(StateStore::open(&path).unwrap()),
        Some(Duration::from_millis(5)),
    )
    .expect_err("the sink crashes the job");
    assert!(err.to_string().contains("simulated crash"), "{err}");

    let checkpoint: NumberCheckpoint = crate::state::read_state(&path)
        .unwrap()
        .expect("a checkpoint was written");
    let mut resume_at: Vec<(u64, u64, u64)> = checkpoint
        .splits
        .iter()
        .map(|s: &SplitSnapshot<NumberSequenceSplit>| (s.split.next_offset, s.split.end, 0))
        .chain(checkpoint.enumerator.iter().map(|s| (s.next_offset, s.end, 0)))
        .collect();
    resume_at.sort_unstable();

    let (sink, second) = CollectSink::new();
    let report = run(
        make_source(),
        p2,
        Box::new(sink),
        Some(StateStore::open(&path).unwrap()),
        Some(Duration::from_millis(5)),
    )
    .expect("the restarted job finishes");
    assert!(!report.stopped);

    let first = first.lock().unwrap().clone();
    let second = second.lock().unwrap().clone();
    let mut seen = vec![0u32; count as usize];
    for v in first.iter().chain(second.iter()) {
        seen[*v as usize] += 1;
    }
    assert!(seen.iter().all(|c| *c >= 1), "a number was lost");
    // a duplicate is a number the first run emitted after its split's checkpointed position
    let resumed = |v: u64| resume_at.iter().any(|(next, end, _)| v >= *next && v < *end);
    let duplicates: Vec<u64> = (0..count).filter(|v| seen[*v as usize] > 1).collect();
    assert!(duplicates.iter().all(|v| seen[*v as usize] == 2 && resumed(*v)));
    assert!(
        second.iter().all(|v| resumed(*v)),
        "the restart re-read before a checkpointed position"
    );
    assert!(first.len() >= 8_000 && first.len() < count as usize);
}

#[test]
fn crash_and_restore_at_the_same_parallelism() {
    crash_and_restore(2, 2);
}

#[test]
fn restore_from_parallelism_1_to_4() {
    crash_and_restore(1, 4);
}

#[test]
fn restore_from_parallelism_4_to_1() {
    crash_and_restore(4, 1);
}

/// Stops the job through the stop signal once it has written `after` records.
struct StoppingSink {
    inner: CollectSink<u64>,
    written: usize,
    after: usize,
    stop: Arc<Mutex<Option<tokio::sync::watch::Sender<bool>>>>,
}

impl Sink<u64> for StoppingSink {
    fn write(&mut self, records: Vec<u64>) -> Result<()> {
        self.written += records.len();
        if self.written >= self.after {
            if let Some(tx) = self.stop.lock().unwrap().take() {
                let _ = tx.send(true);
            }
        }
        self.inner.write(records)
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
}

#[test]
fn a_graceful_stop_resumes_with_no_gap_and_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (inner, first) = CollectSink::new();
    let sink = StoppingSink {
        inner,
        written: 0,
        after: 5_000,
        stop: Arc::new(Mutex::new(Some(tx))),
    };
    let mut source = NumberSequenceSource::new(0, 100_000, 3);
    source.batch_size = 100;
    let job = Job::new(source, JobOptions::new("test", 3))
        .with_state(StateStore::open(&path).unwrap())
        .with_stop_signal(rx);
    let report = job.run_blocking(Box::new(sink)).expect("stops cleanly");
    assert!(report.stopped);
    let first = first.lock().unwrap().clone();
    assert!(first.len() >= 5_000 && first.len() < 100_000, "{}", first.len());

    let (sink, second) = CollectSink::new();
    let mut source = NumberSequenceSource::new(0, 100_000, 3);
    source.batch_size = 100;
    run(source, 2, Box::new(sink), Some(StateStore::open(&path).unwrap()), None).expect("resumes");
    let mut all: Vec<u64> = first.iter().chain(second.lock().unwrap().iter()).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..100_000).collect::<Vec<_>>());
}

#[test]
fn a_restart_after_the_end_emits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let (sink, _) = CollectSink::new();
    run(
        NumberSequenceSource::new(0, 1_000, 2),
        2,
        Box::new(sink),
        Some(StateStore::open(&path).unwrap()),
        None,
    )
    .unwrap();
    let (sink, again) = CollectSink::new();
    let report = run(
        NumberSequenceSource::new(0, 1_000, 2),
        2,
        Box::new(sink),
        Some(StateStore::open(&path).unwrap()),
        None,
    )
    .unwrap();
    assert!(again.lock().unwrap().is_empty());
    assert_eq!(report.splits.len(), 2);
}

#[test]
fn a_corrupt_state_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    std::fs::write(&path, b"{\"format\":\"tidegate-state\",\"version\":1,\"len").unwrap();
    let before = std::fs::read(&path).unwrap();
    let (sink, out) = CollectSink::new();
    let err = run(
        NumberSequenceSource::new(0, 10, 1),
        1,
        Box::new(sink),
        Some(StateStore::open(&path).unwrap()),
        None,
    )
    .expect_err("refused");
    assert_eq!(err.exit_code(), 3, "{err}");
    assert!(out.lock().unwrap().is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// Counts `end_of_input` calls.
struct EndCountingSink {
    ends: Arc<std::sync::atomic::AtomicUsize>,
}

impl Sink<u64> for EndCountingSink {
    fn write(&mut self, _records: Vec<u64>) -> Result<()> {
        Ok(())
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.ends.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn end_of_input_reaches_the_sink_once_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let ends = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..2 {
        let sink = EndCountingSink {
            ends: Arc::clone(&ends),
        };
        run(
            NumberSequenceSource::new(0, 100, 2),
            2,
            Box::new(sink),
            Some(StateStore::open(&path).unwrap()),
            None,
        )
        .unwrap();
    }
    assert_eq!(ends.load(Ordering::SeqCst), 1);
    let cp: NumberCheckpoint = crate::state::read_state(&path).unwrap().unwrap();
    assert!(cp.end_of_input);
}

#[test]
fn a_stopped_job_does_not_signal_end_of_input() {
    let ends = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::watch::channel(true); // stop at once
    let sink = EndCountingSink {
        ends: Arc::clone(&ends),
    };
    let job = Job::new(NumberSequenceSource::new(0, 1_000_000, 2), JobOptions::new("stop", 2)).with_stop_signal(rx);
    let report = job.run_blocking(Box::new(sink)).unwrap();
    drop(tx);
    assert!(report.stopped);
    assert_eq!(ends.load(Ordering::SeqCst), 0);
}

/// The limits a session's job starts with are its config's; a change made while it runs (`POST
/// /control`) carries over to the session's next run (a group member's, after a rebalance)
/// rather than being reset to the config's.
#[test]
fn limits_changed_while_a_session_runs_carry_over_to_its_next_run() {
    let stats = Arc::new(super::JobStats::default());
    let source = || {
        let mut s = NumberSequenceSource::new(0, 10, 1);
        s.rate_limits = (Some(1e9), None);
        s
    };
    let first = Job::new(source(), JobOptions::new("test", 1)).with_stats(Arc::clone(&stats));
    first.run_blocking(Box::new(CollectSink::new().0)).expect("first run");
    assert_eq!(stats.throttle.limits(), (Some(1e9), None), "the config's limits");
    // POST /control, between two runs of the session
    stats.throttle.set_limits(Some(5e8), Some(1e9));
    let second = Job::new(source(), JobOptions::new("test", 1)).with_stats(Arc::clone(&stats));
    second.run_blocking(Box::new(CollectSink::new().0)).expect("second run");
    assert_eq!(
        stats.throttle.limits(),
        (Some(5e8), Some(1e9)),
        "the change carried over"
    );
}

/// A sink that notes whether the job said it was running at each write (what `/ready` reads).
struct RunningProbe {
    stats: Arc<super::JobStats>,
    seen: Arc<Mutex<Vec<bool>>>,
}

impl Sink<u64> for RunningProbe {
    fn write(&mut self, _records: Vec<u64>) -> Result<()> {
        let running = self.stats.running.load(Ordering::Relaxed);
        self.seen.lock().unwrap().push(running);
        Ok(())
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
}

#[test]
fn a_job_is_running_while_it_writes_and_not_before_or_after() {
    let stats = Arc::new(super::JobStats::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    assert!(!stats.running.load(Ordering::Relaxed), "before the run");
    let sink = RunningProbe {
        stats: Arc::clone(&stats),
        seen: Arc::clone(&seen),
    };
    Job::new(NumberSequenceSource::new(0, 100, 2), JobOptions::new("test", 2))
        .with_stats(Arc::clone(&stats))
        .run_blocking(Box::new(sink))
        .expect("run");
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty() && seen.iter().all(|r| *r), "{seen:?}");
    assert!(!stats.running.load(Ordering::Relaxed), "after the run");
}
