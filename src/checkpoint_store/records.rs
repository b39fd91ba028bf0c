//! The records of the Kafka checkpoint store: keys (`<owner>/checkpoint`, `<owner>/enumerator`,
//! `<owner>/split/<split id>`), values (a JSON envelope with a format, a version, the job, the
//! checkpoint id and a CRC32 of the key, job, checkpoint id and payload), a checkpoint cut into records, and the records read
//! back assembled into the checkpoint JSON the state file would hold. Pure: no Kafka here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::{StateError, StoredCheckpoint};

/// The `format` of every state record.
pub const RECORD_FORMAT: &str = "tidegate-state-record";
/// The `format` of the head of a record written in parts ([`PART_BYTES`]).
pub const PARTS_FORMAT: &str = "tidegate-state-record-parts";
/// A record larger than this is written in parts of this size, each its own Kafka record under
/// `<key>/part/<i>`, its head under the key saying how many, and of what length and CRC32: a
/// checkpoint of thousands of partitions (its enumerator's record) fits any topic's and client's
/// message size limit (librdkafka's default `message.max.bytes` is 1,000,000). The parts go in the
/// same transaction, before their head.
pub const PART_BYTES: usize = 256 * 1024;
/// The record version this build reads and writes.
pub const RECORD_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    format: String,
    version: u64,
    job: String,
    checkpoint_id: u64,
    crc32: u32,
    payload: Value,
}

/// The key prefix of the event-time values a group's members publish (`eof_scope = "source"`,
/// `crate::coordination`): `#event-time/<job>/`, which no owner of any job can start with (a
/// job's name is never empty and holds no `#`). Not state: `--reset-state` removes them with it.
pub fn event_time_prefix(job: &str) -> String {
    format!("#event-time/{job}/")
}

/// The key of the record of one part of `owner`'s checkpoint.
pub fn checkpoint_key(owner: &str) -> String {
    format!("{owner}/checkpoint")
}

fn enumerator_key(owner: &str) -> String {
    format!("{owner}/enumerator")
}

/// The key of `owner`'s claim of its generation (see [`super::layout`]).
pub fn claim_key(owner: &str) -> String {
    format!("{owner}/claim")
}

/// The claim of `owner`, instance `instance` of generation `generation` cut from `base`: the
/// record that says the generation has begun before its first checkpoint.
pub fn claim_record(
    owner: &str,
    job: &str,
    instance: crate::core::Instance,
    generation: u64,
    base: Option<u64>,
) -> Result<(String, Vec<u8>), StateError> {
    let key = claim_key(owner);
    let payload = serde_json::json!({"instance": instance, "generation": generation, "base": base});
    let value = encode(&key, job, 0, payload)?;
    Ok((key, value))
}

/// Whether the record `bytes` under `key` is sound (decodes, is `job`'s, its checksum holds).
pub fn check(key: &str, job: &str, bytes: &[u8]) -> Result<(), StateError> {
    decode(key, job, bytes).map(|_| ())
}

fn split_key(owner: &str, split_id: &str) -> String {
    format!("{owner}/split/{split_id}")
}

/// Whether `key` is one of `owner`'s records (another job's keys, even ones that start with
/// this job's name, are not).
pub fn is_owned(owner: &str, key: &str) -> bool {
    key.strip_prefix(owner)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| {
            rest == "checkpoint"
                || rest == "enumerator"
                || rest == "claim"
                || rest.starts_with("split/")
                || rest.starts_with("checkpoint/part/")
                || rest.starts_with("enumerator/part/")
        })
}

/// Whether `key` is a part of a record written in parts.
pub fn is_part(key: &str) -> bool {
    key.rsplit_once("/part/")
        .is_some_and(|(_, i)| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// `(key, value)` as the records to write: itself, or (larger than [`PART_BYTES`]) its parts
/// and then its head.
fn in_parts(key: String, value: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    if value.len() <= PART_BYTES {
        return vec![(key, value)];
    }
    let mut out: Vec<(String, Vec<u8>)> = value
        .chunks(PART_BYTES)
        .enumerate()
        .map(|(i, part)| (format!("{key}/part/{i}"), part.to_vec()))
        .collect();
    let head = serde_json::json!({
        "format": PARTS_FORMAT,
        "parts": out.len(),
        "length": value.len(),
        "crc32": crc32fast::hash(&value),
    });
    out.push((key, serde_json::to_vec(&head).unwrap_or_default()));
    out
}

/// The whole record whose head is `head` (under `key`), from its parts in `parts`: `None` when
/// `head` is not the head of a record in parts, or when its parts are missing or do not match it
/// (a read that cut their transaction, or damage: the head is left, and fails to decode).
pub fn joined(key: &str, head: &[u8], parts: &BTreeMap<String, Option<Vec<u8>>>) -> Option<Vec<u8>> {
    // a head is small, and says its format (a cheap look before a parse)
    if head.len() > 512 || memchr::memmem::find(head, PARTS_FORMAT.as_bytes()).is_none() {
        return None;
    }
    let head: Value = serde_json::from_slice(head).ok()?;
    if head["format"] != PARTS_FORMAT {
        return None;
    }
    let count = head["parts"].as_u64()?;
    let mut whole = Vec::with_capacity(head["length"].as_u64().unwrap_or(0) as usize);
    for i in 0..count {
        whole.extend_from_slice(parts.get(&format!("{key}/part/{i}"))?.as_deref()?);
    }
    (whole.len() as u64 == head["length"].as_u64()? && u64::from(crc32fast::hash(&whole)) == head["crc32"].as_u64()?)
        .then_some(whole)
}

/// The CRC32 of a record: its key, job, checkpoint id and payload (a record moved to another key
/// or edited in any of them fails it).
fn crc(key: &str, job: &str, checkpoint_id: u64, payload: &Value) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in [
        key.as_bytes(),
        b"\0",
        job.as_bytes(),
        b"\0",
        checkpoint_id.to_string().as_bytes(),
        b"\0",
    ] {
        hasher.update(part);
    }
    // serde_json writes a `Value`'s objects in key order: the same payload, the same bytes
    hasher.update(&serde_json::to_vec(payload).unwrap_or_default());
    hasher.finalize()
}

fn encode(key: &str, job: &str, checkpoint_id: u64, payload: Value) -> Result<Vec<u8>, StateError> {
    let envelope = Envelope {
        format: RECORD_FORMAT.into(),
        version: RECORD_VERSION,
        job: job.into(),
        checkpoint_id,
        crc32: crc(key, job, checkpoint_id, &payload),
        payload,
    };
    serde_json::to_vec(&envelope).map_err(|e| StateError::Malformed(e.to_string()))
}

fn decode(key: &str, job: &str, bytes: &[u8]) -> Result<Envelope, StateError> {
    if bytes.is_empty() {
        return Err(StateError::Empty);
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|_| StateError::NotAStateFile("the value is not a tidegate state record (not JSON)".into()))?;
    let format = value.get("format").and_then(Value::as_str).unwrap_or("none");
    if format == PARTS_FORMAT {
        return Err(StateError::Truncated(
            "the record was written in parts, and its parts are missing or do not match it".into(),
        ));
    }
    if format != RECORD_FORMAT {
        return Err(StateError::NotAStateFile(format!(
            "format is {format:?}, not {RECORD_FORMAT:?}"
        )));
    }
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| StateError::Malformed(e.to_string()))?;
    if envelope.version != RECORD_VERSION {
        return Err(StateError::UnknownVersion {
            found: envelope.version,
            supported: RECORD_VERSION,
        });
    }
    let actual = crc(key, &envelope.job, envelope.checkpoint_id, &envelope.payload);
    if actual != envelope.crc32 {
        return Err(StateError::ChecksumMismatch {
            expected: envelope.crc32,
            actual,
        });
    }
    if envelope.job != job {
        return Err(StateError::JobMismatch {
            expected: job.into(),
            found: envelope.job,
        });
    }
    Ok(envelope)
}

/// The instance (`job.instance`) that wrote the checkpoint record `bytes` under `key` (a single
/// instance's records say index 0 of 1): `None` for a record that does not say (none written by
/// tidegate since instances were recorded) or does not decode.
pub fn written_by(key: &str, job: &str, bytes: &[u8]) -> Option<crate::core::Instance> {
    let envelope = decode(key, job, bytes).ok()?;
    serde_json::from_value(envelope.payload.get("instance")?.clone()).ok()
}

/// Whether the checkpoint record `bytes` under `key` leaves its sink something to recover that
/// only the instance that wrote it can (a file's length, a transaction judged by its commit
/// marker): a sink state other than none or one carried in the sink's transaction. A record
/// that does not decode says no.
pub fn sink_to_recover(key: &str, job: &str, bytes: &[u8]) -> bool {
    decode(key, job, bytes)
        .ok()
        .and_then(|e| e.payload.get("sink").cloned())
        .is_some_and(|sink| !sink.is_null() && sink["state_in_transaction"] != true)
}

/// The generation the checkpoint record `bytes` under `key` says its generation was cut from
/// (see [`super::layout`]); `None` in the first generation, or for a record that does not decode.
pub fn base_of(key: &str, job: &str, bytes: &[u8]) -> Option<u64> {
    decode(key, job, bytes).ok()?.payload.get("base")?.as_u64()
}

/// `checkpoint` as `(key, value)` records: one per split, the enumerator's, and the job's (every
/// other field of the checkpoint, with the ids of its splits), last.
pub fn records_of(owner: &str, job: &str, checkpoint: &StoredCheckpoint) -> Result<Vec<(String, Vec<u8>)>, StateError> {
    let id = checkpoint.checkpoint_id;
    let Value::Object(mut fields) = checkpoint.value.clone() else {
        return Err(StateError::Malformed("a checkpoint is not a JSON object".into()));
    };
    let splits = match fields.remove("splits") {
        Some(Value::Array(splits)) => splits,
        _ => return Err(StateError::Malformed("a checkpoint without a `splits` list".into())),
    };
    if splits.len() != checkpoint.split_ids.len() {
        return Err(StateError::Malformed(format!(
            "{} splits but {} split ids",
            splits.len(),
            checkpoint.split_ids.len()
        )));
    }
    let enumerator = fields.remove("enumerator").unwrap_or(Value::Null);
    let mut records = Vec::with_capacity(splits.len() + 2);
    for (split, split_id) in splits.into_iter().zip(&checkpoint.split_ids) {
        let key = split_key(owner, split_id);
        let value = encode(&key, job, id, split)?;
        records.push((key, value));
    }
    let key = enumerator_key(owner);
    let value = encode(&key, job, id, enumerator)?;
    records.extend(in_parts(key, value));
    fields.insert("split_ids".into(), Value::from(checkpoint.split_ids.clone()));
    let key = checkpoint_key(owner);
    let value = encode(&key, job, id, Value::Object(fields))?;
    records.extend(in_parts(key, value));
    Ok(records)
}

/// The checkpoint JSON from the latest record of each of `owner`'s keys (`None`: a tombstone);
/// `None` when there is no job record. An error names the key it is about.
pub fn assemble(
    owner: &str,
    job: &str,
    latest: &BTreeMap<String, Option<Vec<u8>>>,
) -> Result<Option<Value>, (String, StateError)> {
    let read = |key: &str| -> Result<Option<Envelope>, (String, StateError)> {
        match latest.get(key) {
            Some(Some(bytes)) => decode(key, job, bytes).map(Some).map_err(|e| (key.to_string(), e)),
            _ => Ok(None),
        }
    };
    // every live record of this job must be sound, including ones the last checkpoint no longer
    // names: damage is reported, never stepped around
    for (key, value) in latest {
        if let Some(bytes) = value {
            decode(key, job, bytes).map_err(|e| (key.clone(), e))?;
        }
    }
    let key = checkpoint_key(owner);
    let Some(head) = read(&key)? else {
        return Ok(None);
    };
    let id = head.checkpoint_id;
    let Value::Object(mut fields) = head.payload else {
        return Err((key, StateError::Malformed("the job record is not a JSON object".into())));
    };
    let split_ids: Vec<String> = match fields.remove("split_ids") {
        Some(ids) => serde_json::from_value(ids).map_err(|e| (key.clone(), StateError::Malformed(e.to_string())))?,
        None => return Err((key, StateError::Malformed("the job record lists no splits".into()))),
    };
    // written in one transaction with the job record: a part of another checkpoint means the
    // topic was written by something else
    let part = |key: String| -> Result<Value, (String, StateError)> {
        match read(&key)? {
            Some(e) if e.checkpoint_id == id => Ok(e.payload),
            Some(e) => Err((
                key,
                StateError::Malformed(format!(
                    "holds checkpoint {}, the job record checkpoint {id} (not written by one transaction)",
                    e.checkpoint_id
                )),
            )),
            None => Err((key, StateError::Truncated(format!("missing from checkpoint {id}")))),
        }
    };
    let enumerator = part(enumerator_key(owner))?;
    let splits = split_ids
        .iter()
        .map(|s| part(split_key(owner, s)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut checkpoint = Map::new();
    checkpoint.extend(fields);
    checkpoint.insert("enumerator".into(), enumerator);
    checkpoint.insert("splits".into(), Value::Array(splits));
    Ok(Some(Value::Object(checkpoint)))
}

/// Whether a read of `owner`'s records (`latest`) caught a checkpoint half way: a part of it (a
/// split's or the enumerator's record) newer than its job record, which its transaction writes
/// last. A read that stops at the end of the log as it was when the read began can cut another
/// process's transaction that way (a group member checkpointing while another restores); the rest
/// of that transaction is in the log by then, and a second read finds it whole.
pub fn torn(owner: &str, job: &str, latest: &BTreeMap<String, Option<Vec<u8>>>) -> bool {
    let id = |key: &str| match latest.get(key) {
        Some(Some(bytes)) => decode(key, job, bytes).ok().map(|e| e.checkpoint_id),
        _ => None,
    };
    let Some(head) = id(&checkpoint_key(owner)) else {
        return false;
    };
    latest
        .keys()
        .filter(|k| k.as_str() != checkpoint_key(owner) && k.as_str() != claim_key(owner))
        .any(|k| id(k).is_some_and(|part| part > head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_read_that_caught_a_checkpoint_half_way_is_told_from_damage() {
        let first = records_of("j@a", "j", &checkpoint(1, &[("t-0", 5), ("t-1", 7)])).unwrap();
        let second = records_of("j@a", "j", &checkpoint(2, &[("t-0", 9)])).unwrap();
        let whole = latest(first.clone());
        assert!(!torn("j@a", "j", &whole));
        // the second checkpoint's split record read, its job record not yet
        let mut half = whole.clone();
        half.insert(second[0].0.clone(), Some(second[0].1.clone()));
        assert!(torn("j@a", "j", &half));
        assert!(assemble("j@a", "j", &half).is_err(), "assembled, it is inconsistent");
        let both = latest(first.into_iter().chain(second));
        assert!(!torn("j@a", "j", &both));
        assert_eq!(
            assemble("j@a", "j", &both).unwrap().unwrap()["splits"],
            json!([{"next": 9}])
        );
    }

    fn checkpoint(id: u64, splits: &[(&str, u64)]) -> StoredCheckpoint {
        StoredCheckpoint {
            checkpoint_id: id,
            value: json!({
                "job": "j", "source": "kafka", "checkpoint_id": id, "enumerator": {"seen": id},
                "splits": splits.iter().map(|(_, n)| json!({"next": n})).collect::<Vec<_>>(),
            }),
            split_ids: splits.iter().map(|(s, _)| s.to_string()).collect(),
        }
    }

    fn latest(records: impl IntoIterator<Item = (String, Vec<u8>)>) -> BTreeMap<String, Option<Vec<u8>>> {
        records.into_iter().map(|(k, v)| (k, Some(v))).collect()
    }

    #[test]
    fn a_job_record_says_its_base_and_whether_its_sink_has_something_to_recover() {
        let record = |fields: serde_json::Value| {
            let mut cp = checkpoint(4, &[("t-0", 5)]);
            for (k, v) in fields.as_object().unwrap() {
                cp.value[k] = v.clone();
            }
            records_of("j#1~2", "j", &cp).unwrap().pop().unwrap()
        };
        let (key, bytes) = record(json!({"generation": 2, "base": 1}));
        assert_eq!(base_of(&key, "j", &bytes), Some(1));
        assert!(!sink_to_recover(&key, "j", &bytes), "no sink state");
        let (key, bytes) = record(json!({}));
        assert_eq!(base_of(&key, "j", &bytes), None);
        let carried = json!({"sink": {"transactional_id": "t", "transaction": null, "state_in_transaction": true}});
        let (key, bytes) = record(carried);
        assert!(!sink_to_recover(&key, "j", &bytes), "carried in the sink's transaction");
        let (key, bytes) = record(json!({"sink": {"length": 120}}));
        assert!(sink_to_recover(&key, "j", &bytes), "a file's length");
        let (key, bytes) = record(json!({"sink": {"transactional_id": "t", "transaction": "3-x"}}));
        assert!(sink_to_recover(&key, "j", &bytes), "a transaction judged by its marker");
    }

    #[test]
    fn a_job_record_says_which_instance_wrote_it() {
        let mut cp = checkpoint(3, &[("t-0", 5)]);
        cp.value["instance"] = json!({"index": 2, "count": 3});
        let records = records_of("j#2", "j", &cp).unwrap();
        let (key, job_record) = records.last().unwrap();
        assert_eq!(key, "j#2/checkpoint");
        assert_eq!(
            written_by(key, "j", job_record),
            Some(crate::core::Instance { index: 2, count: 3 })
        );
        // a single instance's record says index 0 of 1 (the coordinator always writes it); one
        // without the field, damage or another job's record says nothing
        let mut single = checkpoint(3, &[("t-0", 5)]);
        single.value["instance"] = json!({"index": 0, "count": 1});
        let single = records_of("j", "j", &single).unwrap();
        let (key, single) = single.last().unwrap();
        assert_eq!(
            written_by(key, "j", single),
            Some(crate::core::Instance { index: 0, count: 1 })
        );
        let unsaid = records_of("j", "j", &checkpoint(3, &[("t-0", 5)])).unwrap();
        let (key, unsaid) = unsaid.last().unwrap();
        assert_eq!(written_by(key, "j", unsaid), None);
        assert_eq!(written_by("j#2/checkpoint", "other", job_record), None);
        let mut damaged = job_record.clone();
        let at = damaged.len() / 2;
        damaged[at] ^= 1;
        assert_eq!(written_by("j#2/checkpoint", "j", &damaged), None);
    }

    #[test]
    fn a_checkpoint_comes_back_whole_and_stale_splits_stay_out() {
        let first = checkpoint(1, &[("t-0", 5), ("t-1", 7)]);
        let second = checkpoint(2, &[("t-1", 9)]);
        let mut topic = latest(records_of("j", "j", &first).unwrap());
        topic.extend(latest(records_of("j", "j", &second).unwrap()));
        assert_eq!(assemble("j", "j", &topic).unwrap(), Some(second.value.clone()));
        assert!(
            topic.contains_key("j/split/t-0"),
            "the old split's record is still there"
        );
        assert_eq!(assemble("other", "other", &BTreeMap::new()).unwrap(), None);
    }

    #[test]
    fn damage_and_foreign_records_name_their_key() {
        let records = records_of("j", "j", &checkpoint(1, &[("t-0", 5)])).unwrap();
        let mut topic = latest(records.clone());
        topic.insert("j/split/t-0".into(), Some(b"garbage".to_vec()));
        let (key, e) = assemble("j", "j", &topic).unwrap_err();
        assert_eq!(key, "j/split/t-0");
        assert!(matches!(e, StateError::NotAStateFile(_)), "{e}");

        let mut topic = latest(records.clone());
        let damaged = String::from_utf8(topic["j/enumerator"].clone().unwrap())
            .unwrap()
            .replace("\"seen\":1", "\"seen\":2");
        topic.insert("j/enumerator".into(), Some(damaged.into_bytes()));
        assert!(matches!(
            assemble("j", "j", &topic).unwrap_err().1,
            StateError::ChecksumMismatch { .. }
        ));

        let mut topic = latest(records);
        topic.insert(
            "j/enumerator".into(),
            Some(records_of("j", "k", &checkpoint(1, &[])).unwrap()[0].1.clone()),
        );
        assert!(matches!(
            assemble("j", "j", &topic).unwrap_err().1,
            StateError::JobMismatch { .. }
        ));
    }

    #[test]
    fn a_part_of_another_checkpoint_is_refused() {
        let mut topic = latest(records_of("j", "j", &checkpoint(1, &[("t-0", 5)])).unwrap());
        let newer = records_of("j", "j", &checkpoint(2, &[("t-0", 6)])).unwrap();
        topic.insert(newer[2].0.clone(), Some(newer[2].1.clone()));
        let (key, e) = assemble("j", "j", &topic).unwrap_err();
        assert_eq!(key, "j/enumerator");
        assert!(matches!(e, StateError::Malformed(_)), "{e}");
    }

    #[test]
    fn the_checksum_covers_the_key_the_job_and_the_checkpoint_id() {
        let records = records_of("j", "j", &checkpoint(1, &[("t-0", 5), ("t-1", 7)])).unwrap();
        // split t-0's record under t-1's key: sound alone, the wrong split's position
        let mut topic = latest(records.clone());
        topic.insert("j/split/t-1".into(), topic["j/split/t-0"].clone());
        let (key, e) = assemble("j", "j", &topic).unwrap_err();
        assert_eq!(key, "j/split/t-1");
        assert!(matches!(e, StateError::ChecksumMismatch { .. }), "{e}");

        // an edited checkpoint id in every record
        let topic: BTreeMap<String, Option<Vec<u8>>> = records
            .into_iter()
            .map(|(k, v)| {
                let edited = String::from_utf8(v)
                    .unwrap()
                    .replace("\"checkpoint_id\":1", "\"checkpoint_id\":2");
                (k, Some(edited.into_bytes()))
            })
            .collect();
        let (_, e) = assemble("j", "j", &topic).unwrap_err();
        assert!(matches!(e, StateError::ChecksumMismatch { .. }), "{e}");
    }

    #[test]
    fn keys_of_other_jobs_are_not_owned() {
        assert!(is_owned("j", "j/checkpoint"));
        assert!(is_owned("j", "j/split/t-0"));
        assert!(!is_owned("j", "j2/checkpoint"));
        assert!(!is_owned("j", "j/x/checkpoint"));
    }
}
