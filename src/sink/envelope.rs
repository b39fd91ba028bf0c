//! The JSON-lines envelope of the file and stdout sinks:
//! `{"topic","partition","offset","timestamp","key","value","headers"}`.
//!
//! `value` is the JSON for `json` (its own bytes, as written, when on one line; else parsed and
//! written compactly), the decoded Avro as JSON for `avro`, a string for `string`, base64 for
//! `bytes`. Keys are their decoded JSON when the source decodes keys (`key_format`); keys and
//! header values are otherwise strings when they are UTF-8, else `{"base64": "…"}`; a header
//! name that repeats maps to an array of its values.

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

/// Write one record as a JSON line.
///
/// Written field by field rather than derived: a JSON value is copied as its producer wrote it
/// (the decoder has checked it in full), which serde cannot splice into its output without
/// parsing it again; only a value spread over several lines is parsed and written compactly.
pub fn write_line<W: Write>(out: &mut W, record: &Record) -> std::io::Result<()> {
    out.write_all(b"{\"topic\":")?;
    json(out, &record.topic.as_deref())?;
    out.write_all(b",\"partition\":")?;
    json(out, &record.partition)?;
    out.write_all(b",\"offset\":")?;
    json(out, &record.offset)?;
    out.write_all(b",\"timestamp\":")?;
    json(out, &record.timestamp)?;
    out.write_all(b",\"key\":")?;
    match &record.decoded_key {
        Some(decoded) => json(out, decoded)?,
        None => json(out, &record.key.as_deref().map(Binary))?,
    }
    out.write_all(b",\"value\":")?;
    match (&record.value, record.format, &record.dead_letter) {
        (Some(bytes), ValueFormat::Json, None) if memchr::memchr2(b'\n', b'\r', bytes).is_none() => {
            out.write_all(bytes)?
        }
        (Some(bytes), ValueFormat::Json, None) => match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(value) => json(out, &value)?,
            // not JSON after all (it was never decoded): as bytes, like any other value
            Err(_) => base64_string(out, bytes)?,
        },
        (Some(bytes), ValueFormat::Bytes, _) if record.decoded.is_none() => base64_string(out, bytes)?,
        _ => json(out, &Value(record))?,
    }
    if record.headers.is_empty() {
        out.write_all(b",\"headers\":{}")?;
    } else {
        out.write_all(b",\"headers\":")?;
        json(out, &Headers(&record.headers))?;
    }
    if let Some(error) = &record.dead_letter {
        out.write_all(b",\"error\":")?;
        json(out, error)?;
    }
    out.write_all(b"}\n")
}

/// `bytes` as a JSON string of their base64, encoded a slice at a time on the stack: no string per
/// record (base64's alphabet needs no JSON escapes).
fn base64_string<W: Write>(out: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    // 768 input bytes, a multiple of 3, encode to exactly 1,024 without padding
    let mut buf = [0u8; 1024];
    out.write_all(b"\"")?;
    for chunk in bytes.chunks(768) {
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(chunk, &mut buf)
            .map_err(std::io::Error::other)?;
        out.write_all(&buf[..n])?;
    }
    out.write_all(b"\"")
}

/// One JSON value; serde_json hands back the writer's own error (a closed pipe stays a BrokenPipe).
fn json<W: Write, T: Serialize + ?Sized>(out: &mut W, value: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
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
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(br#"{"a":1}"#)),
            decoded: Some(json!({"a": 1})),
            format: ValueFormat::Json,
            decoded_key: None,
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
        // a JSON value is copied as written (order and spacing kept), one on several lines compacted
        r.decoded = None;
        r.value = Some(Bytes::from_static(br#"{"z": 1, "a": [1.50, "x"]}"#));
        let mut buf = Vec::new();
        write_line(&mut buf, &r).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains(r#","value":{"z": 1, "a": [1.50, "x"]},"headers":"#),
            "{text}"
        );
        r.value = Some(Bytes::from_static(b"{\n  \"z\": 1,\r\n  \"a\": \"x\"\n}"));
        let mut buf = Vec::new();
        write_line(&mut buf, &r).unwrap();
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(line(&r)["value"], json!({"z": 1, "a": "x"}));
        r.format = ValueFormat::String;
        r.value = Some(Bytes::from_static(b"hello"));
        assert_eq!(line(&r)["value"], json!("hello"));
        r.format = ValueFormat::Bytes;
        r.value = Some(Bytes::from_static(&[0, 1, 2]));
        r.key = Some(Bytes::from_static(&[0xfe]));
        let l = line(&r);
        assert_eq!(l["value"], json!("AAEC"));
        assert_eq!(l["key"], json!({"base64": "/g=="}));
        // a decoded key (key_format) is printed as its JSON
        r.decoded_key = Some(json!({"seq": 3}));
        assert_eq!(line(&r)["key"], json!({"seq": 3}));
        r.decoded_key = None;
        // longer than one stack slice of the encoder, and not a multiple of 3
        let long: Vec<u8> = (0..2_000u32).map(|i| (i * 7 % 256) as u8).collect();
        r.value = Some(long.clone().into());
        assert_eq!(
            line(&r)["value"],
            json!(base64::engine::general_purpose::STANDARD.encode(&long))
        );
        r.value = None;
        assert_eq!(line(&r)["value"], json!(null));
        r.headers.clear();
        assert_eq!(line(&r)["headers"], json!({}));
    }
}
