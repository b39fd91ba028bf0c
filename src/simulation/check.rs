//! The invariants of a schedule across processes: the committed output (every committed record,
//! as consumers read it once a killed member's open transaction has timed out) holds every record of
//! the bounded input at most once, in order per partition, and nothing else; all of it once when
//! a member ended by itself with success (a job that reports success has finished every
//! partition, whoever read it); every member still alive at the end of the schedule ended.

use super::kafka::{Broker, SimKafka};
use super::{Exit, Outcome, Plan, OUTPUT};

/// The committed output of each partition, as the input index of each record (`u64::MAX` for a
/// record that is not one of the input's).
pub(super) fn output(records: &[u64], broker: &Broker) -> Vec<Vec<u64>> {
    (0..records.len() as i32)
        .map(|p| {
            broker
                .committed_values(OUTPUT, p)
                .into_iter()
                .map(|value| {
                    let text = value
                        .map(|v| String::from_utf8_lossy(&v).into_owned())
                        .unwrap_or_default();
                    match text.split_once(':') {
                        Some((partition, index)) if partition == p.to_string() => index.parse().unwrap_or(u64::MAX),
                        _ => u64::MAX,
                    }
                })
                .collect()
        })
        .collect()
}

/// What of the input `output` lacks: `partition p: n of m` for each partition short.
pub(super) fn unfinished(records: &[u64], output: &[Vec<u64>]) -> Vec<String> {
    records
        .iter()
        .zip(output)
        .enumerate()
        .filter(|(_, (r, w))| w.len() as u64 != **r)
        .map(|(p, (r, w))| format!("partition {p}: {} of {r}", w.len()))
        .collect()
}

/// Whether a member's failure is one the schedule asked for: an injected request error (not a
/// coordinator moving, which a member retries until its timeout), a fencing of a member paused
/// past its transaction's timeout, a twin refused, a deleted state topic refused.
fn explained(plan: &Plan, error: &str) -> bool {
    // a coordinator moving is passing: a member fails for it only once it outlasted the retries
    if error.contains("Not coordinator") && !error.contains("still failing after") {
        return false;
    }
    let faults = plan.faults.lookups + plan.faults.commits + plan.faults.offsets > 0;
    let paused = plan.pause_steps.iter().any(Option::is_some)
        || plan
            .point_disruptions
            .iter()
            .flatten()
            .any(|(_, _, pause)| pause.is_some())
        || plan.events.iter().any(|e| matches!(e.action, super::Action::Pause(..)));
    faults
        || (paused && error.contains("fenced"))
        || error.contains("job.member")
        || error.contains("missing: the checkpoint topic does not exist")
}

pub(super) fn invariants(plan: &Plan, outcome: &Outcome, _kafka: &SimKafka) -> Result<(), String> {
    let mut complete = true;
    for (p, (records, written)) in outcome.expected.iter().zip(&outcome.output).enumerate() {
        if let Some(stray) = written.iter().find(|i| **i >= *records) {
            return Err(format!(
                "partition {p}: the output holds a record that is not in the input (index {stray}: an aborted record, \
                 or another partition's)"
            ));
        }
        if let Some(w) = written.windows(2).find(|w| w[1] <= w[0]) {
            return Err(format!(
                "partition {p}: the output repeats or reorders records ({} then {}; {} records written of {records})",
                w[0],
                w[1],
                written.len()
            ));
        }
        complete &= written.len() as u64 == *records;
    }
    let missing = unfinished(&outcome.expected, &outcome.output);
    for m in &outcome.members {
        match &m.exit {
            Exit::Returned {
                signalled: false,
                result: Ok(()),
                unfinished,
            } if !unfinished.is_empty() => {
                return Err(format!(
                    "member {} (process {}) exited 0 by itself with the input unfinished: {}",
                    m.name,
                    m.pid,
                    unfinished.join(", ")
                ));
            }
            Exit::Returned { result: Err(e), .. } if !explained(plan, e) => {
                return Err(format!(
                    "member {} (process {}) failed, and nothing the schedule did explains it: {e}",
                    m.name, m.pid
                ));
            }
            Exit::Panicked(message) => {
                return Err(format!("member {} (process {}) panicked: {message}", m.name, m.pid));
            }
            Exit::Running => {
                return Err(format!(
                    "member {} (process {}) did not end: hung (the bounded input: {})",
                    m.name,
                    m.pid,
                    if complete {
                        "all written".to_string()
                    } else {
                        missing.join(", ")
                    }
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
