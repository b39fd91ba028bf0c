//! Compiling the `fields` table of a datagen source into [`Gen`] generator functions; every
//! error names the field path.

use std::collections::BTreeMap;

use rand::distr::weighted::WeightedIndex;
use serde_json::Value;

use super::template::{FakeKind, Gen};

/// Compile the `fields` table of a datagen source; errors name the field path.
pub fn compile_fields(fields: &BTreeMap<String, Value>, path: &str) -> Result<Gen, (String, String)> {
    let mut out = Vec::with_capacity(fields.len());
    for (name, spec) in fields {
        out.push((name.clone(), compile(spec, &format!("{path}.{name}"))?));
    }
    Ok(Gen::Object(out))
}

fn err<T>(path: &str, message: impl Into<String>) -> Result<T, (String, String)> {
    Err((path.to_string(), message.into()))
}

fn num(v: Option<&Value>, path: &str, what: &str) -> Result<Option<f64>, (String, String)> {
    match v {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| (format!("{path}.{what}"), format!("must be a number, not {v}"))),
    }
}

fn int(v: Option<&Value>, path: &str, what: &str) -> Result<Option<i64>, (String, String)> {
    match v {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| (format!("{path}.{what}"), format!("must be an integer, not {v}"))),
    }
}

fn duration_ms(v: Option<&Value>, path: &str, what: &str) -> Result<i64, (String, String)> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => n.as_i64().filter(|x| *x >= 0).ok_or_else(|| {
            (
                format!("{path}.{what}"),
                "must be a non-negative number of milliseconds".into(),
            )
        }),
        Some(Value::String(s)) => crate::connector::values::parse_duration(s)
            .map(|d| d.as_millis() as i64)
            .map_err(|e| (format!("{path}.{what}"), e)),
        Some(other) => err(
            &format!("{path}.{what}"),
            format!("must be a duration like \"150ms\", not {other}"),
        ),
    }
}

const KINDS: &str = "value, sequence, uniform, normal, choice, uuid, timestamp, fake, object";
const KIND_NAMES: [&str; 9] = [
    "value",
    "sequence",
    "uniform",
    "normal",
    "choice",
    "uuid",
    "timestamp",
    "fake",
    "object",
];

/// The keys a generator takes beside its name, and inside its table (`None`: not a table).
fn keys_of(kind: &str) -> (&'static [&'static str], Option<&'static [&'static str]>) {
    match kind {
        "sequence" => (&[], Some(&["start", "step"])),
        "uniform" => (&["round"], Some(&["min", "max"])),
        "normal" => (&["round", "min", "max"], Some(&["mean", "stddev"])),
        "choice" => (&["weights"], None),
        "uuid" => (&[], Some(&[])),
        "timestamp" => (&[], Some(&["start", "step", "jitter", "format"])),
        _ => (&[], None), // value, fake, object: anything goes inside
    }
}

/// An unknown key: named, with the ones that are valid there.
fn unknown_key(at: &str, key: &str, valid: &[&str]) -> (String, String) {
    let valid = if valid.is_empty() {
        "none".to_string()
    } else {
        valid.join(", ")
    };
    (format!("{at}.{key}"), format!("unknown key; valid here: {valid}"))
}

/// Compile one generator spec, like `{ uniform = { min = 1, max = 9 } }`.
pub fn compile(spec: &Value, path: &str) -> Result<Gen, (String, String)> {
    let Value::Object(map) = spec else {
        return err(path, format!("must be a table naming a generator ({KINDS})"));
    };
    let kind_keys: Vec<&String> = map.keys().filter(|k| KIND_NAMES.contains(&k.as_str())).collect();
    if kind_keys.len() != 1 {
        let named = if kind_keys.is_empty() { "none" } else { "several" };
        return err(
            path,
            format!("must name exactly one generator ({KINDS}); it names {named}"),
        );
    }
    let kind = kind_keys[0].as_str();
    let (beside, inside) = keys_of(kind);
    if let Some(extra) = map.keys().find(|k| k.as_str() != kind && !beside.contains(&k.as_str())) {
        let valid: Vec<&str> = std::iter::once(kind).chain(beside.iter().copied()).collect();
        return Err(unknown_key(path, extra, &valid));
    }
    let round = int(map.get("round"), path, "round")?.map(|r| r.clamp(0, 12) as u32);
    let arg = &map[kind];
    let at = format!("{path}.{kind}");
    let args = arg.as_object();
    if let (Some(inside), Some(args)) = (inside, args) {
        if let Some(extra) = args.keys().find(|k| !inside.contains(&k.as_str())) {
            return Err(unknown_key(&at, extra, inside));
        }
    }
    let get = |k: &str| args.and_then(|a| a.get(k));
    Ok(match kind {
        "value" => Gen::Const(arg.clone()),
        "sequence" => Gen::Sequence {
            start: int(get("start"), &at, "start")?.unwrap_or(0),
            step: int(get("step"), &at, "step")?.unwrap_or(1),
        },
        "uniform" => {
            let (min, max) = (get("min"), get("max"));
            let (Some(lo), Some(hi)) = (min, max) else {
                return err(&at, "needs min and max");
            };
            if lo.is_i64() && hi.is_i64() && round.is_none() {
                let (lo, hi) = (lo.as_i64().unwrap_or(0), hi.as_i64().unwrap_or(0));
                if lo > hi {
                    return err(&at, "min must not exceed max");
                }
                Gen::UniformInt { min: lo, max: hi }
            } else {
                let lo = num(Some(lo), &at, "min")?.unwrap_or(0.0);
                let hi = num(Some(hi), &at, "max")?.unwrap_or(0.0);
                if lo >= hi {
                    return err(&at, "min must be below max");
                }
                Gen::UniformFloat {
                    min: lo,
                    max: hi,
                    round,
                }
            }
        }
        "normal" => {
            let mean = num(get("mean"), &at, "mean")?.ok_or_else(|| (at.clone(), "needs mean".to_string()))?;
            let stddev = num(get("stddev"), &at, "stddev")?.ok_or_else(|| (at.clone(), "needs stddev".to_string()))?;
            if !(stddev >= 0.0 && stddev.is_finite()) {
                return err(&format!("{at}.stddev"), "must be a non-negative number");
            }
            let (min, max) = (num(map.get("min"), path, "min")?, num(map.get("max"), path, "max")?);
            if let (Some(lo), Some(hi)) = (min, max) {
                if lo > hi {
                    return err(path, "min must not exceed max");
                }
            }
            Gen::Normal {
                mean,
                stddev,
                round,
                min,
                max,
            }
        }
        "choice" => {
            let Some(items) = arg.as_array().filter(|a| !a.is_empty()) else {
                return err(&at, "must be a non-empty list");
            };
            let weights = match map.get("weights") {
                None => None,
                Some(Value::Array(w)) if w.len() == items.len() => {
                    let w: Option<Vec<f64>> = w.iter().map(Value::as_f64).collect();
                    let w = w.ok_or_else(|| (format!("{path}.weights"), "must be numbers".to_string()))?;
                    Some(WeightedIndex::new(w).map_err(|_| {
                        (
                            format!("{path}.weights"),
                            "must be numbers of 0 or more, at least one of them above 0".to_string(),
                        )
                    })?)
                }
                Some(_) => {
                    return err(
                        &format!("{path}.weights"),
                        format!("must be a list of {} numbers", items.len()),
                    )
                }
            };
            Gen::Choice {
                items: items.clone(),
                weights,
            }
        }
        "uuid" => Gen::Uuid,
        "timestamp" => {
            let start_ms = match get("start") {
                Some(Value::String(s)) => {
                    crate::connector::values::parse_time(s).map_err(|e| (format!("{at}.start"), e))?
                }
                Some(v) if v.is_i64() => v.as_i64().unwrap_or(0),
                _ => {
                    return err(
                        &format!("{at}.start"),
                        "needs a start: RFC 3339 text or epoch milliseconds",
                    )
                }
            };
            let rfc3339 = match get("format").and_then(Value::as_str) {
                None | Some("rfc3339") => true,
                Some("epoch_millis") => false,
                Some(other) => {
                    return err(
                        &format!("{at}.format"),
                        format!("is rfc3339 or epoch_millis, not {other:?}"),
                    )
                }
            };
            Gen::Timestamp {
                start_ms,
                step_ms: duration_ms(get("step"), &at, "step")?,
                jitter_ms: duration_ms(get("jitter"), &at, "jitter")?,
                rfc3339,
            }
        }
        "fake" => {
            let name = arg.as_str().unwrap_or_default();
            match FakeKind::ALL.iter().find(|(n, _)| *n == name) {
                Some((_, k)) => Gen::Fake(*k),
                None => {
                    let names: Vec<&str> = FakeKind::ALL.iter().map(|(n, _)| *n).collect();
                    return err(&at, format!("is one of {}", names.join(", ")));
                }
            }
        }
        "object" => {
            let Some(fields) = args else {
                return err(&at, "must be a table of fields");
            };
            let fields: BTreeMap<String, Value> = fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            compile_fields(&fields, &at)?
        }
        other => return err(path, format!("unknown generator {other:?} (one of {KINDS})")),
    })
}
