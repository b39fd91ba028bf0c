//! The events of a periodic source (the seed's `SourceSupplier`): given inline in the config, or
//! read from a TOML or JSON file that is re-read every discovery interval. Events are validated
//! here: unique ids, positive periods, and no more than the configured limit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schedule::Schedule;

/// The default cap on events: the original warns that scheduling "tons of events" is a misuse.
pub const DEFAULT_MAX_EVENTS: usize = 1000;

/// One event as validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDef {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The value: JSON, whose text may use `{id}`, `{seq}`, `{scheduled}` and `{scheduled_ms}`.
    pub value: Value,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    pub schedule: Schedule,
    /// Fire this many times, then end (bounded runs); `None` for forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// An event as written in a config or a supplier file.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEvent {
    /// Unique id (also the split id, and the `tidegate-event-id` header).
    pub id: String,
    /// Key of each record (the same templates as the value).
    pub key: Option<String>,
    /// Value of each record: any JSON (a table, text, …); text may use `{id}`, `{seq}` (the
    /// fire's number from 0), `{scheduled}` (RFC 3339) and `{scheduled_ms}`.
    pub value: Value,
    /// Headers of each record.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `{ wall_time = true, initial_delay = "1s", period = "10s" }`.
    pub schedule: RawSchedule,
    /// Fire this many times, then stop.
    pub count: Option<u64>,
}

/// `schedule` of an event.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// Fire on the epoch-aligned grid (true) or at a fixed rate from assignment (false, default).
    #[serde(default)]
    pub wall_time: bool,
    /// Wall time: the offset within the period ("1s" with a 10 s period fires at xx:01, xx:11…);
    /// fixed rate: the delay before the first fire.
    #[serde(default)]
    pub initial_delay: Option<String>,
    /// Time between fires, e.g. "250ms", "1s", "10m".
    pub period: String,
}

/// Validate raw events; errors are `(key, message)` with `at` as the key prefix.
pub fn validate_events(raw: Vec<RawEvent>, at: &str, max_events: usize) -> Result<Vec<EventDef>, (String, String)> {
    if raw.len() > max_events {
        return Err((
            at.to_string(),
            format!(
                "{} events is more than the limit of {max_events} (max_events); scheduling many events is a misuse: \
                 redesign the event flow, or raise the limit knowingly",
                raw.len()
            ),
        ));
    }
    let mut ids = BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, e) in raw.into_iter().enumerate() {
        let key = format!("{at}[{i}]");
        if e.id.trim().is_empty() {
            return Err((format!("{key}.id"), "must not be empty".into()));
        }
        if !ids.insert(e.id.clone()) {
            return Err((format!("{key}.id"), format!("{:?} is used twice", e.id)));
        }
        let period = crate::connector::values::parse_duration(&e.schedule.period)
            .map_err(|m| (format!("{key}.schedule.period"), m))?;
        if period.is_zero() {
            return Err((format!("{key}.schedule.period"), "must be more than 0".into()));
        }
        let delay = match &e.schedule.initial_delay {
            Some(d) => {
                crate::connector::values::parse_duration(d).map_err(|m| (format!("{key}.schedule.initial_delay"), m))?
            }
            None => std::time::Duration::ZERO,
        };
        if e.count == Some(0) {
            return Err((
                format!("{key}.count"),
                "must be at least 1 (omit it to fire forever)".into(),
            ));
        }
        out.push(EventDef {
            id: e.id,
            key: e.key,
            value: e.value,
            headers: e.headers,
            schedule: Schedule {
                wall_time: e.schedule.wall_time,
                initial_delay_ms: delay.as_millis() as i64,
                period_ms: (period.as_millis() as i64).max(1),
            },
            count: e.count,
        });
    }
    Ok(out)
}

/// Where events come from.
#[derive(Debug, Clone)]
pub enum Supplier {
    Inline(Vec<EventDef>),
    File { path: PathBuf, max_events: usize },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileShape {
    Table { events: Vec<RawEvent> },
    List(Vec<RawEvent>),
}

impl Supplier {
    /// The current events (a file is read again each time).
    pub fn events(&self) -> Result<Vec<EventDef>, String> {
        match self {
            Supplier::Inline(events) => Ok(events.clone()),
            Supplier::File { path, max_events } => read_file(path, *max_events),
        }
    }

    /// Whether the events can change while running.
    pub fn is_static(&self) -> bool {
        matches!(self, Supplier::Inline(_))
    }
}

/// Read a TOML (`[[events]]`) or JSON (a list, or `{"events": [...]}`) supplier file.
pub fn read_file(path: &Path, max_events: usize) -> Result<Vec<EventDef>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let is_json = path.extension().and_then(|e| e.to_str()) == Some("json");
    let shape: FileShape = if is_json {
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        ::config::Config::builder()
            .add_source(::config::File::from_str(&text, ::config::FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| format!("{}: {e}", path.display()))?
    };
    let raw = match shape {
        FileShape::Table { events } | FileShape::List(events) => events,
    };
    validate_events(raw, &format!("{}: events", path.display()), max_events).map_err(|(k, m)| format!("{k}: {m}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(id: &str, period: &str) -> RawEvent {
        RawEvent {
            id: id.into(),
            key: None,
            value: Value::Null,
            headers: BTreeMap::new(),
            schedule: RawSchedule {
                wall_time: true,
                initial_delay: None,
                period: period.into(),
            },
            count: None,
        }
    }

    #[test]
    fn validation_names_the_event() {
        assert!(validate_events(vec![raw("a", "1s"), raw("b", "250ms")], "source.events", 10).is_ok());
        let (k, _) = validate_events(vec![raw("a", "1s"), raw("a", "2s")], "source.events", 10).unwrap_err();
        assert_eq!(k, "source.events[1].id");
        let (k, _) = validate_events(vec![raw("a", "0")], "source.events", 10).unwrap_err();
        assert_eq!(k, "source.events[0].schedule.period");
        let (k, m) = validate_events(vec![raw("a", "1s"), raw("b", "1s")], "source.events", 1).unwrap_err();
        assert_eq!(k, "source.events");
        assert!(m.contains("limit of 1"), "{m}");
    }

    #[test]
    fn files_in_toml_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("events.toml");
        std::fs::write(
            &toml,
            "[[events]]\nid = \"tick\"\nvalue = { n = 1 }\nschedule = { wall_time = true, period = \"1s\" }\n",
        )
        .unwrap();
        let events = read_file(&toml, 10).unwrap();
        assert_eq!(events[0].id, "tick");
        assert_eq!(events[0].schedule.period_ms, 1000);
        let json = dir.path().join("events.json");
        std::fs::write(&json, r#"[{"id": "x", "value": "v", "schedule": {"period": "300ms"}}]"#).unwrap();
        assert_eq!(read_file(&json, 10).unwrap()[0].schedule.period_ms, 300);
        std::fs::write(&json, "[{").unwrap();
        assert!(read_file(&json, 10).is_err());
        assert!(read_file(&dir.path().join("missing.toml"), 10).is_err());
    }
}
