//! The Kafka split enumerator (Flink's `KafkaSourceEnumerator`): discovers the subscribed
//! partitions from metadata at start and every discovery interval, resolves their offsets once,
//! assigns each split to its owner reader, and finishes the splits of partitions that are gone.
//! What it does with each discovery's findings is in `changes`.

mod changes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::discovery::{admin_consumer, discover, Discovery, DiscoveryRequest};
use super::offsets::TopicPartition;
use super::settings::KafkaSourceSettings;
use super::split::{reader_owner, KafkaPartitionSplit};
use crate::client::cluster::Consumer;
use crate::core::{EnumeratorContext, SourceSplit, SplitEnumerator, SplitId};
use crate::error::Result;
use crate::metrics::KafkaMetrics;

/// How soon discovery looks again while something waits on it (topics to exist or to answer,
/// restored splits to be checked, a partition that may be gone): at most the configured interval.
const RETRY: Duration = Duration::from_secs(1);
/// The longest wait between discoveries that keep failing while something waits on them.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A split the enumerator knows, with its offsets as resolved at discovery.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnownSplit {
    /// For an unassigned split, where it will start; for an assigned one, where it started
    /// (its progress is in the readers' split states).
    pub split: KafkaPartitionSplit,
    pub assigned: bool,
    /// The partition disappeared from the cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// The enumerator's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KafkaEnumeratorState {
    /// Whether the first discovery (with the configured starting offsets) happened; partitions
    /// discovered after it start at earliest.
    pub(crate) initial_discovery_done: bool,
    pub(crate) splits: Vec<KnownSplit>,
    /// The settings the state was written with, to check a restore against (absent in state
    /// files written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settings: Option<SettingsFingerprint>,
    /// A group member's job: how many partitions each topic had at the job's first discovery
    /// (see [`super::discovery::DiscoveryRequest::initial_partitions`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) initial_partitions: BTreeMap<String, i32>,
}

/// What a restored state depends on: the subscription, the starting offsets, the format and the
/// end rule must not change under it; a change of the stopping offsets applies to its
/// unfinished splits, a change of `replay_speed` to what is replayed from the restart on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsFingerprint {
    pub subscription: String,
    pub starting: String,
    pub stopping: String,
    pub format: String,
    /// Which records end a split (absent in state files written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<EndRule>,
    /// `replay_speed` in words ("none": as fast as possible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_speed: Option<String>,
}

/// The end rule a state's finished splits (and its source-wide stop) were judged by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndRule {
    /// The end-of-stream expression as written, "none", or "a Rust evaluator".
    pub eof: String,
    pub eof_emit_marker: bool,
    /// "partition" or "source".
    pub eof_scope: String,
}

/// Assigns Kafka partitions to readers.
pub struct KafkaSourceEnumerator {
    settings: Arc<KafkaSourceSettings>,
    known: BTreeMap<SplitId, KnownSplit>,
    initial_done: bool,
    pending: BTreeMap<usize, Vec<SplitId>>,
    no_more_splits: bool,
    parallelism: usize,
    metrics: KafkaMetrics,
    /// The settings written into the state.
    fingerprint: Option<SettingsFingerprint>,
    /// Restored splits not finished (the readers', and the ones no reader got): they wait for
    /// the first discovery, which checks them against their partition's log (recreated or
    /// truncated since?) before they are assigned. `None` once checked, or without a restore.
    restored: Option<Vec<KafkaPartitionSplit>>,
    /// The stopping offsets changed since the restored state was written: the restored splits
    /// take the stops resolved at that first discovery.
    stops_changed: bool,
    /// The metadata client discovery uses (created at start).
    consumer: Option<Arc<dyn Consumer>>,
    /// Known partitions the broker calls unknown, since when: gone once that lasts for the
    /// request timeout.
    missing_since: HashMap<TopicPartition, Instant>,
    /// Topics the broker answered with an error (not "unknown"), since when.
    unavailable_since: HashMap<String, Instant>,
    /// Failed discoveries in a row.
    failures: u32,
    /// What the last "waiting for topics" line said, so it is not repeated every retry.
    waiting_for: Vec<String>,
    /// Splits the restored state had assigned and no reader gave back: finished before the
    /// restart, so a topic recreated since does not concern them.
    finished_before: std::collections::HashSet<SplitId>,
    /// A group member's first discovery: its splits wait until a checkpoint holds their resolved
    /// starting offsets (`Some(None)` until that checkpoint is taken, then its id). Another
    /// member that takes them over then starts where the job began, not at a `latest` resolved
    /// again, and not at their start as partitions discovered later.
    held_for_checkpoint: Option<Option<u64>>,
    /// A group member's job: the partition counts of the job's first discovery.
    initial_partitions: BTreeMap<String, i32>,
    /// Splits given up to another member mid-run (see [`SplitEnumerator::release_splits`]):
    /// known still (their readers' snapshots hold where they stopped), read no more.
    released: std::collections::HashSet<SplitId>,
    /// A group member's bounded job found its splits (no discovery after the first): it ends
    /// once every reader asked for a split, having none left (see `end_when_idle`).
    discovery_over: bool,
    /// Readers that asked for a split and were given none since.
    idle: std::collections::BTreeSet<usize>,
}

impl KafkaSourceEnumerator {
    pub(crate) fn new(
        settings: Arc<KafkaSourceSettings>,
        state: Option<KafkaEnumeratorState>,
        metrics: KafkaMetrics,
    ) -> Self {
        let restoring = state.is_some();
        let state = state.unwrap_or_default();
        let known: BTreeMap<SplitId, KnownSplit> = state.splits.into_iter().map(|k| (k.split.split_id(), k)).collect();
        // restored splits no reader got (discovered, or given back by a stopped reader, just
        // before the checkpoint) are assigned again, after the first discovery checked them
        let unassigned: Vec<KafkaPartitionSplit> = known
            .values()
            .filter(|k| !k.assigned && !k.removed)
            .map(|k| k.split.clone())
            .collect();
        KafkaSourceEnumerator {
            settings,
            known,
            initial_done: state.initial_discovery_done,
            pending: BTreeMap::new(),
            no_more_splits: false,
            parallelism: 1,
            metrics,
            fingerprint: None,
            restored: restoring.then_some(unassigned),
            stops_changed: false,
            consumer: None,
            missing_since: HashMap::new(),
            unavailable_since: HashMap::new(),
            failures: 0,
            waiting_for: Vec::new(),
            finished_before: Default::default(),
            held_for_checkpoint: None,
            initial_partitions: state.initial_partitions,
            released: Default::default(),
            discovery_over: false,
            idle: Default::default(),
        }
    }

    /// Record `fingerprint` in every snapshot.
    pub fn with_fingerprint(mut self, fingerprint: SettingsFingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    /// The configured stopping offsets changed since the restored state: resolve them again for
    /// its unfinished splits (and the unassigned ones) before they are assigned.
    pub fn resolving_stops_again(mut self) -> Self {
        self.stops_changed = true;
        self
    }

    fn owner(&self, split: &KafkaPartitionSplit) -> usize {
        reader_owner(&split.topic, split.partition, self.parallelism, self.settings.instance)
    }

    fn add_pending(&mut self, split: KafkaPartitionSplit) {
        let owner = self.owner(&split);
        let id = split.split_id();
        self.known.insert(
            id.clone(),
            KnownSplit {
                split,
                assigned: false,
                removed: false,
            },
        );
        let list = self.pending.entry(owner).or_default();
        if !list.contains(&id) {
            list.push(id);
        }
    }

    fn assign_pending(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>) -> Result<()> {
        if self.held_for_checkpoint.is_some() {
            return Ok(());
        }
        let readers: Vec<usize> = ctx.registered_readers().iter().copied().collect();
        let mut assigned = 0;
        for reader in readers {
            if let Some(ids) = self.pending.remove(&reader) {
                assigned += ids.len();
                let mut splits = Vec::with_capacity(ids.len());
                for id in ids {
                    if let Some(k) = self.known.get_mut(&id) {
                        k.assigned = true;
                        debug!(reader, split_id = %id, split = %k.split.describe(), "assigning split");
                        splits.push(k.split.clone());
                    }
                }
                // (a list a gone partition emptied sends nothing: the reader stays idle)
                if !splits.is_empty() {
                    self.idle.remove(&reader);
                }
                ctx.assign_splits(reader, splits)?;
            }
            if self.no_more_splits {
                ctx.signal_no_more_splits(reader)?;
            }
        }
        if assigned > 0 {
            // one line, however many partitions (each split's is at debug)
            info!(
                splits = assigned,
                readers = ctx.current_parallelism(),
                "splits assigned"
            );
        }
        Ok(())
    }

    /// Run a discovery after `delay`, once: each result says when the next one is due (see
    /// [`Self::schedule_next`]), so discovery retries quickly only while something waits on it.
    fn schedule(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>, delay: Duration) {
        let Some(consumer) = self.consumer.clone() else {
            return;
        };
        let live = self.known.values().filter(|k| !k.removed).map(|k| &k.split);
        let restored = self.restored.iter().flatten();
        let mut request = DiscoveryRequest {
            initial_done: self.initial_done,
            initial_partitions: self.initial_partitions.clone(),
            ..DiscoveryRequest::default()
        };
        for split in live.chain(restored.clone()) {
            request.known.insert((split.topic.clone(), split.partition));
            if let Some(id) = &split.topic_id {
                request.topic_ids.insert(split.topic.clone(), id.clone());
            }
        }
        request.check = restored.map(|s| (s.topic.clone(), s.partition)).collect();
        let settings = Arc::clone(&self.settings);
        let parallelism = self.parallelism;
        ctx.call_async(
            move || discover(&settings, consumer.as_ref(), &request, parallelism),
            delay,
            None,
        );
    }

    /// After a discovery: look again soon while something waits on it, else after the
    /// configured interval; with discovery off, no more splits can come.
    fn schedule_next(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>) {
        let interval = self.settings.discovery_interval;
        let waiting = !self.initial_done
            || self.restored.is_some()
            || !self.missing_since.is_empty()
            || !self.unavailable_since.is_empty();
        if waiting || self.failures > 0 {
            let backoff = RETRY
                .saturating_mul(1 << self.failures.saturating_sub(1).min(5))
                .min(MAX_BACKOFF);
            let delay = match interval {
                Some(p) if !waiting => p,
                Some(p) => backoff.min(p),
                None => backoff,
            };
            self.schedule(ctx, delay);
        } else if let Some(p) = interval {
            self.schedule(ctx, p);
        } else if self.settings.assignment.is_some() {
            self.discovery_over = true;
        } else {
            self.no_more_splits = true;
        }
    }

    /// A group member's bounded job: no split will come once discovery is over, nothing waits to
    /// be assigned, checkpointed or checked, and every reader asked for a split, its own
    /// finished (or given up). Its readers end only then, so the partitions the group deals the
    /// member meanwhile are taken in by readers still there (see `take_splits`), and the
    /// partitions that stay are not stopped for them.
    fn end_when_idle(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>) -> Result<()> {
        let waiting = self.restored.is_some()
            || self.held_for_checkpoint.is_some()
            || self.pending.values().any(|ids| !ids.is_empty());
        if self.no_more_splits || !self.discovery_over || waiting {
            return Ok(());
        }
        let readers: Vec<usize> = ctx.registered_readers().iter().copied().collect();
        if !readers.iter().all(|r| self.idle.contains(r)) {
            return Ok(());
        }
        debug!("group member: every reader finished its splits; no more will come");
        self.no_more_splits = true;
        for reader in readers {
            ctx.signal_no_more_splits(reader)?;
        }
        Ok(())
    }
}

impl SplitEnumerator for KafkaSourceEnumerator {
    type Split = KafkaPartitionSplit;
    type State = KafkaEnumeratorState;
    type CallResult = Discovery;

    fn start(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>) -> Result<()> {
        self.parallelism = ctx.current_parallelism();
        if let Some(restored) = &self.restored {
            // the readers gave their unfinished splits back (add_splits_back) before start
            let back: std::collections::HashSet<SplitId> = restored.iter().map(SourceSplit::split_id).collect();
            self.finished_before = self
                .known
                .iter()
                .filter(|(id, k)| k.assigned && !k.removed && !back.contains(*id))
                .map(|(id, _)| id.clone())
                .collect();
            // with a source-wide stop across processes, the others learn these hold no one back
            if let Some(clock) = ctx.event_time() {
                for id in &self.finished_before {
                    clock.finished_before(id);
                }
            }
        }
        self.consumer = Some(Arc::from(admin_consumer(&self.settings)?));
        self.schedule(ctx, Duration::ZERO);
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        _ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        splits: Vec<KafkaPartitionSplit>,
    ) -> Result<()> {
        match self.restored.as_mut() {
            // restored ones (before start), or given back before the first discovery checked
            // the restored ones: checked with them
            Some(waiting) => waiting.extend(splits),
            None => {
                for split in splits {
                    self.add_pending(split);
                }
            }
        }
        Ok(())
    }

    fn add_reader(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        _reader: usize,
    ) -> Result<()> {
        self.assign_pending(ctx)
    }

    /// A group member's reader with nothing left to read (its readers ask: see
    /// `KafkaSource::create_reader`): it may be given splits taken in, and the job ends once
    /// every reader asked (see `end_when_idle`).
    fn handle_split_request(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        reader: usize,
    ) -> Result<()> {
        self.idle.insert(reader);
        self.end_when_idle(ctx)
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<KafkaEnumeratorState> {
        if let Some(taken @ None) = self.held_for_checkpoint.as_mut() {
            *taken = Some(checkpoint_id);
        }
        let mut known = self.known.clone();
        // restored splits waiting for their check are unassigned, whatever the old state said
        for waiting in self.restored.iter().flatten() {
            known.insert(
                waiting.split_id(),
                KnownSplit {
                    split: waiting.clone(),
                    assigned: false,
                    removed: false,
                },
            );
        }
        Ok(KafkaEnumeratorState {
            initial_discovery_done: self.initial_done,
            splits: known.into_values().collect(),
            settings: self.fingerprint.clone(),
            initial_partitions: self.initial_partitions.clone(),
        })
    }

    /// In place only for splits its readers hold, and with nothing waiting on a discovery, a
    /// checkpoint or a check: before the first discovery every split is still to be found (and
    /// would be found, released or not), a first discovery's splits held for the checkpoint of
    /// their starting offsets, or restored ones not yet checked, are in no reader's snapshot. Not
    /// with a source-wide stop: the members align on it, and a split's end there is judged across
    /// them.
    fn release_splits(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        splits: &[SplitId],
    ) -> Result<bool> {
        let source_wide = ctx.event_time().is_some_and(|clock| clock.options().source_wide_stop);
        if source_wide || !self.initial_done || self.held_for_checkpoint.is_some() || self.restored.is_some() {
            return Ok(false);
        }
        let in_place = splits.iter().all(|id| self.known.get(id).is_some_and(|k| k.assigned));
        if in_place {
            self.released.extend(splits.iter().cloned());
        }
        Ok(in_place)
    }

    /// Taken in as the first discovery's partitions are, once nothing waits on a checkpoint or
    /// a check, and while no reader was told that no split will come (a bounded job's readers,
    /// all finished: see `end_when_idle`; one of them may have ended). Not with a
    /// source-wide stop.
    fn take_splits(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        splits: Vec<KafkaPartitionSplit>,
    ) -> Result<bool> {
        let source_wide = ctx.event_time().is_some_and(|clock| clock.options().source_wide_stop);
        if source_wide
            || !self.initial_done
            || self.held_for_checkpoint.is_some()
            || self.restored.is_some()
            || self.no_more_splits
        {
            return Ok(false);
        }
        for split in splits {
            debug!(split_id = %split.split_id(), split = %split.describe(), "split taken in from another member's checkpoint");
            self.released.remove(&split.split_id());
            self.add_pending(split);
        }
        self.assign_pending(ctx)?;
        Ok(true)
    }

    fn notify_checkpoint_complete(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        checkpoint_id: u64,
    ) -> Result<()> {
        if self
            .held_for_checkpoint
            .is_some_and(|taken| taken.is_some_and(|id| id <= checkpoint_id))
        {
            self.held_for_checkpoint = None;
            info!("group member: the first discovery's starting offsets are checkpointed; reading");
            self.assign_pending(ctx)?;
            self.end_when_idle(ctx)?;
        }
        Ok(())
    }

    fn handle_call_result(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        result: Result<Discovery>,
    ) -> Result<()> {
        if self.no_more_splits {
            return Ok(());
        }
        match result {
            Ok(d) => {
                self.failures = 0;
                self.handle_discovery(ctx, d)?;
                self.schedule_next(ctx);
                self.assign_pending(ctx)?;
                self.end_when_idle(ctx)
            }
            Err(e) if !self.initial_done => Err(e),
            Err(e) => {
                warn!(error = %e, waiting_restored = self.restored.is_some(), "partition discovery failed; keeping the current splits and trying again");
                self.metrics.discovery_failures.increment(1);
                self.failures = self.failures.saturating_add(1);
                self.schedule_next(ctx);
                Ok(())
            }
        }
    }
}
