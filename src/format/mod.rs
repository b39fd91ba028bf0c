//! Record formats: decoding values read from Kafka (`bytes`, `string`, `json`, `avro`,
//! `protobuf`, `json_schema`) into the
//! form the end-of-stream expression and the JSON-lines envelope use, encoding generated values,
//! and the decode-error policy.

pub mod avro;
pub(crate) mod config;
mod json;
mod json_scan;
pub(crate) mod json_schema;
pub(crate) mod protobuf;
pub(crate) mod registry;
pub(crate) mod registry_wire;
pub(crate) mod schema_config;

use std::sync::Arc;

use crate::error::Result;
use crate::record::ValueFormat;
pub(crate) use config::AvroConfig;
pub use json::{JsonDecoder, JsonFieldsDecoder};
pub(crate) use schema_config::WireSchema;

/// What happens to a record whose value cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeErrorPolicy {
    /// Fail the job, naming topic, partition and offset; the state never moves past the record.
    #[default]
    Fail,
    /// Count it, log it, and move on.
    Skip,
    /// Send the raw record, with the error in headers, to the dead-letter topic, then move on.
    DeadLetter,
}

/// Why a value was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes are not valid for the format: a poison record, for the decode-error policy.
    Invalid(String),
    /// What decoding needs is out of reach (the schema registry, after retries until the
    /// request timeout): the job fails, and no record is skipped or dead-lettered for it.
    Unavailable(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Invalid(m) | DecodeError::Unavailable(m) => f.write_str(m),
        }
    }
}

impl From<String> for DecodeError {
    fn from(message: String) -> Self {
        DecodeError::Invalid(message)
    }
}

impl From<&str> for DecodeError {
    fn from(message: &str) -> Self {
        DecodeError::Invalid(message.to_string())
    }
}

/// Decodes record values of one format. One per reader: decoders may cache (Avro schemas).
pub trait ValueDecoder: Send {
    /// The format it decodes.
    fn format(&self) -> ValueFormat;
    /// The decoded value for structured formats, `None` for `bytes` and `string`.
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, DecodeError>;
    /// Takes back a value this decoder returned and nobody needs any more, so the next `decode`
    /// can reuse its allocations (the trading-day path decodes the same field of every record).
    fn recycle(&mut self, _value: serde_json::Value) {}
}

/// Encodes generated JSON values for a format that is not JSON itself (Avro).
pub trait ValueEncoder: Send + Sync {
    /// The encoded bytes of `value`, or why it does not fit the format.
    fn encode(&self, value: &serde_json::Value) -> std::result::Result<Vec<u8>, String>;
}

/// A shareable encoder (Debug so settings that hold one stay printable).
#[derive(Clone)]
pub struct EncoderHandle(pub Arc<dyn ValueEncoder>);

impl std::fmt::Debug for EncoderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValueEncoder")
    }
}

/// `bytes`: anything goes.
pub struct BytesDecoder;

impl ValueDecoder for BytesDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Bytes
    }
    fn decode(&mut self, _bytes: &[u8]) -> Result<Option<serde_json::Value>, DecodeError> {
        Ok(None)
    }
}

/// `string`: valid UTF-8.
pub struct StringDecoder;

impl ValueDecoder for StringDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::String
    }
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, DecodeError> {
        std::str::from_utf8(bytes)
            .map(|_| None)
            .map_err(|e| DecodeError::Invalid(format!("not valid UTF-8: {e}")))
    }
}

/// The decoder for a format without external dependencies (Avro needs a schema source).
pub fn simple_decoder(format: ValueFormat) -> Option<Box<dyn ValueDecoder>> {
    match format {
        ValueFormat::Bytes => Some(Box::new(BytesDecoder)),
        ValueFormat::String => Some(Box::new(StringDecoder)),
        ValueFormat::Json => Some(Box::new(JsonDecoder)),
        ValueFormat::Avro | ValueFormat::Protobuf | ValueFormat::JsonSchema => None,
    }
}

/// Creates the value decoder of each reader.
pub type DecoderFactory = Arc<dyn Fn() -> Result<Box<dyn ValueDecoder>> + Send + Sync>;

/// A factory of decoders for a Kafka source (one decoder per reader, each with its own cache);
/// `request_timeout` bounds how long a schema registry is retried.
pub fn decoder_factory(
    format: ValueFormat,
    avro: Option<&AvroConfig>,
    request_timeout: std::time::Duration,
) -> Result<DecoderFactory> {
    if format != ValueFormat::Avro {
        return Ok(Arc::new(move || {
            simple_decoder(format).ok_or_else(|| crate::Error::config("source.format", "no decoder"))
        }));
    }
    let Some(avro) = avro else {
        return Err(crate::Error::config(
            "source.avro",
            "format \"avro\" needs schema_registry or schema_file",
        ));
    };
    match (&avro.schema_registry, &avro.schema_file) {
        (Some(registry), _) => {
            let registry = registry.clone();
            Ok(Arc::new(move || {
                Ok(Box::new(avro::RegistryDecoder::new(registry.clone(), request_timeout)) as Box<dyn ValueDecoder>)
            }))
        }
        (None, Some(path)) => {
            let schema = avro::read_schema("source.avro.schema_file", path)?;
            Ok(Arc::new(move || {
                Ok(Box::new(avro::SchemaFileDecoder::new(schema.clone())?) as Box<dyn ValueDecoder>)
            }))
        }
        (None, None) => Err(crate::Error::config(
            "source.avro",
            "set schema_registry or schema_file",
        )),
    }
}

/// A factory of key decoders for a Kafka source's `key_format`: `None` keeps keys as they are.
/// Avro keys come from the registry (wire format) or from `key_schema_file` (raw datums).
pub fn key_decoder_factory(
    key_format: Option<ValueFormat>,
    avro: Option<&AvroConfig>,
    request_timeout: std::time::Duration,
) -> Result<Option<DecoderFactory>> {
    let Some(format) = key_format else {
        return Ok(None);
    };
    if format != ValueFormat::Avro {
        return Ok(Some(Arc::new(move || {
            simple_decoder(format).ok_or_else(|| crate::Error::config("source.key_format", "no decoder"))
        })));
    }
    let avro = avro.ok_or_else(|| {
        crate::Error::config(
            "source.avro",
            "key_format \"avro\" needs schema_registry or key_schema_file",
        )
    })?;
    match (&avro.schema_registry, &avro.key_schema_file) {
        (Some(registry), _) => {
            let registry = registry.clone();
            Ok(Some(Arc::new(move || {
                Ok(Box::new(avro::RegistryDecoder::new(registry.clone(), request_timeout)) as Box<dyn ValueDecoder>)
            })))
        }
        (None, Some(path)) => {
            let schema = avro::read_schema("source.avro.key_schema_file", path)?;
            Ok(Some(Arc::new(move || {
                Ok(Box::new(avro::SchemaFileDecoder::new(schema.clone())?) as Box<dyn ValueDecoder>)
            })))
        }
        (None, None) => Err(crate::Error::config(
            "source.avro.key_schema_file",
            "key_format \"avro\" needs schema_registry or key_schema_file",
        )),
    }
}

/// The encoder of generated values: `None` for JSON and string, which need none.
pub fn encoder_for(
    format: ValueFormat,
    avro: Option<&AvroConfig>,
    key: &str,
    topic: Option<&str>,
) -> Result<Option<EncoderHandle>> {
    if format != ValueFormat::Avro {
        return Ok(None);
    }
    avro_encoder(avro, key, topic, false).map(Some)
}

/// The encoder of generated Avro keys, and the field names of their schema when it is a record
/// (then a key is those of the generated fields; else the rendered key template).
pub fn key_encoder_for(
    avro: Option<&AvroConfig>,
    key: &str,
    topic: Option<&str>,
) -> Result<(EncoderHandle, Option<Vec<String>>)> {
    let encoder = avro_encoder(avro, key, topic, true)?;
    let fields = match avro.and_then(|a| a.key_schema_file.as_ref()) {
        Some(path) => match avro::read_schema(&format!("{key}.key_schema_file"), path)? {
            apache_avro::Schema::Record(r) => Some(r.fields.iter().map(|f| f.name.clone()).collect()),
            _ => None,
        },
        None => None,
    };
    Ok((encoder, fields))
}

/// An Avro encoder of values or keys (`is_key`): raw datums of the schema file, or the Confluent
/// wire format after registering it under the subject its strategy names.
fn avro_encoder(avro: Option<&AvroConfig>, key: &str, topic: Option<&str>, is_key: bool) -> Result<EncoderHandle> {
    let Some(avro) = avro else {
        return Err(crate::Error::config(
            key,
            "format \"avro\" needs schema_registry or schema_file",
        ));
    };
    let (file_key, file) = if is_key {
        ("key_schema_file", &avro.key_schema_file)
    } else {
        ("schema_file", &avro.schema_file)
    };
    let Some(path) = file else {
        return Err(crate::Error::config(
            format!("{key}.{file_key}"),
            "writing Avro needs the schema (a .avsc file)",
        ));
    };
    let schema = avro::read_schema(&format!("{key}.{file_key}"), path)?;
    Ok(EncoderHandle(match &avro.schema_registry {
        Some(registry) => {
            let Some(topic) = topic else {
                return Err(crate::Error::config(
                    format!("{key}.schema_registry"),
                    "registering a schema needs a Kafka sink (its topic names the subject)",
                ));
            };
            let record = match &schema {
                apache_avro::Schema::Record(r) => Some(r.name.fullname(None)),
                _ => None,
            };
            let subject = avro
                .subject_name_strategy
                .subject(topic, record.as_deref(), is_key)
                .map_err(|e| crate::Error::config(format!("{key}.subject_name_strategy"), e))?;
            Arc::new(avro::RegistryEncoder::new(registry.clone(), subject, schema)?)
        }
        None => Arc::new(avro::SchemaFileEncoder::new(schema)?),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_accept_their_format_and_reject_others() {
        assert_eq!(JsonDecoder.decode(br#"{"a":1}"#), Ok(Some(serde_json::json!({"a": 1}))));
        assert!(JsonDecoder
            .decode(b"{not json")
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
        assert_eq!(StringDecoder.decode("héllo".as_bytes()), Ok(None));
        assert!(StringDecoder.decode(&[0xff, 0xfe]).is_err());
        assert_eq!(BytesDecoder.decode(&[0xff]), Ok(None));
    }
}
