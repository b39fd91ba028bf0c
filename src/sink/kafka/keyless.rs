//! The partition of records without a key: one per write, in turn over the topic's partitions,
//! instead of librdkafka's sticky partitioner choosing for every message.
//!
//! librdkafka's partitioner reads the clock twice for each keyless message (its sticky period
//! and the partition queue's enqueue time), and looks the partition up each time: 6 % of the
//! samples of a generator producing into Kafka (`perf`, docs/performance.md). Given a partition,
//! its batch call does that once per batch. The spread is the sticky partitioner's: a batch's
//! records together in one partition, the next batch in the next.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::targets::partitions_of;
use crate::client::cluster::Producer;
use crate::core::sim;

/// How long a topic's partition count is used before it is looked up again: librdkafka's own
/// metadata refresh (`topic.metadata.refresh.interval.ms`), so partitions added to the topic
/// are written as soon as librdkafka's partitioner would have written them.
const REFRESH: Duration = Duration::from_secs(300);

/// How long a lookup may take; one that fails leaves the keyless records to librdkafka's
/// partitioner until the next refresh.
const LOOKUP: Duration = Duration::from_secs(5);

/// The partitioners under which a record without a key goes to any partition (librdkafka's
/// `partitioner`; its default is `consistent_random`). Under the others (`consistent`,
/// `murmur2`, `fnv1a`) it goes to one fixed partition, which only librdkafka knows.
const RANDOM_PARTITIONERS: [&str; 4] = ["consistent_random", "murmur2_random", "fnv1a_random", "random"];

/// Chooses the partition of each write's keyless records.
pub(super) struct KeylessPartitions {
    /// Whether the sink's properties leave keyless records to any partition.
    enabled: bool,
    /// The topic, its partition count (`None`: the lookup failed) and when it was looked up.
    count: Option<(String, Option<i32>, Instant)>,
    next: i32,
}

impl KeylessPartitions {
    pub(super) fn new(properties: &BTreeMap<String, String>) -> Self {
        let random = properties
            .get("partitioner")
            .is_none_or(|p| RANDOM_PARTITIONERS.contains(&p.as_str()));
        // a sticky period of 0 asks for a random partition for every message; unset, it is
        // twice the linger (librdkafka's rdkafka_conf.c), the sink's 5 ms unless set
        let zero = |key: &str| properties.get(key).is_some_and(|ms| ms.trim() == "0");
        let sticky = match properties.get("sticky.partitioning.linger.ms") {
            Some(_) => !zero("sticky.partitioning.linger.ms"),
            None => !zero("linger.ms") && !zero("queue.buffering.max.ms"),
        };
        KeylessPartitions {
            enabled: random && sticky,
            count: None,
            // from a random partition, as librdkafka's sticky partitioner: sinks that start
            // together do not write their first batches to the same partition
            next: rand::random_range(0..i32::MAX),
        }
    }

    /// The partition of the next write's keyless records to `topic`; `None`: librdkafka's
    /// partitioner chooses.
    pub(super) fn next(
        &mut self,
        producer: &dyn Producer,
        properties: &BTreeMap<String, String>,
        topic: &str,
    ) -> Option<i32> {
        if !self.enabled {
            return None;
        }
        let now = sim::now();
        let fresh = matches!(&self.count, Some((t, _, at)) if t == topic && now.duration_since(*at) < REFRESH);
        if !fresh {
            let count = partitions_of(producer, properties, topic, LOOKUP)
                .ok()
                .and_then(|p| i32::try_from(p.len()).ok())
                .filter(|n| *n > 0);
            self.count = Some((topic.to_string(), count, now));
        }
        let count = self.count.as_ref().and_then(|(_, count, _)| *count)?;
        let partition = self.next.rem_euclid(count);
        self.next = self.next.wrapping_add(1);
        Some(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn only_a_random_sticky_partitioner_s_keyless_records_are_chosen_for() {
        assert!(KeylessPartitions::new(&properties(&[])).enabled);
        assert!(KeylessPartitions::new(&properties(&[("partitioner", "murmur2_random")])).enabled);
        // these send every keyless record to one partition of librdkafka's choosing
        assert!(!KeylessPartitions::new(&properties(&[("partitioner", "murmur2")])).enabled);
        assert!(!KeylessPartitions::new(&properties(&[("partitioner", "consistent")])).enabled);
        // a random partition for every message
        assert!(!KeylessPartitions::new(&properties(&[("sticky.partitioning.linger.ms", "0")])).enabled);
        assert!(!KeylessPartitions::new(&properties(&[("linger.ms", "0")])).enabled);
        assert!(!KeylessPartitions::new(&properties(&[("queue.buffering.max.ms", "0")])).enabled);
        let set = [("linger.ms", "0"), ("sticky.partitioning.linger.ms", "10")];
        assert!(KeylessPartitions::new(&properties(&set)).enabled);
    }
}
