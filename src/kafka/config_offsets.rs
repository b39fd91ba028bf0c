//! The `starting_offsets` and `stopping_offsets` of a Kafka source's config, as written, parsed
//! into [`StartingOffsets`] and [`StoppingOffsets`] (every error names its key).

use std::collections::BTreeMap;

use serde_json::Value;

use super::offsets::{parse_topic_partition, CommittedReset, StartingOffsets, StoppingOffsets};
use crate::connector::values::{keyword, one_of, single_entry, time_value};
use crate::error::{Error, Result};

fn offsets_map(key: &str, v: &Value) -> Result<BTreeMap<(String, i32), i64>> {
    let Value::Object(map) = v else {
        return Err(Error::config(key, "must be a table of \"topic:partition\" = offset"));
    };
    let mut out = BTreeMap::new();
    for (tp, o) in map {
        let entry = format!("{key}.\"{tp}\"");
        let parsed = parse_topic_partition(tp).ok_or_else(|| Error::config(&entry, "is not \"topic:partition\""))?;
        let offset = o
            .as_i64()
            .filter(|o| *o >= 0)
            .ok_or_else(|| Error::config(&entry, "must be an offset (>= 0)"))?;
        out.insert(parsed, offset);
    }
    Ok(out)
}

/// One offset for every partition (`{ offset = 42 }`).
fn offset(key: &str, v: &Value) -> Result<i64> {
    v.as_i64()
        .filter(|o| *o >= 0)
        .ok_or_else(|| Error::config(key, format!("must be an offset (>= 0), not {v}")))
}

pub(super) fn starting_offsets(v: Option<&Value>) -> Result<StartingOffsets> {
    const KEY: &str = "source.starting_offsets";
    const EXPECTED: &str = "\"earliest\", \"latest\", \"committed\", { committed = … }, { timestamp = … }, \
                            { offset = … } or { offsets = { … } }";
    let Some(v) = v else {
        return Ok(StartingOffsets::Earliest);
    };
    if let Some(s) = v.as_str() {
        return match s {
            "earliest" => Ok(StartingOffsets::Earliest),
            "latest" => Ok(StartingOffsets::Latest),
            "committed" => Ok(StartingOffsets::Committed {
                reset: CommittedReset::None,
            }),
            other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
        };
    }
    let (kind, arg) = single_entry(KEY, v, EXPECTED)?;
    let at = format!("{KEY}.{kind}");
    match kind {
        "timestamp" => Ok(StartingOffsets::Timestamp(time_value(&at, arg)?)),
        "offsets" => Ok(StartingOffsets::Specific(offsets_map(&at, arg)?)),
        "offset" => Ok(StartingOffsets::Offset(offset(&at, arg)?)),
        "committed" => {
            const RESETS: [(&str, CommittedReset); 3] = [
                ("earliest", CommittedReset::Earliest),
                ("latest", CommittedReset::Latest),
                ("none", CommittedReset::None),
            ];
            match arg.as_str() {
                Some(text) => Ok(StartingOffsets::Committed {
                    reset: keyword(&at, Some(text), CommittedReset::None, &RESETS)?,
                }),
                None => Err(Error::config(at, format!("is {}", one_of(&RESETS)))),
            }
        }
        other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
    }
}

pub(super) fn stopping_offsets(v: Option<&Value>) -> Result<StoppingOffsets> {
    const KEY: &str = "source.stopping_offsets";
    const EXPECTED: &str = "\"none\", \"latest\", { timestamp = … }, { offset = … } or { offsets = { … } }";
    let Some(v) = v else {
        return Ok(StoppingOffsets::None);
    };
    if let Some(s) = v.as_str() {
        return match s {
            "none" => Ok(StoppingOffsets::None),
            "latest" => Ok(StoppingOffsets::Latest),
            other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
        };
    }
    let (kind, arg) = single_entry(KEY, v, EXPECTED)?;
    let at = format!("{KEY}.{kind}");
    match kind {
        "timestamp" => Ok(StoppingOffsets::Timestamp(time_value(&at, arg)?)),
        "offsets" => Ok(StoppingOffsets::Specific(offsets_map(&at, arg)?)),
        "offset" => Ok(StoppingOffsets::Offset(offset(&at, arg)?)),
        other => Err(Error::config(KEY, format!("{other:?} is not one of {EXPECTED}"))),
    }
}
