//! This process's membership of the job's consumer group: the consumer that joins it (and reads
//! nothing), and the rebalance callbacks that hand the assignment to the job and hold a
//! revocation until the job has stopped with a final checkpoint.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata, Rebalance};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::group_id;
use crate::error::{kafka, Error, Result};
use crate::kafka::client::{client_config, client_context_through, TracingContext};
use crate::kafka::TopicPartition;

/// How long a revoked member may take to stop its job with a final checkpoint before the
/// broker drops it from the group (librdkafka's `max.poll.interval.ms`, which is the rebalance
/// timeout too), unless `source.properties` says otherwise.
const RELEASE_TIMEOUT_MS: &str = "300000";

/// What the group did to this member.
pub enum Change {
    /// These partitions are this member's now (maybe none), with its group metadata for the
    /// checkpoints' transactions (KIP-447).
    Assigned(BTreeSet<TopicPartition>, Option<Arc<ConsumerGroupMetadata>>),
    /// Every partition is taken back: stop the job with a final checkpoint, then
    /// [`Membership::release`].
    Revoked,
}

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
            let metadata = consumer.group_metadata().map(Arc::new);
            let _ = self.changes.send(Change::Assigned(partitions, metadata));
        }
    }
}

/// This process's membership of the job's consumer group: a thread that polls the group's
/// consumer (heartbeats and rebalances; the records it is assigned are fetched by the job).
pub struct Membership {
    changes: mpsc::UnboundedReceiver<Change>,
    released: Option<std_mpsc::Sender<()>>,
    leaving: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Membership {
    /// Join the group `tidegate-<job>` on the source's cluster, subscribed to `topics`, with the
    /// source's properties (a user's `session.timeout.ms` or `heartbeat.interval.ms` apply).
    pub fn join(
        job: &str,
        member: &str,
        bootstrap_servers: &str,
        properties: &std::collections::BTreeMap<String, String>,
        topics: &[String],
    ) -> Result<Membership> {
        let group = group_id(job);
        let client_id = format!("tidegate-{job}@{member}");
        let mut config = client_config(
            bootstrap_servers,
            &[
                ("max.poll.interval.ms", RELEASE_TIMEOUT_MS),
                ("heartbeat.interval.ms", "1000"),
            ],
            properties,
        );
        // the group and its protocol are the job's: eager (every partition revoked, then
        // assigned), nothing committed by this consumer
        config
            .set("group.id", &group)
            .set("client.id", &client_id)
            .set("partition.assignment.strategy", "roundrobin")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
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
            .map_err(|e| kafka(format!("joining consumer group {group} at {bootstrap_servers}"), e))?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(|e| {
            kafka(
                format!("subscribing consumer group {group} to {}", topics.join(", ")),
                e,
            )
        })?;
        info!(group = %group, member = %member, "joining the job's consumer group");
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

    /// The group's next change; `None` when the membership ended.
    pub async fn next(&mut self) -> Option<Change> {
        self.changes.recv().await
    }

    /// The job stopped after a revocation: its partitions may go.
    pub fn release(&self) {
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
