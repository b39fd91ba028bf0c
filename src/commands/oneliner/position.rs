//! The `--from` and `--to` of `tidegate replay`: `earliest`, `latest`, `none`, a time (RFC 3339, a
//! zone-less UTC time or date, `@` epoch milliseconds, or relative to now like `-1h`), an offset
//! for every partition, or explicit `TOPIC:PARTITION=OFFSET` lists, turned into the config's `starting_offsets` and
//! `stopping_offsets` values. Relative times are resolved here, once, so the printed config
//! names an absolute time and replays the same records whenever it runs.

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use crate::connector::values::parse_time;
use crate::error::Error;

/// A `--from` or `--to` as the config writes it, with a note for the printed config when a
/// relative time was resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Position {
    pub value: Value,
    pub note: Option<String>,
}

/// Which flag, for the keywords it takes and the error it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    From,
    To,
}

impl Bound {
    fn flag(self) -> &'static str {
        match self {
            Bound::From => "--from",
            Bound::To => "--to",
        }
    }

    fn keywords(self) -> &'static [&'static str] {
        match self {
            Bound::From => &["earliest", "latest"],
            Bound::To => &["latest", "none"],
        }
    }
}

/// What either flag takes, for error messages.
fn expected(bound: Bound) -> String {
    format!(
        "{}, a time (2026-11-27T09:30:00-05:00, 2026-11-27T16:00 in UTC, 2026-11-27, -1h, -30m, -2d, now, \
         @<epoch ms>), an OFFSET for every partition or TOPIC:PARTITION=OFFSET[,…]",
        bound.keywords().join(", ")
    )
}

/// Parse `text` given to `bound`'s flag, `now` being the start of the run; an error names the flag.
pub fn parse(bound: Bound, text: &str, now: DateTime<Utc>) -> Result<Position, Error> {
    parse_text(bound, text, now).map_err(|m| Error::config(bound.flag(), m))
}

fn parse_text(bound: Bound, text: &str, now: DateTime<Utc>) -> Result<Position, String> {
    let flag = bound.flag();
    let t = text.trim();
    let plain = |value: Value| Position { value, note: None };
    if bound.keywords().contains(&t) {
        return Ok(plain(Value::String(t.to_string())));
    }
    if t.contains('=') {
        return offsets(t).map(|o| plain(json!({ "offsets": o })));
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        // an offset in every partition, as kcat's `-o N` (epoch milliseconds are `@N`)
        let offset: i64 = t.parse().map_err(|_| format!("{t:?} is too large for an offset"))?;
        return Ok(plain(json!({ "offset": offset })));
    }
    let ms = time(t, now).map_err(|why| format!("{text:?}: {why}; expected {}", expected(bound)))?;
    let resolved = rfc3339(ms);
    let relative = t == "now" || t.starts_with('-');
    let note = relative.then(|| format!("{flag} {t} resolved to {resolved} at start"));
    Ok(Position {
        value: json!({ "timestamp": resolved }),
        note,
    })
}

/// Epoch milliseconds as RFC 3339 in UTC, with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// A time as epoch milliseconds: `now`, `-DURATION` before now, `@MS`, RFC 3339, or a zone-less
/// date-time or date read as UTC.
fn time(t: &str, now: DateTime<Utc>) -> Result<i64, String> {
    if t == "now" {
        return Ok(now.timestamp_millis());
    }
    if let Some(ago) = t.strip_prefix('-') {
        let d = humantime::parse_duration(ago.trim())
            .map_err(|e| format!("{ago:?} is not a duration like 1h, 30m or 2d ({e})"))?;
        let d = chrono::Duration::from_std(d).map_err(|_| format!("{ago:?} is too long"))?;
        return now
            .checked_sub_signed(d)
            .map(|t| t.timestamp_millis())
            .ok_or_else(|| format!("{ago:?} reaches before any time there is"));
    }
    if let Some(ms) = t.strip_prefix('@') {
        return ms
            .parse::<i64>()
            .map_err(|_| format!("{ms:?} is not epoch milliseconds"));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(t, format) {
            return Ok(naive.and_utc().timestamp_millis());
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return Ok(date
            .and_hms_opt(0, 0, 0)
            .map(|d| d.and_utc().timestamp_millis())
            .unwrap_or_default());
    }
    // RFC 3339 without seconds (`2026-11-27T09:30-05:00`, `…T16:00Z`)
    for format in ["%Y-%m-%dT%H:%M%:z", "%Y-%m-%dT%H:%M%#z"] {
        if let Ok(t) = DateTime::parse_from_str(t, format) {
            return Ok(t.timestamp_millis());
        }
    }
    if let Some(utc) = t.strip_suffix('Z').or_else(|| t.strip_suffix('z')) {
        if let Ok(naive) = NaiveDateTime::parse_from_str(utc, "%Y-%m-%dT%H:%M") {
            return Ok(naive.and_utc().timestamp_millis());
        }
    }
    parse_time(t).map_err(|_| "not a time".to_string())
}

/// `t:0=42,t:1=7` as the config's `{ "t:0" = 42, "t:1" = 7 }`.
fn offsets(t: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for entry in t.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |why: &str| format!("{entry:?}: {why}; offsets are TOPIC:PARTITION=OFFSET[,…]");
        let (tp, offset) = entry.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let (topic, partition) = tp.trim().rsplit_once(':').ok_or_else(|| bad("no `:PARTITION`"))?;
        let partition: u32 = partition
            .trim()
            .parse()
            .map_err(|_| bad("the partition is not a number"))?;
        let offset: u64 = offset
            .trim()
            .parse()
            .map_err(|_| bad("the offset is not a number (>= 0)"))?;
        if topic.is_empty() {
            return Err(bad("no topic"));
        }
        out.insert(format!("{topic}:{partition}"), Value::from(offset));
    }
    if out.is_empty() {
        return Err("no offsets given".to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-27T16:30:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn ts(bound: Bound, text: &str) -> Value {
        parse(bound, text, now()).unwrap().value
    }

    fn error(bound: Bound, text: &str) -> String {
        parse(bound, text, now()).unwrap_err().to_string()
    }

    #[test]
    fn keywords_belong_to_their_flag() {
        assert_eq!(ts(Bound::From, "earliest"), json!("earliest"));
        assert_eq!(ts(Bound::To, "none"), json!("none"));
        assert_eq!(ts(Bound::To, "latest"), json!("latest"));
        let e = error(Bound::To, "earliest");
        assert!(
            e.starts_with("invalid config: --to: \"earliest\": not a time; expected latest, none"),
            "{e}"
        );
        let e = error(Bound::From, "none");
        assert!(
            e.starts_with("invalid config: --from: \"none\": not a time; expected earliest, latest"),
            "{e}"
        );
    }

    #[test]
    fn times_with_a_zone_but_no_seconds_and_huge_spans() {
        let now = DateTime::parse_from_rfc3339("2026-11-27T21:00:00Z").unwrap().to_utc();
        let at = |t: &str| time(t, now);
        let close = DateTime::parse_from_rfc3339("2026-11-27T14:30:00Z")
            .unwrap()
            .timestamp_millis();
        assert_eq!(at("2026-11-27T09:30-05:00"), Ok(close));
        assert_eq!(at("2026-11-27T14:30Z"), Ok(close));
        assert_eq!(at("2026-11-27T14:30+00:00"), Ok(close));
        // a span before any time there is: an error, not a panic
        assert!(at("-1000000y").is_err(), "{:?}", at("-1000000y"));
    }

    #[test]
    fn relative_times_resolve_against_now_and_say_so() {
        let p = parse(Bound::From, "-1h", now()).unwrap();
        assert_eq!(p.value, json!({ "timestamp": "2026-11-27T15:30:00.000Z" }));
        assert_eq!(
            p.note.as_deref(),
            Some("--from -1h resolved to 2026-11-27T15:30:00.000Z at start")
        );
        assert_eq!(
            ts(Bound::From, "-30m"),
            json!({ "timestamp": "2026-11-27T16:00:00.000Z" })
        );
        assert_eq!(
            ts(Bound::From, "-2d"),
            json!({ "timestamp": "2026-11-25T16:30:00.000Z" })
        );
        assert_eq!(
            ts(Bound::To, "-1h30m"),
            json!({ "timestamp": "2026-11-27T15:00:00.000Z" })
        );
        assert_eq!(ts(Bound::To, "now"), json!({ "timestamp": "2026-11-27T16:30:00.000Z" }));
    }

    #[test]
    fn absolute_times_are_utc_without_a_zone_and_keep_a_given_zone() {
        let p = parse(Bound::To, "2026-11-27T16:00", now()).unwrap();
        assert_eq!(p.value, json!({ "timestamp": "2026-11-27T16:00:00.000Z" }));
        assert_eq!(p.note, None);
        assert_eq!(
            ts(Bound::From, "2026-11-27 09:30:15"),
            json!({ "timestamp": "2026-11-27T09:30:15.000Z" })
        );
        assert_eq!(
            ts(Bound::From, "2026-11-27"),
            json!({ "timestamp": "2026-11-27T00:00:00.000Z" })
        );
        assert_eq!(
            ts(Bound::From, "2026-11-27T09:30:00-05:00"),
            json!({ "timestamp": "2026-11-27T14:30:00.000Z" })
        );
        assert_eq!(
            ts(Bound::From, "@1000"),
            json!({ "timestamp": "1970-01-01T00:00:01.000Z" })
        );
    }

    #[test]
    fn a_bare_number_is_an_offset_in_every_partition() {
        assert_eq!(ts(Bound::From, "42"), json!({ "offset": 42 }));
        assert_eq!(ts(Bound::To, "0"), json!({ "offset": 0 }));
    }

    #[test]
    fn offsets_name_their_partitions() {
        assert_eq!(
            ts(Bound::From, "trades:0=5, trades:1=7"),
            json!({ "offsets": { "trades:0": 5, "trades:1": 7 } })
        );
        let e = error(Bound::To, "trades=5");
        assert!(e.contains("--to: \"trades=5\": no `:PARTITION`"), "{e}");
        let e = error(Bound::From, "trades:0=-1");
        assert!(e.contains("--from: \"trades:0=-1\": the offset is not a number"), "{e}");
    }

    #[test]
    fn bad_input_names_the_flag() {
        let e = error(Bound::From, "yesterday");
        assert!(
            e.starts_with("invalid config: --from: \"yesterday\": not a time; expected earliest, latest, a time"),
            "{e}"
        );
        let e = error(Bound::From, "-1 fortnight");
        assert!(
            e.starts_with("invalid config: --from: \"-1 fortnight\": \"1 fortnight\" is not a duration"),
            "{e}"
        );
        let e = error(Bound::To, "99999999999999999999");
        assert!(
            e.contains("--to: \"99999999999999999999\" is too large for an offset"),
            "{e}"
        );
    }
}
