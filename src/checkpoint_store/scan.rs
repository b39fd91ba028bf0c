//! Reading the Kafka checkpoint store's topic: the latest committed value of each of a job's
//! keys, up to the end of the log as it was when the read began (waiting out other producers'
//! open transactions), and which other owners of the job's name hold a checkpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::Offset;
use tracing::{info, warn};

use super::config::KafkaStoreConfig;
use super::records::is_owned;
use crate::client::cluster::{self, ClientSpec, Consumer};
use crate::core::sim;
use crate::error::{kafka, Error, Result};

/// How long a call to the cluster may take (watermarks).
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restore waits for another producer's open transaction on the state topic to end:
/// longer than the transaction timeout of tidegate's producers (60 s, the store's and the Kafka
/// sink's default), so a crashed process's transaction is aborted by the broker meanwhile.
pub const RESTORE_WAIT: Duration = Duration::from_secs(150);
/// How long one step of a scan waits for records.
const STEP: Duration = Duration::from_millis(100);

/// The latest value of each of the job's keys (`None`: a tombstone), committed records only,
/// read up to the partition's high watermark as it was when the scan began. A `read_committed`
/// consumer's end of partition is the last stable offset: another producer's open transaction
/// (another job or instance on the shared topic, a crashed process whose transaction has not
/// timed out) holds it back, and stopping there could miss this job's latest checkpoint. So the
/// scan waits, at most [`RESTORE_WAIT`], until its position reaches the high watermark.
/// Blocking; see [`scan_async`] for a scan that waits on the async runtime (and, under a
/// simulation, on its virtual clock).
pub(super) fn scan(c: &KafkaStoreConfig) -> Result<Scan> {
    let mut scanner = Scanner::start(c, None)?;
    loop {
        if let Some(mut found) = scanner.step(STEP)? {
            found.join_parts();
            return Ok(found);
        }
        if sim::active() {
            // a blocking wait cannot let the simulated cluster move on
            return Err(Error::runtime(
                scanner.context(),
                "a blocking read of the checkpoint topic would wait for an open transaction under a simulation: \
                 read it with scan_async",
            ));
        }
    }
}

/// What this process read of a job's state topic, kept so that its next read (a group member's
/// next run after a rebalance, a look at the job's progress) continues where this one ended
/// instead of reading the topic from its start again: a rebalance's pause does not grow with the
/// topic (other jobs' records, years of this job's). Only the job's records are kept. A read older
/// than [`CONTINUE_FOR`] starts over: compaction may have removed a tombstone written since.
#[derive(Clone)]
struct Continued {
    /// The records as read (records written in parts not joined).
    raw: Scan,
    /// Where the read ended.
    position: i64,
    at: tokio::time::Instant,
}

/// How long a read may be continued (well within the topic's `delete.retention.ms`, a day).
const CONTINUE_FOR: Duration = Duration::from_secs(3600);

/// The reads kept, by the (simulation and simulated) process, cluster, topic and job.
type ReadOf = (u64, usize, String, String, String);
static CONTINUED: std::sync::Mutex<BTreeMap<ReadOf, Continued>> = std::sync::Mutex::new(BTreeMap::new());

/// [`scan`] on the async runtime, continuing this process's last read of the topic (see
/// [`Continued`]): each step on a blocking thread (in place under a simulation, where the waits
/// between steps are virtual).
pub(super) async fn scan_async(c: &KafkaStoreConfig) -> Result<Scan> {
    read_async(c, false).await
}

/// Read the topic ahead of the reads to come (a group member's, before it joins the group), up
/// to its committed end now, without waiting for an open transaction: the next read continues
/// from there (see [`Continued`]).
pub(super) async fn read_ahead(c: &KafkaStoreConfig) -> Result<()> {
    read_async(c, true).await.map(|_| ())
}

/// [`scan_async`], or [`read_ahead`] with `to_stable`.
async fn read_async(c: &KafkaStoreConfig, to_stable: bool) -> Result<Scan> {
    let key = (
        sim::instance(),
        sim::current_process(),
        c.bootstrap_servers.clone(),
        c.topic.clone(),
        c.job.clone(),
    );
    let continued = CONTINUED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .filter(|k| sim::now().saturating_duration_since(k.at) < CONTINUE_FOR)
        .cloned();
    let config = c.clone();
    let mut scanner = crate::core::unblock(move || Scanner::start(&config, continued)).await??;
    scanner.to_stable = to_stable;
    loop {
        let (back, found) = crate::core::unblock(move || {
            let found = scanner.step(if sim::active() { Duration::ZERO } else { STEP });
            (scanner, found)
        })
        .await?;
        scanner = back;
        if let Some(found) = found? {
            CONTINUED.lock().unwrap_or_else(|p| p.into_inner()).insert(
                key,
                Continued {
                    raw: found.clone(),
                    position: scanner.position,
                    at: sim::now(),
                },
            );
            let mut found = found;
            found.join_parts();
            return Ok(found);
        }
        if sim::active() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A scan in progress (see [`scan`]): the consumer, the end it reads to, what it found so far.
pub(super) struct Scanner {
    config: KafkaStoreConfig,
    consumer: Option<Box<dyn Consumer>>,
    high: i64,
    found: Scan,
    event_time_prefix: String,
    started: tokio::time::Instant,
    waiting: bool,
    /// Where the consumer stands.
    position: i64,
    /// Stop at the committed end (the last stable offset) rather than wait for an open
    /// transaction there to end.
    to_stable: bool,
}

impl Scanner {
    fn context(&self) -> String {
        format!(
            "reading checkpoint topic {} at {}",
            self.config.topic, self.config.bootstrap_servers
        )
    }

    /// Take the end of the partition (uncommitted records included), and start reading from its
    /// beginning, or from where `continued` ended.
    fn start(c: &KafkaStoreConfig, continued: Option<Continued>) -> Result<Scanner> {
        let high = high_watermark(c)?;
        let (found, from) = match continued {
            // (a topic that ends before the last read did was recreated: read it all)
            Some(k) if k.position <= high => (k.raw, k.position),
            _ => (Scan::default(), 0),
        };
        let mut scanner = Scanner {
            config: c.clone(),
            consumer: None,
            high,
            found,
            event_time_prefix: super::records::event_time_prefix(&c.job),
            started: sim::now(),
            waiting: false,
            position: from,
            to_stable: false,
        };
        if high > from {
            let consumer = reader(c, &c.owner, "read_committed")?;
            let offset = if from > 0 {
                Offset::Offset(from)
            } else {
                Offset::Beginning
            };
            consumer
                .assign(&[(c.topic.as_str(), 0, offset)])
                .map_err(|e| kafka(scanner.context(), e))?;
            scanner.consumer = Some(consumer);
        }
        Ok(scanner)
    }

    /// Read what can be read within `wait`: the whole scan once the position reached the end
    /// taken at the start, `None` while an open transaction holds it back. An error past
    /// [`RESTORE_WAIT`].
    pub(super) fn step(&mut self, wait: Duration) -> Result<Option<Scan>> {
        let Some(consumer) = self.consumer.as_ref() else {
            // nothing past where the last read ended
            return Ok(Some(std::mem::take(&mut self.found)));
        };
        let c = &self.config;
        let mut at_end = false;
        let mut wait = wait;
        loop {
            match consumer.poll(wait) {
                Some(Ok(m)) => {
                    wait = Duration::ZERO;
                    if let Some(key) = m.key.as_deref().and_then(|k| std::str::from_utf8(k).ok()) {
                        if owner_of_key(&c.job, key).is_some() {
                            self.found.records.insert(key.to_string(), m.payload);
                            self.found.offsets.insert(key.to_string(), m.offset);
                        } else if key.starts_with(&self.event_time_prefix) {
                            match m.payload {
                                Some(_) => self.found.event_time.insert(key.to_string()),
                                None => self.found.event_time.remove(key),
                            };
                        }
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    at_end = true;
                    break;
                }
                Some(Err(e)) => return Err(kafka(self.context(), e)),
                None => break,
            }
        }
        let position = consumer
            .position(&c.topic, 0)
            .map_err(|e| kafka(self.context(), e))?
            .unwrap_or(self.position);
        self.position = position;
        if position >= self.high {
            if self.waiting {
                info!(topic = %c.topic, offset = self.high, waited_ms = sim::now().saturating_duration_since(self.started).as_millis() as u64, "checkpoint topic read to its end");
            }
            return Ok(Some(std::mem::take(&mut self.found)));
        }
        if at_end && self.to_stable {
            return Ok(Some(std::mem::take(&mut self.found)));
        }
        if at_end && !self.waiting {
            // the end of the committed records, before the high watermark: an open transaction
            let (_, stable) = consumer
                .fetch_watermarks(&c.topic, 0, TIMEOUT)
                .map_err(|e| kafka(self.context(), e))?;
            warn!(
                topic = %c.topic,
                offset = stable,
                high_watermark = self.high,
                wait_s = RESTORE_WAIT.as_secs(),
                "an open transaction holds the checkpoint topic at offset {stable}; waiting for it to end before restoring"
            );
            self.waiting = true;
        }
        if sim::now().saturating_duration_since(self.started) > RESTORE_WAIT {
            return Err(Error::runtime(
                self.context(),
                format!(
                    "committed records end at offset {position} of partition 0, the log at {}: a transaction \
                     left open there (another job or instance on this topic, or a stuck producer) did not end \
                     within {RESTORE_WAIT:?}; end or abort it (a crashed producer's transaction ends after its \
                     transaction.timeout.ms), or give this job its own checkpoint.topic, then start again",
                    self.high
                ),
            ));
        }
        Ok(None)
    }
}

/// What a scan found: the latest value of each key of the job, every owner's (`None`: a
/// tombstone).
#[derive(Default, Clone)]
pub(super) struct Scan {
    pub(super) records: BTreeMap<String, Option<Vec<u8>>>,
    /// The offset of each key's latest record (which of two records was written later).
    pub(super) offsets: BTreeMap<String, i64>,
    /// The job's event-time values (`records::event_time_prefix`) that are not tombstones.
    pub(super) event_time: std::collections::BTreeSet<String>,
    /// The keys of the parts of records written in parts (their heads in `records` hold the
    /// whole records, joined).
    pub(super) parts: std::collections::BTreeSet<String>,
}

impl Scan {
    /// Records written in parts, joined: each head replaced by the whole record (left as it is
    /// when its parts are missing or do not match), the parts set apart.
    fn join_parts(&mut self) {
        let parts: BTreeMap<String, Option<Vec<u8>>> = self
            .records
            .keys()
            .filter(|k| super::records::is_part(k))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|k| self.records.remove_entry(&k))
            .collect();
        if parts.is_empty() {
            return;
        }
        for (key, value) in self.records.iter_mut() {
            if let Some(whole) = value
                .as_deref()
                .and_then(|head| super::records::joined(key, head, &parts))
            {
                *value = Some(whole);
            }
        }
        self.parts = parts.into_iter().filter(|(_, v)| v.is_some()).map(|(k, _)| k).collect();
    }

    /// `owner`'s live keys, parts included (what a removal of its records tombstones).
    pub(super) fn live_keys_of(&self, owner: &str) -> Vec<String> {
        self.records
            .iter()
            .filter(|(k, v)| v.is_some() && is_owned(owner, k))
            .map(|(k, _)| k.clone())
            .chain(self.parts.iter().filter(|k| is_owned(owner, k)).cloned())
            .collect()
    }

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
pub(super) fn reader(config: &KafkaStoreConfig, owner: &str, isolation: &str) -> Result<Box<dyn Consumer>> {
    cluster::of(&config.bootstrap_servers).consumer(&reader_spec(config, owner, isolation))
}

/// [`reader`]'s client.
pub(crate) fn reader_spec<'a>(config: &'a KafkaStoreConfig, owner: &str, isolation: &str) -> ClientSpec<'a> {
    ClientSpec::new(&config.bootstrap_servers, &config.properties, "state-reader")
        .set("group.id", format!("tidegate-state-reader-{owner}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation.to_string())
        .set("client.id", "tidegate-state-reader")
}

#[cfg(test)]
mod tests {
    use super::{owner_of_key, Scan};

    /// A checkpoint of 5,000 partitions: its enumerator's record (every split it knows) is
    /// written in parts no larger than `PART_BYTES`, read back whole; a part missing (a read
    /// that cut the transaction) leaves a head that fails to decode.
    #[test]
    fn a_large_record_is_written_in_parts_and_read_back_whole() {
        use crate::checkpoint_store::records::{assemble, records_of, PART_BYTES};
        let topic = "market-data.equities.trades.2026-12-04.north-america-east";
        let split = |p: usize| serde_json::json!({"topic": topic, "partition": p, "next_offset": 12_345, "stop_offset": 67_890});
        let checkpoint = crate::core::StoredCheckpoint {
            checkpoint_id: 3,
            value: serde_json::json!({
                "job": "j", "checkpoint_id": 3,
                "enumerator": {"splits": (0..5000).map(|p| serde_json::json!({"split": split(p), "assigned": true})).collect::<Vec<_>>()},
                "splits": (0..5000).map(|p| serde_json::json!({"split": split(p)})).collect::<Vec<_>>(),
            }),
            split_ids: (0..5000).map(|p| format!("{topic}-{p}")).collect(),
        };
        let records = records_of("j", "j", &checkpoint).unwrap();
        let largest = records.iter().map(|(_, v)| v.len()).max().unwrap();
        assert!(largest <= PART_BYTES, "a record of {largest} bytes");
        assert!(
            records.iter().any(|(k, _)| k == "j/enumerator/part/2"),
            "written in parts"
        );
        let mut found = Scan {
            records: records.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect(),
            ..Scan::default()
        };
        let mut cut = Scan {
            records: found.records.clone(),
            ..Scan::default()
        };
        cut.records.remove("j/enumerator/part/1");
        found.join_parts();
        let whole = assemble("j", "j", &found.of("j")).unwrap().unwrap();
        assert_eq!(whole["enumerator"], checkpoint.value["enumerator"]);
        assert!(found.live_keys_of("j").contains(&"j/enumerator/part/0".to_string()));
        cut.join_parts();
        let e = assemble("j", "j", &cut.of("j")).unwrap_err();
        assert_eq!(e.0, "j/enumerator");
        assert!(e.1.to_string().contains("parts"), "{}", e.1);
    }

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
