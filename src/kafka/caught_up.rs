//! Which of a fetcher's splits are caught up, as the broker confirms it: at the end of their log,
//! with nothing past the consumer's position, not even records of an open transaction. A
//! source-wide stop (`eof_scope = "source"`) moves a caught-up split's watermark by these
//! confirmations only (see `crate::core::event_time`), so a partition whose transaction is still
//! open, or whose leader does not answer, holds the others back instead of being taken as done.
//!
//! Flink has no counterpart: its idleness (`withIdleness`) is a timeout, which is what tidegate
//! did before (the wall clock less `caught_up_grace`), and which is too short by construction for
//! transactional producers, whose records become visible only at their commit.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, warn};

use super::consumer::consumer_config;
use super::live_split::LiveSplit;
use super::settings::KafkaSourceSettings;
use crate::client::TracingContext;
use crate::core::event_time::{wall_millis, EventTimeClock};
use crate::core::SplitId;

/// How often the splits at the end of their log are confirmed: bounds how much later than its
/// grace a split of a live topic ends after the stop, and other splits' records go out.
const CONFIRM_EVERY: Duration = Duration::from_millis(200);
/// How long one question may take (and the pause after one went unanswered, so a leader that
/// does not answer does not keep the fetcher waiting): an unanswered one confirms nothing.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// The splits of a fetcher at the end of their log: reported as each fetch finds them (the
/// pacing clock does not wait for their first record), and, with a [`CaughtUpCheck`], confirmed.
#[derive(Default)]
pub(crate) struct CaughtUp {
    /// Reached the end of their log in this fetch, with no record after it.
    reported: Vec<SplitId>,
    /// At the end of their log, no record since (tracked only with a check).
    at_end: Vec<SplitId>,
    check: Option<CaughtUpCheck>,
}

impl CaughtUp {
    /// Tracks the splits at the end of their log and has the broker confirm them caught up
    /// (asking with a client of `settings`, named after reader `reader_index`).
    pub(super) fn confirmed_by_broker(settings: &KafkaSourceSettings, reader_index: usize) -> Self {
        CaughtUp {
            check: Some(CaughtUpCheck::new(settings, reader_index)),
            ..CaughtUp::default()
        }
    }

    /// A record of `id` was fetched.
    pub(super) fn record(&mut self, id: &SplitId) {
        if !self.reported.is_empty() {
            self.reported.retain(|r| r != id);
        }
        if !self.at_end.is_empty() {
            // by pointer: a hint of which splits to ask about, not what the answer rests on
            self.at_end.retain(|r| !std::sync::Arc::ptr_eq(r, id));
        }
    }

    /// `id`'s fetch reached the end of its log.
    pub(super) fn end_of_log(&mut self, id: &SplitId) {
        self.reported.push(id.clone());
        if self.check.is_some() && !self.at_end.contains(id) {
            self.at_end.push(id.clone());
        }
    }

    /// The splits that reached the end of their log in this fetch, and those the broker
    /// confirms caught up, with when (see [`CaughtUpCheck::confirm`]).
    pub(super) fn take(
        &mut self,
        consumer: &BaseConsumer<TracingContext>,
        splits: &[LiveSplit],
    ) -> (Vec<SplitId>, Vec<(SplitId, i64)>) {
        let reported = std::mem::take(&mut self.reported);
        let Some(check) = self.check.as_mut() else {
            return (reported, Vec::new());
        };
        // splits finished or removed since
        self.at_end.retain(|id| splits.iter().any(|s| s.id == *id));
        let at_end: Vec<&LiveSplit> = splits.iter().filter(|s| self.at_end.contains(&s.id)).collect();
        (reported, check.confirm(consumer, &at_end))
    }
}

/// Whether a job's readers need splits confirmed caught up: a source-wide stop takes a caught-up
/// split as done only as the broker confirms it.
pub(super) fn needed(clock: Option<&EventTimeClock>) -> bool {
    clock.is_some_and(|c| c.options().source_wide_stop)
}

/// Asks the broker whether the splits at the end of their log are caught up.
struct CaughtUpCheck {
    config: ClientConfig,
    /// A read_uncommitted client: its ListOffsets answers the high watermark, which counts the
    /// records of open transactions (the fetcher's own read_committed consumer would answer the
    /// last stable offset, which is where its fetch already stands). Created on first use.
    watermarks: Option<BaseConsumer<TracingContext>>,
    next: Instant,
}

impl CaughtUpCheck {
    fn new(settings: &KafkaSourceSettings, reader_index: usize) -> Self {
        let mut config = consumer_config(settings, reader_index, 1, 1);
        config.set("isolation.level", "read_uncommitted");
        config.set("client.id", format!("tidegate-reader-{reader_index}-watermarks"));
        CaughtUpCheck {
            config,
            watermarks: None,
            next: Instant::now(),
        }
    }

    /// Of `at_end`, the splits whose partition's high watermark is at the consumer's position
    /// (no record past it, no open transaction), each with the wall-clock milliseconds the
    /// question was sent at: whatever the split reads later was written after that.
    fn confirm(&mut self, consumer: &BaseConsumer<TracingContext>, at_end: &[&LiveSplit]) -> Vec<(SplitId, i64)> {
        if Instant::now() < self.next || at_end.is_empty() {
            return Vec::new();
        }
        self.next = Instant::now() + CONFIRM_EVERY;
        if self.watermarks.is_none() {
            match self
                .config
                .create_with_context(TracingContext::new("watermarks".to_string()))
            {
                Ok(c) => self.watermarks = Some(c),
                Err(e) => {
                    warn!(error = %e, "cannot create the client that confirms caught-up partitions; trying again");
                    return Vec::new();
                }
            }
        }
        let Some(watermarks) = &self.watermarks else {
            return Vec::new();
        };
        // the positions first: a record written after they were read shows in the watermark
        let positions = consumer.position().ok();
        let sent = wall_millis();
        let mut ask = TopicPartitionList::new();
        for s in at_end {
            if let Err(e) = ask.add_partition_offset(&s.topic, s.partition, Offset::End) {
                debug!(split_id = %s.id, error = %e, "cannot ask for a high watermark");
            }
        }
        let ends = match watermarks.offsets_for_times(ask, QUERY_TIMEOUT) {
            Ok(ends) => ends,
            Err(e) => {
                debug!(error = %e, "no high watermarks: no split confirmed caught up this time");
                self.next = Instant::now() + QUERY_TIMEOUT;
                return Vec::new();
            }
        };
        let offset = |tpl: &TopicPartitionList, s: &LiveSplit| {
            let elem = tpl.find_partition(&s.topic, s.partition)?;
            match (elem.error(), elem.offset()) {
                (Ok(()), Offset::Offset(o)) => Some(o),
                _ => None,
            }
        };
        let mut confirmed = Vec::new();
        for s in at_end {
            // the consumer's position moves past transaction markers; before its first record
            // it has none, and the split's own stands
            let position = positions
                .as_ref()
                .and_then(|p| offset(p, s))
                .map_or(s.position, |p| p.max(s.position));
            match offset(&ends, s) {
                Some(high) if high <= position => confirmed.push((s.id.clone(), sent)),
                high => {
                    debug!(split_id = %s.id, position, high_watermark = ?high, "at the end of its log, not caught up (records to come, or an open transaction)")
                }
            }
        }
        confirmed
    }
}
