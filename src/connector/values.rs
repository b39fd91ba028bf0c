//! The vocabulary of config values every connector's validation shares: subtrees deserialized
//! with the failing key named, durations, times, keywords, counts, one-entry tables and
//! librdkafka property maps. Each helper returns an [`Error::Config`] naming the key.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

/// Deserialize a subtree, naming the exact key on error (`prefix` is the subtree's own path).
pub fn typed<T: DeserializeOwned>(prefix: &str, value: Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
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
        Error::config(key, inner)
    })
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
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{s:?} is not an RFC 3339 time or epoch milliseconds: {e}"))
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

/// A librdkafka property value: text, a number or a boolean.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Int(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// librdkafka properties as the client takes them: every value as text.
pub fn properties(map: BTreeMap<String, PropertyValue>) -> BTreeMap<String, String> {
    map.into_iter().map(|(k, v)| (k, v.to_string())).collect()
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
