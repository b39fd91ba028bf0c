//! The Kafka split reader (Flink's `KafkaPartitionSplitReader`): one rust-rdkafka `BaseConsumer`
//! per fetcher thread, assigned and positioned by hand (no group rebalancing). It hands batches of
//! records to the reader and finishes a split when the consumer *position* reaches its stop offset,
//! so transaction markers and compaction gaps cannot hang a bounded read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, warn};

mod health;

use super::batch_queue::{BatchLimit, ConsumerQueue, Event, SharedConsumer};
use super::caught_up::CaughtUp;
use super::consumer::{consumer_config, PartitionErrors};
use super::live_split::{index_in, LiveSplit};
use super::offsets::StoppingOffsets;
use super::settings::KafkaSourceSettings;
use super::split::KafkaPartitionSplit;
use crate::client::TracingContext;
use crate::core::{FinishReason, RecordsWithSplitIds, SourceSplit, SplitId, SplitReader, SplitsChange};
use crate::error::{Error, Result};
use crate::metrics::KafkaMetrics;
use crate::record::Record;

/// How long one `fetch` waits for the first record: bounds how late split changes are seen.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often positions of bounded splits are checked when records keep arriving.
const POSITION_CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a split may fetch nothing, while its partition has records past its position, before
/// its fetch is restarted (see `health::restart_stalled_fetches`).
const STALL_AFTER: Duration = Duration::from_secs(15);

/// Reads the splits of one fetcher with one consumer.
pub struct KafkaPartitionSplitReader {
    queue: ConsumerQueue,
    /// Shared with the records' values lent from its messages (the queue's doc): the last of them
    /// destroys it, maybe after this reader.
    consumer: SharedConsumer,
    /// Live splits. Looked up per record, so by a last-hit cache and a scan rather than hashing:
    /// librdkafka hands records over in runs of one partition.
    splits: Vec<LiveSplit>,
    last_hit: usize,
    finished: Vec<(SplitId, FinishReason)>,
    limit: BatchLimit,
    /// Room for a split's records in the next batch: the most one split had in the last (no doubling).
    group_capacity: usize,
    last_position_check: Instant,
    metrics: KafkaMetrics,
    /// Errors librdkafka keeps reporting for a split's partition (not authorized, gone).
    partition_errors: PartitionErrors,
    /// Splits at the end of their log, reported and (for a source-wide stop) confirmed.
    caught_up: CaughtUp,
    /// How long a split may not move before its fetch is restarted ([`STALL_AFTER`]; shorter in tests).
    stall_after: Duration,
    /// The configured stops, to resolve again for a split whose log was reset under it.
    stopping: StoppingOffsets,
    request_timeout: Duration,
    /// Fetch restarts so far (the metric's count, for tests).
    restarts: u64,
}

impl KafkaPartitionSplitReader {
    /// The split reader of reader `reader_index` of `readers`, which starts with `partitions`
    /// partitions (its consumer's share of the prefetch: [`super::consumer::prefetch`]).
    pub(crate) fn new(
        settings: &KafkaSourceSettings,
        (reader_index, readers): (usize, usize),
        partitions: usize,
        limit: BatchLimit,
        metrics: KafkaMetrics,
    ) -> Result<Self> {
        let consumer: BaseConsumer<TracingContext> = consumer_config(settings, reader_index, readers, partitions)
            .create_with_context(TracingContext::new(format!("reader-{reader_index}")).passing_refusals())
            .map_err(|e| crate::error::kafka("creating a reader's consumer", e))?;
        let consumer = Arc::new(consumer);
        let queue = ConsumerQueue::new(&consumer, limit.records, !uses_oauthbearer(&settings.properties))
            .ok_or_else(|| Error::runtime("creating a reader's consumer", "librdkafka gave no consumer queue"))?;
        Ok(KafkaPartitionSplitReader {
            queue,
            consumer,
            splits: Vec::new(),
            last_hit: 0,
            finished: Vec::new(),
            limit,
            group_capacity: 64,
            last_position_check: Instant::now(),
            metrics,
            partition_errors: PartitionErrors::new(settings.request_timeout, fetch_wait(settings)),
            caught_up: Default::default(),
            stall_after: STALL_AFTER,
            stopping: settings.stopping.clone(),
            request_timeout: settings.request_timeout,
            restarts: 0,
        })
    }

    /// With `confirm`, have the broker confirm splits at the end of their log.
    pub(super) fn confirming_caught_up(
        mut self,
        settings: &KafkaSourceSettings,
        reader_index: usize,
        confirm: bool,
    ) -> Self {
        if confirm {
            self.caught_up = CaughtUp::confirmed_by_broker(settings, reader_index);
        }
        self
    }

    fn tpl_of(&self, topic: &str, partitions: &[i32]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition(topic, *p);
        }
        tpl
    }

    /// The index of a live split.
    fn index_of(&mut self, topic: &str, partition: i32) -> Option<usize> {
        index_in(&self.splits, &mut self.last_hit, topic, partition)
    }

    /// Stop fetching a split and report it finished.
    fn finish(&mut self, topic: &str, partition: i32, reason: FinishReason, out: &mut Vec<(SplitId, FinishReason)>) {
        let Some(i) = self.index_of(topic, partition) else {
            return;
        };
        let split = self.splits.swap_remove(i);
        self.partition_errors.forget(topic, partition);
        if let Some(g) = &split.metrics.remaining {
            g.set(0.0);
        }
        debug!(split_id = %split.id, position = split.position, reason = reason.as_str(), "split reached its end");
        let tpl = self.tpl_of(topic, &[partition]);
        if let Err(e) = self.consumer.incremental_unassign(&tpl) {
            warn!(split_id = %split.id, error = %e, "could not unassign a finished split");
        }
        out.push((split.id, reason));
    }

    /// Finish bounded splits whose consumer position reached the stop offset: the position moves
    /// past transaction markers and aborted records that are never delivered as messages.
    fn check_positions(&mut self, out: &mut Vec<(SplitId, FinishReason)>) -> Result<()> {
        self.last_position_check = Instant::now();
        if !self.splits.iter().any(|s| s.stop.is_some()) {
            return Ok(());
        }
        let positions = self
            .consumer
            .position()
            .map_err(|e| crate::error::kafka("reading consumer positions", e))?;
        let mut done = Vec::new();
        for elem in positions.elements() {
            let Offset::Offset(pos) = elem.offset() else {
                continue;
            };
            if let Some(split) = self
                .index_of(elem.topic(), elem.partition())
                .map(|i| &mut self.splits[i])
            {
                if pos > split.position {
                    split.position = pos;
                    split.progress_at = Instant::now();
                    self.partition_errors
                        .cleared(elem.topic(), elem.partition(), "position moved");
                }
                if let Some(stop) = split.stop {
                    if let Some(g) = &split.metrics.remaining {
                        g.set((stop - split.position).max(0) as f64);
                    }
                    if pos >= stop {
                        done.push((split.topic.clone(), split.partition));
                    }
                }
            }
        }
        for (topic, partition) in done {
            self.finish(&topic, partition, FinishReason::StoppingOffset, out);
        }
        Ok(())
    }
}

impl Drop for KafkaPartitionSplitReader {
    fn drop(&mut self) {
        // records still held (unwritten, or paced) keep the consumer alive through their values:
        // it stops fetching now, not when the last of them is dropped
        if Arc::strong_count(&self.consumer) > 2 {
            if let Err(e) = self.consumer.unassign() {
                debug!(error = %e, "unassigning a closed reader's partitions");
            }
        }
    }
}

/// Whether the consumer authenticates with SASL OAUTHBEARER, whose token refresh needs librdkafka's
/// main queue served by the batch read (see `batch_queue`).
fn uses_oauthbearer(properties: &std::collections::BTreeMap<String, String>) -> bool {
    ["sasl.mechanism", "sasl.mechanisms"]
        .iter()
        .filter_map(|k| properties.get(*k))
        .any(|v| v.trim().eq_ignore_ascii_case("OAUTHBEARER"))
}

/// How long the consumer's fetches wait for records (`fetch.wait.max.ms`, librdkafka's default
/// 500 ms unless the source's properties set it).
fn fetch_wait(settings: &KafkaSourceSettings) -> Duration {
    let ms = settings
        .properties
        .get("fetch.wait.max.ms")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(500);
    Duration::from_millis(ms)
}

impl SplitReader for KafkaPartitionSplitReader {
    type Element = Record;
    type Split = KafkaPartitionSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Record>> {
        let mut batch = RecordsWithSplitIds::default();
        let mut finished = std::mem::take(&mut self.finished);
        if self.splits.is_empty() {
            batch.finished = finished;
            return Ok(batch);
        }
        let mut groups: Vec<(SplitId, Vec<Record>)> = Vec::new();
        let mut count = 0;
        let mut bytes = 0;
        let mut eof = false;
        let mut idle = false;
        let mut timeout = POLL_TIMEOUT;
        let mut to_finish: Vec<(Arc<str>, i32)> = Vec::new();
        let mut failure: Option<Error> = None;
        let mut out_of_range: Vec<(String, i32)> = Vec::new();
        while count < self.limit.records && bytes < self.limit.bytes && failure.is_none() && out_of_range.is_empty() {
            // librdkafka's batch read waits until it has all it was asked for or its timeout: the first
            // read asks for one record (waiting up to POLL_TIMEOUT), the next ones, without waiting, for
            // what is there, so a live tail's record (a market-close marker) goes on at once
            let want = if timeout.is_zero() {
                self.limit.read_size(count, bytes)
            } else {
                1
            };
            let (splits, last_hit, consumer_errors, partition_errors, group_capacity, caught_up) = (
                &mut self.splits,
                &mut self.last_hit,
                &self.metrics.consumer_errors,
                &mut self.partition_errors,
                &self.group_capacity,
                &mut self.caught_up,
            );
            let read = self.queue.read(timeout, want, |event| match event {
                Event::Message(m) => {
                    let Some(index) = index_in(splits, last_hit, m.topic, m.partition) else {
                        return; // a split removed a moment ago
                    };
                    let split = &mut splits[index];
                    // in queue order: a record behind the error came from a fetch after it
                    partition_errors.cleared(m.topic, m.partition, "records");
                    caught_up.record(&split.id);
                    if split.reset_from.is_some() || m.offset < split.position {
                        // librdkafka reset the position below the split's (a recreated or truncated
                        // log): its records wait until the split's stop is resolved against that log
                        split.reset_from.get_or_insert(m.offset);
                        return;
                    }
                    if split.stop.is_some_and(|stop| m.offset >= stop) {
                        to_finish.push((split.topic.clone(), split.partition));
                        return;
                    }
                    let record = Record {
                        topic: Some(Arc::clone(&split.topic)),
                        partition: Some(m.partition),
                        offset: Some(m.offset),
                        timestamp: m.timestamp,
                        // keys are short: copied; values lent from librdkafka's buffer (short ones copied)
                        key: m.key.map(Bytes::copy_from_slice),
                        value: m.lend_payload(),
                        headers: m.headers(),
                        ..Record::default()
                    };
                    split.position = m.offset + 1;
                    split.fetched_records += 1;
                    let (key_len, value_len) = (m.key.map_or(0, <[u8]>::len), m.payload.map_or(0, <[u8]>::len));
                    split.fetched_bytes += (key_len + value_len) as u64;
                    bytes += BatchLimit::cost(key_len, value_len);
                    split.last_timestamp = record.timestamp;
                    let slot = match split.slot {
                        Some(slot) => slot,
                        None => {
                            groups.push((split.id.clone(), Vec::with_capacity(*group_capacity)));
                            split.slot = Some(groups.len() - 1);
                            groups.len() - 1
                        }
                    };
                    groups[slot].1.push(record);
                    count += 1;
                    if split.stop.is_some_and(|stop| split.position >= stop) {
                        to_finish.push((split.topic.clone(), split.partition));
                    }
                }
                Event::PartitionEof {
                    topic,
                    partition,
                    offset,
                } => {
                    eof = true;
                    partition_errors.ended(topic, partition);
                    if let Some(index) = index_in(splits, last_hit, topic, partition) {
                        let split = &mut splits[index];
                        if offset < split.position || split.reset_from.is_some() {
                            // the log ends below the split's position: reset under it (see above)
                            split.reset_from.get_or_insert(offset);
                        } else {
                            caught_up.end_of_log(&split.id);
                        }
                    }
                }
                Event::Error {
                    code: RDKafkaRespErr::RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET,
                    topic,
                    partition,
                    ..
                } => {
                    out_of_range.push((topic.to_string(), partition));
                }
                Event::Error {
                    code: RDKafkaRespErr::RD_KAFKA_RESP_ERR__FATAL,
                    message,
                    topic,
                    partition,
                } => {
                    failure.get_or_insert(Error::runtime(
                        format!("consuming {topic}:{partition}"),
                        format!("fatal consumer error: {message}"),
                    ));
                }
                Event::Error {
                    code: RDKafkaRespErr::RD_KAFKA_RESP_ERR__AUTHENTICATION,
                    message,
                    ..
                } => {
                    failure.get_or_insert(Error::runtime(
                        "kafka (reader)",
                        format!("authentication failed: {message}"),
                    ));
                }
                Event::Error {
                    code,
                    message,
                    topic,
                    partition,
                } => {
                    consumer_errors.increment(1);
                    if PartitionErrors::is_persistent(code) && !topic.is_empty() {
                        partition_errors.seen(topic, partition, &message);
                    } else {
                        // transient: librdkafka retries broker failures by itself
                        debug!(topic, partition, error = %message, "consumer error");
                    }
                }
            });
            timeout = Duration::ZERO;
            if read == 0 {
                idle = count == 0;
                break;
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !out_of_range.is_empty() {
            return Err(self.out_of_range_error(&out_of_range));
        }
        if let Some(e) = self.partition_errors.failure() {
            return Err(e);
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let now = Instant::now();
        for split in &mut self.splits {
            split.slot = None;
            if split.fetched_records > 0 {
                split.progress_at = now;
                split.metrics.records_in.increment(split.fetched_records);
                split.metrics.bytes_in.increment(split.fetched_bytes);
                split.fetched_records = 0;
                split.fetched_bytes = 0;
                if let Some(stop) = split.stop {
                    if let Some(g) = &split.metrics.remaining {
                        g.set((stop - split.position).max(0) as f64);
                    }
                }
                if let Some(ts) = split.last_timestamp {
                    split.metrics.fetch_lag.set((now_ms - ts).max(0) as f64 / 1000.0);
                }
            }
        }
        to_finish.dedup();
        for (topic, partition) in to_finish {
            self.finish(&topic, partition, FinishReason::StoppingOffset, &mut finished);
        }
        if eof || idle || self.last_position_check.elapsed() >= POSITION_CHECK_EVERY {
            self.check_positions(&mut finished)?;
            self.restart_stalled_fetches();
        }
        self.apply_resets(&mut finished)?;
        self.probe_partition_errors();
        if let Some(most) = groups.iter().map(|(_, records)| records.len()).max() {
            self.group_capacity = most.max(16).min(self.limit.records);
        }
        batch.records = groups;
        batch.finished = finished;
        (batch.caught_up, batch.confirmed_caught_up) = self.caught_up.take(&self.consumer, &self.splits);
        Ok(batch)
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<KafkaPartitionSplit>) -> Result<()> {
        match change {
            SplitsChange::Add(splits) => {
                let mut tpl = TopicPartitionList::new();
                for split in splits {
                    let id = split.split_id();
                    if split.is_empty() {
                        debug!(split_id = %id, next_offset = split.next_offset, "empty split: finished at once");
                        self.finished.push((id, FinishReason::Empty));
                        continue;
                    }
                    tpl.add_partition_offset(&split.topic, split.partition, Offset::Offset(split.next_offset))
                        .map_err(|e| crate::error::kafka(format!("assigning {id}"), e))?;
                    let metrics = self
                        .metrics
                        .partition(&split.topic, split.partition, split.stop_offset.is_some());
                    if let Some(stop) = split.stop_offset {
                        if let Some(g) = &metrics.remaining {
                            g.set((stop - split.next_offset).max(0) as f64);
                        }
                    }
                    debug!(split_id = %id, next_offset = split.next_offset, "fetching split");
                    let live = LiveSplit::new(&split, id, metrics);
                    match self.index_of(&split.topic, split.partition) {
                        Some(i) => self.splits[i] = live,
                        None => self.splits.push(live),
                    }
                }
                if tpl.count() > 0 {
                    self.consumer
                        .incremental_assign(&tpl)
                        .map_err(|e| crate::error::kafka("assigning partitions", e))?;
                }
            }
            SplitsChange::Remove(ids) => {
                let mut tpl = TopicPartitionList::new();
                let errors = &mut self.partition_errors;
                self.splits.retain(|s| {
                    let keep = !ids.contains(&s.id);
                    if !keep {
                        tpl.add_partition(&s.topic, s.partition);
                        errors.forget(&s.topic, s.partition);
                    }
                    keep
                });
                if tpl.count() > 0 {
                    if let Err(e) = self.consumer.incremental_unassign(&tpl) {
                        warn!(error = %e, "could not unassign removed splits");
                    }
                }
            }
        }
        Ok(())
    }

    fn wake_up_handle(&self) -> Option<crate::core::split_reader::WakeUpHandle> {
        let waker = self.queue.waker();
        Some(Arc::new(move || waker.wake()))
    }

    fn pause_or_resume_splits(&mut self, pause: &[SplitId], resume: &[SplitId]) -> Result<()> {
        let (mut p, mut r) = (TopicPartitionList::new(), TopicPartitionList::new());
        let mut rearm = Vec::new();
        let now = Instant::now();
        for s in &mut self.splits {
            if pause.contains(&s.id) {
                p.add_partition(&s.topic, s.partition);
                s.paused = true;
                // a paused split cannot show it is healthy: its error is looked at again on resume
                s.rearm |= self.partition_errors.forget(&s.topic, s.partition);
            } else if resume.contains(&s.id) {
                r.add_partition(&s.topic, s.partition);
                s.paused = false;
                s.progress_at = now; // the stall clock starts again
                if std::mem::take(&mut s.rearm) {
                    rearm.push((s.topic.clone(), s.partition, s.position));
                }
            }
        }
        if p.count() > 0 {
            self.consumer
                .pause(&p)
                .map_err(|e| crate::error::kafka("pausing splits", e))?;
        }
        if r.count() > 0 {
            self.consumer
                .resume(&r)
                .map_err(|e| crate::error::kafka("resuming splits", e))?;
        }
        for (topic, partition, position) in rearm {
            self.rearm(&topic, partition, position);
        }
        Ok(())
    }
}

/// A Kafka source's split reader: over librdkafka, or under the deterministic simulation a
/// reader of the simulated cluster (`simulate`, tests only).
// one per fetcher, never moved once built: its size does not matter, and the native reader
// stays unboxed on the hot path
#[allow(clippy::large_enum_variant)]
pub enum PartitionReader {
    /// Over librdkafka.
    Native(KafkaPartitionSplitReader),
    /// Over a simulated cluster.
    Simulated(Box<dyn SplitReader<Element = Record, Split = KafkaPartitionSplit>>),
}

impl SplitReader for PartitionReader {
    type Element = Record;
    type Split = KafkaPartitionSplit;

    fn fetch(&mut self) -> Result<RecordsWithSplitIds<Record>> {
        match self {
            PartitionReader::Native(r) => r.fetch(),
            PartitionReader::Simulated(r) => r.fetch(),
        }
    }

    fn handle_splits_changes(&mut self, change: SplitsChange<KafkaPartitionSplit>) -> Result<()> {
        match self {
            PartitionReader::Native(r) => r.handle_splits_changes(change),
            PartitionReader::Simulated(r) => r.handle_splits_changes(change),
        }
    }

    fn wake_up_handle(&self) -> Option<crate::core::split_reader::WakeUpHandle> {
        match self {
            PartitionReader::Native(r) => r.wake_up_handle(),
            PartitionReader::Simulated(r) => r.wake_up_handle(),
        }
    }

    fn pause_or_resume_splits(&mut self, pause: &[SplitId], resume: &[SplitId]) -> Result<()> {
        match self {
            PartitionReader::Native(r) => r.pause_or_resume_splits(pause, resume),
            PartitionReader::Simulated(r) => r.pause_or_resume_splits(pause, resume),
        }
    }

    fn close(&mut self) -> Result<()> {
        match self {
            PartitionReader::Native(r) => r.close(),
            PartitionReader::Simulated(r) => r.close(),
        }
    }
}

/// A split reader of a simulated cluster, built from the source's settings.
#[cfg(test)]
pub(crate) type SimulatedReaders =
    std::sync::Arc<dyn Fn(&KafkaSourceSettings) -> Box<dyn SplitReader<Element = Record, Split = KafkaPartitionSplit>>>;

#[cfg(test)]
thread_local! {
    static SIMULATED: std::cell::RefCell<Vec<(String, SimulatedReaders)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Under the deterministic simulation on this thread: the source's split readers of the cluster at
/// `servers` are `readers`' (the fetch path over librdkafka's batch API is not simulated), until
/// the guard is dropped.
#[cfg(test)]
pub(crate) fn simulate(servers: &str, readers: SimulatedReaders) -> SimulatedGuard {
    SIMULATED.with(|s| s.borrow_mut().push((servers.to_string(), readers)));
    SimulatedGuard(servers.to_string())
}

/// The simulated split reader of `settings`' cluster, if one is simulated on this thread.
#[cfg(test)]
pub(crate) fn simulated(
    settings: &KafkaSourceSettings,
) -> Option<Box<dyn SplitReader<Element = Record, Split = KafkaPartitionSplit>>> {
    let readers = SIMULATED.with(|s| {
        s.borrow()
            .iter()
            .find(|(servers, _)| *servers == settings.bootstrap_servers)
            .map(|(_, r)| std::sync::Arc::clone(r))
    })?;
    Some(readers(settings))
}

/// Ends a [`simulate`] when dropped.
#[cfg(test)]
pub(crate) struct SimulatedGuard(String);

#[cfg(test)]
impl Drop for SimulatedGuard {
    fn drop(&mut self) {
        SIMULATED.with(|s| s.borrow_mut().retain(|(servers, _)| *servers != self.0));
    }
}
