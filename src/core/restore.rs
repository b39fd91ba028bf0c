//! Where a job resumes: a stored checkpoint checked against the job that reads it (its job,
//! source, sink and instance), and the sink's recovery of the last one.

use std::path::Path;

use tracing::warn;

use super::checkpoint::{Checkpoint, SourceCheckpoint};
use super::rt;
use super::sink::Sink;
use super::source::{Instance, Source};
use super::split::SourceSplit;
use crate::error::{Error, Result, StateError};

/// Where a job resumes, once the sink has recovered.
pub(crate) struct Restored<S: Source> {
    /// The checkpoint to resume from, if any.
    pub(crate) checkpoint: Option<SourceCheckpoint<S>>,
    /// Above every id the state file ever held, so a transaction's marker is never reused.
    pub(crate) next_checkpoint_id: u64,
}

/// Let the sink recover to the state file's last checkpoint. If that checkpoint's transaction was
/// not committed (a crash between the state file and the commit), resume from the one before it,
/// which the state file keeps for this.
pub(crate) async fn recover_sink<S: Source>(
    mut sink: Box<dyn Sink<S::Output>>,
    latest: Option<SourceCheckpoint<S>>,
) -> Result<(Box<dyn Sink<S::Output>>, Restored<S>)> {
    let next_checkpoint_id = latest.as_ref().map_or(1, |cp| cp.checkpoint_id + 1);
    let (sink, latest, committed) = rt::unblock(move || {
        let committed = sink.recover(latest.as_ref().map(|cp| (cp.checkpoint_id, cp.sink.as_ref())));
        (sink, latest, committed)
    })
    .await?;
    let checkpoint = match (latest, committed?) {
        (Some(cp), false) => {
            let previous = cp.previous.map(|b| *b);
            warn!(
                checkpoint = cp.checkpoint_id,
                resuming_from = previous.as_ref().map(|p| p.checkpoint_id),
                "the last checkpoint's transaction was not committed; resuming from the one before it"
            );
            previous
        }
        (latest, true) => latest,
        (None, false) => None,
    };
    Ok((
        sink,
        Restored {
            checkpoint,
            next_checkpoint_id,
        },
    ))
}

/// A state file is resumed only by what wrote it: the same sink (only it can recover its last
/// checkpoint: cut a file back to its length, settle a transaction by its id) and the same
/// instance (its state covers its share of the work only). A state without these records (an
/// older tidegate's) is taken as it is.
pub(crate) fn check_writer<E, S: SourceSplit>(
    cp: &Checkpoint<E, S>,
    sink: Option<&serde_json::Value>,
    instance: Instance,
) -> Result<()> {
    let how = "finish the job with the settings that wrote its last checkpoint, or start over with --reset-state";
    if let Some(was) = cp.instance.filter(|was| *was != instance) {
        return Err(Error::config(
            "job.instance",
            format!(
                "changed since the last checkpoint was written (was index {} of {}, now index {} of {}): each instance's \
                 state covers its own share of the work (its partitions, its generated ranges), and a new share \
                 would read moved partitions from their start or overlap another's ranges; {how}",
                was.index, was.count, instance.index, instance.count
            ),
        ));
    }
    if let (Some(was), Some(now)) = (&cp.sink_settings, sink) {
        if was != now {
            let keys: Vec<String> = match (was.as_object(), now.as_object()) {
                (Some(a), Some(b)) => {
                    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                    keys.sort();
                    keys.dedup();
                    // the kind first: the rest follows from it
                    let changed: Vec<String> = keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).cloned().collect();
                    match changed.iter().find(|k| *k == "type") {
                        Some(t) => vec![t.clone()],
                        None => changed,
                    }
                }
                _ => Vec::new(),
            };
            let show = |v: &serde_json::Value, k: &str| match &v[k] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => "none".to_string(),
                other => other.to_string(),
            };
            let (key, change) = match keys.as_slice() {
                [] => ("sink".to_string(), format!("was {was}, now {now}")),
                keys => (
                    format!("sink.{}", keys[0]),
                    keys.iter()
                        .map(|k| format!("{k} was {}, now {}", show(was, k), show(now, k)))
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
            };
            return Err(Error::config(
                key,
                format!(
                    "changed since the last checkpoint was written ({change}): its last checkpoint can only be \
                     recovered by the sink that wrote it (a file cut back to its length, a transaction settled \
                     by its id), or records would be lost or repeated; {how}"
                ),
            ));
        }
    }
    Ok(())
}

/// The checkpoint `raw` (read from the state file at `path`) as `source`'s, for job `job`: a
/// state of another job or source kind, or one its settings do not fit, is refused.
pub fn checkpoint_of<S: Source>(
    source: &S,
    job: &str,
    path: &Path,
    raw: serde_json::Value,
) -> Result<SourceCheckpoint<S>> {
    let refused = |source| Error::State {
        path: path.to_path_buf(),
        source,
    };
    // whose state it is, before what it holds: another job's or source's state does not fit
    let found = |key: &str| raw.get(key).and_then(|v| v.as_str()).unwrap_or("unknown").to_string();
    if found("source") != source.kind() {
        return Err(refused(StateError::SourceMismatch {
            expected: source.kind().into(),
            found: found("source"),
        }));
    }
    if found("job") != job {
        return Err(refused(StateError::JobMismatch {
            expected: job.to_string(),
            found: found("job"),
        }));
    }
    let checkpoint: SourceCheckpoint<S> =
        serde_json::from_value(raw).map_err(|e| refused(StateError::Malformed(e.to_string())))?;
    if let Some(stored) = &checkpoint.source_settings {
        source.check_restore(stored)?;
    }
    Ok(checkpoint)
}
