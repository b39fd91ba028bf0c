//! The JSON-lines envelope of the file and stdout sinks:
//! `{"topic","partition","offset","timestamp","key","value","headers"}`.
//!
//! `value` is the parsed JSON for `json`, the decoded Avro as JSON for `avro`, a string for
//! `string`, base64 for `bytes`. Keys and header values are strings when they are UTF-8, else
//! `{"base64": "…"}`; a header name that repeats maps to an array of its values.

use std::io::Write;

use base64::Engine;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::record::{Header, Record, ValueFormat};

struct Binary<'a>(&'a [u8]);

impl Serialize for Binary<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("base64", &base64::engine::general_purpose::STANDARD.encode(self.0))?;
                m.end()
            }
        }
    }
}

struct Value<'a>(&'a Record);

impl Serialize for Value<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        if let Some(decoded) = &r.decoded {
            return decoded.serialize(s);
        }
        match (&r.value, r.format) {
            (None, _) => s.serialize_none(),
            (Some(bytes), ValueFormat::String) => Binary(bytes).serialize(s),
            (Some(bytes), _) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }
}

struct HeaderValue<'a>(&'a Option<Vec<u8>>);

impl Serialize for HeaderValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => Binary(v).serialize(s),
            None => s.serialize_none(),
        }
    }
}

struct Headers<'a>(&'a [Header]);

impl Serialize for Headers<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let mut seen: Vec<&str> = Vec::new();
        for h in self.0 {
            if seen.contains(&h.key.as_str()) {
                continue;
            }
            seen.push(&h.key);
            let same: Vec<HeaderValue<'_>> = self
                .0
                .iter()
                .filter(|o| o.key == h.key)
                .map(|o| HeaderValue(&o.value))
                .collect();
            if same.len() == 1 {
                m.serialize_entry(&h.key, &same[0])?;
            } else {
                m.serialize_entry(&h.key, &same)?;
            }
        }
        m.end()
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    topic: Option<&'a str>,
    partition: Option<i32>,
    offset: Option<i64>,
    timestamp: Option<i64>,
    key: Option<Binary<'a>>,
    value: Value<'a>,
    headers: Headers<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// Write one record as a JSON line.
pub fn write_line<W: Write>(out: &mut W, record: &Record) -> std::io::Result<()> {
    let envelope = Envelope {
        topic: record.topic.as_deref(),
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        key: record.key.as_deref().map(Binary),
        value: Value(record),
        headers: Headers(&record.headers),
        error: record.dead_letter.as_deref(),
    };
    // serde_json hands back the writer's own error (a closed pipe stays a BrokenPipe)
    serde_json::to_writer(&mut *out, &envelope).map_err(std::io::Error::from)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn line(r: &Record) -> serde_json::Value {
        let mut buf = Vec::new();
        write_line(&mut buf, r).unwrap();
        assert!(buf.ends_with(b"\n"));
        serde_json::from_slice(&buf).unwrap()
    }

    #[test]
    fn json_string_and_bytes_values() {
        let mut r = Record {
            topic: Some(Arc::from("t")),
            partition: Some(1),
            offset: Some(7),
            timestamp: Some(99),
            key: Some(b"k".to_vec()),
            value: Some(br#"{"a":1}"#.to_vec()),
            decoded: Some(json!({"a": 1})),
            format: ValueFormat::Json,
            headers: vec![
                Header {
                    key: "h".into(),
                    value: Some(b"x".to_vec()),
                },
                Header {
                    key: "dup".into(),
                    value: Some(b"1".to_vec()),
                },
                Header {
                    key: "dup".into(),
                    value: None,
                },
                Header {
                    key: "bin".into(),
                    value: Some(vec![0xff]),
                },
            ],
            dead_letter: None,
        };
        assert_eq!(
            line(&r),
            json!({"topic": "t", "partition": 1, "offset": 7, "timestamp": 99, "key": "k", "value": {"a": 1},
                   "headers": {"h": "x", "dup": ["1", null], "bin": {"base64": "/w=="}}})
        );
        r.decoded = None;
        r.format = ValueFormat::String;
        r.value = Some(b"hello".to_vec());
        assert_eq!(line(&r)["value"], json!("hello"));
        r.format = ValueFormat::Bytes;
        r.value = Some(vec![0, 1, 2]);
        r.key = Some(vec![0xfe]);
        let l = line(&r);
        assert_eq!(l["value"], json!("AAEC"));
        assert_eq!(l["key"], json!({"base64": "/g=="}));
        r.value = None;
        assert_eq!(line(&r)["value"], json!(null));
    }
}
