//! The Kafka split enumerator (Flink's `KafkaSourceEnumerator`): discovers the subscribed
//! partitions from metadata at start and every discovery interval, resolves their offsets once,
//! assigns each split to its owner reader, and finishes the splits of partitions that disappear.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::discovery::{admin_consumer, discover, reader_owner, Discovery};
use super::offsets::{OffsetsResolver, TopicPartition};
use super::split::KafkaPartitionSplit;
use super::KafkaSourceSettings;
use crate::core::{EnumeratorContext, RemoveSplits, SourceEvent, SourceSplit, SplitEnumerator, SplitId};
use crate::error::{Error, Result};
use crate::metrics::KafkaMetrics;

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
    pub initial_discovery_done: bool,
    pub splits: Vec<KnownSplit>,
    /// The settings the state was written with, to check a restore against (absent in state
    /// files written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SettingsFingerprint>,
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
    /// Shared with the discovery callable, so it only resolves offsets of new partitions.
    known_partitions: Arc<Mutex<HashSet<TopicPartition>>>,
    initial_done: Arc<AtomicBool>,
    pending: BTreeMap<usize, Vec<SplitId>>,
    no_more_splits: bool,
    parallelism: usize,
    metrics: KafkaMetrics,
    /// The settings written into the state.
    fingerprint: Option<SettingsFingerprint>,
    /// The stopping offsets changed since the restored state was written: its unfinished splits
    /// wait here until the first discovery resolved their new stops.
    restops: Option<Vec<KafkaPartitionSplit>>,
}

impl KafkaSourceEnumerator {
    pub fn new(settings: Arc<KafkaSourceSettings>, state: Option<KafkaEnumeratorState>, metrics: KafkaMetrics) -> Self {
        let state = state.unwrap_or_default();
        let known: BTreeMap<SplitId, KnownSplit> = state.splits.into_iter().map(|k| (k.split.split_id(), k)).collect();
        // restored splits no reader got (discovered, or given back by a stopped reader, just
        // before the checkpoint) are assigned again; `start` finds their owners
        let unassigned: Vec<SplitId> = known
            .iter()
            .filter(|(_, k)| !k.assigned && !k.removed)
            .map(|(id, _)| id.clone())
            .collect();
        let pending = if unassigned.is_empty() {
            BTreeMap::new()
        } else {
            BTreeMap::from([(0, unassigned)])
        };
        let partitions = known
            .values()
            .map(|k| (k.split.topic.clone(), k.split.partition))
            .collect();
        KafkaSourceEnumerator {
            settings,
            known,
            known_partitions: Arc::new(Mutex::new(partitions)),
            initial_done: Arc::new(AtomicBool::new(state.initial_discovery_done)),
            pending,
            no_more_splits: false,
            parallelism: 1,
            metrics,
            fingerprint: None,
            restops: None,
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
        let unassigned: Vec<KafkaPartitionSplit> = self
            .known
            .values()
            .filter(|k| !k.assigned && !k.removed)
            .map(|k| k.split.clone())
            .collect();
        self.pending.clear(); // they wait for their new stops instead
        self.restops = Some(unassigned);
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

    fn handle_discovery(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        d: Discovery,
    ) -> Result<()> {
        if let (Some(stops), Some(waiting)) = (&d.restored_stops, self.restops.take()) {
            for mut split in waiting {
                let stop = stops.get(&(split.topic.clone(), split.partition)).copied().flatten();
                let old = split.describe();
                split.stop_offset = stop;
                info!(split_id = %split.split_id(), was = %old, now = %split.describe(),
                      "stopping_offsets changed since the state file: the unfinished split gets the new stop");
                self.add_pending(split);
            }
        }
        let initial = !self.initial_done.load(Ordering::Acquire);
        if initial && !d.missing_topics.is_empty() {
            if self.settings.wait_for_topics {
                info!(missing = %d.missing_topics.join(", "), "waiting for the subscribed topics to exist");
                return Ok(());
            }
            return Err(Error::runtime(
                "partition discovery",
                format!(
                    "{} does not exist (set source.wait_for_topics = true to wait for it)",
                    d.missing_topics.join(", ")
                ),
            ));
        }
        {
            let mut known = self.known_partitions.lock().unwrap_or_else(|p| p.into_inner());
            for s in &d.new_splits {
                known.insert((s.topic.clone(), s.partition));
            }
        }
        if !d.new_splits.is_empty() {
            info!(count = d.new_splits.len(), initial, "discovered new partitions");
        }
        for split in d.new_splits {
            self.add_pending(split);
        }
        // partitions that disappeared: their splits end
        let gone: Vec<SplitId> = self
            .known
            .iter()
            .filter(|(_, k)| !k.removed && !d.partitions.contains(&(k.split.topic.clone(), k.split.partition)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            let Some(k) = self.known.get_mut(&id) else {
                continue;
            };
            warn!(split_id = %id, "partition no longer exists; finishing its split");
            k.removed = true;
            let owner = reader_owner(
                &k.split.topic,
                k.split.partition,
                self.parallelism,
                self.settings.instance,
            );
            if k.assigned {
                ctx.send_event_to_reader(owner, SourceEvent(Box::new(RemoveSplits(vec![id.clone()]))))?;
            } else if let Some(list) = self.pending.get_mut(&owner) {
                list.retain(|p| *p != id);
            }
        }
        self.initial_done.store(true, Ordering::Release);
        if self.settings.discovery_interval.is_none() {
            self.no_more_splits = true;
        }
        self.assign_pending(ctx)
    }
}

impl SplitEnumerator for KafkaSourceEnumerator {
    type Split = KafkaPartitionSplit;
    type State = KafkaEnumeratorState;
    type CallResult = Discovery;

    fn start(&mut self, ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>) -> Result<()> {
        self.parallelism = ctx.current_parallelism();
        // pending restored splits were queued before the parallelism was known
        let restored: Vec<KafkaPartitionSplit> = self
            .pending
            .values()
            .flatten()
            .filter_map(|id| self.known.get(id).map(|k| k.split.clone()))
            .collect();
        self.pending.clear();
        for split in restored {
            self.add_pending(split);
        }
        let consumer = Arc::new(admin_consumer(&self.settings)?);
        let settings = Arc::clone(&self.settings);
        let known = Arc::clone(&self.known_partitions);
        let initial_done = Arc::clone(&self.initial_done);
        let parallelism = self.parallelism;
        let mut restops: Option<Vec<TopicPartition>> = self
            .restops
            .as_ref()
            .map(|splits| splits.iter().map(|s| (s.topic.clone(), s.partition)).collect());
        let period = match (self.settings.discovery_interval, self.settings.wait_for_topics) {
            (Some(p), _) => Some(p),
            (None, true) => Some(Duration::from_secs(1)), // retry until the topics exist
            (None, false) => None,
        };
        ctx.call_async(
            move || {
                let mut d = discover(
                    &settings,
                    &consumer,
                    &known,
                    initial_done.load(Ordering::Acquire),
                    parallelism,
                )?;
                if let Some(partitions) = restops.take() {
                    let resolver =
                        OffsetsResolver::new(&consumer, settings.request_timeout, settings.group_id.as_deref());
                    d.restored_stops = Some(resolver.resolve_stop(&settings.stopping, &partitions)?);
                }
                Ok(d)
            },
            Duration::ZERO,
            period,
        );
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        _ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        splits: Vec<KafkaPartitionSplit>,
    ) -> Result<()> {
        if let Some(waiting) = self.restops.as_mut() {
            waiting.extend(splits);
            return Ok(());
        }
        for split in splits {
            self.known_partitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((split.topic.clone(), split.partition));
            self.add_pending(split);
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

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<KafkaEnumeratorState> {
        let mut splits: Vec<KnownSplit> = self.known.values().cloned().collect();
        // splits waiting for their new stops are unassigned, whatever the old state said
        for waiting in self.restops.iter().flatten() {
            if let Some(k) = splits.iter_mut().find(|k| k.split.split_id() == waiting.split_id()) {
                k.split = waiting.clone();
                k.assigned = false;
            }
        }
        Ok(KafkaEnumeratorState {
            initial_discovery_done: self.initial_done.load(Ordering::Acquire),
            splits,
            settings: self.fingerprint.clone(),
        })
    }

    fn handle_call_result(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        result: Result<Discovery>,
    ) -> Result<()> {
        match result {
            Ok(d) => {
                if self.no_more_splits {
                    return Ok(()); // a retry that raced the end of discovery
                }
                self.handle_discovery(ctx, d)
            }
            Err(e) if !self.initial_done.load(Ordering::Acquire) => Err(e),
            Err(e) => {
                warn!(error = %e, "partition discovery failed; keeping the current splits");
                self.metrics.discovery_failures.increment(1);
                Ok(())
            }
        }
    }
}
