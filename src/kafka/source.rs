//! The Kafka source (Flink's `KafkaSource`): its boundedness, how its partitions move between
//! instances, and the partition-discovery enumerator, split readers, record emitter and offset
//! committer it creates.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::batch_queue::BatchLimit;
use super::enumerator::{KafkaEnumeratorState, KafkaSourceEnumerator, KnownSplit};
use super::settings::KafkaSourceSettings;
use super::split::KafkaPartitionSplit;
use super::split_reader::{KafkaPartitionSplitReader, PartitionReader};
use super::{caught_up, committer, emitter};
use crate::core::{
    Boundedness, EofOnRecordEvaluator, EventTimeOptions, FetcherMode, ReaderContext, ReaderOptions, RemoveSplits,
    Source, SourceReaderBase, SourceSplit, SplitId, SplitSnapshot,
};
use crate::error::Result;
use crate::format::{DecodeErrorPolicy, DecoderFactory};
use crate::metrics::KafkaMetrics;
use crate::record::{Record, ValueFormat};

/// The Kafka source (Flink's `KafkaSource`): splits are topic-partitions, found by the
/// partition-discovery enumerator and read by split readers over librdkafka, each up to its
/// stopping offset or its end-of-stream record. Run it with a [`crate::core::Job`]:
///
/// ```no_run
/// use tidegate::core::{CollectSink, Job, JobOptions};
/// use tidegate::kafka::{KafkaSource, StoppingOffsets};
/// use tidegate::record::ValueFormat;
///
/// // a trading day, up to its market-close record in each partition
/// let source = KafkaSource::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .topics(["trades"])
///     .format(ValueFormat::Json)
///     .bounded(StoppingOffsets::Latest)
///     .eof_expression(r#"value.type == "MARKET_CLOSE""#)?
///     .build()?;
/// let (sink, records) = CollectSink::new();
/// let report = Job::new(source, JobOptions::new("trading-day", 2)).run_blocking(Box::new(sink))?;
/// println!("{} records, {} splits", report.records_written, report.splits.len());
/// # Ok::<(), tidegate::Error>(())
/// ```
pub struct KafkaSource {
    pub(crate) settings: Arc<KafkaSourceSettings>,
    /// The value format (recorded in the state, which a change of format would not fit).
    pub(crate) format: ValueFormat,
    pub(crate) decoder: DecoderFactory,
    pub(crate) decode_errors: DecodeErrorPolicy,
    pub(crate) eof: Option<Arc<dyn EofOnRecordEvaluator<Record>>>,
    /// The end-of-stream expression as written (recorded in the state: a changed rule would not
    /// fit the splits it ended); `None` with an `eof` closure.
    pub(crate) eof_text: Option<String>,
    pub(crate) eof_emit_marker: bool,
    /// What the end-of-stream evaluator reads (everything, for a closure).
    pub(crate) eof_reads: emitter::Decoded,
    /// The filter (`source.where`): records it rejects are not emitted but advance the position.
    pub(crate) filter: Option<Arc<crate::expr::RecordExpression>>,
    pub(crate) fetcher_mode: FetcherMode,
    pub(crate) queue_capacity: usize,
    pub(crate) max_batch_records: usize,
    /// A fetch's batch stops growing at this many bytes (values, keys and the records' own
    /// size), so large records do not make large batches: the queue holds `queue_capacity` of them.
    pub(crate) max_batch_bytes: usize,
    /// Records keep their decoded value for the sink (false for sinks that never print it).
    pub(crate) keep_decoded: bool,
    /// Decodes keys (`key_format`); `None` leaves them as they are.
    pub(crate) key_decoder: Option<DecoderFactory>,
    /// The sink's check of each record (a topic template): a record failing it follows
    /// `decode_errors` like an undecodable one.
    pub(crate) sink_check: Option<crate::connector::RecordCheck>,
    /// Where its metrics go (no-op handles unless the daemon registered them).
    pub(crate) metrics: KafkaMetrics,
    /// Pacing and a source-wide stop (inactive by default).
    pub(crate) event_time: EventTimeOptions,
    /// The job's initial records/s and bytes/s limits (`source.max_rate`, `max_bytes_rate`).
    pub(crate) rate_limits: (Option<f64>, Option<f64>),
}

impl Source for KafkaSource {
    type Split = KafkaPartitionSplit;
    type EnumeratorState = KafkaEnumeratorState;
    type Enumerator = KafkaSourceEnumerator;
    type Reader = SourceReaderBase<PartitionReader, Record, emitter::KafkaRecordEmitter>;
    type Output = Record;

    fn kind(&self) -> &'static str {
        "kafka"
    }

    fn event_time(&self) -> Option<EventTimeOptions> {
        Some(self.event_time.clone())
    }

    fn rate_limits(&self) -> (Option<f64>, Option<f64>) {
        self.rate_limits
    }

    fn boundedness(&self) -> Boundedness {
        if self.settings.stopping.is_bounded() {
            Boundedness::Bounded
        } else {
            Boundedness::ContinuousUnbounded
        }
    }

    fn create_enumerator(&self) -> Result<KafkaSourceEnumerator> {
        Ok(
            KafkaSourceEnumerator::new(Arc::clone(&self.settings), None, self.metrics.clone())
                .with_fingerprint(self.fingerprint()),
        )
    }

    /// A restore checks the state's settings against the config: a changed subscription, start
    /// or format is an error (the state's positions belong to the old one); changed stopping
    /// offsets apply to the unfinished splits, resolved now.
    fn restore_enumerator(&self, state: KafkaEnumeratorState) -> Result<KafkaSourceEnumerator> {
        let stops_changed = self.check_restored_settings(state.settings.as_ref())?;
        let mut enumerator = KafkaSourceEnumerator::new(Arc::clone(&self.settings), Some(state), self.metrics.clone());
        if stops_changed {
            enumerator = enumerator.resolving_stops_again();
        }
        Ok(enumerator.with_fingerprint(self.fingerprint()))
    }

    /// The partitions move with their positions to the instance discovery deals them to now;
    /// partitions no instance knew are discovered as new ones.
    fn reshare(&self, parts: Vec<crate::core::Share<Self>>, parallelism: usize) -> Result<crate::core::Share<Self>> {
        let owns = |s: &KafkaPartitionSplit| self.settings.owns(&s.topic, s.partition, parallelism);
        let group = self.settings.assignment.is_some();
        let mut state = KafkaEnumeratorState {
            // static instances: every one of them discovered; a group member's parts: any of
            // them (a partition no part mentions is then a new one, read from its start, as
            // Flink reads partitions discovered after the first discovery, unless the job's
            // first discovery saw it: see DiscoveryRequest::initial_partitions)
            initial_discovery_done: !group,
            ..Default::default()
        };
        // parts come oldest first: where two hold a split (a group member's checkpoint from
        // before another member took the split over), the one whose run restored it most often
        // stands, then the one that did not release it, then the newer (see members::merged)
        type Holder = (u32, bool, usize);
        let mut chosen: BTreeMap<SplitId, Holder> = BTreeMap::new();
        let mut known = BTreeMap::new();
        let mut splits = BTreeMap::new();
        for (index, (part, snapshots)) in parts.into_iter().enumerate() {
            if group {
                state.initial_discovery_done |= part.initial_discovery_done;
                // the job's first discovery: the fewest partitions any member's first saw
                for (topic, count) in part.initial_partitions {
                    let least = state.initial_partitions.entry(topic).or_insert(count);
                    *least = (*least).min(count);
                }
            } else {
                state.initial_discovery_done &= part.initial_discovery_done;
            }
            // the newest part's settings (a group member's parts include old runs)
            state.settings = part.settings.or(state.settings);
            let mut held: BTreeMap<SplitId, KnownSplit> = part
                .splits
                .into_iter()
                .filter(|k| owns(&k.split))
                .map(|k| (k.split.split_id(), k))
                .collect();
            let mut snapshots: BTreeMap<SplitId, SplitSnapshot<KafkaPartitionSplit>> = snapshots
                .into_iter()
                .filter(|s| owns(&s.split))
                .map(|s| (s.split.split_id(), s))
                .collect();
            let ids: std::collections::BTreeSet<SplitId> = held.keys().chain(snapshots.keys()).cloned().collect();
            for id in ids {
                let (k, snap) = (held.remove(&id), snapshots.remove(&id));
                let handovers = k
                    .iter()
                    .map(|k| k.split.handovers)
                    .chain(snap.iter().map(|s| s.split.handovers))
                    .max();
                let released = snap.as_ref().is_some_and(is_released);
                let candidate = (handovers.unwrap_or(0), !released, index);
                if chosen.get(&id).is_some_and(|best| *best > candidate) {
                    continue;
                }
                chosen.insert(id.clone(), candidate);
                known.remove(&id);
                splits.remove(&id);
                known.extend(k.map(|k| (id.clone(), k)));
                splits.extend(snap.map(|s| (id.clone(), s)));
            }
        }
        if group {
            // this run restores them: one handover more; a released split goes on from where
            // its run stopped reading it
            for k in known.values_mut() {
                k.split.handovers += 1;
            }
            for s in splits.values_mut() {
                s.split.handovers += 1;
                if is_released(s) {
                    s.finished = None;
                }
            }
        }
        state.splits = known.into_values().collect();
        Ok((state, splits.into_values().collect()))
    }

    fn create_reader(&self, context: ReaderContext) -> Result<Self::Reader> {
        let (index, readers) = (context.index, context.parallelism);
        let mut options = ReaderOptions::new(index);
        options.fetcher_mode = self.fetcher_mode;
        options.queue_capacity = self.queue_capacity;
        options.eof = self.eof.clone();
        options.eof_emit_marker = self.eof_emit_marker;
        // a group member's readers say when they have nothing left: its bounded job ends only
        // once all of them have, and may be handed partitions until then
        options.request_splits = self.settings.assignment.is_some();
        options.request_when_drained = true;
        options.stats = context.fetch_stats;
        let confirm = caught_up::needed(context.event_time.as_deref());
        options.event_time = context.event_time;
        options.throttle = context.throttle;
        let settings = Arc::clone(&self.settings);
        let limit = BatchLimit {
            records: self.max_batch_records.max(1),
            bytes: self.max_batch_bytes.max(1),
        };
        let metrics = self.metrics.clone();
        let factory = Box::new(move |partitions| {
            #[cfg(test)]
            if let Some(simulated) = super::split_reader::simulated(&settings) {
                return Ok(PartitionReader::Simulated(simulated));
            }
            KafkaPartitionSplitReader::new(&settings, (index, readers), partitions, limit, metrics.clone())
                .map(|reader| PartitionReader::Native(reader.confirming_caught_up(&settings, index, confirm)))
        });
        let emitter =
            emitter::KafkaRecordEmitter::new((self.decoder)()?, self.decode_errors, self.metrics.reader(index))
                .keep_decoded(self.keep_decoded)
                .filter(
                    self.filter.clone(),
                    if self.eof.is_some() {
                        self.eof_reads
                    } else {
                        emitter::Decoded::NOTHING
                    },
                )
                .key_decoder(self.key_decoder.as_ref().map(|f| f()).transpose()?)
                .sink_check(self.sink_check.clone());
        let mut reader = SourceReaderBase::new(factory, emitter, options).with_event_handler(Box::new(|event| {
            match event.0.downcast::<RemoveSplits>() {
                Ok(remove) => remove.0,
                Err(_) => Vec::new(),
            }
        }));
        if let Some(group) = self.settings.group_id.clone() {
            reader = reader.with_checkpoint_listener(committer::offset_committer(&self.settings, group, index)?);
        }
        Ok(reader)
    }
}

/// Whether a run gave the split up mid-run (it went on at another member).
fn is_released(snapshot: &SplitSnapshot<KafkaPartitionSplit>) -> bool {
    snapshot
        .finished
        .is_some_and(|f| f.reason == crate::core::FinishReason::Released)
}

impl KafkaSource {
    /// The settings it reads with.
    pub(crate) fn settings(&self) -> &KafkaSourceSettings {
        &self.settings
    }
}
