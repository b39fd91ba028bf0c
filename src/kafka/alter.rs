//! Offsets moved by hand in a stopped job's last checkpoint (`tidegate state set`, Kafka
//! Connect's offsets API, KIP-875): where a position given as an offset, a time, `earliest` or
//! `latest` lands in the partition, and the change of one partition's split in the checkpoint's
//! JSON (its position, whether it is finished) with the entry its history keeps.

use serde_json::{json, Value};

use super::discovery::admin_consumer;
use super::offsets::OffsetsResolver;
use super::source::KafkaSource;
use crate::error::{Error, Result};

/// The most changes by hand a checkpoint's history keeps (the oldest go first).
pub const HISTORY_LIMIT: usize = 100;

/// Where to move a partition's position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// This offset.
    Offset(i64),
    /// The first record at or after this time (epoch milliseconds); the end when none is.
    Timestamp(i64),
    /// The partition's first offset.
    Earliest,
    /// The partition's end (its high watermark).
    Latest,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Offset(n) => write!(f, "--offset {n}"),
            Position::Timestamp(t) => write!(f, "--timestamp {}", super::offsets::time_text(*t)),
            Position::Earliest => write!(f, "--earliest"),
            Position::Latest => write!(f, "--latest"),
        }
    }
}

/// `position` of `topic`'s `partition` as an offset, checked against the partition's range now
/// (an offset the broker no longer holds, or beyond its end, would be reset by the reader: an
/// error here, naming the range).
pub fn resolve(source: &KafkaSource, topic: &str, partition: i32, position: &Position) -> Result<i64> {
    let settings = source.settings();
    let consumer = admin_consumer(settings)?;
    let resolver = OffsetsResolver::new(consumer.as_ref(), settings.request_timeout, None);
    let tp = vec![(topic.to_string(), partition)];
    let earliest = resolver.earliest(&tp)?.get(&tp[0]).copied().unwrap_or(0);
    let latest = resolver.latest(&tp)?.get(&tp[0]).copied().unwrap_or(0);
    let offset = match position {
        Position::Offset(n) => *n,
        Position::Earliest => earliest,
        Position::Latest => latest,
        Position::Timestamp(t) => resolver.for_timestamp(&tp, *t)?.get(&tp[0]).copied().unwrap_or(latest),
    };
    if offset < earliest || offset > latest {
        return Err(Error::config(
            "--partition",
            format!(
            "{position} gives offset {offset}, outside {topic}:{partition}, which holds offsets {earliest} to {latest} now \
             ({latest} is its end: the next record produced)"
        ),
        ));
    }
    Ok(offset)
}

/// The change of one partition: a new position, and whether it is finished (`None`: a new
/// position makes it unfinished, else it stays as it is).
#[derive(Debug, Clone)]
pub struct Alteration {
    pub topic: String,
    pub partition: i32,
    /// The resolved position, and how it was asked for.
    pub offset: Option<(i64, Position)>,
    pub finished: Option<bool>,
}

/// What [`alter`] changed, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Altered {
    pub before: String,
    pub after: String,
}

/// Apply `change` to `checkpoint` (a Kafka source's checkpoint, as the store holds it) and to
/// the checkpoint kept before it (which a transactional sink's recovery may resume from), and
/// add an entry to its history, stamped `at`. An error names the partitions the state holds.
pub fn alter(checkpoint: &mut Value, change: &Alteration, at: &str) -> std::result::Result<Altered, String> {
    let altered = alter_one(checkpoint, change)?;
    if let Some(previous) = checkpoint.get_mut("previous").filter(|p| p.is_object()) {
        // the split may have been assigned since: that checkpoint then does not hold it
        let _ = alter_one(previous, change);
    }
    let mut entry = json!({
        "at": at,
        "by": "tidegate state set",
        "partition": format!("{}:{}", change.topic, change.partition),
        "before": altered.before,
        "after": altered.after,
    });
    if let Some((_, asked)) = &change.offset {
        entry["position"] = json!(asked.to_string());
    }
    let Some(fields) = checkpoint.as_object_mut() else {
        return Err("the state is not a JSON object".into());
    };
    let history = fields.entry("history").or_insert_with(|| json!([]));
    if let Some(list) = history.as_array_mut() {
        list.push(entry);
        let over = list.len().saturating_sub(HISTORY_LIMIT);
        list.drain(..over);
    }
    Ok(altered)
}

fn is(split: &Value, topic: &str, partition: i32) -> bool {
    split["topic"].as_str() == Some(topic) && split["partition"].as_i64() == Some(partition as i64)
}

/// A split snapshot in words: its position, its stop, whether (and why) it is finished.
fn describe(split: &Value, finished: Option<&Value>) -> String {
    let mut text = format!("next_offset {}", split["next_offset"]);
    if let Some(stop) = split["stop_offset"].as_i64() {
        text.push_str(&format!(", stop_offset {stop}"));
    }
    match finished.filter(|f| !f.is_null()) {
        Some(f) => {
            text.push_str(&format!(", finished ({})", f["reason"].as_str().unwrap_or("?")));
            if let Some(at) = f["at"].as_i64() {
                text.push_str(&format!(" at {at}"));
            }
        }
        None => text.push_str(", unfinished"),
    }
    if split["stop_offset"]
        .as_i64()
        .is_some_and(|stop| split["next_offset"].as_i64().is_some_and(|next| next >= stop))
        && finished.is_none_or(|f| f.is_null())
    {
        text.push_str(" (nothing left before its stop)");
    }
    text
}

fn alter_one(checkpoint: &mut Value, change: &Alteration) -> std::result::Result<Altered, String> {
    let (topic, partition) = (change.topic.as_str(), change.partition);
    let held = checkpoint["splits"]
        .as_array()
        .and_then(|splits| splits.iter().position(|s| is(&s["split"], topic, partition)));
    if let Some(i) = held {
        let snapshot = &mut checkpoint["splits"][i];
        let before = describe(&snapshot["split"], snapshot.get("finished"));
        set_split(snapshot, change);
        let after = describe(&snapshot["split"], snapshot.get("finished"));
        return Ok(Altered { before, after });
    }
    // not yet assigned to a reader: the enumerator holds where it will start
    let known = checkpoint["enumerator"]["splits"].as_array().and_then(|splits| {
        splits
            .iter()
            .position(|k| is(&k["split"], topic, partition) && k["assigned"] != true && k["removed"] != true)
    });
    let Some(i) = known else {
        return Err(not_held(checkpoint, topic, partition));
    };
    let before = describe(&checkpoint["enumerator"]["splits"][i]["split"], None);
    if change.finished == Some(true) {
        // finished: a reader's snapshot says so, as if a reader had been dealt it and ended it
        let mut snapshot = json!({ "split": checkpoint["enumerator"]["splits"][i]["split"].clone() });
        set_split(&mut snapshot, change);
        let after = describe(&snapshot["split"], snapshot.get("finished"));
        checkpoint["enumerator"]["splits"][i]["assigned"] = json!(true);
        if let Some(splits) = checkpoint["splits"].as_array_mut() {
            splits.push(snapshot);
            splits.sort_by_key(|s| {
                format!(
                    "{}-{}",
                    s["split"]["topic"].as_str().unwrap_or_default(),
                    s["split"]["partition"]
                )
            });
        }
        return Ok(Altered { before, after });
    }
    let split = &mut checkpoint["enumerator"]["splits"][i]["split"];
    if let Some((offset, _)) = change.offset {
        split["next_offset"] = json!(offset);
    }
    Ok(Altered {
        before,
        after: describe(split, None),
    })
}

/// A reader's snapshot of the split, changed: its position, and finished or not.
fn set_split(snapshot: &mut Value, change: &Alteration) {
    if let Some((offset, _)) = change.offset {
        snapshot["split"]["next_offset"] = json!(offset);
    }
    let finished = change
        .finished
        .unwrap_or(change.offset.is_none() && !snapshot["finished"].is_null());
    let Some(fields) = snapshot.as_object_mut() else {
        return;
    };
    if finished {
        if fields.get("finished").is_none_or(|f| f.is_null()) {
            fields.insert("finished".into(), json!({ "reason": "stopping_offset" }));
        }
    } else {
        fields.remove("finished");
    }
}

fn not_held(checkpoint: &Value, topic: &str, partition: i32) -> String {
    let mut held: Vec<String> = checkpoint["splits"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(checkpoint["enumerator"]["splits"].as_array().into_iter().flatten())
        .filter_map(|s| {
            Some(format!(
                "{}:{}",
                s["split"]["topic"].as_str()?,
                s["split"]["partition"].as_i64()?
            ))
        })
        .collect();
    held.sort();
    held.dedup();
    format!(
        "{topic}:{partition} is not in the job's state, which holds {} (with job.instance, each instance's state \
         holds its share only)",
        if held.is_empty() {
            "no partition".to_string()
        } else {
            held.join(", ")
        }
    )
}

#[cfg(test)]
#[path = "alter_tests.rs"]
mod tests;
