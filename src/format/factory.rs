//! Building the decoders and encoders that validated format settings call for: the decoder of a
//! format that needs no schema, the per-reader decoder factories of a Kafka source (values and
//! keys, Avro from a registry or a schema file), and the encoders of generated values.

use std::sync::Arc;

use super::avro;
use super::codec::{DecoderFactory, EncoderHandle, ValueDecoder};
use super::config::AvroConfig;
use super::json::JsonDecoder;
use super::plain::{BytesDecoder, StringDecoder};
use crate::error::Result;
use crate::record::ValueFormat;

/// The decoder for a format without external dependencies (Avro needs a schema source).
pub fn simple_decoder(format: ValueFormat) -> Option<Box<dyn ValueDecoder>> {
    match format {
        ValueFormat::Bytes => Some(Box::new(BytesDecoder)),
        ValueFormat::String => Some(Box::new(StringDecoder)),
        ValueFormat::Json => Some(Box::new(JsonDecoder)),
        ValueFormat::Avro | ValueFormat::Protobuf | ValueFormat::JsonSchema => None,
    }
}

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
