//! Reading the Kafka checkpoint store's topic: the latest committed value of each of a job's
//! keys, up to the end of the log as it was when the read began (waiting out other producers'
//! open transactions), and which other owners of the job's name hold a checkpoint.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{info, warn};

use super::records::is_owned;
use super::KafkaStoreConfig;
use crate::error::{kafka, Error, Result};
use crate::kafka::client::{client_config, TracingContext};

/// How long a call to the cluster may take (watermarks).
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restore waits for another producer's open transaction on the state topic to end:
/// longer than the transaction timeout of tidegate's producers (60 s, the store's and the Kafka
/// sink's default), so a crashed process's transaction is aborted by the broker meanwhile.
pub const RESTORE_WAIT: Duration = Duration::from_secs(150);

/// The latest value of each of the job's keys (`None`: a tombstone), committed records only,
/// read up to the partition's high watermark as it was when the scan began. A `read_committed`
/// consumer's end of partition is the last stable offset: another producer's open transaction
/// (another job or instance on the shared topic, a crashed process whose transaction has not
/// timed out) holds it back, and stopping there could miss this job's latest checkpoint. So the
/// scan waits, at most [`RESTORE_WAIT`], until its position reaches the high watermark.
pub(super) fn scan(c: &KafkaStoreConfig) -> Result<Scan> {
    let context = || format!("reading checkpoint topic {} at {}", c.topic, c.bootstrap_servers);
    let high = high_watermark(c)?;
    let mut records = BTreeMap::new();
    let mut offsets = BTreeMap::new();
    let mut event_time = std::collections::BTreeSet::new();
    let event_time_prefix = super::records::event_time_prefix(&c.job);
    if high <= 0 {
        return Ok(Scan {
            records,
            offsets,
            event_time,
        });
    }
    let consumer = reader(c, &c.owner, "read_committed")?;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&c.topic, 0, Offset::Beginning)
        .and_then(|_| consumer.assign(&assignment))
        .map_err(|e| kafka(context(), e))?;
    let started = Instant::now();
    let mut waiting = false;
    loop {
        let mut at_end = false;
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(Ok(key)) = m.key_view::<str>() {
                    if owner_of_key(&c.job, key).is_some() {
                        records.insert(key.to_string(), m.payload().map(<[u8]>::to_vec));
                        offsets.insert(key.to_string(), m.offset());
                    } else if key.starts_with(&event_time_prefix) {
                        match m.payload() {
                            Some(_) => event_time.insert(key.to_string()),
                            None => event_time.remove(key),
                        };
                    }
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => at_end = true,
            Some(Err(e)) => return Err(kafka(context(), e)),
            None => {}
        }
        let position = match consumer
            .position()
            .map_err(|e| kafka(context(), e))?
            .find_partition(&c.topic, 0)
        {
            Some(p) => match p.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            },
            None => 0,
        };
        if position >= high {
            if waiting {
                info!(topic = %c.topic, offset = high, waited_ms = started.elapsed().as_millis() as u64, "checkpoint topic read to its end");
            }
            return Ok(Scan {
                records,
                offsets,
                event_time,
            });
        }
        if at_end && !waiting {
            // the end of the committed records, before the high watermark: an open transaction
            let (_, stable) = consumer
                .fetch_watermarks(&c.topic, 0, TIMEOUT)
                .map_err(|e| kafka(context(), e))?;
            warn!(
                topic = %c.topic,
                offset = stable,
                high_watermark = high,
                wait_s = RESTORE_WAIT.as_secs(),
                "an open transaction holds the checkpoint topic at offset {stable}; waiting for it to end before restoring"
            );
            waiting = true;
        }
        if started.elapsed() > RESTORE_WAIT {
            return Err(Error::runtime(
                context(),
                format!(
                    "committed records end at offset {position} of partition 0, the log at {high}: a transaction \
                     left open there (another job or instance on this topic, or a stuck producer) did not end \
                     within {RESTORE_WAIT:?}; end or abort it (a crashed producer's transaction ends after its \
                     transaction.timeout.ms), or give this job its own checkpoint.topic, then start again"
                ),
            ));
        }
    }
}

/// What a scan found: the latest value of each key of the job, every owner's (`None`: a
/// tombstone).
pub(super) struct Scan {
    pub(super) records: BTreeMap<String, Option<Vec<u8>>>,
    /// The offset of each key's latest record (which of two records was written later).
    pub(super) offsets: BTreeMap<String, i64>,
    /// The job's event-time values (`records::event_time_prefix`) that are not tombstones.
    pub(super) event_time: std::collections::BTreeSet<String>,
}

impl Scan {
    /// `owner`'s records.
    pub(super) fn of(&self, owner: &str) -> BTreeMap<String, Option<Vec<u8>>> {
        self.records
            .iter()
            .filter(|(key, _)| is_owned(owner, key))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The owners holding a live checkpoint or claim record, with it, a checkpoint before a claim
    /// of the same owner.
    pub(super) fn heads<'s>(&'s self, job: &'s str) -> impl Iterator<Item = Head<'s>> + 's {
        self.records.iter().filter_map(move |(key, value)| {
            let owner = owner_of_key(job, key)?;
            let checkpointed = match &key[owner.len()..] {
                "/checkpoint" => true,
                "/claim" => false,
                _ => return None,
            };
            Some(Head {
                owner,
                key,
                bytes: value.as_deref()?,
                checkpointed,
                offset: self.offsets.get(key).copied().unwrap_or(-1),
            })
        })
    }
}

/// An owner's checkpoint or claim record.
pub(super) struct Head<'s> {
    pub(super) owner: &'s str,
    pub(super) key: &'s str,
    pub(super) bytes: &'s [u8],
    /// A checkpoint (else a claim).
    pub(super) checkpointed: bool,
    /// Where in the topic it was written.
    pub(super) offset: i64,
}

/// The owner of `key` when it is one of `job`'s (`<owner>/…`, the owner `<job>`, `<job>#<i>` or
/// `<job>#<i>~<generation>`: see [`super::layout`]).
fn owner_of_key<'k>(job: &str, key: &'k str) -> Option<&'k str> {
    let (owner, _) = key.split_once('/')?;
    let ours = super::layout::parse_owner(job, owner).is_some() || super::layout::parse_member(job, owner).is_some();
    ours.then_some(owner)
}

/// The end of partition 0 of the state topic, uncommitted records included: what a scan must
/// read up to (a `read_committed` client's watermarks stop at the last stable offset).
fn high_watermark(c: &KafkaStoreConfig) -> Result<i64> {
    let (_, high) = reader(c, &c.owner, "read_uncommitted")?
        .fetch_watermarks(&c.topic, 0, TIMEOUT)
        .map_err(|e| {
            kafka(
                format!(
                    "reading the end of checkpoint topic {} at {}",
                    c.topic, c.bootstrap_servers
                ),
                e,
            )
        })?;
    Ok(high)
}

/// A consumer of the state topic at `isolation` (`read_committed`: committed records only), an
/// event at the partition's end.
pub(super) fn reader(config: &KafkaStoreConfig, owner: &str, isolation: &str) -> Result<BaseConsumer<TracingContext>> {
    client_config(
        &config.bootstrap_servers,
        &[
            ("group.id", &format!("tidegate-state-reader-{owner}")),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "true"),
            ("isolation.level", isolation),
            ("client.id", "tidegate-state-reader"),
        ],
        &config.properties,
    )
    .create_with_context(TracingContext::new("state-reader"))
    .map_err(|e| kafka("creating the checkpoint store's reader", e))
}

#[cfg(test)]
mod tests {
    use super::owner_of_key;

    #[test]
    fn a_job_s_keys_are_its_owners_with_or_without_an_instance_and_a_generation() {
        assert_eq!(owner_of_key("a", "a/checkpoint"), Some("a"));
        assert_eq!(owner_of_key("a", "a#1/split/t-0"), Some("a#1"));
        assert_eq!(owner_of_key("a", "a#1~2/enumerator"), Some("a#1~2"));
        assert_eq!(owner_of_key("a", "ab/checkpoint"), None);
        assert_eq!(owner_of_key("a", "a#x/checkpoint"), None);
        assert_eq!(owner_of_key("a", "b#1/checkpoint"), None);
        assert_eq!(owner_of_key("a", "a"), None);
    }
}
