//! A simulated process's membership of a consumer group: its heartbeats (a task of its
//! process, which stop when it is killed or paused), and the changes it takes from polling the
//! coordinator under either protocol, as librdkafka hands them on.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clients::SimGroupMetadata;
use super::{group, incremental, SimKafka};
use crate::client::cluster::{Change, GroupMembership, GroupMetadata, GroupMetadataSource, GroupProtocol, NextChange};
use crate::core::sim;
use crate::kafka::TopicPartition;

/// What a membership knows of itself.
#[derive(Debug, Default)]
pub(super) struct MemberState {
    /// Its id in the group (`None`: to join).
    id: Option<String>,
    /// The classic protocol: the generation whose partitions it holds, handed to the job.
    holding: Option<i32>,
    /// The consumer protocol: the partitions handed to the job, and its member epoch now.
    owned: Option<BTreeSet<TopicPartition>>,
    epoch: i32,
    /// A revocation was handed to the job, not yet released: of these partitions.
    revoking: Option<BTreeSet<TopicPartition>>,
    /// The metadata as of the last assignment; whether the assignment was lost since.
    fence: Option<(i32, String)>,
    lost: bool,
    /// When it joined (the consumer protocol tells a member dealt nothing only a while after,
    /// and once: not again after it was dropped and rejoined).
    joined_at: Option<tokio::time::Instant>,
    told_nothing: bool,
    /// The member epoch the coordinator answered the last look with: the member takes it at the
    /// next look, as a heartbeat's answer is in flight a while (a checkpoint meanwhile carries
    /// the old one, and is refused).
    answered_epoch: Option<i32>,
}

/// A group membership of a simulated process: its heartbeats are a task of that process (they
/// stop when it is killed or paused), and its changes come from polling the coordinator.
pub(super) struct SimMembership {
    pub(super) kafka: Arc<SimKafka>,
    pub(super) process: usize,
    pub(super) group: String,
    pub(super) client: String,
    pub(super) topics: Vec<String>,
    pub(super) protocol: GroupProtocol,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) state: Arc<Mutex<MemberState>>,
    pub(super) heartbeats: Option<tokio::task::JoinHandle<()>>,
}

/// How often a simulated member heartbeats, and looks at its group.
const HEARTBEAT: Duration = Duration::from_millis(1000);
const LOOK: Duration = Duration::from_millis(50);
/// How long after joining a consumer-protocol member dealt nothing is told so (as the native
/// membership's `NOTHING_DEALT_AFTER`).
const NOTHING_DEALT_AFTER: Duration = Duration::from_secs(3);

impl SimMembership {
    pub(super) fn started(mut self) -> Self {
        let (kafka, process, group, state) = (
            Arc::clone(&self.kafka),
            self.process,
            self.group.clone(),
            Arc::clone(&self.state),
        );
        self.heartbeats = Some(crate::core::spawn(async move {
            loop {
                if sim::alive(process) {
                    let id = state.lock().unwrap_or_else(|p| p.into_inner()).id.clone();
                    if let Some(id) = id {
                        let now = sim::now();
                        kafka
                            .broker()
                            .groups
                            .entry(group.clone())
                            .or_default()
                            .heartbeat(&id, now);
                    }
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        }));
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One look at the coordinator: the change to hand to the job, if any.
    fn look(&self) -> Option<Change> {
        if !sim::alive(self.process) {
            return None;
        }
        let mut broker = self.kafka.broker();
        let now = sim::now();
        let mut state = self.state();
        if state.revoking.is_some() {
            return None;
        }
        let group = broker.groups.entry(self.group.clone()).or_default();
        let id = match &state.id {
            Some(id) => id.clone(),
            None => {
                if group.members.is_empty() {
                    group.protocol = self.protocol;
                }
                let id = group.join(
                    self.client.clone(),
                    self.topics.clone(),
                    self.session_timeout,
                    self.rebalance_timeout,
                    now,
                );
                state.id = Some(id.clone());
                state.joined_at = Some(now);
                if self.protocol == GroupProtocol::Consumer {
                    // the coordinator computes the targets of the new group epoch before it
                    // answers the next heartbeat (Broker::expire)
                    return None;
                }
                id
            }
        };
        if self.protocol == GroupProtocol::Consumer {
            return Self::reconcile(&mut state, group, &id, now);
        }
        match group.duty(&id, state.holding) {
            group::Duty::Unknown => {
                // dropped (its session expired): its partitions are lost; it joins again
                state.id = None;
                state.lost = true;
                if state.holding.take().is_some() {
                    let lost = state.owned.take().unwrap_or_default();
                    state.revoking = Some(lost.clone());
                    return Some(Change::Revoked(lost));
                }
                None
            }
            group::Duty::Revoke => {
                state.holding = None;
                let all = state.owned.take().unwrap_or_default();
                state.revoking = Some(all.clone());
                Some(Change::Revoked(all))
            }
            group::Duty::Rejoin => {
                group.rejoin(&id);
                None
            }
            group::Duty::Wait => None,
            group::Duty::Assigned(generation, partitions) => {
                state.holding = Some(generation);
                state.epoch = generation;
                state.fence = Some((generation, id));
                state.lost = false;
                state.owned = Some(partitions.clone());
                Some(Change::Assigned(partitions))
            }
        }
    }

    /// One heartbeat of a consumer-protocol member: what changed for it.
    fn reconcile(
        state: &mut MemberState,
        group: &mut group::Group,
        id: &str,
        now: tokio::time::Instant,
    ) -> Option<Change> {
        match group.reconcile(id, now) {
            incremental::Reconciled::Unknown => {
                // dropped (its session or rebalance timeout): what it held is lost; it joins again
                state.id = None;
                state.lost = true;
                match state.owned.take() {
                    Some(lost) if !lost.is_empty() => {
                        state.revoking = Some(lost.clone());
                        Some(Change::Revoked(lost))
                    }
                    _ => None,
                }
            }
            incremental::Reconciled::Revoke(partitions) => {
                if let Some(owned) = &mut state.owned {
                    owned.retain(|tp| !partitions.contains(tp));
                }
                state.revoking = Some(partitions.clone());
                Some(Change::Revoked(partitions))
            }
            incremental::Reconciled::Wait => None,
            incremental::Reconciled::Owns(epoch, partitions) => {
                if state.owned.as_ref() == Some(&partitions) {
                    // the new epoch of a rebalance that leaves it alone reaches it a look later
                    if let Some(answered) = state.answered_epoch.replace(epoch) {
                        state.epoch = answered;
                    }
                    return None;
                }
                state.epoch = epoch;
                state.answered_epoch = Some(epoch);
                // as the native membership: nothing dealt is said after a while, not at once
                // (librdkafka calls no rebalance callback for an empty assignment), and not
                // again after a revocation of everything
                if partitions.is_empty()
                    && (state.owned.is_some()
                        || state.told_nothing
                        || state
                            .joined_at
                            .is_some_and(|j| now.saturating_duration_since(j) < NOTHING_DEALT_AFTER))
                {
                    return None;
                }
                state.told_nothing |= partitions.is_empty();
                state.owned = Some(partitions.clone());
                state.fence = Some((epoch, id.to_string()));
                state.lost = false;
                Some(Change::Assigned(partitions))
            }
        }
    }
}

impl GroupMembership for SimMembership {
    fn next(&mut self) -> NextChange<'_> {
        Box::pin(async move {
            loop {
                if let Some(change) = self.look() {
                    return Some(change);
                }
                tokio::time::sleep(LOOK).await;
            }
        })
    }

    fn release(&self) {
        let mut state = self.state();
        let Some(revoked) = state.revoking.take() else {
            return;
        };
        if let Some(id) = state.id.clone() {
            drop(state);
            if sim::alive(self.process) {
                let mut broker = self.kafka.broker();
                let group = broker.groups.entry(self.group.clone()).or_default();
                match self.protocol {
                    GroupProtocol::Consumer => group.released(&id, &revoked),
                    GroupProtocol::Classic => group.rejoin(&id),
                }
            }
        }
    }

    fn metadata(&self) -> GroupMetadataSource {
        let (state, group) = (Arc::clone(&self.state), self.group.clone());
        GroupMetadataSource::new(move || {
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            let (assigned_epoch, id) = state.fence.clone()?;
            // the member's epoch now, while it is the member the assignment was made to
            let epoch = if state.lost || state.id.as_deref() != Some(id.as_str()) {
                assigned_epoch
            } else {
                state.epoch
            };
            Some(GroupMetadata::new(SimGroupMetadata {
                group: group.clone(),
                member: Some((epoch, id)),
            }))
        })
    }

    fn protocol(&self) -> GroupProtocol {
        self.protocol
    }
}

impl Drop for SimMembership {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeats.take() {
            h.abort();
        }
        // a process that ends leaves its group at once (a killed one never gets here alive)
        let id = self.state().id.take();
        if let (Some(id), true) = (id, sim::alive(self.process)) {
            let now = sim::now();
            let mut broker = self.kafka.broker();
            broker.note(format!("group {}: {id} leaves (process {})", self.group, self.process));
            broker.groups.entry(self.group.clone()).or_default().leave(&id, now);
        }
    }
}
