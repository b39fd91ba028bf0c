//! The split reader's watchdogs: fetches that stalled, partition errors that may have stopped,
//! positions out of range, and logs reset under a split by `offset_reset`.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, warn};

use super::KafkaPartitionSplitReader;
use crate::core::{FinishReason, SplitId};
use crate::error::Error;
use crate::kafka::offsets::OffsetsResolver;

impl KafkaPartitionSplitReader {
    /// A shorter stall threshold, so a test need not wait 15 s.
    #[cfg(test)]
    pub(in crate::kafka) fn set_stall_after(&mut self, after: Duration) {
        self.stall_after = after;
    }

    /// Fetches restarted as stalled so far.
    #[cfg(test)]
    pub(in crate::kafka) fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The last transport trouble the consumer's context heard of.
    #[cfg(test)]
    pub(in crate::kafka) fn transport_trouble(&self) -> Option<String> {
        self.consumer.context().last_transport_trouble()
    }

    /// Partitions with an error that would fail the job if it lasted.
    #[cfg(test)]
    pub(in crate::kafka) fn open_partition_errors(&self) -> usize {
        self.partition_errors.open.len()
    }

    /// librdkafka sometimes stops fetching a manually assigned partition after its broker
    /// connection broke and came back (librdkafka #5153, rust-rdkafka #597; seen here a few times
    /// in a broker-pause test): the position stays while the partition has records, and a bounded
    /// replay would wait forever without a word. A split that moved not at all for
    /// `stall_after`, while the broker's last stable offset is past its position (or, for a bounded
    /// split, while the broker cannot even say where the partition ends), has its fetch started
    /// over ([`Self::restart_fetch`]); the restart is logged and counted. A paused
    /// split fetches nothing on purpose: it is never stalled, and its clock starts again when it
    /// resumes.
    pub(super) fn restart_stalled_fetches(&mut self) {
        let now = Instant::now();
        for i in 0..self.splits.len() {
            if self.splits[i].paused || now.duration_since(self.splits[i].progress_at) < self.stall_after {
                continue;
            }
            self.splits[i].progress_at = now; // look again after another stall_after
            let split = &self.splits[i];
            let (topic, partition, position) = (split.topic.clone(), split.partition, split.position);
            let before_stop = split.stop.is_none_or(|stop| position < stop);
            // the consumer reads read_committed, so this is the last stable offset
            match self
                .consumer
                .fetch_watermarks(&topic, partition, Duration::from_secs(5))
            {
                Ok((_, stable)) if stable > position && before_stop => {
                    warn!(split_id = %split.id, position, last_stable_offset = stable, stalled_s = self.stall_after.as_secs(),
                          "no records fetched although the partition has more; restarting its fetch");
                }
                Ok((_, stable)) => {
                    // at the end of its log: idle, not stalled (a bounded split whose stop lies
                    // beyond the end waits for records, as a live one does)
                    if before_stop && split.stop.is_some() {
                        debug!(split_id = %split.id, position, last_stable_offset = stable, stop = ?split.stop,
                               "the split waits at the end of its partition for records up to its stop");
                    }
                    continue;
                }
                Err(e) => {
                    // not even the partition's end can be read: the broker is away (librdkafka
                    // reconnects by itself), or librdkafka lost track of the partition's leader
                    // and the fetch is stuck with it until a restart. A live tail's split is idle
                    // at its end as often as not: only a bounded one is owed records here
                    if split.stop.is_none() || !before_stop {
                        continue;
                    }
                    warn!(split_id = %split.id, position, stalled_s = self.stall_after.as_secs(), error = %e,
                          "no records fetched, and the partition's end cannot be read; restarting its fetch");
                    self.restart_counted(i);
                    // the broker is likely away for the others too: one such wait (the query's
                    // and the restart's, 10 s at most) per fetch, so a stop is not held up
                    break;
                }
            }
            self.restart_counted(i);
        }
    }

    /// Restart split `i`'s fetch, counted.
    fn restart_counted(&mut self, i: usize) {
        self.metrics.fetch_restarts.increment(1);
        self.restarts += 1;
        let split = &self.splits[i];
        let (topic, partition, position) = (split.topic.clone(), split.partition, split.position);
        if let Err(e) = self.restart_fetch(&topic, partition, position) {
            warn!(split_id = %self.splits[i].id, error = %e, "restarting the fetch failed; trying again later");
        }
    }

    /// Start a partition's fetch over at `position`: its topic's metadata asked for again, then the
    /// partition unassigned and assigned at the position. A seek is not enough: it leaves a
    /// partition whose leader librdkafka has lost track of (a broker it decommissioned, say, when
    /// a metadata answer left it out) waiting for a leader-epoch check that nothing retries, and
    /// it does nothing for a partition handed to a broker that is gone; an assignment with an
    /// offset starts the fetch afresh on the leader the new metadata names (librdkafka 2.12's
    /// offset.c and partition.c, read for this).
    fn restart_fetch(&self, topic: &str, partition: i32, position: i64) -> crate::error::Result<()> {
        if let Err(e) = self.consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            debug!(topic, error = %e, "asking for the topic's metadata before restarting a fetch");
        }
        // the assignment is tried even when the unassignment fails: a restart whose assignment
        // failed before has left the partition unassigned, and must not fail at this step forever
        let tpl = self.tpl_of(topic, &[partition]);
        if let Err(e) = self.consumer.incremental_unassign(&tpl) {
            debug!(topic, partition, error = %e, "unassigning a partition to restart its fetch");
        }
        let mut at = TopicPartitionList::new();
        at.add_partition_offset(topic, partition, Offset::Offset(position))
            .map_err(|e| crate::error::kafka(format!("assigning {topic}:{partition}"), e))?;
        self.consumer
            .incremental_assign(&at)
            .map_err(|e| crate::error::kafka(format!("assigning {topic}:{partition} at {position}"), e))
    }

    /// Seek a partition to where it stands: librdkafka starts its fetch over, forgets the last
    /// error it reported and the end it reported, so the next fetch says either (the end, or the
    /// error again).
    pub(super) fn rearm(&self, topic: &str, partition: i32, position: i64) {
        if let Err(e) = self
            .consumer
            .seek(topic, partition, Offset::Offset(position), Duration::from_secs(5))
        {
            warn!(topic, partition, error = %e, "could not look at the partition's error again");
        }
    }

    /// Re-arm the partitions whose open error is due for a look (see `PartitionErrors`).
    pub(super) fn probe_partition_errors(&mut self) {
        if self.partition_errors.open.is_empty() {
            return;
        }
        for (topic, partition) in self.partition_errors.due_probes() {
            let Some(split) = self
                .splits
                .iter()
                .find(|s| s.partition == partition && *s.topic == *topic && !s.paused)
            else {
                continue;
            };
            self.rearm(&topic, partition, split.position);
        }
    }

    /// The error for positions librdkafka found out of range (`offset_reset = "error"`): per
    /// partition, the stored offset, the log's current range, and what likely happened.
    pub(super) fn out_of_range_error(&self, partitions: &[(String, i32)]) -> Error {
        let mut lines = Vec::new();
        for (topic, partition) in partitions {
            let Some(split) = self
                .splits
                .iter()
                .find(|s| s.partition == *partition && *s.topic == **topic)
            else {
                continue;
            };
            let position = split.position;
            let line = match self
                .consumer
                .fetch_watermarks(topic, *partition, Duration::from_secs(5))
            {
                Ok((low, _)) if position < low => format!(
                    "{topic}:{partition} wants offset {position} but the earliest available is {low} \
                     (retention deleted it; set source.offset_reset = \"earliest\" or \"latest\" to continue from there)"
                ),
                Ok((low, high)) => format!(
                    "{topic}:{partition}: the stored offset {position} is beyond the end of the log, which now holds \
                     offsets {low} to {high}: the topic was likely deleted and recreated (or truncated) since that \
                     offset was stored. To read the new log, set source.offset_reset = \"earliest\" (from its start) \
                     or \"latest\" (from its end); to start the job over, run it with --reset-state"
                ),
                Err(e) => format!(
                    "{topic}:{partition}: offset {position} is out of range, and the log's range could not be read \
                     ({e}); set source.offset_reset = \"earliest\" or \"latest\" to continue from the log's start or end"
                ),
            };
            lines.push(line);
        }
        if lines.is_empty() {
            lines.push("a stored offset is out of range (set source.offset_reset = \"earliest\" or \"latest\")".into());
        }
        Error::runtime("reading Kafka", lines.join("; "))
    }

    /// Splits whose log librdkafka reset under them (`offset_reset` = earliest or latest, their
    /// position beyond the end of the log: it was recreated or truncated): their stop belonged
    /// to the old log, so it is resolved again from the configured stopping offsets against this
    /// one (a bounded split ends), the decision logged, and the split read from where the reset
    /// put it.
    pub(super) fn apply_resets(&mut self, out: &mut Vec<(SplitId, FinishReason)>) -> crate::error::Result<()> {
        let mut ended = Vec::new();
        for i in 0..self.splits.len() {
            let Some(from) = self.splits[i].reset_from.take() else {
                continue;
            };
            let split = &self.splits[i];
            let tp = (split.topic.to_string(), split.partition);
            let stop = match split.stop {
                None => None,
                Some(_) => OffsetsResolver::new(&*self.consumer, self.request_timeout, None)
                    .resolve_stop(&self.stopping, std::slice::from_ref(&tp))
                    .map_err(|e| Error::runtime(format!("resolving the stop of {}:{} again", tp.0, tp.1), e))?
                    .get(&tp)
                    .copied()
                    .flatten(),
            };
            warn!(split_id = %split.id, stored_offset = split.position, now_at = from, old_stop = ?split.stop, stop = ?stop,
                  "the partition's log no longer holds the split's position (the topic was recreated or truncated): \
                   source.offset_reset moved it, and its stop is resolved again from source.stopping_offsets");
            let split = &mut self.splits[i];
            split.position = from;
            split.stop = stop;
            split.progress_at = Instant::now();
            if let (Some(stop), Some(g)) = (stop, &split.metrics.remaining) {
                g.set((stop - from).max(0) as f64);
            }
            if stop.is_some_and(|stop| from >= stop) {
                ended.push((split.topic.clone(), split.partition));
            } else {
                // the records after the reset this fetch set aside are fetched again
                self.rearm(&tp.0, tp.1, from);
            }
        }
        for (topic, partition) in ended {
            self.finish(&topic, partition, FinishReason::StoppingOffset, out);
        }
        Ok(())
    }
}
