//! A consumer group membership over librdkafka: the consumer that joins the group (and reads
//! nothing), and the rebalance callbacks that hand the assignment on and hold a revocation until
//! the job has released its partitions.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::super::seam::{Change, GroupMembership, GroupMetadata, GroupSpec, NextChange};
use crate::client::{client_context_through, TracingContext};
use crate::error::{kafka, Error, Result};
use crate::kafka::TopicPartition;

/// How long a revoked member may take to stop its job with a final checkpoint before the
/// broker drops it from the group (librdkafka's `max.poll.interval.ms`, which is the rebalance
/// timeout too), unless the properties say otherwise.
const RELEASE_TIMEOUT_MS: &str = "300000";

/// The consumer's context: rebalances become [`Change`]s, and a revocation waits until the job
/// has released its partitions.
struct GroupContext {
    tracing: TracingContext,
    changes: mpsc::UnboundedSender<Change>,
    released: Mutex<std_mpsc::Receiver<()>>,
    /// An assignment was handed to the job (a revocation before any has nothing to wait for).
    holding: AtomicBool,
}

client_context_through!(GroupContext, tracing);

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            if !self.holding.swap(false, Ordering::SeqCst) {
                return;
            }
            info!("group rebalance: partitions revoked; stopping the job with a final checkpoint");
            if self.changes.send(Change::Revoked).is_err() {
                return;
            }
            // the broker's rebalance waits for this member to rejoin (max.poll.interval.ms): the
            // partitions are released once the job's final checkpoint is committed; a dropped
            // sender is a job that ended
            let released = self.released.lock().unwrap_or_else(|p| p.into_inner());
            let _ = released.recv();
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // this consumer only holds the partitions: the job's readers fetch them
            if let Err(e) = consumer.pause(tpl) {
                warn!(error = %e, "pausing the group member's own fetches failed; what it fetches is dropped");
            }
            let partitions: BTreeSet<TopicPartition> = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            info!(partitions = partitions.len(), "group rebalance: partitions assigned");
            self.holding.store(true, Ordering::SeqCst);
            let metadata = consumer.group_metadata().map(GroupMetadata::new);
            let _ = self.changes.send(Change::Assigned(partitions, metadata));
        }
    }
}

/// A membership: a thread that polls the group's consumer (heartbeats and rebalances; the
/// records it is assigned are fetched by the job).
pub(super) struct Membership {
    changes: mpsc::UnboundedReceiver<Change>,
    released: Option<std_mpsc::Sender<()>>,
    leaving: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The member's consumer config: `config` (the source's cluster and properties) with the
/// group's settings (what `validate` checks is what joins).
pub fn membership_config(config: &ClientConfig, spec: &GroupSpec) -> ClientConfig {
    let mut config = config.clone();
    for (key, value) in [
        ("max.poll.interval.ms", RELEASE_TIMEOUT_MS),
        ("heartbeat.interval.ms", "1000"),
    ] {
        if config.get(key).is_none() {
            config.set(key, value);
        }
    }
    // the group and its protocol are the job's: eager (every partition revoked, then
    // assigned), nothing committed by this consumer
    config
        .set("group.id", &spec.group)
        .set("client.id", format!("{}@{}", spec.group, spec.member))
        .set("partition.assignment.strategy", "roundrobin")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    config
}

impl Membership {
    /// Join `spec.group` with a consumer of `config` (the source's cluster and properties: a
    /// user's `session.timeout.ms` or `heartbeat.interval.ms` apply), subscribed to `spec.topics`.
    pub(super) fn join(config: &ClientConfig, spec: &GroupSpec) -> Result<Membership> {
        let config = membership_config(config, spec);
        let servers = config.get("bootstrap.servers").unwrap_or_default().to_string();
        let (changes_tx, changes) = mpsc::unbounded_channel();
        let (released_tx, released_rx) = std_mpsc::channel();
        let context = GroupContext {
            tracing: TracingContext::new("group"),
            changes: changes_tx,
            released: Mutex::new(released_rx),
            holding: AtomicBool::new(false),
        };
        let consumer: BaseConsumer<GroupContext> = config
            .create_with_context(context)
            .map_err(|e| kafka(format!("joining consumer group {} at {servers}", spec.group), e))?;
        let names: Vec<&str> = spec.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(|e| {
            kafka(
                format!(
                    "subscribing consumer group {} to {}",
                    spec.group,
                    spec.topics.join(", ")
                ),
                e,
            )
        })?;
        info!(group = %spec.group, member = %spec.member, "joining the job's consumer group");
        let leaving = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&leaving);
        let thread = std::thread::Builder::new()
            .name("tidegate-group".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match consumer.poll(Duration::from_millis(100)) {
                        Some(Ok(_)) => debug!("a record fetched by the group member itself, dropped"),
                        Some(Err(e)) => warn!(error = %e, "consumer group"),
                        None => {}
                    }
                }
                // leave the group at once, so the others rebalance without waiting for the
                // session to time out (a revocation now has nothing to wait for)
                consumer.context().holding.store(false, Ordering::SeqCst);
                consumer.unsubscribe();
                let _ = consumer.poll(Duration::from_millis(100));
            })
            .map_err(|e| Error::io("starting the consumer group's thread", e))?;
        Ok(Membership {
            changes,
            released: Some(released_tx),
            leaving,
            thread: Some(thread),
        })
    }
}

impl GroupMembership for Membership {
    fn next(&mut self) -> NextChange<'_> {
        Box::pin(self.changes.recv())
    }

    fn release(&self) {
        if let Some(tx) = &self.released {
            let _ = tx.send(());
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.leaving.store(true, Ordering::SeqCst);
        // a revocation still waiting for the job gets its answer: the job has ended
        self.released.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
