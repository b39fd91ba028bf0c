//! The simulation's invariant: the output the next start will see is exactly what the state
//! file's checkpoint covers, split by split and in order; at the end, exactly the input.

use std::collections::BTreeMap;

use serde_json::Value;

use super::sinks::{Disk, END_MARKER};

/// Which simulated sink a schedule writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SinkKind {
    Truncating,
    Transactional,
}

/// A split of the input: its id and range.
#[derive(Debug, Clone)]
pub(crate) struct Range {
    pub(crate) id: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Where its output must end: its end, or its first end-of-stream record (not emitted).
    pub(crate) expected_end: u64,
}

/// How far a checkpoint has each split: the end (exclusive) of what it covers, and whether the
/// split is finished.
pub(crate) type Coverage = BTreeMap<String, (u64, bool)>;

/// The checkpoint a start resumes from, picked as the runtime picks it: a transactional sink's
/// last checkpoint only if its transaction was committed, else the one before.
pub(crate) fn resumed(state: Option<&Value>, kind: SinkKind, disk: &Disk) -> Option<Value> {
    let state = state?;
    if kind == SinkKind::Truncating {
        return Some(state.clone());
    }
    match state["sink"]["transaction"].as_str() {
        Some(token) if disk.marker.as_deref() != Some(token) => state.get("previous").filter(|p| !p.is_null()).cloned(),
        _ => Some(state.clone()),
    }
}

/// What a checkpoint covers of every split; every split must be in it exactly once.
pub(crate) fn coverage(checkpoint: Option<&Value>, ranges: &[Range]) -> Result<Coverage, String> {
    let Some(cp) = checkpoint else {
        return Ok(ranges.iter().map(|r| (r.id.clone(), (r.start, false))).collect());
    };
    let mut covered = Coverage::new();
    let snapshots = cp["splits"].as_array().cloned().unwrap_or_default();
    // the splits no reader has: the pulled source's remaining list, or the resolving source's
    // splits not assigned (`[split, assigned]`)
    let unassigned: Vec<Value> = match &cp["enumerator"] {
        Value::Array(remaining) => remaining.clone(),
        other => other["splits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s[1] == false)
            .map(|s| s[0].clone())
            .collect(),
    };
    let entries = snapshots
        .iter()
        .map(|s| (&s["split"], &s["finished"]))
        .chain(unassigned.iter().map(|s| (s, &Value::Null)));
    for (split, finished) in entries {
        let id = split["id"].as_str().ok_or("a split without an id")?.to_string();
        let next = split["next_offset"].as_u64().ok_or("a split without next_offset")?;
        let end = match finished["reason"].as_str() {
            Some("eof_record") => finished["at"].as_u64().ok_or("an eof_record without `at`")?,
            _ => next,
        };
        if covered.insert(id.clone(), (end, !finished.is_null())).is_some() {
            return Err(format!("checkpoint {}: split {id} is in it twice", cp["checkpoint_id"]));
        }
    }
    for r in ranges {
        if !covered.contains_key(&r.id) {
            return Err(format!(
                "checkpoint {}: split {} is missing (lost on restore)",
                cp["checkpoint_id"], r.id
            ));
        }
    }
    Ok(covered)
}

/// The start a resolving source's checkpoint (or the one before it, kept beside it) resolved.
pub(crate) fn resolution(checkpoint: Option<&Value>) -> Option<u64> {
    let cp = checkpoint?;
    cp["enumerator"]["latest"]
        .as_u64()
        .or_else(|| cp["previous"]["enumerator"]["latest"].as_u64())
}

/// The output a start resumes with: the file cut back to the checkpoint's length, or the
/// committed transactions. `whole`: after a stop or the end, the file as the process left it,
/// which must be exactly the checkpoint's length.
pub(crate) fn durable_output(
    kind: SinkKind,
    disk: &Disk,
    checkpoint: Option<&Value>,
    whole: bool,
) -> Result<Vec<u64>, String> {
    match kind {
        SinkKind::Transactional => Ok(disk.committed.clone()),
        SinkKind::Truncating => {
            let length = checkpoint.and_then(|c| c["sink"]["length"].as_u64()).unwrap_or(0) as usize;
            let unsynced = if whole { disk.unsynced.len() } else { 0 };
            let held = disk.synced.len() + unsynced;
            if held < length || (whole && held != length) {
                return Err(format!(
                    "the file holds {held} records ({unsynced} not synced), the checkpoint says {length}"
                ));
            }
            Ok(disk.synced[..length].to_vec())
        }
    }
}

/// The output must hold, for every split, exactly its numbers from its start to what the
/// checkpoint covers, in order, and nothing else; the end marker once, last, if (and only if)
/// the checkpoint says the input ended.
pub(crate) fn output_matches(
    output: &[u64],
    covered: &Coverage,
    ranges: &[Range],
    end_of_input: bool,
) -> Result<(), String> {
    let markers = output.iter().filter(|v| **v == END_MARKER).count();
    match (end_of_input, markers) {
        (false, 0) => {}
        (true, 1) if output.last() == Some(&END_MARKER) => {}
        _ => {
            return Err(format!(
                "the output has {markers} end markers (last: {}), the checkpoint says the input ended: {end_of_input}",
                output.last() == Some(&END_MARKER)
            ))
        }
    }
    let output = &output[..output.len() - markers];
    for r in ranges {
        let mine: Vec<u64> = output.iter().copied().filter(|v| *v >= r.start && *v < r.end).collect();
        let end = covered.get(&r.id).map_or(r.start, |c| c.0);
        let expected: Vec<u64> = (r.start..end).collect();
        if mine != expected {
            return Err(format!(
                "split {} ({}..{}): the checkpoint covers {}..{end}, the output has {}",
                r.id,
                r.start,
                r.end,
                r.start,
                describe_difference(&mine, &expected)
            ));
        }
    }
    if let Some(stray) = output
        .iter()
        .find(|v| !ranges.iter().any(|r| **v >= r.start && **v < r.end))
    {
        return Err(format!("the output has {stray}, which no split holds"));
    }
    Ok(())
}

/// Every split finished where it should, and the output is exactly the input.
pub(crate) fn complete(covered: &Coverage, ranges: &[Range]) -> Result<(), String> {
    for r in ranges {
        match covered.get(&r.id) {
            Some((end, true)) if *end == r.expected_end => {}
            other => {
                return Err(format!(
                    "split {} ({}..{}) should end at {}, the last checkpoint has {other:?}",
                    r.id, r.start, r.end, r.expected_end
                ))
            }
        }
    }
    Ok(())
}

fn describe_difference(found: &[u64], expected: &[u64]) -> String {
    let first = found.iter().zip(expected).position(|(a, b)| a != b);
    let at = first.unwrap_or(found.len().min(expected.len()));
    let missing: Vec<u64> = expected.iter().filter(|v| !found.contains(v)).copied().collect();
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<u64> = found.iter().filter(|v| !seen.insert(**v)).copied().collect();
    format!(
        "{} records (first difference at index {at}: found {:?}, expected {:?}); lost {}{:?}, repeated {}{:?}",
        found.len(),
        found.get(at),
        expected.get(at),
        missing.len(),
        &missing[..missing.len().min(8)],
        repeated.len(),
        &repeated[..repeated.len().min(8)],
    )
}
