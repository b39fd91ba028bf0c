//! The readers' consumer: its librdkafka settings (why each default), and the consumer errors
//! that say a partition cannot be read, which fail the job when they persist.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaRespErr;
use tracing::{debug, info, warn};

use super::settings::KafkaSourceSettings;
use crate::client::client_config;
use crate::error::Error;

/// librdkafka's prefetch for one reader: its consumer queue (every partition of the reader's
/// feeds it) holds at most this many messages and KiB of values (`queued.min.messages`,
/// `queued.max.messages.kbytes`), one fetch answer brings at most `fetch.max.bytes`, and a
/// partition at most `max.partition.fetch.bytes` of it.
///
/// The queue is counted in *decompressed* values (librdkafka counts a message's value length),
/// but the fetch sizes in the bytes the broker sends, which are *compressed*, and librdkafka
/// checks its queue only before it asks for more: one answer lands whole, however large it is
/// once decompressed. So the fetch sizes are what bound a reader's memory for data that
/// compresses well: an answer of `fetch_bytes` unpacks to `fetch_bytes` times the ratio (256 KiB
/// of a 50:1 topic, 12.5 MiB), where librdkafka's defaults (1 MiB per partition, 50 MiB per
/// answer capped to the queue's 4 MiB) unpacked to 100 MiB and more (docs/performance.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefetch {
    pub messages: usize,
    pub kbytes: usize,
    /// `fetch.max.bytes` (and `message.max.bytes`, which librdkafka wants at most that)
    pub fetch_bytes: usize,
    pub partition_fetch_bytes: usize,
}

/// The prefetch of each of a job's `readers` readers when it starts with `partitions`
/// partitions: one reader of up to [`FULL_PREFETCH_PARTITIONS`] partitions gets the whole
/// budget; more readers, or a reader of more partitions (which fetches more at once: up to
/// `max.partition.fetch.bytes` from each), share it, down to a floor. With the whole budget for
/// every reader, 4 partitions at parallelism 2 peaked at 72 MiB and 64 partitions at 95-109 MiB,
/// against 52-60 MiB for one reader of 4 (docs/performance.md, "The readers' prefetch").
pub fn prefetch(readers: usize, partitions: usize) -> Prefetch {
    // a smaller prefetch queue and smaller fetches than librdkafka's: enough to keep the
    // pipeline busy, and a bounded memory. The defaults (100k messages, 64 MiB, 1 MiB per
    // partition and fetch) cost RSS for little throughput: replaying 100-byte records from 2
    // partitions peaked at 100 MiB with 8 MiB / 1 MiB, 60 MiB with 4 MiB / 512 KiB. Answers of
    // 256 KiB (64 KiB per partition) read 4M 100-byte records from 4 partitions as fast as 4 MiB
    // ones did (2.27-2.73 s against 2.37-2.51 s, four rounds each), and a 50:1 topic of 1 KiB
    // records peaked at 56-60 MiB instead of 172-175 MiB (docs/performance.md)
    let full = Prefetch {
        messages: 20_000,
        kbytes: 4096,
        fetch_bytes: 256 * 1024,
        partition_fetch_bytes: 64 * 1024,
    };
    let shares = readers.max(1) * partitions.max(1).div_ceil(FULL_PREFETCH_PARTITIONS);
    Prefetch {
        // the floor: 5 ms of the fastest reading measured, at least, so a queue over it is
        // refilled within librdkafka's fetch.queue.backoff.ms (10 ms, below) of draining
        messages: (full.messages / shares).max(5000),
        kbytes: (full.kbytes / shares).max(1024),
        fetch_bytes: full.fetch_bytes,
        partition_fetch_bytes: full.partition_fetch_bytes,
    }
}

/// The partitions of a reader up to which it gets the whole budget (see [`prefetch`]).
pub const FULL_PREFETCH_PARTITIONS: usize = 4;

/// The consumer of reader `reader_index` of `readers`, which starts with `partitions`
/// partitions: tidegate's settings, then the user's properties.
pub fn consumer_config(
    settings: &KafkaSourceSettings,
    reader_index: usize,
    readers: usize,
    partitions: usize,
) -> ClientConfig {
    let prefetch = prefetch(readers, partitions);
    let user = |key: &str| {
        settings
            .properties
            .get(key)
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    // librdkafka refuses a `fetch.max.bytes` below `message.max.bytes`: a user's larger
    // `message.max.bytes` raises the answer size with it
    let answer = prefetch.fetch_bytes.max(user("message.max.bytes").unwrap_or(0));
    // and a user's smaller `fetch.max.bytes` lowers `message.max.bytes` (librdkafka's least: 1000)
    let message = answer.min(user("fetch.max.bytes").unwrap_or(usize::MAX)).max(1000);
    let (messages, kbytes, answer, message, partition_bytes) = (
        prefetch.messages.to_string(),
        prefetch.kbytes.to_string(),
        answer.to_string(),
        message.to_string(),
        prefetch.partition_fetch_bytes.to_string(),
    );
    let client_id = format!("tidegate-reader-{reader_index}");
    // Manual assignment still needs a group id in librdkafka; without the user's group this
    // one is never joined or committed to (no subscribe, no commits from this consumer).
    let group = settings
        .group_id
        .clone()
        .unwrap_or_else(|| "tidegate-manual-assignment".to_string());
    let reset = settings.offset_reset.as_str();
    let defaults: Vec<(&str, &str)> = vec![
        ("group.id", &group),
        ("client.id", &client_id),
        // offsets are ours (the state file), never librdkafka's
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        // an EOF event makes us look at the position, which moves past transaction markers
        ("enable.partition.eof", "true"),
        ("isolation.level", "read_committed"),
        // a start offset deleted by retention is an error unless configured otherwise
        ("auto.offset.reset", reset),
        ("allow.auto.create.topics", "false"),
        // librdkafka 2.x postpones a partition's next fetch by fetch.queue.backoff.ms (1 s by
        // default) whenever its prefetch queue is over the thresholds below; a replay drains
        // the queue a batch at a time, so the default starved it to a quarter of kcat's rate
        ("fetch.queue.backoff.ms", "10"),
        // see `prefetch`
        ("queued.min.messages", &messages),
        ("queued.max.messages.kbytes", &kbytes),
        ("fetch.max.bytes", &answer),
        ("message.max.bytes", &message),
        ("max.partition.fetch.bytes", &partition_bytes),
    ];
    client_config(&settings.bootstrap_servers, &defaults, &settings.properties)
}

/// Consumer errors that say a partition cannot be read (authorization revoked, topic deleted):
/// librdkafka retries them forever, so a bounded replay would wait without a word. They are
/// logged at warn (once, then every 10 s per partition) and fail the job once they persisted for
/// the source's request timeout.
///
/// librdkafka reports such an error once, not on every failed fetch, and says nothing when it
/// stops; so while one is open the split reader re-arms librdkafka's reporting every
/// [`PROBE_EVERY`] (see [`PartitionErrors::due_probes`]) by seeking the partition to where it
/// stands: a partition that can be read again then reports its end, one that still cannot
/// reports the error again. A record handed over after the error clears it at once (its fetch
/// succeeded); so does the position moving past where the reader stood. The end of the partition
/// only clears it if the error does not come back within [`PartitionErrors::confirm_after`]:
/// librdkafka turns a fetch answer at the fetch position into an end-of-partition event before it
/// looks at the answer's error, so a broker that answers an error with the partition's high
/// watermark (librdkafka's mock cluster does; Apache Kafka answers -1) makes the first refused
/// fetch after each re-seek look like the end, and the next one reports the error again.
pub(super) struct PartitionErrors {
    pub(super) timeout: Duration,
    /// How long an end of the partition must stand without the error coming back to clear it:
    /// the next fetch reports the error again, and a broker holds an answer without records up to
    /// `fetch.wait.max.ms`; a probe interval more is the margin for the round trip.
    confirm_after: Duration,
    pub(super) open: HashMap<(String, i32), OpenError>,
}

/// How often an open error is probed.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// An error a partition reported and no sign of health since.
pub(super) struct OpenError {
    message: String,
    since: Instant,
    logged: Option<Instant>,
    probed: Instant,
    /// When the partition reported its end since the error, if it did: the error is cleared once
    /// that end stood for `confirm_after`, kept (with its first `since`) if the error came back.
    ended: Option<Instant>,
}

impl PartitionErrors {
    /// Errors that fail the job after `timeout`, for a consumer whose fetches wait up to
    /// `fetch_wait` (`fetch.wait.max.ms`) for records.
    pub(super) fn new(timeout: Duration, fetch_wait: Duration) -> Self {
        PartitionErrors {
            timeout,
            confirm_after: fetch_wait + PROBE_EVERY,
            open: HashMap::new(),
        }
    }

    pub(super) fn is_persistent(code: RDKafkaRespErr) -> bool {
        use RDKafkaRespErr::*;
        matches!(
            code,
            RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
                | RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                | RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
                | RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                | RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_ID
        )
    }

    pub(super) fn seen(&mut self, topic: &str, partition: i32, message: &str) {
        let now = Instant::now();
        let timeout = self.timeout;
        let entry = self
            .open
            .entry((topic.to_string(), partition))
            .or_insert_with(|| OpenError {
                message: message.to_string(),
                since: now,
                logged: None,
                probed: now,
                ended: None,
            });
        entry.message = message.to_string();
        if let Some(ended) = entry.ended.take() {
            debug!(topic, partition, error = %message, end_ms_ago = now.duration_since(ended).as_millis() as u64,
                   "the error came back after the partition reported its end: that end was the refused fetch's answer");
        }
        if entry
            .logged
            .is_none_or(|logged| now.duration_since(logged) >= Duration::from_secs(10))
        {
            entry.logged = Some(now);
            warn!(topic, partition, error = %message, failing_in_s = timeout.saturating_sub(now.duration_since(entry.since)).as_secs(),
                  "the partition cannot be read; the job fails if this lasts for source.request_timeout");
        }
    }

    /// The partition reported its end: a sign of health once it stood for `confirm_after`
    /// without the error coming back (see the type's doc).
    pub(super) fn ended(&mut self, topic: &str, partition: i32) {
        if self.open.is_empty() {
            return;
        }
        if let Some(e) = self.open.get_mut(&(topic.to_string(), partition)) {
            e.ended.get_or_insert_with(Instant::now);
        }
    }

    /// The partition showed it can be read (`sign`: what it did).
    pub(super) fn cleared(&mut self, topic: &str, partition: i32, sign: &str) {
        if self.open.is_empty() {
            return;
        }
        if let Some(e) = self.open.remove(&(topic.to_string(), partition)) {
            info!(topic, partition, error = %e.message, after_ms = e.since.elapsed().as_millis() as u64, sign,
                  "the partition can be read again");
        }
    }

    /// Forget a partition's error without a sign of health (its split ended or was paused).
    pub(super) fn forget(&mut self, topic: &str, partition: i32) -> bool {
        !self.open.is_empty() && self.open.remove(&(topic.to_string(), partition)).is_some()
    }

    /// The partitions whose open error is due for a probe (each at most every [`PROBE_EVERY`]);
    /// not those whose end is being confirmed: the probe that brought it re-armed the reporting.
    pub(super) fn due_probes(&mut self) -> Vec<(String, i32)> {
        let now = Instant::now();
        self.open
            .iter_mut()
            .filter(|(_, e)| e.ended.is_none() && now.duration_since(e.probed) >= PROBE_EVERY)
            .map(|(tp, e)| {
                e.probed = now;
                tp.clone()
            })
            .collect()
    }

    /// The first error that outlasted the timeout, after clearing those whose partition's end
    /// stood for `confirm_after`. An error whose end is still being confirmed does not fail yet:
    /// either it is cleared, or it comes back and fails at once, within `confirm_after` of the
    /// timeout.
    pub(super) fn failure(&mut self) -> Option<Error> {
        if self.open.is_empty() {
            return None;
        }
        let confirm_after = self.confirm_after;
        let confirmed: Vec<(String, i32)> = self
            .open
            .iter()
            .filter(|(_, e)| e.ended.is_some_and(|ended| ended.elapsed() >= confirm_after))
            .map(|(tp, _)| tp.clone())
            .collect();
        for (topic, partition) in confirmed {
            self.cleared(&topic, partition, "end of the partition");
        }
        self.open
            .iter()
            .find(|(_, e)| e.ended.is_none() && e.since.elapsed() >= self.timeout)
            .map(|((topic, partition), e)| {
                Error::runtime(
                    format!("reading {topic}:{partition}"),
                    format!("{} (for {:?}, the source's request_timeout)", e.message, self.timeout),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefetch_of_one_small_reader_is_shared_by_more_readers_and_partitions() {
        let full = prefetch(1, 4);
        assert_eq!(
            (full.messages, full.kbytes, full.fetch_bytes, full.partition_fetch_bytes),
            (20_000, 4096, 256 * 1024, 64 * 1024)
        );
        assert_eq!(prefetch(0, 0), full);
        assert_eq!(prefetch(1, 1), full);
        // two readers of 2 partitions each: half each
        let half = prefetch(2, 2);
        assert_eq!((half.messages, half.kbytes), (10_000, 2048));
        assert_eq!(prefetch(1, 8), half, "8 partitions: two fetches' worth of partitions");
        // 64 partitions at parallelism 2, 32 each: the floor
        let floor = prefetch(2, 32);
        assert_eq!((floor.messages, floor.kbytes), (5000, 1024));
        assert_eq!(
            (floor.fetch_bytes, floor.partition_fetch_bytes),
            (full.fetch_bytes, full.partition_fetch_bytes)
        );
        for (readers, partitions) in [(1, 5), (3, 1), (2, 64), (8, 1000)] {
            let p = prefetch(readers, partitions);
            assert!(
                p.messages <= full.messages && p.kbytes <= full.kbytes,
                "{readers} x {partitions}: {p:?}"
            );
        }
    }

    #[test]
    fn the_consumer_gets_its_share_and_the_user_has_the_last_word() {
        let mut settings =
            KafkaSourceSettings::new("127.0.0.1:9", super::super::Subscription::Topics(vec!["t".into()]));
        let config = consumer_config(&settings, 0, 2, 32);
        assert_eq!(config.get("queued.min.messages"), Some("5000"));
        assert_eq!(config.get("queued.max.messages.kbytes"), Some("1024"));
        assert_eq!(config.get("max.partition.fetch.bytes"), Some("65536"));
        assert_eq!(config.get("fetch.max.bytes"), Some("262144"));
        assert_eq!(config.get("message.max.bytes"), Some("262144"));
        settings.properties.insert("queued.min.messages".into(), "7".into());
        let config = consumer_config(&settings, 0, 2, 32);
        assert_eq!(config.get("queued.min.messages"), Some("7"));
    }

    /// librdkafka refuses a consumer whose `fetch.max.bytes` is below its `message.max.bytes`:
    /// a user who sets either one gets a consumer librdkafka accepts, with their value.
    #[test]
    fn a_users_fetch_or_message_size_moves_the_other_so_librdkafka_accepts_both() {
        use rdkafka::consumer::BaseConsumer;
        type Properties<'a> = &'a [(&'a str, &'a str)];
        let cases: [(Properties, &str, &str); 4] = [
            (&[("message.max.bytes", "4000000")], "4000000", "4000000"),
            (&[("fetch.max.bytes", "100000")], "100000", "100000"),
            (&[("fetch.max.bytes", "8000000")], "8000000", "262144"),
            (
                &[("fetch.max.bytes", "500"), ("message.max.bytes", "1000")],
                "500",
                "1000",
            ),
        ];
        for (properties, fetch, message) in cases {
            let mut settings =
                KafkaSourceSettings::new("127.0.0.1:9", super::super::Subscription::Topics(vec!["t".into()]));
            for (k, v) in properties {
                settings.properties.insert(k.to_string(), v.to_string());
            }
            let config = consumer_config(&settings, 0, 1, 1);
            assert_eq!(
                (config.get("fetch.max.bytes"), config.get("message.max.bytes")),
                (Some(fetch), Some(message)),
                "{properties:?}"
            );
            let created = config.create::<BaseConsumer>();
            if fetch == "500" {
                // both set by the user, and wrong: librdkafka's own error stands
                assert!(created.is_err(), "{properties:?}");
            } else {
                assert!(created.is_ok(), "{properties:?}: {:?}", created.err());
            }
        }
    }
}
