//! The source-wide stop across a group's members (`eof_scope = "source"`): each member publishes
//! its splits' watermarks, the first record each of its readers holds, and the stop it knows, to
//! the checkpoint topic every 100 ms, and tails what the others published, so that each member's
//! clock holds a record until no split of the source, whoever reads it, can still find an
//! end-of-stream record at or before it (Flink's watermark alignment, FLIP-182, through Kafka).
//!
//! What a member publishes is a fact about the data, whoever reads the split later: a watermark
//! bounds the timestamps its split can still evaluate past the position it was taken at, and it
//! goes out with the stop the member knew when it took it (the clock gives both under one lock,
//! and a reader sets a stop before the watermark its batch moves). A member that takes the
//! split over reads it again from the last checkpoint and finds the same end-of-stream records,
//! so what another member released on the strength of a published watermark stays right. So
//! values are merged by the largest watermark and the earliest stop read, whoever wrote them, a
//! member the group has dropped included (a member that starts later reads what compaction has
//! kept, the last value of each split: a lower watermark only makes it wait longer). The records
//! are not transactional, and the tail reads uncommitted ones (a checkpoint's open transaction on
//! the topic must not hold the watermarks up); they are keyed `#event-time/<job>/<split>`
//! (`checkpoint_store::records::event_time_prefix`), compacted with the checkpoints, and
//! tombstoned with them by `--reset-state`. A member gives the clock nothing until it has read
//! what was published before it started (an old value may be followed by its tombstone).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::published::{Merged, Published};
use crate::checkpoint_store::KafkaStoreConfig;
use crate::client::cluster::{self, ClientSpec, Consumer, Outgoing, Producer};
use crate::core::event_time::EventTimeClock;
use crate::core::{sim, JobStats, SplitId};
use crate::error::{kafka, Result};
use crate::kafka::{KafkaPartitionSplit, Subscription};

/// How often a member publishes and reads the others' values.
const EVERY: Duration = Duration::from_millis(100);
/// How often the source's partitions are listed again (partitions added to a topic).
const LIST_EVERY: Duration = Duration::from_secs(5);
/// How long a reset's read and the last flush may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long listing a topic's partitions may take: the thread that lists also publishes and
/// reads, and a listing that times out is tried again at the next [`LIST_EVERY`].
const LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long this member's values may fail to reach the topic before the link fails the member:
/// the splits it reads would hold every member back without a word.
const FAIL_AFTER: Duration = Duration::from_secs(60);

/// The thread (a task, under a simulation) that publishes this member's values and tails the
/// others'; stopped (after a last publication) when dropped.
pub struct EventTimeLink {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Why the thread gave up (its values cannot be published), once it has.
    failure: watch::Receiver<Option<String>>,
}

impl EventTimeLink {
    /// Start publishing the clocks the session's runs put in `stats`, for the job of `store`
    /// reading `subscription` at `source_servers`, its values stamped `stamp` ([`stamp_of`]:
    /// values stamped otherwise are another job's, left out) (`--reset-state` has removed the
    /// values of the job before: `checkpoint_store`'s reset writes tombstones over them with the
    /// job's state).
    pub fn start(
        store: &KafkaStoreConfig,
        source_servers: &str,
        source_properties: &BTreeMap<String, String>,
        subscription: &Subscription,
        stamp: String,
        stats: Arc<JobStats>,
    ) -> Result<Self> {
        Self::start_failing_after(
            store,
            source_servers,
            source_properties,
            subscription,
            stamp,
            stats,
            FAIL_AFTER,
        )
    }

    /// [`start`](Self::start), failing when the values cannot be published for `fail_after`.
    fn start_failing_after(
        store: &KafkaStoreConfig,
        source_servers: &str,
        source_properties: &BTreeMap<String, String>,
        subscription: &Subscription,
        stamp: String,
        stats: Arc<JobStats>,
        fail_after: Duration,
    ) -> Result<Self> {
        let state_cluster = cluster::of(&store.bootstrap_servers);
        let [publisher, tail, lister] = specs(store, source_servers, source_properties);
        let producer = state_cluster.producer(&publisher)?;
        let tail = state_cluster.consumer(&tail)?;
        let lister = cluster::of(source_servers).consumer(&lister)?;
        tail.assign(&[(store.topic.as_str(), 0, Offset::Beginning)])
            .map_err(|e| kafka(format!("reading {}", store.topic), e))?;
        // what was published before this member started ends here (uncommitted records
        // included): an end-of-partition event may never come while the others keep publishing
        let (_, end) = tail
            .fetch_watermarks(&store.topic, 0, TIMEOUT)
            .map_err(|e| kafka(format!("reading the end of {}", store.topic), e))?;
        let link = Link {
            topic: store.topic.clone(),
            prefix: crate::checkpoint_store::records::event_time_prefix(&store.job),
            producer,
            tail,
            lister,
            subscription: subscription.clone(),
            properties: source_properties.clone(),
            stats,
            merged: Merged::of(stamp),
            splits: None,
            listed: None,
            sent: HashMap::new(),
            caught_up: end <= 0,
            end,
            warned: None,
            fail_after,
            clock: None,
            closed_published: false,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let (failed, failure) = watch::channel(None);
        if sim::active() {
            // a task of the simulated process: between its steps, virtual time passes
            crate::core::spawn(async move {
                let mut link = link;
                while link.step(&stopping, &failed, Duration::ZERO) {
                    tokio::time::sleep(EVERY).await;
                }
            });
            return Ok(EventTimeLink {
                stop,
                thread: None,
                failure,
            });
        }
        let thread = std::thread::Builder::new()
            .name("event-time".into())
            .spawn(move || {
                let mut link = link;
                while link.step(&stopping, &failed, EVERY) {}
            })
            .map_err(|e| crate::error::Error::io("starting the event-time link", e))?;
        Ok(EventTimeLink {
            stop,
            thread: Some(thread),
            failure,
        })
    }

    /// Wait until the link has failed, and say why: its values could not be published (a fatal
    /// producer error, or deliveries failing for a minute), or its thread ended.
    pub async fn failed(&mut self) -> String {
        match self.failure.wait_for(Option::is_some).await {
            Ok(failure) => failure.clone().unwrap_or_default(),
            Err(_) => "the event-time link's thread ended".to_string(),
        }
    }
}

impl Drop for EventTimeLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The stamp of a job's published values: its name, and a hash of the source settings its
/// values depend on (the cluster, the subscription, the starting and stopping offsets, the end
/// rule): a deployment of the same name on a shared state topic that reads other topics or
/// another day stamps its values otherwise, and the two do not stop each other.
pub fn stamp_of(job: &str, source: &crate::kafka::config::KafkaSourceConfig) -> String {
    let s = &source.settings;
    let settings = format!(
        "{}|{}|{}|{}|{}",
        s.bootstrap_servers,
        s.subscription,
        s.starting,
        s.stopping,
        source.eof.as_deref().unwrap_or("none")
    );
    // FNV-1a: stable across processes and versions
    let hash = settings.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{job}/{hash:016x}")
}

struct Link {
    topic: String,
    prefix: String,
    producer: Arc<dyn Producer>,
    tail: Box<dyn Consumer>,
    lister: Box<dyn Consumer>,
    subscription: Subscription,
    /// The source's properties (what a refused listing is explained with).
    properties: BTreeMap<String, String>,
    stats: Arc<JobStats>,
    merged: Merged,
    /// Every split of the source, once listed.
    splits: Option<HashSet<SplitId>>,
    listed: Option<tokio::time::Instant>,
    /// What was last published of each split.
    sent: HashMap<SplitId, Published>,
    /// The topic was read to its end once: before, a value read may be one a later tombstone
    /// ends, and nothing is given to the clock.
    caught_up: bool,
    /// The end of the topic when this member started.
    end: i64,
    /// When a failed read was last logged.
    warned: Option<tokio::time::Instant>,
    /// How long deliveries may fail before the link gives up ([`FAIL_AFTER`]).
    fail_after: Duration,
    /// The clock of the run going on (or the last one).
    clock: Option<Arc<EventTimeClock>>,
    /// The ended run's clock was published whole, once more.
    closed_published: bool,
}

impl Link {
    /// Read (waiting at most `wait`), list, publish; whether to go on (not after a failure, said
    /// to `failed`, nor after the last step once `stop` is set).
    fn step(&mut self, stop: &AtomicBool, failed: &watch::Sender<Option<String>>, wait: Duration) -> bool {
        let stopping = stop.load(Ordering::Relaxed);
        self.read(wait);
        if self
            .listed
            .is_none_or(|at| sim::now().saturating_duration_since(at) >= LIST_EVERY)
        {
            self.list();
            // and everything published again: a value whose delivery failed is not lost
            self.sent.clear();
        }
        // the run going on (or the last one): a new run's clock replaces the one before
        if let Some(now) = self.stats.event_time.get() {
            if !self.clock.as_ref().is_some_and(|c| Arc::ptr_eq(c, &now)) {
                self.clock = Some(now);
                self.closed_published = false;
                // the new run's splits are published whole, whoever published them last
                self.sent.clear();
            }
        }
        if let Some(clock) = self.clock.clone() {
            if let Some(splits) = self.splits.as_ref().filter(|_| self.caught_up) {
                clock.set_peers(self.merged.peers(splits));
            }
            // an ended run's clock is published once more, whole, then no longer: the next
            // owners of its splits publish them now (its fronts, hidden, would hide theirs)
            // (and again until every value of it went out)
            if !self.closed_published {
                let closed = clock.is_closed();
                self.closed_published = self.publish(&clock) && closed;
            }
        }
        if let Some(failure) = self.failure() {
            warn!(topic = %self.topic, "{failure}");
            let _ = failed.send(Some(failure));
            return false;
        }
        if stopping {
            if let Err(e) = self.producer.flush(TIMEOUT) {
                warn!(error = %e, "the last event-time values were not all acknowledged");
            }
            return false;
        }
        true
    }

    /// Read what was published, waiting at most `wait` for the first record.
    fn read(&mut self, wait: Duration) {
        let mut wait = wait;
        let (mut reached, mut at_end) = (false, false);
        while let Some(message) = self.tail.poll(wait) {
            wait = Duration::ZERO;
            match message {
                Ok(m) => {
                    reached |= m.offset + 1 >= self.end;
                    let Some(split) = m
                        .key
                        .as_deref()
                        .and_then(|k| std::str::from_utf8(k).ok())
                        .and_then(|k| k.strip_prefix(&self.prefix))
                    else {
                        continue;
                    };
                    let split: SplitId = Arc::from(split);
                    match m.payload.as_deref().map(serde_json::from_slice::<Published>) {
                        None => self.merged.apply(split, None),
                        Some(Ok(v)) => self.merged.apply(split, Some(v)),
                        // not a checkpoint: an unreadable value is left out (its split then holds
                        // the others back until its reader publishes again)
                        Some(Err(e)) => warn!(split_id = %split, error = %e, "an unreadable event-time value"),
                    }
                }
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => {
                    at_end = true;
                    break;
                }
                Err(e) => {
                    // until it reads again, nothing is released: say so, every 30 s at most
                    if self
                        .warned
                        .is_none_or(|at| sim::now().saturating_duration_since(at) >= Duration::from_secs(30))
                    {
                        self.warned = Some(sim::now());
                        warn!(topic = %self.topic, error = %e, caught_up = self.caught_up, "reading the members' event-time values failed; retrying");
                    }
                    break;
                }
            }
        }
        // the end of the partition where the consumer stands, which may be before `end` (its
        // fetch began before `end` was taken)
        if at_end {
            let position = self.tail.position(&self.topic, 0).ok().flatten();
            reached |= position.is_some_and(|o| o >= self.end);
        }
        if reached && !self.caught_up {
            self.caught_up = true;
            info!(
                splits = self.merged.splits.len(),
                "source-wide stop across the group: the values published so far are read"
            );
        }
    }

    /// List the source's partitions; until every topic has been listed, the peers are not set
    /// (and the clock releases nothing).
    fn list(&mut self) {
        self.listed = Some(sim::now());
        let mut splits = HashSet::new();
        match &self.subscription {
            Subscription::Partitions(list, _) => {
                splits.extend(list.iter().map(|(t, p)| Arc::from(KafkaPartitionSplit::id_of(t, *p))));
            }
            Subscription::Topics(topics) => {
                for topic in topics {
                    let what = format!("listing the partitions of {topic}");
                    match self.lister.metadata(Some(topic), LIST_TIMEOUT, &self.properties, &what) {
                        Ok(m) => match m.partitions_of(topic) {
                            Some(partitions) => {
                                splits.extend(
                                    partitions
                                        .iter()
                                        .map(|p| Arc::from(KafkaPartitionSplit::id_of(topic, *p))),
                                );
                            }
                            None => return,
                        },
                        Err(e) => {
                            debug!(topic, error = %e, "listing the partitions for the source-wide stop");
                            return;
                        }
                    }
                }
            }
            // refused with group coordination (config)
            Subscription::Pattern(_) => return,
        }
        // partitions are never taken away: a topic listed short (a stale broker) keeps the ones
        // seen before
        match &mut self.splits {
            Some(known) => known.extend(splits),
            None => {
                info!(
                    partitions = splits.len(),
                    "source-wide stop across the group: aligning with every member's partitions"
                );
                self.splits = Some(splits);
            }
        }
    }

    /// Why this member's values can no longer be published, if they cannot.
    fn failure(&self) -> Option<String> {
        if let Some((code, reason)) = self.producer.fatal_error() {
            return Some(format!(
                "publishing this member's event-time values to {} failed: {reason} ({code:?})",
                self.topic
            ));
        }
        let failing = self.producer.deliveries().failing_for(self.fail_after)?;
        Some(format!(
            "publishing this member's event-time values to {} failed for {:?} and more: {failing}",
            self.topic, self.fail_after
        ))
    }

    /// Publish what changed of this member's splits; whether every value went out to
    /// librdkafka's queue.
    fn publish(&mut self, clock: &EventTimeClock) -> bool {
        let (view, stop) = clock.local_view();
        let mut all = true;
        for split in view {
            let value = Published {
                watermark: split.watermark,
                front: split.front,
                stop,
                stamp: self.merged.stamp.clone(),
            };
            if self.sent.get(&split.id) == Some(&value) {
                continue;
            }
            let key = format!("{}{}", self.prefix, split.id);
            let Ok(payload) = serde_json::to_vec(&value) else {
                continue;
            };
            let mut record = Outgoing::to(&self.topic);
            record.partition = Some(0);
            record.key = Some(key.as_bytes());
            record.value = Some(&payload);
            match self.producer.send(&record) {
                Ok(()) => {
                    self.sent.insert(split.id, value);
                }
                // a full queue or a broker away: sent again next time, the value still unsent
                Err(e) => {
                    debug!(error = %e, "publishing an event-time value");
                    all = false;
                }
            }
        }
        all
    }
}

/// The link's clients: the producer of this member's values and the consumer of everyone's, on
/// the store's cluster, and the lister of the source's partitions.
pub(crate) fn specs<'a>(
    store: &'a KafkaStoreConfig,
    source_servers: &'a str,
    source_properties: &'a BTreeMap<String, String>,
) -> [ClientSpec<'a>; 3] {
    [
        ClientSpec::new(&store.bootstrap_servers, &store.properties, "event-time")
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("client.id", "tidegate-event-time"),
        ClientSpec::new(&store.bootstrap_servers, &store.properties, "event-time")
            .set("group.id", format!("tidegate-event-time-{}", store.owner))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_uncommitted")
            .set("enable.partition.eof", "true")
            .set("client.id", "tidegate-event-time"),
        ClientSpec::new(source_servers, source_properties, "event-time")
            .set("client.id", "tidegate-event-time")
            .set("allow.auto.create.topics", "false"),
    ]
}

#[cfg(test)]
#[path = "event_time_tests.rs"]
mod tests;
