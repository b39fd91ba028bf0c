//! A Kafka split: one topic-partition with its next offset and exclusive stop offset
//! (Flink's `KafkaPartitionSplit`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::{SourceSplit, SplitId};

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

#[cfg(test)]
mod tests {
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
}
