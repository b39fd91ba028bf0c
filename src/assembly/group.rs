//! A group-coordinated job's life in one process (`job.coordination = "group"`): the member
//! joins the job's consumer group and runs the job on its assignment, each partition restored
//! from the newest checkpoint of the Kafka store that holds it, whichever member wrote it. Under
//! the consumer protocol (KIP-848) the running job gives revoked partitions up at a checkpoint
//! and takes new ones in, and a rebalance that leaves a member's assignment alone does not touch
//! it; under the classic, eager one every rebalance stops every member's job with a final
//! checkpoint, and it runs again on the next assignment. While the member waits for one, its next
//! run's store opens (`prepared`). A bounded job's member leaves once the whole input is
//! finished.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use super::build::sink_of;
use super::prepared::{run_store, PreparedStore};
use super::runtime;
use super::session::{Session, Steering};
use crate::checkpoint_store::StoreConfig;
use crate::client::cluster::{self, Change, GroupMembership};
use crate::config::Config;
use crate::connector::registry::SourceConfig;
use crate::coordination::{event_time, group_id, handover, progress, twins};
use crate::core::{sim, SplitHandover};
use crate::error::{Error, Result};
use crate::kafka::{KafkaPartitionSplit, TopicPartition};

/// Run a group-coordinated job: join the group, and run the job on each assignment until a
/// revocation (stop with a final checkpoint, release, wait for the next), a signal, or the end
/// of the job's input on every partition assigned (a bounded replay: the member leaves, and the
/// splits it finished are finished for whoever is assigned them next).
pub fn run(config: Config, reset_state: bool, no_progress: bool) -> Result<()> {
    // job.max_duration counts from the process's start, across its runs
    let deadline = config.job.max_duration.map(|d| sim::now() + d);
    let runtime = runtime::start()?;
    let result = runtime.block_on(async {
        let session = Session::start(&config).await?;
        let result = run_member(&config, &session, reset_state, no_progress, deadline).await;
        session.linger(&result).await;
        result
    });
    runtime::shut_down(runtime);
    result
}

/// A group member's life in this process (see [`run`]), on the session's stop signal and its
/// counters; its blocking calls on blocking threads (in place under a simulation).
pub(crate) async fn run_member(
    config: &Config,
    session: &Session,
    reset_state: bool,
    no_progress: bool,
    deadline: Option<tokio::time::Instant>,
) -> Result<()> {
    let member = config.job.member.clone().unwrap_or_default();
    let SourceConfig::Kafka(source) = &config.source else {
        return Err(Error::config("job.coordination", "\"group\" needs a Kafka source"));
    };
    let mut signal = session.stop.clone();
    // with eof_scope = "source": this member's watermarks out, the others' in (declared
    // before the membership, so dropped after it: the member leaves the group at once, and
    // the link's last values go out after)
    let mut link: Option<event_time::EventTimeLink> = None;
    let servers = &source.settings.bootstrap_servers;
    let (spec, group) = crate::coordination::clients::member_spec(
        source,
        group_id(&config.job.name),
        member.clone(),
        config.job.static_member,
    );
    // a static member's twin is refused by the broker (its place is not released), and its own
    // previous process, stopped a moment ago, is still listed: it must not wait that out
    if !config.job.static_member {
        twins::none_running(source, &group_id(&config.job.name), &member).await?;
    }
    if !reset_state {
        progress::state_topic_still_there(source, &config.checkpoint.store, &group_id(&config.job.name)).await?;
    }
    // read the state topic before joining, up to its committed end (an open transaction there is
    // waited for by the first run, as ever): partitions dealt to this member then move with a
    // read continued from here (`checkpoint_store::scan`), not one of the whole topic (seconds,
    // with other jobs' records in it) while they wait unread
    if let StoreConfig::Kafka(store) = &config.checkpoint.store {
        crate::checkpoint_store::kafka::read_ahead(store).await?;
    }
    let mut membership: Box<dyn GroupMembership> = cluster::of(servers).join_group(&spec, &group)?;
    let mut reset = reset_state;
    // this member's last run ended by itself (its assignment's input is done): it stays in the
    // group, its partitions finished, until the whole job's input is, whoever reads the rest
    // (a member that died holds partitions until the group deals them again, maybe to this one)
    let mut waiting = false;
    // what the group says this member holds; what to run the job on next
    let mut held: BTreeSet<TopicPartition> = BTreeSet::new();
    let mut next: Option<BTreeSet<TopicPartition>> = None;
    // a run refused by the group with no revocation after it: run again on what it holds then
    // (under the consumer protocol, a checkpoint that raced a heartbeat's new member epoch)
    let mut retry_at: Option<tokio::time::Instant> = None;
    // the next run's store, opened while the member waits for its assignment; and whether the
    // group has dealt this member partitions yet (a static member's store waits for that: a twin
    // of its name, refused its place by the broker, must not take its transactional ids over,
    // and an empty assignment may be only librdkafka's silence: see NOTHING_DEALT_AFTER)
    let mut prepared: Option<PreparedStore> = None;
    let mut dealt = false;
    loop {
        note_protocol(session, membership.as_ref());
        let assigned = match next.take() {
            Some(assigned) => assigned,
            None => {
                if prepared.is_none() && (dealt || !config.job.static_member) {
                    prepared = Some(PreparedStore::start(run_store(&config.checkpoint.store)));
                }
                let change = tokio::select! {
                    // a signal or the deadline before an assignment that came with it
                    biased;
                    _ = signal.wait_for(|stop| *stop) => None,
                    _ = until(deadline) => {
                        info!("job.max_duration reached; leaving the group");
                        session.stats().stopped_short.store(true, std::sync::atomic::Ordering::SeqCst);
                        None
                    }
                    change = membership.next() => Some(change),
                    _ = until(retry_at), if retry_at.is_some() => {
                        retry_at = None;
                        next = Some(held.clone());
                        continue;
                    }
                    _ = tokio::time::sleep(progress::LOOK_EVERY), if waiting => {
                        let left = progress::unfinished(source, &config.checkpoint.store).await?;
                        if left.is_empty() {
                            info!(member = %member, "group member: every partition of the job's input is finished; leaving the group");
                            return Ok(());
                        }
                        continue;
                    }
                };
                let change = change.flatten();
                dealt |= matches!(&change, Some(Change::Assigned(p)) if !p.is_empty());
                match change {
                    None => return Ok(()),
                    Some(Change::Refused(reason)) => return Err(Error::runtime("consumer group", reason)),
                    // nothing runs: what was revoked may go at once (a retry still due runs on
                    // what is left)
                    Some(Change::Revoked(revoked)) => {
                        held.retain(|tp| !revoked.contains(tp));
                        membership.release();
                        // holding nothing (no callback says so under the consumer protocol):
                        // it looks at the job's progress, and leaves once the input is done
                        waiting |= held.is_empty();
                        continue;
                    }
                    Some(Change::Assigned(partitions)) => {
                        retry_at = None;
                        partitions
                    }
                }
            }
        };
        held = assigned.clone();
        // a rebalance's pause for this member ends at its first record (see first_record)
        let assigned_at = sim::now();
        let mut run = config.clone();
        run.job.max_duration = deadline.map(|d| d.saturating_duration_since(sim::now()));
        if let SourceConfig::Kafka(k) = &mut run.source {
            k.settings.assignment = Some(Arc::new(assigned.clone()));
            // a source-wide stop aligns with the other members' splits too
            k.event_time.peers = k.event_time.source_wide_stop;
        }
        let opened = match prepared.take() {
            Some(prepared) => {
                let (store, opened) = prepared.open().await?;
                run.checkpoint.store = store;
                opened
            }
            None => {
                run.checkpoint.store = run_store(&config.checkpoint.store);
                crate::checkpoint_store::open_member(&run.checkpoint.store).await?
            }
        };
        opened.fence_with_group(membership.metadata());
        // --reset-state: the first run starts the whole job over (every member's records and
        // every static instance's get tombstones; members still running keep theirs: stop
        // them first), after the checks a first start makes
        let reset_now = std::mem::take(&mut reset);
        let resuming = match &opened.store {
            Some(s) if !reset_now => s.resumes()?,
            _ => false,
        };
        if !resuming {
            let checked = run.source.clone();
            crate::core::unblock(move || checked.check_before_start()).await??;
        }
        if reset_now {
            opened.reset_async().await?;
        }
        if link.is_none() && source.event_time.source_wide_stop {
            if let StoreConfig::Kafka(store) = &run.checkpoint.store {
                link = Some(event_time::EventTimeLink::start(
                    store,
                    &source.settings.bootstrap_servers,
                    &source.settings.properties,
                    &source.settings.subscription,
                    event_time::stamp_of(&config.job.name, source),
                    Arc::clone(session.stats()),
                )?);
            }
        }
        let slot = opened.sink_slot();
        let built = run.clone();
        let sink = crate::core::unblock(move || sink_of(&built, resuming, slot)).await??;
        note_protocol(session, membership.as_ref());
        session
            .stats()
            .group_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        info!(member = %member, partitions = assigned.len(), resuming, "group member: running the job on its assignment");
        let (stop_tx, stop) = watch::channel(false);
        // a revocation to acknowledge once the job has stopped; the group refused the member
        let (mut revoked, mut refused) = (false, None);
        let (mut stopping, mut signalled) = (false, false);
        let mut link_failed = None;
        // what the running job reads; a revocation it is releasing in place, with its answer
        let mut running = assigned.clone();
        let mut releasing: Option<(BTreeSet<TopicPartition>, oneshot::Receiver<bool>)> = None;
        // an assignment that grew, being taken in: the whole new assignment, and the answer
        let mut taking: Option<(BTreeSet<TopicPartition>, Taking)> = None;
        let (handovers, handover_requests) = mpsc::unbounded_channel();
        let first = crate::core::spawn(first_record(Arc::clone(session.stats()), assigned_at));
        let job = session.run_job(
            &run,
            opened.store,
            sink,
            Steering {
                stop,
                handovers: Some(handover_requests),
            },
            no_progress,
            resuming,
        );
        tokio::pin!(job);
        let outcome = loop {
            tokio::select! {
                outcome = &mut job => break outcome,
                change = membership.next(), if !stopping && releasing.is_none() && taking.is_none() => {
                    // this member's own assignment changed: the job gives the revoked partitions
                    // up, or takes the new ones in, and runs on; where it cannot, it stops with a
                    // final checkpoint and runs again on what the member holds then (a member
                    // whose assignment stays is not told anything, and runs on)
                    match change {
                        Some(Change::Assigned(partitions)) if partitions == running => continue,
                        Some(Change::Assigned(partitions)) if partitions.is_superset(&running) => {
                            let added: BTreeSet<TopicPartition> = partitions.difference(&running).cloned().collect();
                            let answer = handover::take_in(config.checkpoint.store.clone(), added, handovers.clone());
                            taking = Some((partitions, Box::pin(answer)));
                            continue;
                        }
                        Some(Change::Assigned(partitions)) => {
                            info!(member = %member, before = running.len(), now = partitions.len(), "group member: its assignment grew; stopping the job with a final checkpoint to run it on the new one");
                            held = partitions.clone();
                            next = Some(partitions);
                        }
                        Some(Change::Revoked(taken)) if running.iter().any(|tp| !taken.contains(tp)) => {
                            let (done, answer) = oneshot::channel();
                            let splits = taken.iter().map(|(t, p)| Arc::from(KafkaPartitionSplit::id_of(t, *p))).collect();
                            if handovers.send(SplitHandover::Release { splits, done }).is_ok() {
                                releasing = Some((taken, answer));
                                continue;
                            }
                            revoked = true;
                            held.retain(|tp| !taken.contains(tp));
                            next = Some(held.clone());
                        }
                        Some(Change::Revoked(taken)) => {
                            revoked = true;
                            held.retain(|tp| !taken.contains(tp));
                            if !held.is_empty() {
                                next = Some(held.clone());
                            }
                        }
                        Some(Change::Refused(reason)) => refused = Some(reason),
                        None => {}
                    }
                    stopping = true;
                    let _ = stop_tx.send(true);
                }
                // the job's answer to a release: its checkpoint holds where each revoked
                // partition stopped (the partitions may go, and the job runs on), or it cannot
                // release them in place (it stops with a final checkpoint instead)
                answer = async {
                    match releasing.as_mut() {
                        Some((_, answer)) => answer.await,
                        None => std::future::pending().await,
                    }
                }, if releasing.is_some() => {
                    let Some((taken, _)) = releasing.take() else { continue };
                    held.retain(|tp| !taken.contains(tp));
                    if answer == Ok(true) {
                        running.retain(|tp| !taken.contains(tp));
                        session.stats().group_released.fetch_add(taken.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        info!(member = %member, released = taken.len(), still = running.len(), "group member: revoked partitions released at a checkpoint; the job runs on with the rest");
                        membership.release();
                        continue;
                    }
                    info!(member = %member, "group member: the job cannot release the revoked partitions in place; stopping it with a final checkpoint");
                    revoked = true;
                    next = Some(held.clone());
                    stopping = true;
                    let _ = stop_tx.send(true);
                }
                // the job's answer to partitions to take in: each restored where its previous
                // owner's checkpoint left it, and read on by the running job; or it cannot (it
                // stops with a final checkpoint, and runs again on the whole)
                taken = async {
                    match taking.as_mut() {
                        Some((_, answer)) => answer.await,
                        None => std::future::pending().await,
                    }
                }, if taking.is_some() => {
                    let Some((partitions, _)) = taking.take() else { continue };
                    held = partitions.clone();
                    if taken {
                        let took = partitions.len() - running.len();
                        session.stats().group_taken.fetch_add(took as u64, std::sync::atomic::Ordering::Relaxed);
                        info!(member = %member, took, now = partitions.len(), "group member: its assignment grew; the job took the new partitions in and runs on");
                        running = partitions;
                        continue;
                    }
                    info!(member = %member, before = running.len(), now = partitions.len(), "group member: its assignment grew; stopping the job with a final checkpoint to run it on the new one");
                    next = Some(partitions);
                    stopping = true;
                    let _ = stop_tx.send(true);
                }
                _ = signal.wait_for(|stop| *stop), if !signalled => {
                    signalled = true;
                    let _ = stop_tx.send(true);
                }
                // this member's values no longer reach the others: it stops with a final
                // checkpoint and fails, rather than hold every member back
                failure = async {
                    match link.as_mut() {
                        Some(link) => link.failed().await,
                        None => std::future::pending().await,
                    }
                }, if link_failed.is_none() => {
                    link_failed = Some(failure);
                    let _ = stop_tx.send(true);
                }
            }
        };
        first.abort();
        if let Some((partitions, _)) = taking.take() {
            // the job ended while taking partitions in: run again on the whole
            held = partitions.clone();
            next.get_or_insert(partitions);
        }
        if let Some((taken, _)) = releasing.take() {
            // the job ended while releasing: its final checkpoint (if it took one) holds every
            // partition where it stopped, as after any revocation
            revoked = true;
            held.retain(|tp| !taken.contains(tp));
            if !held.is_empty() && next.is_none() {
                next = Some(held.clone());
            }
        }
        if let Some(reason) = refused {
            // the group refused the member for good (its final checkpoint may have failed for it)
            return Err(Error::runtime("consumer group", reason));
        }
        match outcome {
            // dropped by the group (paused past its session timeout, say): its transaction
            // was refused and aborted (KIP-447), its partitions are another's; the consumer
            // rejoins, and the group deals this member partitions again
            Err(e) if dropped_by_group(&e) && !*signal.borrow() => {
                warn!(member = %member, error = %e, "group member: its checkpoint was refused by the group; running again on what the group deals it");
                if revoked {
                    membership.release();
                    // holding nothing now: it looks at the job's progress meanwhile (a member
                    // dealt nothing on rejoining is told nothing under the consumer protocol)
                    waiting |= held.is_empty();
                } else {
                    // a revocation (the member was dropped) or an assignment comes first;
                    // else the refusal raced a new member epoch, and it runs again
                    next = None;
                    retry_at = Some(sim::now() + REFUSED_RETRY);
                }
                continue;
            }
            Err(e) if dropped_by_group(&e) => return Ok(()),
            outcome => outcome?,
        }
        if let Some(failure) = link_failed {
            return Err(Error::runtime("the source-wide stop across the group", failure));
        }
        if *signal.borrow() || deadline.is_some_and(|d| sim::now() >= d) {
            // a signal stopped it, or job.max_duration: leave the group
            return Ok(());
        }
        if revoked {
            // stopped with its final checkpoint: the revoked partitions may go (holding nothing
            // now, it looks at the job's progress meanwhile)
            waiting = held.is_empty();
            membership.release();
            continue;
        }
        if next.is_some() {
            // its assignment grew: run on the new one
            waiting = false;
            continue;
        }
        // the job ended by itself: its assignment's input is done; the job's may not be
        let left = progress::unfinished(source, &config.checkpoint.store).await?;
        if left.is_empty() {
            info!(member = %member, "group member: every partition of the job's input is finished; leaving the group");
            return Ok(());
        }
        if !waiting {
            info!(member = %member, unfinished = %left.join(", "), "group member: its partitions are finished; staying in the group until the others' are (a member that died leaves its partitions to be dealt again)");
        }
        waiting = true;
    }
}

/// A take in progress: whether the running job took the partitions in.
type Taking = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// How long a member whose checkpoint the group refused waits for the revocation that says it
/// was dropped before it runs again on what it holds.
const REFUSED_RETRY: std::time::Duration = std::time::Duration::from_secs(3);

/// Say the member's group protocol in `/status` (it may fall back to the classic one after
/// joining).
fn note_protocol(session: &Session, membership: &dyn GroupMembership) {
    *session.stats().group_protocol.lock().unwrap_or_else(|p| p.into_inner()) = Some(membership.protocol().name());
}

/// Whether a run failed because the group had moved on without this member: the broker
/// refused its transaction's positions with the group's metadata (KIP-447). Not a fenced static
/// member (`group.instance.id` taken by another process): that one is fatal to its consumer.
fn dropped_by_group(error: &Error) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(k) = e.downcast_ref::<KafkaError>() {
            // not a fenced static member (FencedInstanceId): that one is fatal to its consumer
            if k.rdkafka_error_code()
                .is_some_and(|c| cluster::is_stale_member(c) && c != RDKafkaErrorCode::FencedInstanceId)
            {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// Wait until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Log the first record written on an assignment, and how long after the assignment came (its
/// store opened, its state read, its job started): with the other members' logs, the pause a
/// rebalance makes (tests/it/group.rs and scripts/bench's `rebalance` measure it).
async fn first_record(stats: Arc<crate::core::JobStats>, began: tokio::time::Instant) {
    use std::sync::atomic::Ordering;
    let before = stats.records_written.load(Ordering::Relaxed);
    while stats.records_written.load(Ordering::Relaxed) == before {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    info!(
        after_ms = sim::now().saturating_duration_since(began).as_millis() as u64,
        "group member: first record written on this assignment"
    );
}
