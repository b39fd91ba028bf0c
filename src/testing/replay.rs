//! Replays of Kafka topics into memory for tests: the daemon's [`KafkaSource`] run to its end
//! into a collecting sink, bounded by the end of each partition or waiting for a marker, and
//! never for longer than a timeout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::job::{run_source, JobSummary};
use super::runtime::{block_on_own, own_runtime};
use crate::core::{CollectSink, JobOptions, StateStore};
use crate::error::{Error, Result};
use crate::kafka::offsets::StoppingOffsets;
use crate::kafka::{KafkaSource, KafkaSourceSettings, Subscription};
use crate::record::{Record, ValueFormat};

/// How long a replay may take by default ([`Replay::timeout`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A replay of Kafka topics into memory: a [`KafkaSource`] (the daemon's) run to its end into a
/// collecting sink.
///
/// Without an `until_*` method it reads each partition to the end it has when the replay starts.
/// With one, it waits for the end-of-stream record in every partition, however late it is
/// written; [`Replay::timeout`] bounds the wait, after which the replay is an error naming the
/// partitions still without one.
pub struct Replay {
    settings: KafkaSourceSettings,
    format: ValueFormat,
    eof: Option<Arc<dyn crate::core::EofOnRecordEvaluator<Record>>>,
    parallelism: usize,
    state: Option<PathBuf>,
    checkpoint_interval: Duration,
    timeout: Duration,
}

impl Replay {
    /// Read `topic` from its beginning to the end each partition has when the replay starts
    /// (the `until_*` methods wait for an end-of-stream record instead), values as bytes.
    pub fn topic(bootstrap: &str, topic: &str) -> Replay {
        let mut settings = KafkaSourceSettings::new(bootstrap, Subscription::Topics(vec![topic.to_string()]));
        settings.stopping = StoppingOffsets::Latest;
        Replay {
            settings,
            format: ValueFormat::Bytes,
            eof: None,
            parallelism: 1,
            state: None,
            checkpoint_interval: Duration::from_secs(1),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Decode values as JSON (the records' `decoded` value; `value.x` in expressions).
    pub fn json(mut self) -> Self {
        self.format = ValueFormat::Json;
        self
    }

    /// Decode values as UTF-8 text.
    pub fn string(mut self) -> Self {
        self.format = ValueFormat::String;
        self
    }

    /// Keep reading past the end each partition had at the start: only an end-of-stream record
    /// (or a closure) ends a partition, and without one only the [`Replay::timeout`] (an error).
    pub fn unbounded(mut self) -> Self {
        self.settings.stopping = StoppingOffsets::None;
        self
    }

    /// End each partition at its first record matching the CEL expression (the daemon's
    /// `source.eof`); that record is not collected. Reads past the end each partition had at the
    /// start: a marker written after the replay started is waited for, up to the timeout.
    pub fn until_eof(mut self, expression: &str) -> Result<Self> {
        let compiled =
            crate::expr::RecordExpression::compile(expression).map_err(|e| Error::config("source.eof", e))?;
        self.eof = Some(Arc::new(compiled));
        Ok(self.unbounded())
    }

    /// End each partition at its first record for which `end` is true; that record is not
    /// collected. Reads past the end each partition had at the start, as [`Replay::until_eof`].
    pub fn until(mut self, end: impl Fn(&Record) -> bool + Send + Sync + 'static) -> Self {
        self.eof = Some(Arc::new(end));
        self.unbounded()
    }

    /// Readers in parallel (default 1).
    pub fn parallelism(mut self, readers: usize) -> Self {
        self.parallelism = readers.max(1);
        self
    }

    /// Checkpoint to `path` (and resume from it), as the daemon's `checkpoint.path` does.
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state = Some(path.into());
        self
    }

    /// How often to checkpoint (default 1 s).
    pub fn checkpoint_interval(mut self, every: Duration) -> Self {
        self.checkpoint_interval = every;
        self
    }

    /// How long the replay may take (default 60 s). One that has not ended by then stops (with
    /// a final checkpoint, when it has a state file) and is an error naming the partitions that
    /// did not end.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Run the replay to its end and return the records, in the order the sink took them.
    /// Blocks the calling thread; safe within an async runtime, where
    /// [`Replay::collect_async`] is the better fit.
    pub fn collect(self) -> Result<Vec<Record>> {
        Ok(self.run()?.0)
    }

    /// Run the replay to its end: the records and how it ended. Blocks the calling thread (see
    /// [`Replay::collect`]).
    pub fn run(self) -> Result<(Vec<Record>, JobSummary)> {
        block_on_own(move || self.replay())
    }

    /// [`Replay::collect`], awaited (in a `#[tokio::test]`, of either runtime flavour).
    pub async fn collect_async(self) -> Result<Vec<Record>> {
        Ok(self.run_async().await?.0)
    }

    /// [`Replay::run`], awaited. The job runs on a runtime and thread of its own (it needs a
    /// multi-threaded runtime), so the caller's runtime only waits for its result.
    pub async fn run_async(self) -> Result<(Vec<Record>, JobSummary)> {
        own_runtime(move || self.replay()).await
    }

    async fn replay(self) -> Result<(Vec<Record>, JobSummary)> {
        let topics = self.settings.subscription.to_string();
        let waits_for_marker = self.eof.is_some();
        let mut builder = KafkaSource::builder().settings(self.settings).format(self.format);
        if let Some(eof) = self.eof {
            builder = builder.eof_evaluator(eof);
        }
        let source = builder.build()?;
        let store = self.state.as_ref().map(StateStore::open).transpose()?;
        let (sink, collected) = CollectSink::new();
        let mut options = JobOptions::new("replay", self.parallelism);
        options.checkpoint_interval = Some(self.checkpoint_interval);
        options.max_duration = Some(self.timeout);
        let store = store.map(|s| std::sync::Arc::new(s) as std::sync::Arc<dyn crate::core::CheckpointStore>);
        let ended = run_source(source, Box::new(sink), options, store).await?;
        let records = std::mem::take(&mut *collected.lock().unwrap_or_else(|p| p.into_inner()));
        if ended.stopped {
            let open = match ended.unfinished.is_empty() {
                true => "(none discovered yet)".to_string(),
                false => ended.unfinished.join(", "),
            };
            let waiting = if waits_for_marker {
                "no end-of-stream record"
            } else {
                "not at the end"
            };
            return Err(Error::runtime(
                format!("replaying {topics}"),
                format!(
                    "{waiting} within {:?} (Replay::timeout) in partitions {} ({} records collected)",
                    self.timeout,
                    open,
                    records.len()
                ),
            ));
        }
        Ok((records, ended.summary))
    }
}
