//! What the Kafka enumerator does with a discovery's findings: new partitions, topics that
//! answer with an error (kept: a broker restarting), partitions the broker calls unknown (gone
//! only once that lasted for the request timeout), restored splits checked against their log,
//! and topics deleted and recreated under their splits (an error, or with `offset_reset` a reset).

use std::collections::BTreeSet;
use std::time::Instant;

use tracing::{info, warn};

use super::KafkaSourceEnumerator;
use crate::core::{EnumeratorContext, RemoveSplits, SourceEvent, SourceSplit, SplitId};
use crate::error::{Error, Result};
use crate::kafka::discovery::{Discovery, PartitionLog};
use crate::kafka::split::{reader_owner, KafkaPartitionSplit};

/// What to do about a split's stored offsets to go on.
const HOW_TO_GO_ON: &str = "set source.offset_reset = \"earliest\" or \"latest\" to read the new log from its start \
                            or its end, or start the job over with --reset-state";

impl KafkaSourceEnumerator {
    pub(super) fn handle_discovery(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        d: Discovery,
    ) -> Result<()> {
        let now = Instant::now();
        self.note_unavailable(&d, now);
        if !self.initial_done {
            // the first discovery sees every subscribed topic, or waits: a partition found later
            // would start at earliest, not at the configured starting offsets
            if !d.missing_topics.is_empty() {
                if self.settings.wait_for_topics {
                    if self.waiting_for != d.missing_topics {
                        info!(missing = %d.missing_topics.join(", "), "waiting for the subscribed topics to exist");
                        self.waiting_for = d.missing_topics.clone();
                    }
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
            if let Some((topic, since)) = self.unavailable_since.iter().min_by_key(|(_, since)| **since) {
                let timeout = self.settings.request_timeout;
                if !self.settings.wait_for_topics && now.duration_since(*since) >= timeout {
                    let error = d.unavailable.get(topic).cloned().unwrap_or_default();
                    return Err(Error::runtime(
                        "partition discovery",
                        format!("topic {topic} cannot be described: {error} (for {timeout:?}, the source's request_timeout)"),
                    ));
                }
                return Ok(());
            }
        }
        self.handle_recreated(ctx, &d)?;
        self.check_restored(&d)?;
        if !d.new_splits.is_empty() {
            info!(
                count = d.new_splits.len(),
                initial = !self.initial_done,
                "discovered new partitions"
            );
        }
        for split in d.new_splits.iter().cloned() {
            self.add_pending(split);
        }
        self.handle_missing(ctx, &d, now)?;
        if !self.initial_done && self.settings.assignment.is_some() {
            // a group member's first discovery: read once a checkpoint holds where it starts,
            // and which partitions there were (a partition of them no run mentions later was
            // dealt to a member that never checkpointed, not added)
            self.held_for_checkpoint = Some(None);
            self.initial_partitions = d.partition_counts.clone();
            ctx.request_checkpoint();
        }
        self.initial_done = true;
        Ok(())
    }

    /// Topics the broker answered with an error: said once when it starts, once when it ends.
    fn note_unavailable(&mut self, d: &Discovery, now: Instant) {
        for (topic, error) in &d.unavailable {
            if !self.unavailable_since.contains_key(topic) {
                warn!(
                    topic,
                    error, "the broker answers the topic with an error; its splits are kept and discovery looks again"
                );
                self.unavailable_since.insert(topic.clone(), now);
            }
        }
        self.unavailable_since.retain(|topic, since| {
            let still = d.unavailable.contains_key(topic);
            if !still {
                info!(
                    topic,
                    after_ms = since.elapsed().as_millis() as u64,
                    "the topic answers again"
                );
            }
            still
        });
    }

    /// Known and restored splits whose partition is not there (its topic unknown to the broker,
    /// not answering with another error): gone once that lasted for the request timeout.
    fn handle_missing(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        d: &Discovery,
        now: Instant,
    ) -> Result<()> {
        let timeout = self.settings.request_timeout;
        let absent = |topic: &str, partition: i32| {
            !d.unavailable.contains_key(topic) && !d.partitions.contains(&(topic.to_string(), partition))
        };
        let mut candidates: BTreeSet<(String, i32)> = self
            .known
            .values()
            .filter(|k| !k.removed && absent(&k.split.topic, k.split.partition))
            .map(|k| (k.split.topic.clone(), k.split.partition))
            .collect();
        candidates.extend(
            self.restored
                .iter()
                .flatten()
                .filter(|s| absent(&s.topic, s.partition))
                .map(|s| (s.topic.clone(), s.partition)),
        );
        self.missing_since.retain(|tp, since| {
            let still = candidates.contains(tp);
            if !still {
                info!(topic = %tp.0, partition = tp.1, after_ms = since.elapsed().as_millis() as u64, "the partition exists again");
            }
            still
        });
        let mut gone = Vec::new();
        let mut newly: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
        for tp in candidates {
            let since = *self.missing_since.entry(tp.clone()).or_insert_with(|| {
                newly.entry(tp.0.clone()).or_default().push(tp.1);
                now
            });
            if now.duration_since(since) >= timeout {
                gone.push(tp);
            }
        }
        for (topic, partitions) in newly {
            warn!(topic, ?partitions, timeout_s = timeout.as_secs(),
                  "the broker says these partitions do not exist; their splits end if that lasts for source.request_timeout");
        }
        for (topic, partition) in gone {
            self.missing_since.remove(&(topic.clone(), partition));
            let id: SplitId = KafkaPartitionSplit::id_of(&topic, partition).into();
            warn!(split_id = %id, "partition no longer exists; finishing its split");
            if let Some(waiting) = self.restored.as_mut() {
                waiting.retain(|s| s.split_id() != id);
            }
            let Some(k) = self.known.get_mut(&id) else {
                continue;
            };
            // forgotten, so a topic created again under the name is discovered anew (its
            // partitions as added ones: at earliest)
            k.removed = true;
            self.initial_partitions.remove(&topic);
            let owner = reader_owner(&topic, partition, self.parallelism, self.settings.instance);
            if k.assigned {
                ctx.send_event_to_reader(owner, SourceEvent(Box::new(RemoveSplits(vec![id.clone()]))))?;
            } else if let Some(list) = self.pending.get_mut(&owner) {
                list.retain(|p| *p != id);
            }
        }
        if self.restored.as_ref().is_some_and(Vec::is_empty) {
            self.restored = None;
        }
        Ok(())
    }

    /// Restored splits whose partition's log the discovery read: a split whose topic was
    /// recreated (another id), or whose log ends below its stored offset (recreated or
    /// truncated), does not belong to this log: an error, or with `offset_reset` a split
    /// started again in it. The others go on, with new stops if the stopping offsets changed.
    fn check_restored(&mut self, d: &Discovery) -> Result<()> {
        let Some(waiting) = self.restored.take() else {
            return Ok(());
        };
        let mut still = Vec::new();
        for split in waiting {
            let tp = (split.topic.clone(), split.partition);
            let Some(log) = d.logs.get(&tp) else {
                still.push(split); // its topic does not answer, or is not there: see handle_missing
                continue;
            };
            let now_id = d.topic_ids.get(&split.topic);
            let why = match (&split.topic_id, now_id) {
                (Some(then), Some(now)) if then != now => Some(format!(
                    "topic {} was deleted and recreated since the last checkpoint was written (its id was {then}, now {now})",
                    split.topic
                )),
                _ if split.next_offset > log.latest => Some(format!(
                    "the log of {}:{} ends below the stored offset: the topic was likely deleted and recreated, or \
                     truncated, since the last checkpoint was written",
                    split.topic, split.partition
                )),
                _ => None,
            };
            let split = match why {
                Some(why) => self.reset(split, log, now_id, &why, "restoring")?,
                None => {
                    let mut split = split.clone();
                    if self.stops_changed {
                        let old = split.describe();
                        split.stop_offset = log.stop;
                        info!(split_id = %split.split_id(), was = %old, now = %split.describe(),
                              "stopping_offsets changed since the last checkpoint: the unfinished split gets the new stop");
                    }
                    if split.topic_id.is_none() {
                        split.topic_id = now_id.cloned();
                    }
                    split
                }
            };
            self.add_pending(split);
        }
        self.restored = (!still.is_empty()).then_some(still);
        Ok(())
    }

    /// A split whose offsets belong to another log than its partition's now (`why`): an error
    /// naming the partition, its stored offset and the log's range; or, with `offset_reset`,
    /// the split started again at the log's start or end, its stop resolved in it (logged).
    fn reset(
        &self,
        split: KafkaPartitionSplit,
        log: &PartitionLog,
        now_id: Option<&String>,
        why: &str,
        doing: &str,
    ) -> Result<KafkaPartitionSplit> {
        let start = match self.settings.offset_reset.as_str() {
            "earliest" => log.earliest,
            "latest" => log.latest,
            _ => {
                return Err(Error::runtime(
                    format!("{doing} {}:{}", split.topic, split.partition),
                    format!(
                        "{why}. Its stored offset {} (stop {}) belongs to the old log; the partition holds offsets {} \
                         to {} now. To go on, {HOW_TO_GO_ON}",
                        split.next_offset,
                        split.stop_offset.map_or("none".to_string(), |s| s.to_string()),
                        log.earliest,
                        log.latest
                    ),
                ));
            }
        };
        let mut fresh = KafkaPartitionSplit::new(split.topic.clone(), split.partition, start, log.stop)
            .with_topic_id(now_id.cloned());
        // (a group job's restore takes the entry that counts the most handovers)
        fresh.handovers = split.handovers;
        warn!(split_id = %split.split_id(), reason = why, was = %split.describe(), now = %fresh.describe(),
              offset_reset = %self.settings.offset_reset,
              "the split's offsets belong to another log than its partition's: source.offset_reset starts it again in this one, \
               its stop resolved from source.stopping_offsets");
        Ok(fresh)
    }

    /// Assigned splits whose topic got another id (deleted and recreated while it was read).
    /// Splits that finished before a restart are left alone; one that finished in this run is
    /// not known to have (the readers keep that), so it is started again in the new topic too.
    fn handle_recreated(
        &mut self,
        ctx: &mut EnumeratorContext<KafkaPartitionSplit, Discovery>,
        d: &Discovery,
    ) -> Result<()> {
        let recreated: Vec<KafkaPartitionSplit> = self
            .known
            .values()
            .filter(|k| !k.removed && !self.finished_before.contains(&k.split.split_id()))
            // given up to another member: its new owner deals with the new topic
            .filter(|k| !self.released.contains(&k.split.split_id()))
            .filter(|k| {
                let (then, now) = (&k.split.topic_id, d.topic_ids.get(&k.split.topic));
                then.as_ref().is_some_and(|then| now.is_some_and(|now| now != then))
            })
            .filter(|k| {
                let id = k.split.split_id();
                !self.restored.iter().flatten().any(|s| s.split_id() == id)
            })
            .map(|k| k.split.clone())
            .collect();
        for split in recreated {
            let tp = (split.topic.clone(), split.partition);
            let Some(log) = d.logs.get(&tp) else {
                continue; // not in the new topic: see handle_missing
            };
            let now_id = d.topic_ids.get(&split.topic);
            let why = format!(
                "topic {} was deleted and recreated while it was read (its id was {}, now {})",
                split.topic,
                split.topic_id.as_deref().unwrap_or("?"),
                now_id.map_or("?", String::as_str)
            );
            let id = split.split_id();
            let assigned = self.known.get(&id).is_some_and(|k| k.assigned);
            // the new topic's partitions no one knows are added ones (at earliest)
            self.initial_partitions.remove(&split.topic);
            let fresh = self.reset(split, log, now_id, &why, "reading")?;
            if assigned {
                // records of the new topic read before this discovery may come again
                let owner = self.owner(&fresh);
                ctx.send_event_to_reader(owner, SourceEvent(Box::new(RemoveSplits(vec![id]))))?;
            }
            self.add_pending(fresh);
        }
        Ok(())
    }
}
