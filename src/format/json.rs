//! The `json` format's decoders: the whole document, or only the top-level fields an end-of-stream
//! expression reads (the trading-day path, which allocates nothing per record once warm).

use serde_json::{Map, Value};

use super::codec::{DecodeError, ValueDecoder};
use super::json_scan::{scan_fields, Scan, Span};
use crate::record::ValueFormat;

/// `json`: one JSON document.
pub struct JsonDecoder;

impl ValueDecoder for JsonDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Json
    }
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<Value>, DecodeError> {
        serde_json::from_slice(bytes)
            .map(Some)
            .map_err(|e| DecodeError::Invalid(format!("not valid JSON: {e}")))
    }
}

/// `json` when nothing needs the whole value: the document is still checked in full (grammar and
/// UTF-8), but only the top-level fields the end-of-stream expression selects are built; the rest
/// is skipped without allocating. (Used when the expression only uses `value.<field>`, or there is
/// none: the JSON-lines envelope prints the value's own bytes, and the Kafka sink writes them.)
///
/// A document the scan (`format::json_scan`) answers for is decoded from the spans it lends, into
/// the map of the previous record when it came back through [`ValueDecoder::recycle`]; anything
/// else goes the way serde_json decides, so the result is serde_json's either way.
pub struct JsonFieldsDecoder {
    fields: Vec<String>,
    found: Vec<Option<Span>>,
    stack: Vec<u8>,
    spare: Option<Map<String, Value>>,
}

impl JsonFieldsDecoder {
    /// A decoder keeping only these top-level fields of each value.
    pub fn new(fields: Vec<String>) -> Self {
        JsonFieldsDecoder {
            found: vec![None; fields.len()],
            fields,
            stack: Vec::new(),
            spare: None,
        }
    }

    /// The selected fields from the spans of a scan, or `None` where serde_json must decide (a
    /// value it rejects, such as a number out of range or an escaped lone surrogate).
    fn build_from_spans(&mut self, bytes: &[u8]) -> Option<Value> {
        let mut map = self.spare.take().unwrap_or_default();
        for (field, span) in self.fields.iter().zip(&self.found) {
            let Some(span) = span.clone() else {
                map.remove(field);
                continue;
            };
            let raw = &bytes[span];
            // a string without escapes is its own text (its UTF-8 checked by the scan)
            let text = match raw {
                [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => Some(std::str::from_utf8(inner).ok()?),
                _ => None,
            };
            match (map.get_mut(field), text) {
                // the same field as a string again: refilled in place
                (Some(Value::String(s)), Some(text)) => {
                    s.clear();
                    s.push_str(text);
                }
                (slot, text) => {
                    let value = match text {
                        Some(text) => Value::String(text.to_owned()),
                        None => serde_json::from_slice(raw).ok()?,
                    };
                    match slot {
                        Some(slot) => *slot = value,
                        None => {
                            map.insert(field.clone(), value);
                        }
                    }
                }
            }
        }
        Some(Value::Object(map))
    }

    /// What serde_json makes of it: the selected fields of an object, else the whole value (an
    /// array, a number…) or the error, as [`JsonDecoder`] gives them.
    fn with_serde(&self, bytes: &[u8]) -> Result<Option<Value>, DecodeError> {
        use serde::de::DeserializeSeed;
        // serde_json checks the UTF-8 of the strings it builds, not of those it skips
        if let Err(e) = std::str::from_utf8(bytes) {
            return Err(DecodeError::Invalid(format!("not valid JSON: not UTF-8 ({e})")));
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        match SelectedFields(&self.fields)
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|_| v))
        {
            Ok(v) => Ok(Some(v)),
            Err(_) => JsonDecoder.decode(bytes),
        }
    }
}

struct SelectedFields<'f>(&'f [String]);

impl<'de> serde::de::DeserializeSeed<'de> for SelectedFields<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for SelectedFields<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if self.0.iter().any(|f| f == key.as_ref()) {
                out.insert(key.into_owned(), map.next_value()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(Value::Object(out))
    }
}

impl ValueDecoder for JsonFieldsDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Json
    }

    fn decode(&mut self, bytes: &[u8]) -> Result<Option<Value>, DecodeError> {
        self.found.iter_mut().for_each(|f| *f = None);
        if scan_fields(bytes, &self.fields, &mut self.found, &mut self.stack) == Scan::Object {
            if let Some(v) = self.build_from_spans(bytes) {
                return Ok(Some(v));
            }
        }
        self.with_serde(bytes)
    }

    fn recycle(&mut self, value: Value) {
        // only a map of the selected fields: not a whole document from the serde_json way
        if let Value::Object(map) = value {
            if map.keys().all(|k| self.fields.contains(k)) {
                self.spare = Some(map);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_decoder_keeps_only_the_selected_fields_and_still_validates() {
        let mut d = JsonFieldsDecoder::new(vec!["type".into(), "n".into()]);
        let v = d
            .decode(br#"{"type":"X","skip":{"deep":[1,2,{"a":"b\u00e9"}]},"n":3,"s":"t"}"#)
            .unwrap();
        assert_eq!(v, Some(serde_json::json!({"type": "X", "n": 3})));
        assert!(d.decode(br#"{"type":"X","skip":{"deep":[1,2,}"#).is_err());
        assert!(d.decode(br#"{"type":"X"} trailing"#).is_err());
        // a skipped string is checked too
        let mut bad = br#"{"type":"X","skip":"ab"}"#.to_vec();
        bad[20] = 0xff;
        assert!(d.decode(&bad).unwrap_err().to_string().contains("UTF-8"));
        assert_eq!(d.decode(b"[1,2]").unwrap(), Some(serde_json::json!([1, 2])));
    }

    /// A random JSON value, nested up to `depth`, with the odd escape, number form and key the
    /// selected fields share.
    fn value(rng: &mut impl rand::Rng, depth: u32) -> String {
        const STRINGS: [&str; 10] = [
            "TRADE",
            "MARKET_CLOSE",
            "",
            "é€😀",
            "a\\\"b",
            "\\u00e9",
            "\\ud800",
            "\\n\\t\\/",
            "a long run of plain text: the scan skips eight bytes at a time é",
            "plain for a while, then \\\" and \\u0041 and more plain text after them",
        ];
        const NUMBERS: [&str; 9] = [
            "0",
            "-0",
            "3",
            "-17",
            "2.5",
            "1e3",
            "-0.5E-2",
            "1e400",
            "18446744073709551616",
        ];
        match rng.random_range(0..if depth == 0 { 6 } else { 8 }) {
            0 => format!("\"{}\"", STRINGS[rng.random_range(0..STRINGS.len())]),
            1 => NUMBERS[rng.random_range(0..NUMBERS.len())].to_string(),
            2 => "true".into(),
            3 => "false".into(),
            4 => "null".into(),
            5 => format!("\"{}\"", STRINGS[rng.random_range(0..2)]),
            6 => {
                let items: Vec<String> = (0..rng.random_range(0..4)).map(|_| value(rng, depth - 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => object(rng, depth),
        }
    }

    fn object(rng: &mut impl rand::Rng, depth: u32) -> String {
        const KEYS: [&str; 5] = ["type", "n", "t", "other", "ty\\u0070e"];
        let members: Vec<String> = (0..rng.random_range(0..5))
            .map(|_| {
                let key = KEYS[rng.random_range(0..KEYS.len())];
                format!("\"{key}\" : {}", value(rng, depth - 1))
            })
            .collect();
        format!("{{ {} }}", members.join(","))
    }

    /// The same document with a few bytes replaced, inserted or removed: JSON's punctuation,
    /// a control character, digits and letters of its literals.
    fn mutate(rng: &mut impl rand::Rng, doc: &str) -> Vec<u8> {
        // 0xff is never UTF-8, 0xc3 starts a two-byte sequence
        const BYTES: &[u8] = b"\"\\{}[],:0-.eEu+ \x01at9\xff\xc3";
        let mut b = doc.as_bytes().to_vec();
        for _ in 0..rng.random_range(1..3) {
            let at = rng.random_range(0..=b.len());
            let byte = BYTES[rng.random_range(0..BYTES.len())];
            match rng.random_range(0..3) {
                0 if at < b.len() => b[at] = byte,
                1 if at < b.len() => {
                    b.remove(at);
                }
                _ => b.insert(at, byte),
            }
        }
        b
    }

    #[test]
    fn the_scan_agrees_with_serde_json_on_generated_documents() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let fields = vec!["type".to_string(), "n".into(), "t".into()];
        let mut fast = JsonFieldsDecoder::new(fields.clone());
        let reference = JsonFieldsDecoder::new(fields);
        let (mut objects, mut invalid, mut scanned) = (0, 0, 0);
        let mut found = vec![None; 3];
        for i in 0..40_000 {
            let doc = if i % 10 < 8 {
                object(&mut rng, 4)
            } else {
                value(&mut rng, 4)
            };
            let doc = if i % 2 == 0 {
                doc.into_bytes()
            } else {
                mutate(&mut rng, &doc)
            };
            let expected = reference.with_serde(&doc);
            found.iter_mut().for_each(|f| *f = None);
            scanned += (scan_fields(&doc, &fast.fields, &mut found, &mut Vec::new()) == Scan::Object) as u32;
            let got = fast.decode(&doc);
            assert_eq!(got, expected, "{}", String::from_utf8_lossy(&doc));
            match got {
                Ok(Some(v)) => {
                    objects += v.is_object() as u32;
                    fast.recycle(v);
                }
                _ => invalid += 1,
            }
        }
        // the generator reaches both sides, and the scan answers for many objects (not for
        // its escaped keys, repeated keys and nested wanted values)
        assert!(
            objects > 10_000 && invalid > 10_000,
            "{objects} objects, {invalid} invalid"
        );
        assert!(scanned > objects / 3, "{scanned} of {objects} objects scanned");
    }

    #[test]
    fn nesting_is_as_deep_as_serde_json_allows() {
        for depth in [120, 126, 127, 128, 129, 400] {
            for doc in [
                format!(r#"{{"type":{}1{}}}"#, "[".repeat(depth), "]".repeat(depth)),
                format!(r#"{{"skip":{}1{},"type":"X"}}"#, "[".repeat(depth), "]".repeat(depth)),
            ] {
                let mut d = JsonFieldsDecoder::new(vec!["type".into()]);
                assert_eq!(d.decode(doc.as_bytes()), d.with_serde(doc.as_bytes()), "{depth}");
            }
        }
    }
}
