//! Where splits start and stop (Flink's `OffsetsInitializer`s), resolved to concrete offsets by
//! the enumerator once, at discovery, so a restart never resolves `latest` again.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::debug;

use crate::client::cluster::{Consumer, KafkaResult};
use crate::client::committed::committed_offsets;
use crate::client::retry::retried;
use crate::client::TracingContext;
use crate::core::sim;
use crate::error::{Error, Result};

/// The two offset lookups a resolver makes: the seam's consumers, and a split reader's own
/// librdkafka consumer (which resolves a stop again after a reset).
pub trait OffsetLookup {
    /// ListOffsets: each element's offset a timestamp, `Beginning` or `End`.
    fn offsets_for_times(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList>;
    /// The offsets the consumer's group committed.
    fn committed_offsets(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList>;
}

impl OffsetLookup for dyn Consumer + '_ {
    fn offsets_for_times(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        Consumer::offsets_for_times(self, partitions, timeout)
    }

    fn committed_offsets(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        Consumer::committed_offsets(self, partitions, timeout)
    }
}

impl OffsetLookup for BaseConsumer<TracingContext> {
    fn offsets_for_times(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        rdkafka::consumer::Consumer::offsets_for_times(self, partitions, timeout)
    }

    fn committed_offsets(&self, partitions: TopicPartitionList, timeout: Duration) -> KafkaResult<TopicPartitionList> {
        rdkafka::consumer::Consumer::committed_offsets(self, partitions, timeout)
    }
}

/// The pause before a ListOffsets call that met a leader change is repeated.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// Whether a ListOffsets error is a leader change a moment cures (a broker gone, a leader not
/// yet elected or moved), not a refusal.
fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    e.rdkafka_error_code().is_some_and(|code| {
        matches!(
            code,
            DestroyBroker
                | BrokerTransportFailure
                | AllBrokersDown
                | LeaderNotAvailable
                | NotLeaderForPartition
                | FencedLeaderEpoch
                | UnknownLeaderEpoch
                // a new leader whose high watermark is not caught up yet (KIP-207)
                | OffsetNotAvailable
        )
    })
}

pub use crate::client::TopicPartition;

/// Where a committed-offsets start goes when the group has no offset for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommittedReset {
    /// The partition's earliest offset.
    Earliest,
    /// The partition's end.
    Latest,
    /// An error naming the partition.
    None,
}

/// Where splits start (inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    /// Each partition's earliest offset.
    Earliest,
    /// Each partition's end: only records written from now on.
    Latest,
    /// The group's committed offsets (needs `group_id`), else `reset`.
    Committed {
        /// Where a partition without a committed offset starts.
        reset: CommittedReset,
    },
    /// The first offset whose timestamp is at or after this (ms since the epoch); latest if none.
    Timestamp(i64),
    /// Given offsets; partitions not listed start at earliest.
    Specific(BTreeMap<TopicPartition, i64>),
    /// The same offset in every partition (kcat's `-o N`), kept within what each partition
    /// holds: earliest where it was deleted, latest where it is not written yet.
    Offset(i64),
}

/// Where splits stop (exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoppingOffsets {
    /// Unbounded.
    None,
    /// The end of each partition when it is discovered (the last stable offset under
    /// `read_committed`).
    Latest,
    /// The first offset whose timestamp is at or after this (ms); the end of the partition if none.
    Timestamp(i64),
    /// Given offsets; partitions not listed stop at latest.
    Specific(BTreeMap<TopicPartition, i64>),
    /// The same offset in every partition, or the end of a partition at discovery where that
    /// comes first (a bounded replay ends).
    Offset(i64),
}

impl StoppingOffsets {
    /// Whether splits stop at all.
    pub fn is_bounded(&self) -> bool {
        !matches!(self, StoppingOffsets::None)
    }
}

/// Epoch milliseconds as RFC 3339 UTC, for people.
pub fn time_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms"))
}

fn offsets_text(map: &BTreeMap<TopicPartition, i64>) -> String {
    map.iter()
        .map(|((t, p), o)| format!("{t}:{p} = {o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// In the config's own words.
impl std::fmt::Display for StartingOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartingOffsets::Earliest => f.write_str("earliest"),
            StartingOffsets::Latest => f.write_str("latest"),
            StartingOffsets::Committed { reset } => match reset {
                CommittedReset::Earliest => f.write_str("committed (else earliest)"),
                CommittedReset::Latest => f.write_str("committed (else latest)"),
                CommittedReset::None => f.write_str("committed (an error where there is none)"),
            },
            StartingOffsets::Timestamp(ms) => write!(f, "timestamp {}", time_text(*ms)),
            StartingOffsets::Specific(map) => write!(f, "offsets {} (the others at earliest)", offsets_text(map)),
            StartingOffsets::Offset(o) => write!(f, "offset {o} in every partition (within what it holds)"),
        }
    }
}

/// In the config's own words.
impl std::fmt::Display for StoppingOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoppingOffsets::None => f.write_str("none (unbounded)"),
            StoppingOffsets::Latest => f.write_str("latest (the ends at start)"),
            StoppingOffsets::Timestamp(ms) => write!(f, "timestamp {}", time_text(*ms)),
            StoppingOffsets::Specific(map) => write!(f, "offsets {} (the others at latest)", offsets_text(map)),
            StoppingOffsets::Offset(o) => write!(f, "offset {o} in every partition (or its end at start)"),
        }
    }
}

/// Parse `topic:partition` (the partition after the last colon, so topics may contain colons).
pub fn parse_topic_partition(s: &str) -> Option<TopicPartition> {
    let (topic, partition) = s.rsplit_once(':')?;
    let partition: i32 = partition.trim().parse().ok()?;
    (!topic.is_empty() && partition >= 0).then(|| (topic.to_string(), partition))
}

/// Resolves offset specifications against the cluster with one ListOffsets request per kind.
pub struct OffsetsResolver<'a, C: OffsetLookup + ?Sized> {
    consumer: &'a C,
    timeout: Duration,
    group_id: Option<&'a str>,
}

impl<'a, C: OffsetLookup + ?Sized> OffsetsResolver<'a, C> {
    pub fn new(consumer: &'a C, timeout: Duration, group_id: Option<&'a str>) -> Self {
        OffsetsResolver {
            consumer,
            timeout,
            group_id,
        }
    }

    /// ListOffsets for each partition: `spec` is a timestamp, or `Offset::End` / `Offset::Beginning`.
    /// `None` where no record is at or after the timestamp.
    fn list_offsets(
        &self,
        partitions: &[TopicPartition],
        spec: Offset,
    ) -> Result<HashMap<TopicPartition, Option<i64>>> {
        let mut out = HashMap::new();
        if partitions.is_empty() {
            return Ok(out);
        }
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in partitions {
            tpl.add_partition_offset(topic, *partition, spec)
                .map_err(|e| crate::error::kafka(format!("offsets request for {topic}:{partition}"), e))?;
        }
        let what = match spec {
            Offset::End => "latest offsets".to_string(),
            Offset::Beginning => "earliest offsets".to_string(),
            Offset::Offset(ts) => format!("offsets for timestamp {ts}"),
            other => format!("offsets for {other:?}"),
        };
        // a partition whose leader just died fails the call when the controller fences that
        // broker (librdkafka destroys its handle), though the partition has a new leader a
        // moment later: such errors are retried until the request timeout
        let deadline = sim::now() + self.timeout;
        let result = loop {
            let remaining = deadline.saturating_duration_since(sim::now());
            let attempt = self.consumer.offsets_for_times(tpl.clone(), remaining);
            let transient = match &attempt {
                Ok(list) => list
                    .elements()
                    .iter()
                    .any(|e| e.error().is_err_and(|e| is_transient(&e))),
                Err(e) => is_transient(e),
            };
            if !transient || sim::now() + RETRY_BACKOFF >= deadline || sim::active() {
                break attempt;
            }
            debug!(what = %what, "listing offsets met a leader change; retrying");
            std::thread::sleep(RETRY_BACKOFF);
        }
        .map_err(|e| crate::error::kafka(format!("listing {what} (timeout {:?})", self.timeout), e))?;
        for elem in result.elements() {
            elem.error().map_err(|e| {
                crate::error::kafka(format!("listing {what} of {}:{}", elem.topic(), elem.partition()), e)
            })?;
            let offset = match elem.offset() {
                Offset::Offset(n) if n >= 0 => Some(n),
                _ => None,
            };
            out.insert((elem.topic().to_string(), elem.partition()), offset);
        }
        Ok(out)
    }

    fn end_or_start(&self, partitions: &[TopicPartition], spec: Offset) -> Result<HashMap<TopicPartition, i64>> {
        self.list_offsets(partitions, spec)?
            .into_iter()
            .map(|(tp, o)| {
                o.map(|o| (tp.clone(), o)).ok_or_else(|| {
                    Error::runtime(
                        "resolving offsets",
                        format!("the broker returned no offset for {}:{}", tp.0, tp.1),
                    )
                })
            })
            .collect()
    }

    pub fn latest(&self, partitions: &[TopicPartition]) -> Result<HashMap<TopicPartition, i64>> {
        self.end_or_start(partitions, Offset::End)
    }

    pub fn earliest(&self, partitions: &[TopicPartition]) -> Result<HashMap<TopicPartition, i64>> {
        self.end_or_start(partitions, Offset::Beginning)
    }

    /// Timestamp lookups, falling back to the end of the partition where nothing is that late.
    pub fn for_timestamp(&self, partitions: &[TopicPartition], ts: i64) -> Result<HashMap<TopicPartition, i64>> {
        let found = self.list_offsets(partitions, Offset::Offset(ts))?;
        let missing: Vec<TopicPartition> = found
            .iter()
            .filter(|(_, o)| o.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        let ends = self.latest(&missing)?;
        Ok(found
            .into_iter()
            .map(|(tp, o)| {
                let offset = o.unwrap_or_else(|| ends[&tp]);
                (tp, offset)
            })
            .collect())
    }

    /// Concrete start offsets for newly discovered partitions.
    pub fn resolve_start(
        &self,
        spec: &StartingOffsets,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        match spec {
            StartingOffsets::Earliest => self.earliest(partitions),
            StartingOffsets::Latest => self.latest(partitions),
            StartingOffsets::Timestamp(ts) => self.for_timestamp(partitions, *ts),
            StartingOffsets::Specific(map) => {
                let unlisted: Vec<TopicPartition> =
                    partitions.iter().filter(|tp| !map.contains_key(*tp)).cloned().collect();
                let mut out = self.earliest(&unlisted)?;
                let listed: Vec<TopicPartition> =
                    partitions.iter().filter(|tp| map.contains_key(*tp)).cloned().collect();
                let (lows, highs) = (self.earliest(&listed)?, self.latest(&listed)?);
                for tp in listed {
                    let (o, low, high) = (map[&tp], lows[&tp], highs[&tp]);
                    // a start outside the log would silently be empty, or fail blaming retention
                    if o < low || o > high {
                        return Err(Error::config(
                            format!("source.starting_offsets.offsets.\"{}:{}\"", tp.0, tp.1),
                            format!(
                                "{o} is outside {}:{}, which holds offsets {low} to {high} (a start may be {low} to {high})",
                                tp.0, tp.1
                            ),
                        ));
                    }
                    out.insert(tp, o);
                }
                Ok(out)
            }
            StartingOffsets::Committed { reset } => self.committed(partitions, *reset),
            StartingOffsets::Offset(o) => {
                let (lows, highs) = (self.earliest(partitions)?, self.latest(partitions)?);
                Ok(partitions
                    .iter()
                    .map(|tp| {
                        let (low, high) = (lows[tp], highs[tp]);
                        let start = (*o).clamp(low, high.max(low));
                        if start != *o {
                            debug!(topic = %tp.0, partition = tp.1, offset = *o, start, low, high, "starting offset kept within the partition");
                        }
                        (tp.clone(), start)
                    })
                    .collect())
            }
        }
    }

    fn committed(&self, partitions: &[TopicPartition], reset: CommittedReset) -> Result<HashMap<TopicPartition, i64>> {
        let Some(group) = self.group_id else {
            return Err(Error::config(
                "source.starting_offsets",
                "`committed` needs source.group_id",
            ));
        };
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in partitions {
            tpl.add_partition(topic, *partition);
        }
        // the group's coordinator may be moving or loading: passing answers, retried
        let what = format!("reading committed offsets of group {group}");
        let committed = retried(&what, self.timeout, |left| {
            let answer = self
                .consumer
                .committed_offsets(tpl.clone(), left)
                .map_err(|e| crate::error::kafka(&what, e))?;
            committed_offsets(&answer, &what)
        })?;
        let mut out = HashMap::new();
        let mut without = Vec::new();
        for (tp, offset) in committed {
            match offset {
                Some(n) => {
                    out.insert(tp, n);
                }
                None => without.push(tp),
            }
        }
        if !without.is_empty() {
            let resolved = match reset {
                CommittedReset::Earliest => self.earliest(&without)?,
                CommittedReset::Latest => self.latest(&without)?,
                CommittedReset::None => {
                    let names: Vec<String> = without.iter().map(|(t, p)| format!("{t}:{p}")).collect();
                    return Err(Error::runtime(
                        "starting offsets",
                        format!(
                            "group {group} has no committed offset for {} and the reset is `none` \
                             (set source.starting_offsets = {{ committed = \"earliest\" }} or \"latest\")",
                            names.join(", ")
                        ),
                    ));
                }
            };
            out.extend(resolved);
        }
        Ok(out)
    }

    /// Concrete stop offsets (`None` = unbounded).
    pub fn resolve_stop(
        &self,
        spec: &StoppingOffsets,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, Option<i64>>> {
        let wrap = |m: HashMap<TopicPartition, i64>| m.into_iter().map(|(tp, o)| (tp, Some(o))).collect();
        match spec {
            StoppingOffsets::None => Ok(partitions.iter().map(|tp| (tp.clone(), None)).collect()),
            StoppingOffsets::Latest => self.latest(partitions).map(wrap),
            StoppingOffsets::Timestamp(ts) => self.for_timestamp(partitions, *ts).map(wrap),
            StoppingOffsets::Specific(map) => {
                let unlisted: Vec<TopicPartition> =
                    partitions.iter().filter(|tp| !map.contains_key(*tp)).cloned().collect();
                let mut out: HashMap<TopicPartition, Option<i64>> = wrap(self.latest(&unlisted)?);
                for tp in partitions {
                    if let Some(o) = map.get(tp) {
                        out.insert(tp.clone(), Some(*o));
                    }
                }
                Ok(out)
            }
            StoppingOffsets::Offset(o) => {
                let ends = self.latest(partitions)?;
                Ok(ends.into_iter().map(|(tp, end)| (tp, Some(end.min(*o)))).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use rdkafka::types::RDKafkaRespErr;

    use super::*;
    use crate::client::committed::answer;

    /// A group whose OffsetFetch answers partition 1 of `t` with an error `errors` times, then
    /// with its committed offset 5 (partition 0: 7); every partition's earliest offset is 0.
    struct PendingCommit {
        errors: Cell<u32>,
    }

    impl OffsetLookup for PendingCommit {
        fn offsets_for_times(&self, partitions: TopicPartitionList, _: Duration) -> KafkaResult<TopicPartitionList> {
            let mut out = TopicPartitionList::new();
            for e in partitions.elements() {
                out.add_partition_offset(e.topic(), e.partition(), Offset::Offset(0))?;
            }
            Ok(out)
        }

        fn committed_offsets(&self, _: TopicPartitionList, _: Duration) -> KafkaResult<TopicPartitionList> {
            let ok = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR;
            let unstable = RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNSTABLE_OFFSET_COMMIT;
            let left = self.errors.get();
            self.errors.set(left.saturating_sub(1));
            Ok(if left > 0 {
                answer(&[(0, Offset::Offset(7), ok), (1, Offset::Invalid, unstable)])
            } else {
                answer(&[(0, Offset::Offset(7), ok), (1, Offset::Offset(5), ok)])
            })
        }
    }

    /// A partition's error in the committed offsets (here an offset commit still pending in an
    /// open transaction) is retried, not read as "nothing committed" and reset to earliest: that
    /// would read again what the group had consumed. Past the timeout, it is an error naming it.
    #[test]
    fn a_committed_start_retries_a_partition_s_error_and_never_resets_it() {
        let partitions = [("t".to_string(), 0), ("t".to_string(), 1)];
        let spec = StartingOffsets::Committed {
            reset: CommittedReset::Earliest,
        };
        let group = PendingCommit { errors: Cell::new(2) };
        let resolver = OffsetsResolver::new(&group, Duration::from_secs(5), Some("g"));
        let start = resolver
            .resolve_start(&spec, &partitions)
            .expect("answered after two errors");
        assert_eq!(start[&partitions[0]], 7);
        assert_eq!(
            start[&partitions[1]], 5,
            "the committed offset, not the reset's earliest"
        );

        let group = PendingCommit {
            errors: Cell::new(u32::MAX),
        };
        let resolver = OffsetsResolver::new(&group, Duration::from_millis(500), Some("g"));
        let e = resolver.resolve_start(&spec, &partitions).expect_err("never answered");
        let text = e.chain_text();
        assert!(text.contains("t:1") && text.contains("still failing"), "{text}");
    }

    #[test]
    fn topic_partition_strings() {
        assert_eq!(parse_topic_partition("trades:0"), Some(("trades".into(), 0)));
        assert_eq!(parse_topic_partition("a:b:12"), Some(("a:b".into(), 12)));
        assert_eq!(parse_topic_partition("trades"), None);
        assert_eq!(parse_topic_partition(":1"), None);
        assert_eq!(parse_topic_partition("t:-1"), None);
    }
}
