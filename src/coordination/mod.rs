//! Instances coordinated by Kafka's group protocol (`job.coordination = "group"`): each process
//! is a member of the consumer group `tidegate-<job>` that reads no records itself; the broker's
//! assignment to it is the set of partitions its job reads. This module owns what the members
//! share through Kafka: the group's name, the check that no two processes run as one member, the
//! job's progress across members, and the event-time values a source-wide stop aligns on. The
//! member's loop, which runs the job on each assignment, is the job assembly's
//! (`crate::assembly::group`).

pub(crate) mod clients;
pub(crate) mod event_time;
pub(crate) mod handover;
pub(crate) mod progress;
mod published;
pub(crate) mod twins;

use crate::kafka::Subscription;

/// The consumer group of a job's members.
pub fn group_id(job: &str) -> String {
    format!("tidegate-{job}")
}

/// The topics a group member subscribes to (the listed partitions' topics when the source names
/// partitions: the assignment is then narrowed to them by discovery).
pub fn topics(subscription: &Subscription) -> Vec<String> {
    match subscription {
        Subscription::Topics(t) => t.clone(),
        Subscription::Partitions(_, t) => t.clone(),
        Subscription::Pattern(_) => Vec::new(),
    }
}
