//! FLIP-238's `GeneratorFunction` (an index in, a record out) and the one a config's field
//! template makes: fields, key, value text, headers and timestamp, encoded in the job's format.

use std::sync::Arc;

use serde_json::Value;

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

impl GeneratorFunction for TemplateGenerator {
    fn map(&mut self, index: u64) -> Result<Record> {
        let mut rng = RecordRng::new(self.seed, index);
        let fields = self.fields.generate(index, &mut rng);
        let mut key = self.key.as_ref().map(|t| t.render(&fields));
        let mut decoded_key = None;
        let key = match &self.key_encoder {
            None => key.map(String::into_bytes),
            Some((encoder, record)) => {
                let value = match record {
                    Some(names) => Value::Object(
                        names
                            .iter()
                            .filter_map(|n| fields.get(n).map(|v| (n.clone(), v.clone())))
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
                value: Some(t.render(&fields).into_bytes()),
            })
            .collect();
        let timestamp = match &self.timestamp_field {
            Some(f) => match fields.get(f) {
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
        let value = match (self.format, &self.encoder) {
            (ValueFormat::String, _) => match &self.value {
                Some(t) => t.render(&fields).into_bytes(),
                None => fields.to_string().into_bytes(),
            },
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
        let structured = self.format.is_structured();
        Ok(Record {
            offset: Some(index as i64),
            timestamp,
            key: key.map(Into::into),
            value: Some(value.into()),
            decoded: (self.keep_decoded && structured).then_some(fields),
            decoded_key,
            format: self.format,
            headers,
            ..Record::default()
        })
    }
}
