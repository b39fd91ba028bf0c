//! FLIP-238's `GeneratorFunction` (an index in, a record out) and the one a config's field
//! template makes: fields, key, value text, headers and timestamp, encoded in the job's format.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::template::{Gen, RecordRng};
use super::text::TextTemplate;
use crate::error::{Error, Result};
use crate::record::{Header, Record, ValueFormat};

/// Turns an index into a record (FLIP-238's `GeneratorFunction`). One instance per fetcher thread.
pub trait GeneratorFunction: Send {
    /// Called once on the fetcher thread before the first record.
    fn open(&mut self, _reader: usize) -> Result<()> {
        Ok(())
    }
    /// Record `index`; must depend on nothing else for restarts to reproduce the same records.
    fn map(&mut self, index: u64) -> Result<Record>;
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Creates the generator of each fetcher.
pub type GeneratorFactory = Arc<dyn Fn() -> Box<dyn GeneratorFunction> + Send + Sync>;

/// A generator from a field template (the config's `source.fields`).
#[derive(Debug, Clone)]
pub struct TemplateGenerator {
    pub seed: u64,
    pub format: ValueFormat,
    pub fields: Gen,
    pub key: Option<TextTemplate>,
    /// The value of `string` records; `json` records are the fields themselves.
    pub value: Option<TextTemplate>,
    pub headers: Vec<(String, TextTemplate)>,
    /// The field holding the record timestamp (epoch ms, or RFC 3339 text).
    pub timestamp_field: Option<String>,
    /// Keep the generated JSON beside the encoded bytes (for sinks that print Avro values).
    pub keep_decoded: bool,
    /// Encodes values for `avro`.
    pub encoder: Option<crate::format::EncoderHandle>,
    /// Encodes keys for `key_format = "avro"`, with the key schema's fields when it is a record
    /// (the key is those generated fields) rather than the key template's text.
    pub key_encoder: Option<(crate::format::EncoderHandle, Option<Vec<String>>)>,
    /// Keep the key as JSON beside its Avro bytes (for sinks that print keys).
    pub keep_decoded_key: bool,
}

/// A record's generated fields: the JSON object, or, where nothing needs the object (a `string`
/// value from a template, no Avro key), the top-level fields' values in template order. That
/// spares building and dropping a map per record, 14 % of a generator's CPU (`perf`,
/// docs/performance.md). Both draw the same random numbers in the same order.
enum Generated<'g> {
    Object(Value),
    Fields(&'g [(String, Gen)], Vec<Value>),
}

impl Generated<'_> {
    /// The value at `path` (`["a", "b"]` for `{a.b}`).
    fn get(&self, path: &[String]) -> Option<&Value> {
        let (head, rest) = path.split_first()?;
        let mut value = match self {
            Generated::Object(object) => object.get(head)?,
            Generated::Fields(names, values) => values.get(names.iter().position(|(name, _)| name == head)?)?,
        };
        for segment in rest {
            value = value.get(segment)?;
        }
        Some(value)
    }

    /// The fields as one JSON object.
    fn into_value(self) -> Value {
        match self {
            Generated::Object(object) => object,
            Generated::Fields(names, values) => Value::Object(
                names
                    .iter()
                    .map(|(name, _)| name.clone())
                    .zip(values)
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

impl GeneratorFunction for TemplateGenerator {
    fn map(&mut self, index: u64) -> Result<Record> {
        let mut rng = RecordRng::new(self.seed, index);
        let flat = self.format == ValueFormat::String && self.value.is_some() && self.key_encoder.is_none();
        let generated = match &self.fields {
            Gen::Object(fields) if flat => Generated::Fields(
                fields,
                fields.iter().map(|(_, g)| g.generate(index, &mut rng)).collect(),
            ),
            fields => Generated::Object(fields.generate(index, &mut rng)),
        };
        let field = |path: &[String]| generated.get(path);
        let mut key = self.key.as_ref().map(|t| t.render_with(field));
        let mut decoded_key = None;
        let key = match &self.key_encoder {
            None => key.map(String::into_bytes),
            Some((encoder, record)) => {
                let value = match record {
                    Some(names) => Value::Object(
                        names
                            .iter()
                            .filter_map(|n| field(std::slice::from_ref(n)).map(|v| (n.clone(), v.clone())))
                            .collect(),
                    ),
                    None => Value::String(key.take().unwrap_or_default()),
                };
                let bytes = encoder
                    .0
                    .encode(&value)
                    .map_err(|m| Error::runtime(format!("generating the key of record {index}"), m))?;
                decoded_key = self.keep_decoded_key.then_some(value);
                Some(bytes)
            }
        };
        let headers = self
            .headers
            .iter()
            .map(|(k, t)| Header {
                key: k.clone(),
                value: Some(t.render_with(field).into_bytes()),
            })
            .collect();
        let timestamp = match &self.timestamp_field {
            Some(f) => match field(std::slice::from_ref(f)) {
                Some(Value::Number(n)) => n.as_i64(),
                Some(Value::String(s)) => Some(crate::connector::values::parse_time(s).map_err(|e| {
                    Error::runtime(
                        format!("generating record {index}"),
                        format!("timestamp field {f}: {e}"),
                    )
                })?),
                Some(other) => {
                    return Err(Error::runtime(
                        format!("generating record {index}"),
                        format!("timestamp field {f} is {other}, not epoch milliseconds or RFC 3339 text"),
                    ))
                }
                None => None,
            },
            None => None,
        };
        let (value, decoded) = match (self.format, &self.value) {
            (ValueFormat::String, Some(t)) => (t.render_with(field).into_bytes(), None),
            _ => self.encode(generated.into_value(), index)?,
        };
        Ok(Record {
            offset: Some(index as i64),
            timestamp,
            key: key.map(Into::into),
            value: Some(value.into()),
            decoded,
            decoded_key,
            format: self.format,
            headers,
            ..Record::default()
        })
    }
}

impl TemplateGenerator {
    /// The value of record `index` from its fields in the job's format (a `string` without a
    /// value template is the fields' JSON), and the fields when they are kept beside it.
    fn encode(&self, fields: Value, index: u64) -> Result<(Vec<u8>, Option<Value>)> {
        let value = match (self.format, &self.encoder) {
            (ValueFormat::String, _) => fields.to_string().into_bytes(),
            (format, Some(encoder)) if format.prints_decoded() => encoder
                .0
                .encode(&fields)
                .map_err(|m| Error::runtime(format!("generating record {index}"), m))?,
            (format, None) if format.prints_decoded() => {
                return Err(Error::runtime(
                    format!("generating record {index}"),
                    format!("no {format} encoder"),
                ))
            }
            _ => serde_json::to_vec(&fields).map_err(|e| Error::runtime(format!("generating record {index}"), e))?,
        };
        let decoded = (self.keep_decoded && self.format.is_structured()).then_some(fields);
        Ok((value, decoded))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::datagen::compile::compile_fields;

    /// A string template's records are what its templates render over the fields' JSON object,
    /// drawn as the object draws them (the per-field path must not reorder the draws).
    #[test]
    fn a_string_template_s_records_are_those_its_fields_render_as_a_json_map() {
        let spec: BTreeMap<String, Value> = serde_json::from_value(json!({
            "symbol": {"choice": ["AAA", "BBB", "CCC"]},
            "price": {"normal": {"mean": 100.0, "stddev": 5.0}, "round": 2},
            "size": {"uniform": {"min": 1, "max": 900}},
            "id": {"uuid": {}},
            "seq": {"sequence": {"start": 7, "step": 3}},
            "ts": {"timestamp": {"start": "2026-11-27T09:30:00Z", "step": 10, "jitter": 5}},
            "venue": {"object": {"mic": {"choice": ["XNAS", "XNYS"]}, "lane": {"uniform": {"min": 1, "max": 4}}}},
            "none": {"value": null}
        }))
        .unwrap();
        let fields = compile_fields(&spec, "source.fields").unwrap();
        let text = |t: &str| TextTemplate::parse(t, &fields).unwrap();
        let mut generator = TemplateGenerator {
            seed: 42,
            format: ValueFormat::String,
            fields: fields.clone(),
            key: Some(text("{symbol}-{venue.mic}")),
            value: Some(text(
                "{seq} {id} {symbol} {price} x {size} @ {venue.mic}/{venue.lane} {ts}{none}",
            )),
            headers: vec![("lane".into(), text("{venue.lane}"))],
            timestamp_field: Some("ts".into()),
            keep_decoded: true,
            encoder: None,
            key_encoder: None,
            keep_decoded_key: false,
        };
        for index in 0..200 {
            let record = generator.map(index).unwrap();
            let object = fields.generate(index, &mut RecordRng::new(42, index));
            let text = |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap()).into_owned();
            let render = |t: &Option<TextTemplate>| t.as_ref().unwrap().render(&object);
            assert_eq!(
                text(record.value.as_deref()),
                render(&generator.value),
                "record {index}"
            );
            assert_eq!(text(record.key.as_deref()), render(&generator.key), "record {index}");
            assert_eq!(
                text(record.headers[0].value.as_deref()),
                generator.headers[0].1.render(&object),
                "record {index}"
            );
            let ts = crate::connector::values::parse_time(object["ts"].as_str().unwrap()).unwrap();
            assert_eq!(record.timestamp, Some(ts), "record {index}");
            assert!(record.decoded.is_none(), "a string record keeps no JSON beside it");
        }
    }
}
