//! A consumer group membership over librdkafka: the consumer that joins the group (and reads
//! nothing), speaking KIP-848's consumer protocol where the broker offers it and the classic one
//! where it does not, and the rebalance callbacks that hand each change on and hold a revocation
//! until the job has stopped reading what was revoked.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::super::seam::{
    Change, GroupMembership, GroupMetadata, GroupMetadataSource, GroupProtocol, GroupSpec, NextChange,
};
use crate::client::{client_context_through, TracingContext};
use crate::error::{kafka, Error, Result};
use crate::kafka::TopicPartition;

/// How long a revoked member may take to stop reading with a final checkpoint before the
/// broker drops it from the group (librdkafka's `max.poll.interval.ms`, which is the rebalance
/// timeout under both protocols), unless the properties say otherwise.
const RELEASE_TIMEOUT_MS: &str = "300000";

/// The group protocol `properties` ask for (`group.protocol`; the consumer protocol, KIP-848,
/// unless they say "classic"), with the keys the consumer protocol leaves to the broker refused
/// by name, each with what replaces it.
pub fn protocol_of(properties: &std::collections::BTreeMap<String, String>) -> Result<GroupProtocol> {
    let protocol = match properties.get("group.protocol") {
        None => GroupProtocol::Consumer,
        Some(p) => GroupProtocol::parse(p).ok_or_else(|| {
            crate::error::Error::config(
                "source.properties.\"group.protocol\"",
                format!("unknown group protocol {p:?}; one of consumer (the default: KIP-848), classic"),
            )
        })?,
    };
    if protocol == GroupProtocol::Consumer {
        if let Some((key, instead)) = CONSUMER_PROTOCOL_REFUSES
            .iter()
            .find(|(k, _)| properties.contains_key(*k))
        {
            return Err(crate::error::Error::config(
                format!("source.properties.\"{key}\""),
                format!(
                    "not used by Kafka's consumer group protocol, which job.coordination = \"group\" speaks by \
                     default: {instead}; or set source.properties.\"group.protocol\" = \"classic\""
                ),
            ));
        }
    }
    Ok(protocol)
}

/// How long after joining a member of the consumer protocol that was dealt nothing is told so:
/// librdkafka calls no rebalance callback for an empty assignment, and the job's loop runs the
/// job on an empty one (a bounded job's member then waits for the others, and leaves with them).
const NOTHING_DEALT_AFTER: Duration = Duration::from_secs(3);

/// The keys librdkafka refuses under the consumer protocol (the broker decides them), with what
/// replaces each: `validate` names them before a consumer would.
pub const CONSUMER_PROTOCOL_REFUSES: [(&str, &str); 4] = [
    (
        "session.timeout.ms",
        "the broker's group.consumer.session.timeout.ms decides it",
    ),
    (
        "heartbeat.interval.ms",
        "the broker's group.consumer.heartbeat.interval.ms decides it",
    ),
    (
        "partition.assignment.strategy",
        "set group.remote.assignor (uniform or range) instead",
    ),
    ("group.protocol.type", "the consumer protocol has no protocol type"),
];

/// What the consumers of one membership share (a fallback to the classic protocol makes a second
/// consumer): the channels to the job's loop, and what the member holds.
struct Shared {
    changes: mpsc::UnboundedSender<Change>,
    released: Mutex<std_mpsc::Receiver<()>>,
    /// The partitions handed to the job and not revoked since.
    held: Mutex<BTreeSet<TopicPartition>>,
    /// The member's metadata as of its last assignment, its member id then, and whether the
    /// assignment was lost since (the group dropped the member): see [`GroupMetadataSource`].
    fence: Mutex<Fence>,
    /// A rebalance callback came: the broker speaks the protocol asked for.
    answered: AtomicBool,
    /// The member was told it was dealt nothing (once: see NOTHING_DEALT_AFTER).
    told_nothing: AtomicBool,
    /// The member leaves the group: its consumer unsubscribes and closes.
    leaving: AtomicBool,
}

#[derive(Default)]
struct Fence {
    assigned: Option<GroupMetadata>,
    member_id: Option<String>,
    lost: bool,
}

impl Shared {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The consumer's context: rebalances become [`Change`]s, and a revocation waits until the job
/// has stopped reading what was revoked.
struct GroupContext {
    tracing: TracingContext,
    shared: Arc<Shared>,
}

client_context_through!(GroupContext, tracing);

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let shared = &self.shared;
        shared.answered.store(true, Ordering::SeqCst);
        let revoked: BTreeSet<TopicPartition> = {
            let mut held = Shared::lock(&shared.held);
            let revoked: BTreeSet<TopicPartition> = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .filter(|tp| held.contains(tp))
                .collect();
            held.retain(|tp| !revoked.contains(tp));
            revoked
        };
        if consumer.assignment_lost() {
            // the group dropped this member: what its job commits from now on must be refused
            Shared::lock(&shared.fence).lost = true;
        }
        // a revocation of nothing handed to the job has nothing to wait for
        if revoked.is_empty() {
            return;
        }
        info!(
            partitions = revoked.len(),
            lost = consumer.assignment_lost(),
            "group rebalance: partitions revoked; the job stops reading them with a final checkpoint"
        );
        if shared.changes.send(Change::Revoked(revoked)).is_err() {
            return;
        }
        // the broker waits for this member (max.poll.interval.ms): the partitions go once the job
        // has stopped reading them and committed its final checkpoint; a dropped sender is a job
        // that ended
        let released = Shared::lock(&shared.released);
        let _ = released.recv();
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(tpl) = rebalance else {
            return;
        };
        let shared = &self.shared;
        shared.answered.store(true, Ordering::SeqCst);
        // an assignment served while the consumer leaves (in its close, under the consumer
        // protocol) goes to no job: and librdkafka's group metadata, asked for in its close,
        // would never answer (the member hung there, seen once in a broker test)
        if shared.leaving.load(Ordering::SeqCst) || consumer.closed() {
            debug!(
                added = tpl.count(),
                "group rebalance: partitions assigned as the member leaves; ignored"
            );
            return;
        }
        // this consumer only holds the partitions: the job's readers fetch them
        if let Err(e) = consumer.pause(tpl) {
            warn!(error = %e, "pausing the group member's own fetches failed; what it fetches is dropped");
        }
        *Shared::lock(&shared.fence) = Fence {
            assigned: consumer.group_metadata().map(GroupMetadata::new),
            member_id: member_id(consumer),
            lost: false,
        };
        let held = {
            let mut held = Shared::lock(&shared.held);
            held.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())));
            held.clone()
        };
        info!(
            added = tpl.count(),
            partitions = held.len(),
            "group rebalance: partitions assigned"
        );
        let _ = shared.changes.send(Change::Assigned(held));
    }
}

/// The member id librdkafka holds now (`None` before it has one).
fn member_id<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    let client = consumer.client().native_ptr();
    // SAFETY: the client is valid while `consumer` lives; rd_kafka_memberid returns a copy (or
    // null) that the caller frees with rd_kafka_mem_free, after it is read.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(client);
        if id.is_null() {
            return None;
        }
        let copy = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(client, id.cast());
        Some(copy)
    }
}

/// A membership: a thread that polls the group's consumer (heartbeats and rebalances; the
/// records it is assigned are fetched by the job).
pub(super) struct Membership {
    changes: mpsc::UnboundedReceiver<Change>,
    released: Option<std_mpsc::Sender<()>>,
    leaving: Arc<AtomicBool>,
    /// The consumer now (a fallback replaces it), for the metadata of each checkpoint.
    consumer: Arc<Mutex<Weak<BaseConsumer<GroupContext>>>>,
    shared: Arc<Shared>,
    protocol: Arc<AtomicU8>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The member's consumer config: `config` (the source's cluster and properties) with the
/// group's settings for `protocol` (what `validate` checks is what joins).
pub fn membership_config(config: &ClientConfig, spec: &GroupSpec, protocol: GroupProtocol) -> ClientConfig {
    let mut config = config.clone();
    if config.get("max.poll.interval.ms").is_none() {
        config.set("max.poll.interval.ms", RELEASE_TIMEOUT_MS);
    }
    config.set("group.protocol", protocol.name());
    match protocol {
        GroupProtocol::Consumer => {
            // the broker decides these (refused by name before: see CONSUMER_PROTOCOL_REFUSES)
            for (key, _) in CONSUMER_PROTOCOL_REFUSES {
                config.remove(key);
            }
            if let Some(assignor) = &spec.assignor {
                config.set("group.remote.assignor", assignor);
            }
        }
        GroupProtocol::Classic => {
            if config.get("heartbeat.interval.ms").is_none() {
                config.set("heartbeat.interval.ms", "1000");
            }
            // eager: every partition revoked, then assigned
            config.set("partition.assignment.strategy", "roundrobin");
        }
    }
    if let Some(instance) = &spec.instance {
        config.set("group.instance.id", instance);
    }
    // the group is the job's; nothing is committed by this consumer
    config
        .set("group.id", &spec.group)
        .set("client.id", format!("{}@{}", spec.group, spec.member))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    config
}

/// The consumer of `spec` on `protocol`, subscribed.
fn subscribed(
    config: &ClientConfig,
    spec: &GroupSpec,
    protocol: GroupProtocol,
    shared: &Arc<Shared>,
) -> Result<BaseConsumer<GroupContext>> {
    let config = membership_config(config, spec, protocol);
    let servers = config.get("bootstrap.servers").unwrap_or_default().to_string();
    let context = GroupContext {
        tracing: TracingContext::new("group"),
        shared: Arc::clone(shared),
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
    info!(group = %spec.group, member = %spec.member, protocol = protocol.name(), "joining the job's consumer group");
    Ok(consumer)
}

/// What a fatal error of the member's consumer means for it.
enum Fatal {
    /// The broker does not offer the consumer protocol: join again on the classic one.
    NoConsumerProtocol,
    /// A static member's place is held by a member that did not leave (consumer protocol): its
    /// previous process, killed within its session, or a twin still running.
    Unreleased,
    /// The membership is over, for this reason.
    Refused(String),
}

/// How long a static member whose place is held waits for it before it gives up: the broker's
/// longest session (its `group.consumer.max.session.timeout.ms`: a killed previous process's
/// session has ended by then), and a heartbeat's round trip. Asked of the broker at the first
/// refusal (`admin`: the cluster's client config); its default, 60 s, where it does not say.
fn unreleased_wait(admin: &ClientConfig) -> Duration {
    const ROUND_TRIP: Duration = Duration::from_secs(3);
    let longest = longest_session(admin).unwrap_or_else(|e| {
        debug!(error = %e, "the broker's group.consumer.max.session.timeout.ms is unknown; taking its default, 60 s");
        Duration::from_secs(60)
    });
    longest + ROUND_TRIP
}

/// A broker's `group.consumer.max.session.timeout.ms`.
fn longest_session(admin: &ClientConfig) -> std::result::Result<Duration, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    const KEY: &str = "group.consumer.max.session.timeout.ms";
    let timeout = Duration::from_secs(5);
    let client: AdminClient<TracingContext> = admin
        .create_with_context(TracingContext::new("group"))
        .map_err(|e| e.to_string())?;
    let metadata = client
        .inner()
        .fetch_metadata(None, timeout)
        .map_err(|e| e.to_string())?;
    let broker = metadata.brokers().first().ok_or("the cluster listed no broker")?.id();
    // rust-rdkafka's admin calls are futures; this thread has no runtime of its own
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let described = runtime
        .block_on(client.describe_configs([&ResourceSpecifier::Broker(broker)], &options))
        .map_err(|e| e.to_string())?;
    let resource = described
        .into_iter()
        .next()
        .ok_or("no answer")?
        .map_err(|code| code.to_string())?;
    let value = resource
        .get(KEY)
        .and_then(|entry| entry.value.clone())
        .ok_or_else(|| format!("broker {broker} did not list {KEY}"))?;
    value
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{KEY} = {value:?}: {e}"))
}

fn fatal(error: &KafkaError, spec: &GroupSpec, protocol: GroupProtocol, answered: bool) -> Option<Fatal> {
    let KafkaError::MessageConsumptionFatal(code) = error else {
        return None;
    };
    Some(match code {
        RDKafkaErrorCode::UnsupportedVersion if protocol == GroupProtocol::Consumer && !answered => {
            Fatal::NoConsumerProtocol
        }
        RDKafkaErrorCode::UnreleasedInstanceId => Fatal::Unreleased,
        // classic protocol: a newer process joined under this member's name
        RDKafkaErrorCode::FencedInstanceId => Fatal::Refused(format!(
            "another process joined consumer group {} as static member {} (group.instance.id, from job.member), \
             and the broker fenced this one ({error}): two processes of one name share their place and their \
             transactional ids; give each a job.member of its own",
            spec.group, spec.member
        )),
        _ => Fatal::Refused(format!(
            "the consumer group {} refused this member: {error}",
            spec.group
        )),
    })
}

impl Membership {
    /// Join `spec.group` with a consumer of `config` (the source's cluster and properties),
    /// subscribed to `spec.topics`, on `spec.protocol`; where the broker does not offer the
    /// consumer protocol, on the classic one (said once in the log).
    pub(super) fn join(config: &ClientConfig, admin: &ClientConfig, spec: &GroupSpec) -> Result<Membership> {
        let (changes_tx, changes) = mpsc::unbounded_channel();
        let (released_tx, released_rx) = std_mpsc::channel();
        let shared = Arc::new(Shared {
            changes: changes_tx,
            released: Mutex::new(released_rx),
            held: Mutex::new(BTreeSet::new()),
            fence: Mutex::new(Fence::default()),
            answered: AtomicBool::new(false),
            told_nothing: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
        });
        let first = Arc::new(subscribed(config, spec, spec.protocol, &shared)?);
        let current = Arc::new(Mutex::new(Arc::downgrade(&first)));
        let protocol = Arc::new(AtomicU8::new(spec.protocol as u8));
        let leaving = Arc::new(AtomicBool::new(false));
        let thread = {
            let (config, admin, spec, shared) = (config.clone(), admin.clone(), spec.clone(), Arc::clone(&shared));
            let (current, protocol, stop) = (Arc::clone(&current), Arc::clone(&protocol), Arc::clone(&leaving));
            std::thread::Builder::new()
                .name("tidegate-group".into())
                .spawn(move || {
                    let mut consumer = first;
                    let mut speaks = spec.protocol;
                    let mut joined = std::time::Instant::now();
                    // until when this static member waits for its place, refused it since (see
                    // unreleased_wait)
                    let mut unreleased_until: Option<std::time::Instant> = None;
                    while !stop.load(Ordering::SeqCst) {
                        if speaks == GroupProtocol::Consumer
                            && !shared.answered.load(Ordering::SeqCst)
                            && !shared.told_nothing.load(Ordering::SeqCst)
                            && joined.elapsed() >= NOTHING_DEALT_AFTER
                        {
                            shared.told_nothing.store(true, Ordering::SeqCst);
                            *Shared::lock(&shared.fence) = Fence {
                                assigned: consumer.group_metadata().map(GroupMetadata::new),
                                member_id: member_id(&consumer),
                                lost: false,
                            };
                            info!("group rebalance: nothing dealt to this member so far");
                            let _ = shared.changes.send(Change::Assigned(BTreeSet::new()));
                        }
                        let error = match consumer.poll(Duration::from_millis(100)) {
                            Some(Ok(_)) => {
                                debug!("a record fetched by the group member itself, dropped");
                                continue;
                            }
                            Some(Err(e)) => e,
                            None => continue,
                        };
                        let rejoin = match fatal(&error, &spec, speaks, shared.answered.load(Ordering::SeqCst)) {
                            None => {
                                warn!(error = %error, "consumer group");
                                continue;
                            }
                            Some(Fatal::NoConsumerProtocol) => {
                                warn!(group = %spec.group, "the broker does not offer Kafka's consumer group protocol (KIP-848; its group.coordinator.rebalance.protocols); this member speaks the classic protocol, whose rebalances stop every member");
                                speaks = GroupProtocol::Classic;
                                Ok(())
                            }
                            // refused at its join (never dealt anything): wait for the place
                            Some(Fatal::Unreleased)
                                if !shared.answered.load(Ordering::SeqCst)
                                    && unreleased_until.is_none_or(|until| std::time::Instant::now() < until) =>
                            {
                                if unreleased_until.is_none() {
                                    let wait = unreleased_wait(&admin);
                                    info!(group = %spec.group, member = %spec.member, wait_s = wait.as_secs(), "this static member's place in the group is still held (its previous process killed within its session, or another process of its name): joining again each second, for up to the broker's longest session");
                                    unreleased_until = Some(std::time::Instant::now() + wait);
                                }
                                let retry_at = std::time::Instant::now() + Duration::from_secs(1);
                                while std::time::Instant::now() < retry_at && !stop.load(Ordering::SeqCst) {
                                    std::thread::sleep(Duration::from_millis(50));
                                }
                                if stop.load(Ordering::SeqCst) {
                                    continue;
                                }
                                Ok(())
                            }
                            // a member fenced while it ran rejoins as a new one, which the broker
                            // refuses under a static member's name until its session ends
                            Some(Fatal::Unreleased) if shared.answered.load(Ordering::SeqCst) => Err(format!(
                                "the broker dropped static member {} of consumer group {} and refuses it back until \
                                 its session ends (group.instance.id, from job.member); started again, it waits for \
                                 its place",
                                spec.member, spec.group
                            )),
                            Some(Fatal::Unreleased) => Err(format!(
                                "another process holds static member {} of consumer group {} (group.instance.id, from \
                                 job.member), and did not release it within the broker's longest session (its \
                                 group.consumer.max.session.timeout.ms): two processes of one name \
                                 share their place and their transactional ids; stop the other, or give this one a \
                                 job.member of its own",
                                spec.member, spec.group
                            )),
                            Some(Fatal::Refused(reason)) => Err(reason),
                        };
                        // librdkafka's consumer is done with after a fatal error: join with a new one
                        match rejoin.and_then(|()| subscribed(&config, &spec, speaks, &shared).map_err(|e| e.to_string())) {
                            Ok(c) => {
                                consumer = Arc::new(c);
                                *Shared::lock(&current) = Arc::downgrade(&consumer);
                                protocol.store(speaks as u8, Ordering::SeqCst);
                                joined = std::time::Instant::now();
                            }
                            Err(reason) => {
                                // the consumer's close (here, or where a checkpoint still holds
                                // it) then revokes nothing the job would have to answer
                                Shared::lock(&shared.held).clear();
                                let _ = shared.changes.send(Change::Refused(reason));
                                return;
                            }
                        }
                    }
                    // leave the group at once, so the others rebalance without waiting for the
                    // session to time out (a revocation now has nothing to wait for); a static
                    // member keeps its place for its session: under the consumer protocol its
                    // leave says so (epoch -2), under the classic one it sends none (its
                    // consumer's close does not, and an unsubscribe would)
                    shared.leaving.store(true, Ordering::SeqCst);
                    Shared::lock(&shared.held).clear();
                    if spec.instance.is_none() || speaks == GroupProtocol::Consumer {
                        consumer.unsubscribe();
                    }
                    let _ = consumer.poll(Duration::from_millis(100));
                })
                .map_err(|e| Error::io("starting the consumer group's thread", e))?
        };
        Ok(Membership {
            changes,
            released: Some(released_tx),
            leaving,
            consumer: current,
            shared,
            protocol,
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

    fn metadata(&self) -> GroupMetadataSource {
        let (consumer, shared) = (Arc::clone(&self.consumer), Arc::clone(&self.shared));
        GroupMetadataSource::new(move || {
            let frozen = || Shared::lock(&shared.fence).assigned.clone();
            let Some(consumer) = Shared::lock(&consumer).upgrade() else {
                return frozen();
            };
            let before = Shared::lock(&shared.fence).member_id.clone();
            let now = consumer.group_metadata().map(GroupMetadata::new);
            // asked again after: metadata read while the group dropped the member (a member id
            // reset, an epoch of 0) must not stand in for the assignment's
            let fence = Shared::lock(&shared.fence);
            if fence.lost || before.is_none() || member_id(&consumer) != before || fence.member_id != before {
                return fence.assigned.clone();
            }
            now.or_else(|| fence.assigned.clone())
        })
    }

    fn protocol(&self) -> GroupProtocol {
        if self.protocol.load(Ordering::SeqCst) == GroupProtocol::Classic as u8 {
            GroupProtocol::Classic
        } else {
            GroupProtocol::Consumer
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
