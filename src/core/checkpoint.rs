//! Checkpoint bookkeeping (Flink's `CheckpointCoordinator`, reduced to one process): what a
//! completed checkpoint holds, the checkpoint in progress, and the job's report.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::source::Source;
use super::split::{SourceSplit, SplitSnapshot};

/// The id under which a reader's last snapshot (end of input, or stop) is taken; it is part of
/// whichever checkpoint completes next.
pub const FINAL_SNAPSHOT: u64 = u64::MAX;

/// What the state file holds: the enumerator's checkpoint and every split's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "E: Serialize, S: SourceSplit",
    deserialize = "E: serde::de::DeserializeOwned, S: SourceSplit"
))]
pub struct Checkpoint<E, S: SourceSplit> {
    /// The job's name (`job.name`): only the same job resumes it.
    pub job: String,
    /// The source kind that wrote it ([`Source::kind`]).
    pub source: String,
    /// The checkpoint's number, counting from 1 over the job's life.
    pub checkpoint_id: u64,
    /// When the checkpoint completed, RFC 3339.
    pub completed_at: String,
    /// The enumerator's checkpoint ([`crate::SplitEnumerator::snapshot_state`]).
    pub enumerator: E,
    /// Every split's progress, finished ones included.
    pub splits: Vec<SplitSnapshot<S>>,
    /// The job reached the end of its input (not a stop): a restart has nothing left to do.
    #[serde(default)]
    pub end_of_input: bool,
    /// The source's settings the state depends on ([`Source::settings_fingerprint`]): a restart
    /// with settings the state does not fit is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_settings: Option<serde_json::Value>,
    /// The source-wide stop (`eof_scope = "source"`) once an end-of-stream record was found: the
    /// timestamp every split ends before, kept across a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timestamp: Option<i64>,
    /// What the sink needs to recover to this checkpoint (a file's length, a transaction's token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<serde_json::Value>,
    /// The sink that wrote it ([`crate::Sink::fingerprint`]): only the same sink resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_settings: Option<serde_json::Value>,
    /// The instance (`job.instance`) that wrote it: only the same share resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<super::source::Instance>,
    /// With a transactional sink: the last checkpoint whose transaction is known committed. A
    /// restart resumes from it if this checkpoint's transaction turns out not to be committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<Checkpoint<E, S>>>,
    /// Changes made by hand to the job's state (`tidegate state set`), oldest first: carried
    /// into every later checkpoint, so the state says what was moved, when and from where.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<serde_json::Value>,
}

/// How a job ended.
#[derive(Debug)]
pub struct JobReport<S: SourceSplit> {
    /// Records the readers emitted.
    pub records_emitted: u64,
    /// Records the sink wrote.
    pub records_written: u64,
    /// Records the source's filter rejected.
    pub records_filtered: u64,
    /// Records the sink wrote elsewhere (dead letters).
    pub records_diverted: u64,
    /// Records read and not emitted because they could not be decoded (`decode_errors = "skip"`).
    pub records_skipped: u64,
    /// The records the job was expected to read in all ([`super::JobStats::expected`]): what it
    /// read, once its input is done.
    pub records_expected: u64,
    /// Checkpoints completed, the final one included.
    pub checkpoints: u64,
    /// The state of every split at the last checkpoint.
    pub splits: Vec<SplitSnapshot<S>>,
    /// The job was stopped (signal or `max_duration`) rather than reaching the end of input.
    pub stopped: bool,
    /// How long the job ran.
    pub elapsed: Duration,
}

pub(crate) type EnumState<S> = <S as Source>::EnumeratorState;
pub(crate) type SourceCheckpoint<S> = Checkpoint<EnumState<S>, <S as Source>::Split>;

/// The checkpoint in progress: the enumerator's snapshot and the readers' acknowledgements.
pub(crate) struct Pending<S: Source> {
    pub(crate) id: u64,
    pub(crate) started: Instant,
    /// Taken when the checkpoint is written.
    pub(crate) enumerator: Option<EnumState<S>>,
    pub(crate) acks: HashMap<usize, Vec<SplitSnapshot<S::Split>>>,
    pub(crate) barrier_sent: bool,
    /// The final checkpoint after every split ended on its own.
    pub(crate) end_of_input: bool,
    /// Written to the state file; waiting for the transactional sink's commit.
    pub(crate) written: Option<SourceCheckpoint<S>>,
}
