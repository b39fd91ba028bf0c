//! A Kafka split: one topic-partition with its next offset and exclusive stop offset
//! (Flink's `KafkaPartitionSplit`), and which instance and which of its readers own it
//! (Flink's `KafkaSourceEnumerator.getSplitOwner`, dealt over instances).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::{Instance, SourceSplit, SplitId};

/// One topic-partition and how far it has been read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaPartitionSplit {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The next offset to read (inclusive); advanced as records are emitted.
    pub next_offset: i64,
    /// Where the split ends (exclusive); `None` for an unbounded split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_offset: Option<i64>,
    /// The id of the topic its offsets belong to (KIP-516): a topic deleted and recreated under
    /// the same name has another. `None` when the broker gave none (or in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// A group-coordinated job: how many times a run of it restored the split (from another
    /// member's checkpoint, or its own run's before). Of the checkpoints that hold a split, a
    /// restore takes the one with the most, so a run that released the split and checkpoints on
    /// never stands over the newer owner's (see `members::merged`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handovers: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl KafkaPartitionSplit {
    /// A split of `topic`'s `partition` from `next_offset`, up to `stop_offset` if bounded.
    pub fn new(topic: impl Into<String>, partition: i32, next_offset: i64, stop_offset: Option<i64>) -> Self {
        KafkaPartitionSplit {
            topic: topic.into(),
            partition,
            next_offset,
            stop_offset,
            topic_id: None,
            handovers: 0,
        }
    }

    /// The same split, its offsets belonging to the topic with this id.
    pub fn with_topic_id(mut self, topic_id: Option<String>) -> Self {
        self.topic_id = topic_id;
        self
    }

    /// `topic-partition`, the id Flink uses.
    pub fn id_of(topic: &str, partition: i32) -> String {
        format!("{topic}-{partition}")
    }

    /// Start at or beyond the stop: nothing to read.
    pub fn is_empty(&self) -> bool {
        self.stop_offset.is_some_and(|stop| self.next_offset >= stop)
    }
}

impl SourceSplit for KafkaPartitionSplit {
    fn split_id(&self) -> SplitId {
        Arc::from(Self::id_of(&self.topic, self.partition))
    }

    /// An upper bound: transaction markers, aborted records and an end-of-stream record make
    /// the actual count smaller.
    fn remaining(&self) -> Option<u64> {
        self.stop_offset.map(|stop| (stop - self.next_offset).max(0) as u64)
    }

    fn rewind_to(&mut self, position: i64) -> bool {
        self.next_offset = position;
        true
    }

    fn name(&self) -> String {
        format!("{}:{}", self.topic, self.partition)
    }

    fn describe(&self) -> String {
        match self.stop_offset {
            Some(stop) => format!("next_offset {}, stop_offset {stop}", self.next_offset),
            None => format!("next_offset {} (no stop)", self.next_offset),
        }
    }
}

/// Java's `String.hashCode` (over UTF-16 code units, wrapping 32-bit arithmetic), which Flink's
/// split owner function uses: the same topic lands on the same readers as in Flink.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// The reader that owns a topic-partition (Flink's `KafkaSourceEnumerator.getSplitOwner`):
/// partitions of one topic are spread round-robin from a start index derived from the topic.
pub fn split_owner(topic: &str, partition: i32, readers: usize) -> usize {
    let readers = readers.max(1) as i64;
    let start = (i64::from(java_string_hash(topic).wrapping_mul(31) & 0x7FFF_FFFF)) % readers;
    ((start + i64::from(partition)) % readers) as usize
}

/// The reader (of this instance) that owns a partition. With one instance this is Flink's
/// `getSplitOwner`; with `count` instances, the owner slot over all `count × parallelism` readers
/// is dealt round-robin to instances, so consecutive partitions spread over instances and readers.
pub fn reader_owner(topic: &str, partition: i32, parallelism: usize, instance: Instance) -> usize {
    let count = instance.count.max(1);
    split_owner(topic, partition, count * parallelism.max(1)) / count
}

/// Whether this instance reads a partition.
pub fn instance_owns(topic: &str, partition: i32, parallelism: usize, instance: Instance) -> bool {
    let count = instance.count.max(1);
    split_owner(topic, partition, count * parallelism.max(1)) % count == instance.index
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn java_hash_matches_the_jvm() {
        // values from java.lang.String#hashCode
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("trades"), -865_715_313);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("é"), 233);
    }

    #[test]
    fn owners_are_stable_and_round_robin_within_a_topic() {
        let first = split_owner("trades", 0, 4);
        for p in 0..8 {
            assert_eq!(split_owner("trades", p, 4), (first + p as usize) % 4);
        }
        assert_eq!(split_owner("any", 5, 1), 0);
    }

    #[test]
    fn one_instance_uses_flinks_owner() {
        let one = Instance { index: 0, count: 1 };
        for p in 0..12 {
            assert_eq!(reader_owner("trades", p, 3, one), split_owner("trades", p, 3));
            assert!(instance_owns("trades", p, 3, one));
        }
    }

    #[test]
    fn instances_split_partitions_and_readers_evenly() {
        let (count, parallelism) = (2usize, 2usize);
        let mut per_reader = BTreeMap::new();
        for p in 0..16 {
            let owners: Vec<usize> = (0..count)
                .filter(|i| instance_owns("trades", p, parallelism, Instance { index: *i, count }))
                .collect();
            assert_eq!(owners.len(), 1, "partition {p} must belong to exactly one instance");
            let inst = Instance {
                index: owners[0],
                count,
            };
            *per_reader
                .entry((owners[0], reader_owner("trades", p, parallelism, inst)))
                .or_insert(0) += 1;
        }
        assert_eq!(per_reader.len(), 4);
        assert!(per_reader.values().all(|n| *n == 4), "{per_reader:?}");
    }
}
