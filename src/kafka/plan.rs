//! What a Kafka replay will read, before it reads: each partition's resolved starting and
//! stopping offsets (from the config, or what a state file has left), as the enumerator would
//! resolve them, and the first and last record timestamps in between. `tidegate plan` prints it;
//! the progress bar's expected total is the same sum ([`SourceSplit::remaining`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::Serialize;

use super::discovery::{admin_consumer, discover};
use super::enumerator::KafkaEnumeratorState;
use super::offsets::{OffsetsResolver, TopicPartition};
use super::source::KafkaSource;
use super::split::KafkaPartitionSplit;
use crate::client::TracingContext;
use crate::core::{Checkpoint, SourceSplit};
use crate::error::{Error, Result};

/// A Kafka source's checkpoint, as the state file holds it.
pub type KafkaCheckpoint = Checkpoint<KafkaEnumeratorState, KafkaPartitionSplit>;

/// One partition's part of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionPlan {
    pub topic: String,
    pub partition: i32,
    /// The next offset to read.
    pub start: i64,
    /// The stopping offset (exclusive); `None`: unbounded.
    pub stop: Option<i64>,
    /// Offsets from start to stop: an upper bound on the records read (transaction markers and
    /// aborted records take offsets but are not read; an end-of-stream record ends earlier).
    pub offsets: Option<u64>,
    /// Timestamp (ms since the epoch) of the first record to read, when there is one.
    pub first_timestamp: Option<i64>,
    /// Timestamp of the last record before the stop (for an unbounded split: the latest now).
    pub last_timestamp: Option<i64>,
    /// Already finished, by a restored state: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// With `--exact`: the records a run reads between start and stop (`read_committed`),
    /// counted by reading them; `None` otherwise or for an unbounded partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
}

/// How long looking up the edge timestamps may take in all, before they are left out.
const TIMESTAMP_BUDGET: Duration = Duration::from_secs(10);
/// How far before the stop the last record is looked for (markers and aborted records are
/// skipped by a read_committed consumer; a window of only those leaves the timestamp out).
const TAIL_WINDOW: i64 = 64;

/// The plan of `source`, resumed from `restored` if given: the partitions in order.
pub fn plan(source: &KafkaSource, restored: Option<KafkaCheckpoint>) -> Result<Vec<PartitionPlan>> {
    let settings = source.settings();
    let consumer = admin_consumer(settings)?;
    let mut parts: BTreeMap<TopicPartition, (KafkaPartitionSplit, Option<String>)> = BTreeMap::new();
    let mut initial_done = false;
    if let Some(cp) = restored {
        let stops_changed = source.check_restored_settings(cp.enumerator.settings.as_ref())?;
        initial_done = cp.enumerator.initial_discovery_done;
        // the readers' splits at their checkpointed positions, then the ones not yet assigned
        for snap in cp.splits {
            let finished = snap.finished.map(|f| match f.at {
                Some(at) => format!("{} at {at}", f.reason.as_str()),
                None => f.reason.as_str().to_string(),
            });
            parts.insert((snap.split.topic.clone(), snap.split.partition), (snap.split, finished));
        }
        for known in cp.enumerator.splits {
            let tp = (known.split.topic.clone(), known.split.partition);
            if !known.assigned && !known.removed {
                parts.entry(tp).or_insert((known.split, None));
            }
        }
        if stops_changed {
            let unfinished: Vec<TopicPartition> = parts
                .iter()
                .filter(|(_, (_, f))| f.is_none())
                .map(|(tp, _)| tp.clone())
                .collect();
            let resolver = OffsetsResolver::new(
                consumer.as_ref(),
                settings.request_timeout,
                settings.group_id.as_deref(),
            );
            let stops = resolver.resolve_stop(&settings.stopping, &unfinished)?;
            for tp in unfinished {
                if let Some((split, _)) = parts.get_mut(&tp) {
                    split.stop_offset = stops.get(&tp).copied().flatten();
                }
            }
        }
    }
    let request = super::discovery::DiscoveryRequest {
        known: parts.keys().cloned().collect(),
        initial_done,
        ..Default::default()
    };
    let discovery = discover(settings, consumer.as_ref(), &request, 1)?;
    if let Some((topic, error)) = discovery.unavailable.iter().next() {
        return Err(Error::runtime(
            "planning",
            format!("topic {topic} cannot be described now: {error}"),
        ));
    }
    if !discovery.missing_topics.is_empty() && !initial_done {
        return Err(Error::runtime(
            "planning",
            format!(
                "{} does not exist{}",
                discovery.missing_topics.join(", "),
                if settings.wait_for_topics {
                    " (a run would wait for it: source.wait_for_topics)"
                } else {
                    ""
                }
            ),
        ));
    }
    for split in discovery.new_splits {
        parts.insert((split.topic.clone(), split.partition), (split, None));
    }
    let mut plan: Vec<PartitionPlan> = parts
        .into_values()
        .map(|(split, finished)| PartitionPlan {
            offsets: if finished.is_some() { Some(0) } else { split.remaining() },
            topic: split.topic,
            partition: split.partition,
            start: split.next_offset,
            stop: split.stop_offset,
            first_timestamp: None,
            last_timestamp: None,
            finished,
            records: None,
        })
        .collect();
    if let Err(e) = edge_timestamps(source, &mut plan) {
        tracing::warn!(error = %e, "the first and last timestamps could not be read; the plan leaves them out");
    }
    Ok(plan)
}

/// How long a replay paced at `speed` takes over the planned event time: the earliest first
/// timestamp of the partitions left to read to the latest last one, over `speed`, in seconds.
pub fn paced_seconds(plan: &[PartitionPlan], speed: f64) -> Option<f64> {
    let left = plan.iter().filter(|p| p.finished.is_none());
    let first = left.clone().filter_map(|p| p.first_timestamp).min()?;
    let last = left.filter_map(|p| p.last_timestamp).max()?;
    Some((last - first).max(0) as f64 / 1000.0 / speed)
}

/// The sum of the offsets to read; `None` if a partition is unbounded.
pub fn total_offsets(plan: &[PartitionPlan]) -> Option<u64> {
    plan.iter().map(|p| p.offsets).sum()
}

/// Which record of a window to take the timestamp of.
#[derive(Clone, Copy, PartialEq)]
enum Edge {
    First,
    Last,
}

/// Fill in the first and last timestamps, reading at most two small windows per partition
/// (the record at the start, the records just before the stop), within [`TIMESTAMP_BUDGET`].
fn edge_timestamps(source: &KafkaSource, plan: &mut [PartitionPlan]) -> Result<()> {
    let settings = source.settings();
    let consumer: BaseConsumer<TracingContext> = crate::client::consumer_client_config(
        &settings.bootstrap_servers,
        &[
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
            ("enable.partition.eof", "true"),
            ("client.id", "tidegate-plan"),
            ("group.id", "tidegate-plan"),
            ("max.partition.fetch.bytes", "65536"),
        ],
        &settings.properties,
    )
    .create_with_context(TracingContext::new("plan"))
    .map_err(|e| crate::error::kafka("creating the plan's client", e))?;
    let deadline = Instant::now() + TIMESTAMP_BUDGET;
    // where each partition's records end: its stop, or for an unbounded one the log's end now
    let mut ends: BTreeMap<usize, i64> = BTreeMap::new();
    for (i, p) in plan.iter().enumerate() {
        if p.finished.is_some() || p.offsets == Some(0) {
            continue;
        }
        let end = match p.stop {
            Some(stop) => stop,
            None => {
                consumer
                    .fetch_watermarks(&p.topic, p.partition, settings.request_timeout)
                    .map_err(|e| crate::error::kafka("reading the end of the log", e))?
                    .1
            }
        };
        if end > p.start {
            ends.insert(i, end);
        }
    }
    for edge in [Edge::First, Edge::Last] {
        for (i, ts) in read_window(&consumer, plan, &ends, edge, deadline)? {
            match edge {
                Edge::First => plan[i].first_timestamp = Some(ts),
                Edge::Last => plan[i].last_timestamp = Some(ts),
            }
        }
    }
    Ok(())
}

/// Read, for each partition `i` of `ends`, up to `ends[i]`: from its start for [`Edge::First`],
/// from [`TAIL_WINDOW`] offsets before the end for [`Edge::Last`]. One topic at a time (the
/// end-of-partition event names only the partition). Returns the timestamps found.
fn read_window(
    consumer: &BaseConsumer<TracingContext>,
    plan: &[PartitionPlan],
    ends: &BTreeMap<usize, i64>,
    edge: Edge,
    deadline: Instant,
) -> Result<HashMap<usize, i64>> {
    let mut found = HashMap::new();
    let topics: HashSet<&str> = ends.keys().map(|&i| plan[i].topic.as_str()).collect();
    for topic in topics {
        let mut open: HashMap<i32, usize> = HashMap::new();
        let mut tpl = TopicPartitionList::new();
        for (&i, &end) in ends.iter().filter(|(&i, _)| plan[i].topic == topic) {
            let p = &plan[i];
            let from = match edge {
                Edge::First => p.start,
                Edge::Last => p.start.max(end - TAIL_WINDOW),
            };
            tpl.add_partition_offset(topic, p.partition, Offset::Offset(from))
                .map_err(|e| crate::error::kafka("planning", e))?;
            open.insert(p.partition, i);
        }
        consumer
            .assign(&tpl)
            .map_err(|e| crate::error::kafka("assigning the plan's partitions", e))?;
        while !open.is_empty() && Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    let Some(&i) = open.get(&m.partition()).filter(|_| m.topic() == topic) else {
                        continue;
                    };
                    let end = ends[&i];
                    if m.offset() < end {
                        if let Some(ts) = m.timestamp().to_millis() {
                            found.insert(i, ts);
                        }
                    }
                    if edge == Edge::First || m.offset() + 1 >= end {
                        open.remove(&m.partition());
                    }
                }
                // the end of the log (for read_committed: of the committed records)
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    open.remove(&partition);
                }
                Some(Err(e)) => return Err(crate::error::kafka("reading the plan's edge records", e)),
            }
        }
        let _ = consumer.unassign();
    }
    Ok(found)
}

/// What `tidegate plan` prints: as text, or with `--json` as this document.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    pub job: String,
    /// The state file resumed from, if it holds a checkpoint.
    pub state: Option<String>,
    pub checkpoint_id: Option<u64>,
    /// With a transactional sink the state also holds the previous checkpoint; a run resumes
    /// from it instead if the last one's transaction turns out not committed.
    pub may_resume_from_previous: bool,
    /// The end-of-stream expression: a partition may end earlier, at its first match.
    pub eof: Option<String>,
    /// `partition` (each partition at its own marker) or `source` (the first marker in any
    /// partition ends every partition at its timestamp); with `eof` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eof_scope: Option<&'static str>,
    /// The event-time pacing factor, when paced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_speed: Option<f64>,
    /// How long the paced replay of the planned event time takes: from the earliest first
    /// timestamp to the latest last one, over `replay_speed` (less if a marker ends it sooner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paced_seconds: Option<f64>,
    pub partitions: Vec<PartitionPlan>,
    /// Offsets to read in all; `None` when a partition is unbounded.
    pub total_offsets: Option<u64>,
    /// With `--exact`: the records to read in all, when every partition is bounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_records: Option<u64>,
}

impl PlanReport {
    /// The plan as a table, with a total line and what may end it sooner.
    pub fn text(&self) -> String {
        let ts = |t: Option<i64>| {
            t.and_then(|ms| {
                let at = std::time::UNIX_EPOCH.checked_add(Duration::from_millis(u64::try_from(ms).ok()?))?;
                Some(humantime::format_rfc3339_millis(at).to_string())
            })
            .unwrap_or_else(|| "-".to_string())
        };
        let count = |n: u64| indicatif::HumanCount(n).to_string();
        let mut out = match (&self.state, self.checkpoint_id) {
            (Some(path), Some(id)) => format!("plan of job {}, resuming from checkpoint {id} in {path}\n", self.job),
            _ => format!("plan of job {} (no checkpoint: a first run)\n", self.job),
        };
        let rows: Vec<[String; 6]> = self
            .partitions
            .iter()
            .map(|p| {
                [
                    format!("{}:{}", p.topic, p.partition),
                    p.start.to_string(),
                    p.stop.map_or("-".to_string(), |s| s.to_string()),
                    match (&p.finished, p.offsets) {
                        (Some(why), _) => format!("finished ({why})"),
                        (None, Some(n)) => count(n),
                        (None, None) => "unbounded".to_string(),
                    },
                    ts(p.first_timestamp),
                    ts(p.last_timestamp),
                ]
            })
            .collect();
        let header = [
            "partition",
            "start",
            "stop",
            "offsets",
            "first timestamp",
            "last timestamp",
        ]
        .map(String::from);
        let mut widths = [0usize; 6];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if (1..4).contains(&i) {
                        format!("{cell:>w$}")
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            out.push_str(&format!("  {}\n", line.join("  ").trim_end()));
        }
        let n = self.partitions.len();
        out.push_str(&match self.total_offsets {
            Some(total) => format!(
                "total: {} offsets in {n} partition{} (an upper bound on the records: transaction markers and aborted records take offsets too)\n",
                count(total),
                if n == 1 { "" } else { "s" }
            ),
            None => format!("total: unbounded ({n} partitions; no stopping offsets)\n"),
        });
        if let Some(records) = self.total_records {
            let each: Vec<String> = self
                .partitions
                .iter()
                .filter_map(|p| p.records.map(|r| format!("{}:{} {}", p.topic, p.partition, count(r))))
                .collect();
            // an end-of-stream record stops its partition at it: the ranges' count is then a
            // bound, not the number read
            out.push_str(&format!(
                "{} {} records to read (read_committed, counted by reading the ranges{}): {}\n",
                if self.eof.is_some() { "up to" } else { "exactly" },
                count(records),
                if self.eof.is_some() {
                    "; an end-of-stream record stops a partition sooner"
                } else {
                    ""
                },
                each.join(", ")
            ));
        }
        match (&self.eof, self.eof_scope) {
            (Some(eof), Some("source")) => out.push_str(&format!(
                "the first record matching `{eof}` in any partition ends every partition at its timestamp (eof_scope = \"source\"), if any\n"
            )),
            (Some(eof), _) => out.push_str(&format!(
                "each partition ends earlier at its first record matching `{eof}`, if any\n"
            )),
            (None, _) => {}
        }
        if let (Some(speed), Some(secs)) = (self.replay_speed, self.paced_seconds) {
            let round = |d: f64| humantime::format_duration(Duration::from_secs(d.max(0.0).round() as u64));
            // a minute or less to a tenth of a second: "6.5s", not "6s"
            let took = if secs < 60.0 {
                format!("{secs:.1}s")
            } else {
                round(secs).to_string()
            };
            out.push_str(&format!(
                "paced at {speed}x: {} of event time in about {took}{}\n",
                round(secs * speed),
                if self.eof.is_some() {
                    " (less if a marker ends it sooner)"
                } else {
                    ""
                }
            ));
        }
        if self.may_resume_from_previous {
            out.push_str("(the sink is transactional: if the last checkpoint's transaction was not committed, a run resumes from the checkpoint before it)\n");
        }
        out
    }
}
