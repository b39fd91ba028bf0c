//! The vocabulary of config values every connector's validation shares: subtrees deserialized
//! with the failing key named, durations, times, keywords, counts, one-entry tables and
//! librdkafka property maps. Each helper returns an [`Error::Config`] naming the key.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::secret::SecretRef;
use crate::error::{Error, Result};

/// Deserialize a subtree, naming the exact key on error (`prefix` is the subtree's own path).
/// Where text is expected, a number or a boolean is taken as its text (`--set job.name=123`,
/// `--set metrics.listen=19464`).
pub fn typed<T: DeserializeOwned>(prefix: &str, mut value: Value) -> Result<T> {
    for _ in 0..64 {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(t) => return Ok(t),
            Err(e) if e.inner().to_string().contains("expected a string") => {
                let Some(spot) = value_at(&mut value, e.path()) else {
                    return Err(config_error(prefix, e));
                };
                match spot {
                    Value::Number(n) => *spot = Value::String(n.to_string()),
                    Value::Bool(b) => *spot = Value::String(b.to_string()),
                    _ => return Err(config_error(prefix, e)),
                }
            }
            Err(e) => return Err(config_error(prefix, e)),
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| config_error(prefix, e))
}

/// The value a deserialization error's path points at.
fn value_at<'a>(value: &'a mut Value, path: &serde_path_to_error::Path) -> Option<&'a mut Value> {
    use serde_path_to_error::Segment;
    let mut node = value;
    for segment in path.iter() {
        node = match segment {
            Segment::Map { key } => node.get_mut(key.as_str())?,
            Segment::Seq { index } => node.get_mut(*index)?,
            _ => return None,
        };
    }
    Some(node)
}

/// A deserialization error as a config error naming the key.
fn config_error(prefix: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    let mut key = if path == "." || path.is_empty() {
        prefix.to_string()
    } else if prefix.is_empty() {
        path
    } else {
        format!("{prefix}.{path}")
    };
    // an unknown or missing field is reported on its table; name the field itself
    let named = inner
        .strip_prefix("unknown field `")
        .or_else(|| inner.strip_prefix("missing field `"))
        .and_then(|r| r.split('`').next());
    if let Some(field) = named {
        if key.rsplit('.').next() != Some(field) {
            key = if key.is_empty() {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
    }
    let message = super::humane::humane(&key, &inner);
    Error::config(key, message)
}

/// Parse a human duration ("250ms", "5s", "10m", "1h 30m", or "0"); negative values are refused.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; a duration is like \"250ms\", \"5s\" or \"10m\""
        ));
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{text:?} is not a duration like \"250ms\", \"5s\" or \"10m\" ({e})"))
}

/// A duration at `key`.
pub fn duration_at(key: &str, text: &str) -> Result<Duration> {
    parse_duration(text).map_err(|m| Error::config(key, m))
}

/// An optional duration at `key`.
pub fn optional_duration(key: &str, text: Option<&str>) -> Result<Option<Duration>> {
    text.map(|t| duration_at(key, t)).transpose()
}

/// Epoch milliseconds, or an RFC 3339 time, as epoch milliseconds.
pub fn parse_time(s: &str) -> std::result::Result<i64, String> {
    if let Ok(ms) = s.trim().parse::<i64>() {
        return Ok(ms);
    }
    let text = s.trim();
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            // a local time without its zone is the usual slip: say so rather than chrono's words
            let local = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .any(|f| chrono::NaiveDateTime::parse_from_str(text, f).is_ok());
            if local {
                format!("{s:?} has no time zone: add one, like {text}Z (UTC) or {text}-05:00")
            } else {
                format!("{s:?} is not an RFC 3339 time (like 2026-11-27T09:30:00-05:00) or epoch milliseconds: {e}")
            }
        })
}

/// A time at `key`: RFC 3339 text or epoch milliseconds.
pub fn time_value(key: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| Error::config(key, "must be epoch milliseconds")),
        Value::String(s) => parse_time(s).map_err(|e| Error::config(key, e)),
        other => Err(Error::config(
            key,
            format!("must be RFC 3339 text or epoch milliseconds, not {other}"),
        )),
    }
}

/// A count of at least 1 at `key`.
pub fn positive(key: &str, n: i64) -> Result<usize> {
    if n < 1 {
        return Err(Error::config(key, format!("must be at least 1, not {n}")));
    }
    Ok(n as usize)
}

/// One of a fixed set of words at `key` (`default` when absent): `is "a", "b" or "c", not "x"`.
pub fn keyword<T: Copy>(key: &str, text: Option<&str>, default: T, choices: &[(&str, T)]) -> Result<T> {
    let Some(text) = text else {
        return Ok(default);
    };
    if let Some((_, value)) = choices.iter().find(|(name, _)| *name == text) {
        return Ok(*value);
    }
    Err(Error::config(key, format!("is {}, not {text:?}", one_of(choices))))
}

/// `"a", "b" or "c"` for the names of `choices`.
pub fn one_of<T>(choices: &[(&str, T)]) -> String {
    let names: Vec<String> = choices.iter().map(|(name, _)| format!("{name:?}")).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The single key of a one-entry table like `{ timestamp = … }`.
pub fn single_entry<'a>(key: &str, v: &'a Value, expected: &str) -> Result<(&'a str, &'a Value)> {
    match v.as_object() {
        Some(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().expect("one entry");
            Ok((k.as_str(), v))
        }
        _ => Err(Error::config(key, format!("must be {expected}"))),
    }
}

/// A librdkafka property value: text, a number, a boolean, or a secret kept outside the config
/// (`{ file = "…" }` or `{ env = "…" }`, see [`SecretRef`]).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Secret(SecretRef),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Int(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Bool(b) => write!(f, "{b}"),
            PropertyValue::Secret(SecretRef::File { file }) => write!(f, "{{ file = {:?} }}", file.display()),
            PropertyValue::Secret(SecretRef::Env { env }) => write!(f, "{{ env = {env:?} }}"),
        }
    }
}

/// librdkafka properties as the client takes them: every value as text, secrets read from their
/// file or variable (an error names `section.properties."key"`).
pub fn properties(section: &str, map: BTreeMap<String, PropertyValue>) -> Result<BTreeMap<String, String>> {
    map.into_iter()
        .map(|(k, v)| {
            let value = match &v {
                PropertyValue::Secret(secret) => {
                    // shown as `***` wherever properties are, whatever its name
                    crate::client::mark_secret(&k);
                    secret.resolve(&format!("{section}.properties.\"{k}\""))?
                }
                other => other.to_string(),
            };
            Ok((k, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_name_the_choices_and_the_mistake() {
        let choices = [("fail", 1), ("skip", 2), ("dead_letter", 3)];
        assert_eq!(keyword("k", None, 0, &choices).unwrap(), 0);
        assert_eq!(keyword("k", Some("skip"), 0, &choices).unwrap(), 2);
        let e = keyword("source.decode_errors", Some("ignore"), 0, &choices).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid config: source.decode_errors: is \"fail\", \"skip\" or \"dead_letter\", not \"ignore\""
        );
    }

    #[test]
    fn durations_refuse_negative_and_garbage() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("soon").is_err());
    }
}
