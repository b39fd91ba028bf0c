//! What a Kafka source reads: topics, a topic pattern, or fixed partitions, and how the config
//! spells each.

use regex::Regex;

use super::offsets::TopicPartition;

/// What to read.
#[derive(Debug, Clone)]
pub(crate) enum Subscription {
    /// These topics, every partition.
    Topics(Vec<String>),
    /// Topics whose whole name matches.
    Pattern(Regex),
    /// Fixed partitions, and their topics.
    Partitions(Vec<TopicPartition>, Vec<String>),
}

/// As the config spells it.
impl std::fmt::Display for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subscription::Topics(topics) => write!(f, "topics {}", topics.join(", ")),
            // the pattern as written: without the anchors `pattern` added
            Subscription::Pattern(re) => {
                let text = re.as_str();
                let inner = text
                    .strip_prefix("^(?:")
                    .and_then(|t| t.strip_suffix(")$"))
                    .unwrap_or(text);
                write!(f, "topic_pattern {inner}")
            }
            Subscription::Partitions(list, _) => write!(
                f,
                "partitions {}",
                list.iter()
                    .map(|(t, p)| format!("{t}:{p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl Subscription {
    /// These partitions (their topics derived).
    pub(crate) fn partitions(list: Vec<TopicPartition>) -> Self {
        let mut topics: Vec<String> = list.iter().map(|(t, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        Subscription::Partitions(list, topics)
    }

    /// A pattern that must match the whole topic name, as in Flink.
    pub(crate) fn pattern(pattern: &str) -> std::result::Result<Self, regex::Error> {
        Regex::new(&format!("^(?:{pattern})$")).map(Subscription::Pattern)
    }
}
