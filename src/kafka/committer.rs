//! The Kafka source's progress report to its consumer group (Flink's
//! `KafkaSourceReader#notifyCheckpointComplete`): each completed checkpoint's positions are
//! committed to `group_id`. The state file stays the source of truth, so the report never holds
//! the job up: commits are asynchronous, and the final one is waited for only briefly, so a
//! broker that does not answer cannot hold a stop for its request timeout.

use std::sync::mpsc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, warn};

use super::settings::KafkaSourceSettings;
use super::split::KafkaPartitionSplit;
use crate::client::{self, TracingContext};
use crate::core::reader_base::CheckpointListener;
use crate::core::SplitSnapshot;
use crate::error::Result;

/// How long a reader's end waits for its final commit (at most the request timeout).
pub const FINAL_COMMIT_WAIT: Duration = Duration::from_secs(3);

/// The consumer config of reader `reader`'s committer to `group`.
pub(crate) fn committer_config(settings: &KafkaSourceSettings, group: &str, reader: usize) -> rdkafka::ClientConfig {
    let client_id = format!("tidegate-committer-{reader}");
    client::consumer_client_config(
        &settings.bootstrap_servers,
        &[
            ("group.id", group),
            ("client.id", &client_id),
            ("enable.auto.commit", "false"),
        ],
        &settings.properties,
    )
}

/// Commits the checkpointed positions of reader `reader` to `group`.
pub(super) fn offset_committer(
    settings: &KafkaSourceSettings,
    group: String,
    reader: usize,
) -> Result<CheckpointListener<KafkaPartitionSplit>> {
    let consumer: BaseConsumer<TracingContext> = committer_config(settings, &group, reader)
        .create_with_context(TracingContext::new(format!("committer-{reader}")))
        .map_err(|e| crate::error::kafka("creating the offset committer", e))?;
    let mut committer = Committer {
        consumer: Some(consumer),
        group,
        final_wait: settings.request_timeout.min(FINAL_COMMIT_WAIT),
    };
    Ok(Box::new(move |checkpoint, splits, is_final| {
        committer.commit(checkpoint, splits, is_final)
    }))
}

/// One reader's group client. Closing a group's client waits for its commits in flight, so the
/// client is closed on a thread of its own, never on the reader's.
struct Committer {
    /// `None` once the final commit took it.
    consumer: Option<BaseConsumer<TracingContext>>,
    group: String,
    final_wait: Duration,
}

impl Committer {
    fn commit(&mut self, checkpoint: u64, splits: &[SplitSnapshot<KafkaPartitionSplit>], is_final: bool) -> Result<()> {
        let Some(consumer) = self.consumer.as_ref() else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        // a split released mid-run is another member's now: its position there is newer
        let held = splits.iter().filter(|s| {
            s.finished
                .is_none_or(|f| f.reason != crate::core::FinishReason::Released)
        });
        for s in held {
            tpl.add_partition_offset(&s.split.topic, s.split.partition, Offset::Offset(s.split.next_offset))
                .map_err(|e| crate::error::kafka("building the offsets to commit", e))?;
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        if !is_final {
            // asynchronous, so a slow group coordinator never stalls reading
            let result = consumer.commit(&tpl, CommitMode::Async);
            self.report(checkpoint, tpl.count(), result);
            // serve the commit callbacks queued on the consumer
            let _ = consumer.poll(Duration::ZERO);
            return Ok(());
        }
        // The final commit is synchronous, on a thread that then closes the client: the reader
        // waits for it up to `final_wait`, then ends without it.
        let Some(consumer) = self.consumer.take() else {
            return Ok(());
        };
        let partitions = tpl.count();
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("tidegate-final-commit".into())
            .spawn(move || {
                let _ = tx.send(consumer.commit(&tpl, CommitMode::Sync));
                drop(consumer);
            });
        if let Err(e) = spawned {
            warn!(checkpoint, group = %self.group, error = %e, "no thread for the final offset commit; skipped (progress report only)");
            return Ok(());
        }
        match rx.recv_timeout(self.final_wait) {
            Ok(result) => self.report(checkpoint, partitions, result),
            Err(_) => warn!(
                checkpoint,
                group = %self.group,
                waited_ms = self.final_wait.as_millis() as u64,
                "the final offset commit got no answer in time; the reader ends without it (progress report only: the checkpoint has the positions)"
            ),
        }
        Ok(())
    }

    fn report(&self, checkpoint: u64, partitions: usize, result: rdkafka::error::KafkaResult<()>) {
        match result {
            Ok(()) => debug!(checkpoint, group = %self.group, partitions, "offsets committed"),
            Err(e) => {
                warn!(checkpoint, group = %self.group, error = %e, "committing offsets failed (progress report only)")
            }
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // a reader that ends without a final commit (a failure): its client's commits in flight
        // may wait for a broker that does not answer
        if let Some(consumer) = self.consumer.take() {
            let _ = std::thread::Builder::new()
                .name("tidegate-committer-close".into())
                .spawn(move || drop(consumer));
        }
    }
}
