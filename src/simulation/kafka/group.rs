//! A simulated consumer group coordinator, Kafka's classic protocol with an eager assignor: a
//! join or a departure starts a rebalance, in which every member gives its partitions back and
//! rejoins; when all have (or the rebalance timeout dropped the rest) the generation moves on and
//! the partitions are dealt round-robin. Members whose heartbeats stop for a session timeout
//! are dropped. Offsets committed inside a transaction are refused for a member no longer in the
//! group or of an older generation (KIP-447): see `Broker::send_offsets`. A group whose members
//! speak the consumer protocol (KIP-848) is reconciled member by member instead (`incremental`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::client::cluster::GroupProtocol;
use crate::kafka::TopicPartition;

/// One member, as the coordinator knows it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    /// Its client id (`<group>@<member>`), as the group lists it.
    pub(super) client: String,
    pub(super) topics: Vec<String>,
    pub(super) last_heartbeat: tokio::time::Instant,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    /// It rejoined in the rebalance going on.
    pub(super) rejoined: bool,
    /// Its partitions in the current generation (the consumer protocol: the ones it owns).
    pub(super) assignment: BTreeSet<TopicPartition>,
    /// The consumer protocol: its member epoch, the partitions the group's target deals it, and
    /// the ones it was told to give back (since when), not released yet.
    pub(super) epoch: i32,
    pub(super) target: BTreeSet<TopicPartition>,
    pub(super) revoking: BTreeSet<TopicPartition>,
    pub(super) revoking_since: Option<tokio::time::Instant>,
}

/// A group.
#[derive(Debug, Default)]
pub(super) struct Group {
    /// The classic protocol's generation; the consumer protocol's group epoch.
    pub(super) generation: i32,
    /// The protocol its members speak (its first member's).
    pub(super) protocol: GroupProtocol,
    /// The consumer protocol: the group epoch the members' targets were computed at.
    pub(super) targeted: i32,
    pub(super) members: BTreeMap<String, Member>,
    /// Since when a rebalance goes on.
    pub(super) rebalancing: Option<tokio::time::Instant>,
    /// Committed offsets: `(topic, partition) -> (offset, metadata)`.
    pub(super) committed: BTreeMap<TopicPartition, (i64, String)>,
    next_member: u64,
}

/// What a member is to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Duty {
    /// The group does not know it (its session expired, or it was never in): join again.
    Unknown,
    /// A rebalance goes on: give the partitions back, then rejoin.
    Revoke,
    /// A rebalance goes on; it holds nothing: rejoin.
    Rejoin,
    /// It rejoined; the rebalance is not complete.
    Wait,
    /// Its partitions in `generation`.
    Assigned(i32, BTreeSet<TopicPartition>),
}

impl Group {
    /// A new member; a rebalance starts.
    pub(super) fn join(
        &mut self,
        client: String,
        topics: Vec<String>,
        session_timeout: Duration,
        rebalance_timeout: Duration,
        now: tokio::time::Instant,
    ) -> String {
        self.next_member += 1;
        let id = format!("member-{}", self.next_member);
        self.members.insert(
            id.clone(),
            Member {
                client,
                topics,
                last_heartbeat: now,
                session_timeout,
                rebalance_timeout,
                rejoined: true,
                assignment: BTreeSet::new(),
                epoch: 0,
                target: BTreeSet::new(),
                revoking: BTreeSet::new(),
                revoking_since: None,
            },
        );
        self.rebalance(now);
        id
    }

    pub(super) fn rebalance(&mut self, now: tokio::time::Instant) {
        if self.protocol == GroupProtocol::Consumer {
            // a new group epoch: the targets are computed again (Broker::expire)
            self.generation += 1;
            return;
        }
        if self.rebalancing.is_none() {
            self.rebalancing = Some(now);
            for m in self.members.values_mut() {
                m.rejoined = false;
            }
        }
    }

    /// A member leaves; the others rebalance.
    pub(super) fn leave(&mut self, member: &str, now: tokio::time::Instant) {
        if self.members.remove(member).is_some() {
            self.rebalance(now);
        }
    }

    /// A heartbeat; false when the group does not know the member.
    pub(super) fn heartbeat(&mut self, member: &str, now: tokio::time::Instant) -> bool {
        match self.members.get_mut(member) {
            Some(m) => {
                m.last_heartbeat = now;
                true
            }
            None => false,
        }
    }

    /// The member gave its partitions back and joins the rebalance going on.
    pub(super) fn rejoin(&mut self, member: &str) {
        if let Some(m) = self.members.get_mut(member) {
            m.rejoined = true;
            m.assignment.clear();
        }
    }

    /// What `member` is to do, as of `assigned` (the generation whose partitions it was given).
    pub(super) fn duty(&self, member: &str, assigned: Option<i32>) -> Duty {
        let Some(m) = self.members.get(member) else {
            return Duty::Unknown;
        };
        match self.rebalancing {
            Some(_) if m.rejoined => Duty::Wait,
            Some(_) if assigned.is_some() => Duty::Revoke,
            Some(_) => Duty::Rejoin,
            None if assigned == Some(self.generation) => Duty::Wait,
            None => Duty::Assigned(self.generation, m.assignment.clone()),
        }
    }

    /// Drop the members whose session expired (and, in a rebalance, those that did not rejoin
    /// within their rebalance timeout); complete a rebalance every member rejoined. What
    /// happened, in words.
    pub(super) fn maintain(&mut self, now: tokio::time::Instant) -> Vec<String> {
        if self.protocol == GroupProtocol::Consumer {
            return self.maintain_incremental(now);
        }
        let mut events = Vec::new();
        let since = self.rebalancing;
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                now.saturating_duration_since(m.last_heartbeat) > m.session_timeout
                    || since.is_some_and(|s| !m.rejoined && now.saturating_duration_since(s) > m.rebalance_timeout)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.members.remove(&id);
            events.push(format!("{id} dropped (session or rebalance timeout)"));
            self.rebalance(now);
        }
        if self.rebalancing.is_some() && self.members.values().all(|m| m.rejoined) {
            self.rebalancing = None;
            self.generation += 1;
            events.push(format!(
                "generation {} with {} members",
                self.generation,
                self.members.len()
            ));
        }
        events
    }

    /// Deal `partitions` (every partition of the subscribed topics) round-robin over the members
    /// in the order of their ids, as Kafka's round-robin assignor does.
    pub(super) fn assign(&mut self, partitions: &BTreeSet<TopicPartition>) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for m in self.members.values_mut() {
            m.assignment.clear();
        }
        if ids.is_empty() {
            return;
        }
        for (i, tp) in partitions.iter().enumerate() {
            if let Some(m) = self.members.get_mut(&ids[i % ids.len()]) {
                m.assignment.insert(tp.clone());
            }
        }
    }
}
