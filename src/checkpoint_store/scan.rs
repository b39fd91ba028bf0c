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
const RESTORE_WAIT: Duration = Duration::from_secs(150);

/// The latest value of each of the job's keys (`None`: a tombstone), committed records only,
/// read up to the partition's high watermark as it was when the scan began. A `read_committed`
/// consumer's end of partition is the last stable offset: another producer's open transaction
/// (another job or instance on the shared topic, a crashed process whose transaction has not
/// timed out) holds it back, and stopping there could miss this job's latest checkpoint. So the
/// scan waits, at most [`RESTORE_WAIT`], until its position reaches the high watermark.
pub(super) fn scan(c: &KafkaStoreConfig) -> Result<Scan> {
    let context = || format!("reading checkpoint topic {} at {}", c.topic, c.bootstrap_servers);
    let high = high_watermark(c)?;
    let mut latest = BTreeMap::new();
    // the latest checkpoint record of each other owner of this job (`<job>`, `<job>#<i>`)
    let mut others: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    if high <= 0 {
        return Ok(Scan {
            latest,
            others: Vec::new(),
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
                    if is_owned(&c.owner, key) {
                        latest.insert(key.to_string(), m.payload().map(<[u8]>::to_vec));
                    } else if let Some(other) = other_owner(&c.job, key) {
                        others.insert(other.to_string(), m.payload().map(<[u8]>::to_vec));
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
            let others = others
                .into_iter()
                .filter_map(|(o, record)| Some((o, record?)))
                .collect();
            return Ok(Scan { latest, others });
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

/// What a scan found.
pub(super) struct Scan {
    /// The latest value of each of the owner's keys (`None`: a tombstone).
    pub(super) latest: BTreeMap<String, Option<Vec<u8>>>,
    /// The job's other owners with a live checkpoint record (other instances, or another
    /// `job.instance` form), with that record.
    pub(super) others: Vec<(String, Vec<u8>)>,
}

/// `key`'s owner when it is the checkpoint record of `job` under any owner (`<job>` or
/// `<job>#<i>`).
fn other_owner<'k>(job: &str, key: &'k str) -> Option<&'k str> {
    let owner = key.strip_suffix("/checkpoint")?;
    let rest = owner.strip_prefix(job)?;
    (rest.is_empty()
        || rest
            .strip_prefix('#')
            .is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit())))
    .then_some(owner)
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
    use super::other_owner;

    #[test]
    fn the_other_owners_of_a_job_are_its_name_with_or_without_an_instance() {
        assert_eq!(other_owner("a", "a/checkpoint"), Some("a"));
        assert_eq!(other_owner("a", "a#1/checkpoint"), Some("a#1"));
        assert_eq!(other_owner("a", "ab/checkpoint"), None);
        assert_eq!(other_owner("a", "a#x/checkpoint"), None);
        assert_eq!(other_owner("a", "a#1/enumerator"), None);
        assert_eq!(other_owner("a", "b#1/checkpoint"), None);
    }
}
