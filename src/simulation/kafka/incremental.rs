//! The simulated coordinator's consumer protocol (KIP-848): a join, a departure or a dropped
//! member moves the group epoch on, and the coordinator computes a target assignment that keeps
//! every partition where it is unless the balance needs it elsewhere (a sticky, uniform
//! assignor). Each member is reconciled on its own heartbeats: it gives back what its target no
//! longer holds, keeping its member epoch until it has; then takes the epoch of the target and
//! the partitions of its target that no other member still owns. A member whose assignment the
//! target leaves alone only takes the new epoch, and is told nothing. Offsets committed inside a
//! transaction are refused unless they carry the member's epoch exactly (Kafka's
//! `ILLEGAL_GENERATION` for a stale one): see `Broker::send_offsets`.

use std::collections::{BTreeMap, BTreeSet};

use super::group::Group;
use crate::kafka::TopicPartition;

/// What a member of a consumer-protocol group is to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reconciled {
    /// The group does not know it (its session expired, or it was never in): join again.
    Unknown,
    /// Give these partitions back, then heartbeat again.
    Revoke(BTreeSet<TopicPartition>),
    /// It owns these partitions at this member epoch.
    Owns(i32, BTreeSet<TopicPartition>),
    /// It was told to give partitions back and has not yet.
    Wait,
}

impl Group {
    /// Drop the members whose session expired, or who held partitions they were told to give
    /// back for longer than their rebalance timeout; what happened, in words.
    pub(super) fn maintain_incremental(&mut self, now: tokio::time::Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                now.saturating_duration_since(m.last_heartbeat) > m.session_timeout
                    || m.revoking_since
                        .is_some_and(|s| now.saturating_duration_since(s) > m.rebalance_timeout)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut events = Vec::new();
        for id in expired {
            self.members.remove(&id);
            self.rebalance(now);
            events.push(format!(
                "{id} dropped (session or rebalance timeout); group epoch {}",
                self.generation
            ));
        }
        events
    }

    /// Compute every member's target of `partitions` (every partition of the subscribed topics)
    /// at the group epoch: each keeps what it owns up to its share, the rest go to the members
    /// below theirs, in the order of their ids.
    pub(super) fn retarget(&mut self, partitions: &BTreeSet<TopicPartition>) {
        self.targeted = self.generation;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        if ids.is_empty() {
            return;
        }
        let (base, extra) = (partitions.len() / ids.len(), partitions.len() % ids.len());
        // the first `extra` members (by id) may hold one more
        let share: BTreeMap<&String, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id, base + usize::from(i < extra)))
            .collect();
        let mut taken: BTreeSet<TopicPartition> = BTreeSet::new();
        let mut targets: BTreeMap<String, BTreeSet<TopicPartition>> = BTreeMap::new();
        for id in &ids {
            let owned = &self.members[id].assignment;
            let kept: BTreeSet<TopicPartition> = owned
                .iter()
                .filter(|tp| partitions.contains(*tp) && !taken.contains(*tp))
                .take(share[id])
                .cloned()
                .collect();
            taken.extend(kept.iter().cloned());
            targets.insert(id.clone(), kept);
        }
        let mut free = partitions.iter().filter(|tp| !taken.contains(*tp));
        for id in &ids {
            let target = targets.entry(id.clone()).or_default();
            while target.len() < share[id] {
                match free.next() {
                    Some(tp) => {
                        target.insert(tp.clone());
                    }
                    None => break,
                }
            }
        }
        for (id, target) in targets {
            if let Some(m) = self.members.get_mut(&id) {
                m.target = target;
            }
        }
    }

    /// A heartbeat's answer for `member`.
    pub(super) fn reconcile(&mut self, member: &str, now: tokio::time::Instant) -> Reconciled {
        let others: BTreeSet<TopicPartition> = self
            .members
            .iter()
            .filter(|(id, _)| id.as_str() != member)
            .flat_map(|(_, m)| m.assignment.iter().cloned())
            .collect();
        let epoch = self.targeted;
        let Some(m) = self.members.get_mut(member) else {
            return Reconciled::Unknown;
        };
        if !m.revoking.is_empty() {
            return Reconciled::Wait;
        }
        let give_back: BTreeSet<TopicPartition> = m.assignment.difference(&m.target).cloned().collect();
        if !give_back.is_empty() {
            m.revoking = give_back.clone();
            m.revoking_since = Some(now);
            return Reconciled::Revoke(give_back);
        }
        let free: Vec<TopicPartition> = m
            .target
            .iter()
            .filter(|tp| !m.assignment.contains(*tp) && !others.contains(*tp))
            .cloned()
            .collect();
        m.assignment.extend(free);
        m.epoch = epoch;
        Reconciled::Owns(m.epoch, m.assignment.clone())
    }

    /// `member` gave `partitions` back.
    pub(super) fn released(&mut self, member: &str, partitions: &BTreeSet<TopicPartition>) {
        if let Some(m) = self.members.get_mut(member) {
            m.assignment.retain(|tp| !partitions.contains(tp));
            m.revoking.clear();
            m.revoking_since = None;
        }
    }
}
