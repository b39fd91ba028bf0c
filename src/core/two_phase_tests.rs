//! End-to-end tests of the checkpoint protocol's two phases on the number-sequence source: a
//! transactional sink whose commit never happens resumes from the checkpoint before, and a job
//! stopped while splits are handed out keeps every split for its restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::job::Job;
use super::job_options::JobOptions;
use super::number_sequence::NumberSequenceSource;
use super::sink::{CollectSink, Sink, SinkState};
use super::state::StateStore;
use crate::error::{Error, Result};

/// What a transactional store (a Kafka topic and its commit marker) holds across "processes".
#[derive(Default)]
struct Committed {
    records: Vec<u64>,
    /// The checkpoint whose transaction committed last (the commit marker).
    marker: Option<u64>,
}

/// A sink whose records become visible only at commit, and whose commit of `fail_commit` (or of
/// the final checkpoint, if the job ends before it) fails, as a crash between the state file and
/// the commit would leave it.
struct TransactionalSink {
    store: Arc<Mutex<Committed>>,
    open: Vec<u64>,
    fail_commit: Option<u64>,
    /// The input ended: the next commit is the final checkpoint's.
    ended: bool,
    /// Checkpoint ids seen in the state file when `commit` ran.
    state: Option<std::path::PathBuf>,
    commits_after_state: Arc<Mutex<Vec<bool>>>,
}

impl Sink<u64> for TransactionalSink {
    fn write(&mut self, mut records: Vec<u64>) -> Result<()> {
        self.open.append(&mut records);
        Ok(())
    }

    fn prepare_commit(&mut self, checkpoint_id: u64) -> Result<Option<SinkState>> {
        Ok(Some(json!({ "transaction": checkpoint_id })))
    }

    fn is_transactional(&self) -> bool {
        true
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        if let Some(path) = &self.state {
            let written: Option<serde_json::Value> = super::state::read_state(path)?;
            let id = written.and_then(|s| s["checkpoint_id"].as_u64());
            self.commits_after_state.lock().unwrap().push(id == Some(checkpoint_id));
        }
        if self.fail_commit.is_some_and(|fail| checkpoint_id >= fail || self.ended) {
            return Err(Error::runtime("test sink", "the process died before the commit"));
        }
        let mut store = self.store.lock().unwrap();
        store.records.append(&mut self.open);
        store.marker = Some(checkpoint_id);
        Ok(())
    }

    fn end_of_input(&mut self) -> Result<()> {
        self.ended = true;
        Ok(())
    }

    fn recover(&mut self, last: Option<(u64, Option<&SinkState>)>) -> Result<bool> {
        self.open.clear(); // an open transaction is aborted
        let Some((_, Some(state))) = last else {
            return Ok(true);
        };
        Ok(self.store.lock().unwrap().marker == state["transaction"].as_u64())
    }
}

#[test]
fn a_transaction_that_never_committed_resumes_from_the_checkpoint_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let store = Arc::new(Mutex::new(Committed::default()));
    let order = Arc::new(Mutex::new(Vec::new()));
    let sink = |fail_commit| TransactionalSink {
        store: Arc::clone(&store),
        open: Vec::new(),
        fail_commit,
        ended: false,
        state: Some(path.clone()),
        commits_after_state: Arc::clone(&order),
    };
    let source = || {
        let mut s = NumberSequenceSource::new(0, 200_000, 2);
        s.batch_size = 500;
        s
    };
    let mut options = JobOptions::new("txn", 2);
    options.checkpoint_interval = Some(Duration::from_millis(5));
    let first = Job::new(source(), options.clone()).with_state(StateStore::open(&path).unwrap());
    let err = first
        .run_blocking(Box::new(sink(Some(3))))
        .expect_err("the commit of checkpoint 3 (or of the final one, if the job is quicker) fails");
    assert!(err.to_string().contains("before the commit"), "{err}");
    // the state file holds the checkpoint whose transaction never committed, and the one before
    // it (checkpoint 0, where nothing was read, before the first commit)
    let state: serde_json::Value = super::state::read_state(&path).unwrap().unwrap();
    let failed = state["checkpoint_id"].as_u64().expect("a checkpoint id");
    assert!((1..=3).contains(&failed), "{state:#}");
    assert_eq!(state["previous"]["checkpoint_id"], failed - 1);
    let committed = store.lock().unwrap().marker;
    assert_eq!(committed, (failed > 1).then(|| failed - 1));

    let second = Job::new(source(), options).with_state(StateStore::open(&path).unwrap());
    let report = second.run_blocking(Box::new(sink(None))).expect("resumes");
    assert!(!report.stopped);
    let mut all = store.lock().unwrap().records.clone();
    let len = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(len, all.len(), "a record was committed twice");
    assert_eq!(all, (0..200_000).collect::<Vec<_>>(), "a record is missing");
    assert!(
        order.lock().unwrap().iter().all(|after| *after),
        "every commit happened after its checkpoint was in the state file"
    );
}

#[test]
fn a_job_stopped_before_its_readers_got_splits_keeps_every_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    // Stopped from the start: the readers' split requests reach the enumerator after they were
    // told to stop, so every split it hands out must go back to it, into the final snapshot.
    let (_tx, stopped) = tokio::sync::watch::channel(true);
    let (sink, first) = CollectSink::new();
    let job = Job::new(NumberSequenceSource::new(0, 10_000, 4), JobOptions::new("stopped", 2))
        .with_state(StateStore::open(&path).unwrap())
        .with_stop_signal(stopped);
    let report = job.run_blocking(Box::new(sink)).expect("stops");
    assert!(report.stopped);

    let (sink, second) = CollectSink::new();
    let job = Job::new(NumberSequenceSource::new(0, 10_000, 4), JobOptions::new("stopped", 2))
        .with_state(StateStore::open(&path).unwrap());
    job.run_blocking(Box::new(sink)).expect("resumes");
    let mut all: Vec<u64> = first
        .lock()
        .unwrap()
        .iter()
        .chain(second.lock().unwrap().iter())
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..10_000).collect::<Vec<_>>(),
        "every number once, none lost with a split"
    );
}

/// A sink that says what it is (its fingerprint), as the file and Kafka sinks do.
struct NamedSink {
    inner: CollectSink<u64>,
    name: serde_json::Value,
}

impl Sink<u64> for NamedSink {
    fn write(&mut self, records: Vec<u64>) -> Result<()> {
        self.inner.write(records)
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> Result<Option<SinkState>> {
        Ok(None)
    }
    fn fingerprint(&self) -> Option<SinkState> {
        Some(self.name.clone())
    }
}

#[test]
fn a_state_is_resumed_only_by_the_sink_and_instance_that_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numbers.state");
    let exactly_once = json!({ "type": "kafka", "topic": "out", "delivery": "exactly_once" });
    let run = |name: serde_json::Value, instance: super::Instance| {
        let (inner, out) = CollectSink::new();
        // stopped at once: a state that is not at its end
        let (_tx, stop) = tokio::sync::watch::channel(true);
        let mut options = JobOptions::new("pinned", 2);
        options.instance = instance;
        let result = Job::new(NumberSequenceSource::new(0, 1_000, 2), options)
            .with_state(StateStore::open(&path).unwrap())
            .with_stop_signal(stop)
            .run_blocking(Box::new(NamedSink { inner, name }));
        (result, out)
    };
    let one = super::Instance { index: 0, count: 1 };
    run(exactly_once.clone(), one).0.expect("the first run stops");
    let written = std::fs::read(&path).unwrap();

    let at_least_once = json!({ "type": "kafka", "topic": "out", "delivery": "at_least_once" });
    let file = json!({ "type": "file", "path": "out.jsonl" });
    let cases = [
        (at_least_once, one, "sink.delivery"),
        (file, one, "sink.type"),
        (
            exactly_once.clone(),
            super::Instance { index: 0, count: 2 },
            "job.instance",
        ),
    ];
    for (sink, instance, key) in cases {
        let (result, out) = run(sink.clone(), instance);
        let err = result.expect_err("a state written by another sink or instance is refused");
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(err.to_string().contains(key), "{key}: {err}");
        assert!(out.lock().unwrap().is_empty(), "nothing is written");
        assert_eq!(std::fs::read(&path).unwrap(), written, "the state is untouched");
    }
    // the same sink and instance resume
    run(exactly_once, one).0.expect("the writer itself resumes");
}
