//! The `protobuf` and `json_schema` tables every connector shares (beside `avro`): where the
//! schema comes from (a schema registry in the Confluent wire format, a local schema file, or
//! both), their validation (every error names its key), and the decoders and encoders they make.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::codec::{DecoderFactory, EncoderHandle, ValueDecoder, ValueEncoder};
use super::config::{AvroConfig, RawAvro};
use super::factory::decoder_factory;
use super::registry::{RawRegistry, RegistrySettings};
use super::{json_schema, protobuf};
use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// `source.protobuf`: where Protobuf schemas come from, for `format = "protobuf"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawProtobuf {
    /// Confluent Schema Registry URL: values are in the Confluent wire format (magic byte, schema
    /// id, message indexes, message). Reading fetches each schema once by id; writing registers
    /// `schema_file` under the subject `<topic>-value`.
    pub schema_registry: Option<RawRegistry>,
    /// A local `.proto` file (imports from its directory and the well-known `google/protobuf`
    /// types). Without a registry, values are raw messages of `message`. Writing always needs it.
    pub schema_file: Option<String>,
    /// The full name of the message written (and read, without a registry), e.g.
    /// "trading.Trade"; may be left out when `schema_file` declares a single top-level message.
    pub message: Option<String>,
}

/// `source.json_schema`: where JSON Schemas come from, for `format = "json_schema"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJsonSchema {
    /// Confluent Schema Registry URL: values are in the Confluent wire format (magic byte, schema
    /// id, JSON text). Reading fetches each schema once by id; writing registers `schema_file`
    /// under the subject `<topic>-value`.
    pub schema_registry: Option<RawRegistry>,
    /// A local JSON Schema file (draft 7 unless it names its `$schema`; no `$ref` outside it).
    /// Without a registry, values are plain JSON checked against it. Writing always needs it.
    pub schema_file: Option<String>,
}

/// Validated `protobuf` or `json_schema` settings. Each value read or written is checked against
/// its schema: one that breaks it is a decode error for the decode-error policy (read) or an
/// error of the generator (write).
#[derive(Debug, Clone)]
pub enum WireSchema {
    Protobuf {
        schema_registry: Option<RegistrySettings>,
        schema_file: Option<PathBuf>,
        message: Option<String>,
    },
    JsonSchema {
        schema_registry: Option<RegistrySettings>,
        schema_file: Option<PathBuf>,
    },
}

/// As the config says it.
impl std::fmt::Display for WireSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, registry, file, message) = match self {
            WireSchema::Protobuf {
                schema_registry,
                schema_file,
                message,
            } => ("protobuf", schema_registry, schema_file, message.as_deref()),
            WireSchema::JsonSchema {
                schema_registry,
                schema_file,
            } => ("json_schema", schema_registry, schema_file, None),
        };
        write!(f, "{name}")?;
        if let Some(file) = file {
            write!(f, " schema_file {}", file.display())?;
        }
        if let Some(message) = message {
            write!(f, " message {message}")?;
        }
        match (file, registry) {
            (Some(_), Some(url)) => write!(f, ", registered at {url}"),
            (None, Some(url)) => write!(f, " schema_registry {url}"),
            _ => Ok(()),
        }
    }
}

/// The `protobuf` / `json_schema` settings of a connector under `section` ("source"): required
/// by their format, refused by any other. `writes`: the connector produces values, which needs
/// the schema file. Schema files are compiled now, so their errors are config errors.
pub fn wire_schema(
    section: &str,
    format: ValueFormat,
    protobuf: Option<RawProtobuf>,
    json_schema: Option<RawJsonSchema>,
    writes: bool,
) -> Result<Option<WireSchema>> {
    if format != ValueFormat::Protobuf && protobuf.is_some() {
        return Err(Error::config(
            format!("{section}.protobuf"),
            "only applies to format = \"protobuf\"",
        ));
    }
    if format != ValueFormat::JsonSchema && json_schema.is_some() {
        return Err(Error::config(
            format!("{section}.json_schema"),
            "only applies to format = \"json_schema\"",
        ));
    }
    let (table, registry, file, message) = match (format, protobuf, json_schema) {
        (ValueFormat::Protobuf, Some(p), _) => ("protobuf", p.schema_registry, p.schema_file, p.message),
        (ValueFormat::JsonSchema, _, Some(j)) => ("json_schema", j.schema_registry, j.schema_file, None),
        (ValueFormat::Protobuf, None, _) | (ValueFormat::JsonSchema, _, None) => {
            return Err(Error::config(
                format!("{section}.{format}"),
                format!("format \"{format}\" needs schema_registry or schema_file"),
            ))
        }
        _ => return Ok(None),
    };
    let key = format!("{section}.{table}");
    let registry = registry
        .map(|r| RegistrySettings::from_raw(&format!("{key}.schema_registry"), r))
        .transpose()?;
    if registry.is_none() && file.is_none() {
        return Err(Error::config(key, "set schema_registry, schema_file, or both"));
    }
    if writes && file.is_none() {
        return Err(Error::config(
            format!("{key}.schema_file"),
            "writing needs the schema (a local file); the registry only registers it",
        ));
    }
    let file = file.map(PathBuf::from);
    let schema = match format {
        ValueFormat::Protobuf => WireSchema::Protobuf {
            schema_registry: registry,
            schema_file: file,
            message,
        },
        _ => WireSchema::JsonSchema {
            schema_registry: registry,
            schema_file: file,
        },
    };
    // a missing or invalid schema file, or a message it does not declare, is a config error now
    schema.compile_file(&key, writes)?;
    Ok(Some(schema))
}

/// The value format of a source that reads (`bytes` by default, or any other) and its schema
/// settings: `avro`, `protobuf` or `json_schema`, each only with its format.
pub fn read_formats(
    format: Option<&str>,
    key_format: Option<ValueFormat>,
    avro: Option<RawAvro>,
    protobuf: Option<RawProtobuf>,
    json_schema: Option<RawJsonSchema>,
) -> Result<(ValueFormat, Option<AvroConfig>, Option<WireSchema>)> {
    let all = [
        ValueFormat::Bytes,
        ValueFormat::String,
        ValueFormat::Json,
        ValueFormat::Avro,
        ValueFormat::Protobuf,
        ValueFormat::JsonSchema,
    ];
    let format = super::config::value_format("source.format", format, ValueFormat::Bytes, &all)?;
    let avro = super::config::avro("source.avro", format, key_format, avro)?;
    let wire = wire_schema("source", format, protobuf, json_schema, false)?;
    Ok((format, avro, wire))
}

/// The decoders of a Kafka source reading `format`: Protobuf and JSON Schema from `wire`, the
/// others as [`decoder_factory`] makes them.
pub fn decoders(
    format: ValueFormat,
    avro: Option<&AvroConfig>,
    wire: Option<&WireSchema>,
    request_timeout: Duration,
) -> Result<DecoderFactory> {
    match wire {
        Some(schema) => schema.decoder_factory("source", request_timeout),
        None => decoder_factory(format, avro, request_timeout),
    }
}

/// A compiled schema file.
enum Compiled {
    Protobuf(prost_reflect::MessageDescriptor, String),
    JsonSchema(json_schema::Validator, String),
}

impl WireSchema {
    /// The registry the schemas come from, if any.
    pub fn registry(&self) -> Option<&RegistrySettings> {
        match self {
            WireSchema::Protobuf { schema_registry, .. } | WireSchema::JsonSchema { schema_registry, .. } => {
                schema_registry.as_ref()
            }
        }
    }

    /// The schema file compiled (`None` without one); `key` is the table's config key. A
    /// Protobuf message is needed to write, and to read without a registry.
    fn compile_file(&self, key: &str, writes: bool) -> Result<Option<Compiled>> {
        match self {
            WireSchema::Protobuf {
                schema_file: Some(path),
                message,
                schema_registry,
            } => {
                let (file, text) = protobuf::read_schema(&format!("{key}.schema_file"), path)?;
                if writes && schema_registry.is_some() {
                    if let Some(import) = file.dependencies().find(|d| !d.name().starts_with("google/protobuf/")) {
                        return Err(Error::config(
                            format!("{key}.schema_file"),
                            format!(
                                "imports {}: a registered schema may import only google/protobuf types \
                                 (schema references are not supported)",
                                import.name()
                            ),
                        ));
                    }
                }
                let message = protobuf::pick_message(&format!("{key}.message"), &file, message.as_deref())?;
                Ok(Some(Compiled::Protobuf(message, text)))
            }
            WireSchema::Protobuf {
                schema_file: None,
                message: Some(_),
                ..
            } => Err(Error::config(
                format!("{key}.message"),
                "names a message of schema_file, which is not set",
            )),
            WireSchema::JsonSchema {
                schema_file: Some(path),
                ..
            } => {
                let (validator, text) = json_schema::read_schema(&format!("{key}.schema_file"), path)?;
                Ok(Some(Compiled::JsonSchema(validator, text)))
            }
            _ => Ok(None),
        }
    }

    fn key(&self, section: &str) -> String {
        match self {
            WireSchema::Protobuf { .. } => format!("{section}.protobuf"),
            WireSchema::JsonSchema { .. } => format!("{section}.json_schema"),
        }
    }

    /// A factory of decoders for a Kafka source (one per reader, each with its own schema cache);
    /// `request_timeout` bounds how long the registry is retried.
    pub fn decoder_factory(&self, section: &str, request_timeout: Duration) -> Result<DecoderFactory> {
        if let Some(registry) = self.registry() {
            let registry = registry.clone();
            return Ok(match self {
                WireSchema::Protobuf { .. } => Arc::new(move || {
                    Ok(Box::new(protobuf::RegistryDecoder::new(&registry, request_timeout)) as Box<dyn ValueDecoder>)
                }),
                WireSchema::JsonSchema { .. } => Arc::new(move || {
                    Ok(Box::new(json_schema::RegistryDecoder::new(&registry, request_timeout))
                        as Box<dyn ValueDecoder>)
                }),
            });
        }
        match self.compile_file(&self.key(section), false)? {
            Some(Compiled::Protobuf(message, _)) => Ok(Arc::new(move || {
                Ok(Box::new(protobuf::SchemaFileDecoder::new(message.clone())) as Box<dyn ValueDecoder>)
            })),
            Some(Compiled::JsonSchema(validator, _)) => {
                let validator = Arc::new(validator);
                Ok(Arc::new(move || {
                    Ok(Box::new(json_schema::SchemaFileDecoder::new(validator.clone())) as Box<dyn ValueDecoder>)
                }))
            }
            None => Err(Error::config(self.key(section), "set schema_registry or schema_file")),
        }
    }

    /// The encoder of generated values; with a registry, `topic` (the Kafka sink's) names the
    /// subject the schema is registered under.
    pub fn encoder(&self, section: &str, topic: Option<&str>) -> Result<EncoderHandle> {
        let key = self.key(section);
        let registry = match (self.registry(), topic) {
            (Some(url), Some(topic)) => Some((url, topic)),
            (Some(_), None) => {
                return Err(Error::config(
                    format!("{key}.schema_registry"),
                    "registering a schema needs a Kafka sink (its topic names the subject)",
                ))
            }
            (None, _) => None,
        };
        let encoder: Arc<dyn ValueEncoder> = match (self.compile_file(&key, true)?, registry) {
            (Some(Compiled::Protobuf(message, text)), Some((url, topic))) => {
                Arc::new(protobuf::Encoder::registered(message, text, url, topic))
            }
            (Some(Compiled::Protobuf(message, _)), None) => Arc::new(protobuf::Encoder::raw(message)),
            (Some(Compiled::JsonSchema(v, text)), Some((url, topic))) => {
                Arc::new(json_schema::Encoder::registered(v, text, url, topic))
            }
            (Some(Compiled::JsonSchema(v, _)), None) => Arc::new(json_schema::Encoder::raw(v)),
            (None, _) => {
                return Err(Error::config(
                    format!("{key}.schema_file"),
                    "writing needs the schema (a local file)",
                ))
            }
        };
        Ok(EncoderHandle(encoder))
    }

    /// Whether `value` (a generated value, an end marker) fits the schema file; the error names `key`.
    pub fn check_value(&self, section: &str, key: &str, value: &serde_json::Value) -> Result<()> {
        match self.compile_file(&self.key(section), true)? {
            Some(Compiled::Protobuf(message, _)) => protobuf::json_to_message(&message, value).map(|_| ()),
            Some(Compiled::JsonSchema(validator, _)) => validator.validate(value),
            None => Ok(()),
        }
        .map_err(|m| Error::config(key, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_proto(registry: Option<&str>, file: Option<&str>, message: Option<&str>) -> Option<RawProtobuf> {
        Some(RawProtobuf {
            schema_registry: registry.map(|u| RawRegistry::Url(u.to_string())),
            schema_file: file.map(str::to_string),
            message: message.map(str::to_string),
        })
    }

    fn key_of(r: Result<Option<WireSchema>>) -> String {
        match r {
            Err(Error::Config { key, .. }) => key,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let proto = dir.path().join("t.proto");
        std::fs::write(
            &proto,
            "syntax = \"proto3\"; message A { int32 x = 1; } message B { int32 y = 1; }",
        )
        .unwrap();
        let proto = proto.to_str().unwrap();
        let json = dir.path().join("t.json");
        std::fs::write(&json, r#"{"type": "object"}"#).unwrap();
        let json = json.to_str().unwrap();
        let p = ValueFormat::Protobuf;
        let reg = Some("http://127.0.0.1:8081");
        assert_eq!(key_of(wire_schema("source", p, None, None, false)), "source.protobuf");
        assert_eq!(
            key_of(wire_schema("source", p, raw_proto(None, None, None), None, false)),
            "source.protobuf"
        );
        assert_eq!(
            key_of(wire_schema(
                "source",
                p,
                raw_proto(Some("localhost:8081"), None, None),
                None,
                false
            )),
            "source.protobuf.schema_registry"
        );
        assert_eq!(
            key_of(wire_schema("source", p, raw_proto(reg, None, None), None, true)),
            "source.protobuf.schema_file"
        );
        assert_eq!(
            key_of(wire_schema(
                "source",
                p,
                raw_proto(reg, Some("/nowhere/t.proto"), None),
                None,
                true
            )),
            "source.protobuf.schema_file"
        );
        // two messages: writing must name one, and a name the file lacks is refused
        assert_eq!(
            key_of(wire_schema("source", p, raw_proto(reg, Some(proto), None), None, true)),
            "source.protobuf.message"
        );
        assert_eq!(
            key_of(wire_schema(
                "source",
                p,
                raw_proto(reg, Some(proto), Some("C")),
                None,
                true
            )),
            "source.protobuf.message"
        );
        assert_eq!(
            key_of(wire_schema("source", p, raw_proto(reg, None, Some("A")), None, false)),
            "source.protobuf.message"
        );
        assert!(
            wire_schema("source", p, raw_proto(reg, Some(proto), Some("B")), None, true)
                .unwrap()
                .is_some()
        );
        // reading from a registry needs no file
        assert!(wire_schema("source", p, raw_proto(reg, None, None), None, false)
            .unwrap()
            .is_some());
        let js = |r: Option<&str>, f: Option<&str>| {
            Some(RawJsonSchema {
                schema_registry: r.map(|u| RawRegistry::Url(u.to_string())),
                schema_file: f.map(str::to_string),
            })
        };
        assert_eq!(
            key_of(wire_schema("source", ValueFormat::Json, None, js(reg, None), false)),
            "source.json_schema"
        );
        assert_eq!(
            key_of(wire_schema(
                "source",
                ValueFormat::Avro,
                raw_proto(reg, None, None),
                None,
                false
            )),
            "source.protobuf"
        );
        assert_eq!(
            key_of(wire_schema(
                "source",
                ValueFormat::JsonSchema,
                None,
                js(reg, Some(proto)),
                true
            )),
            "source.json_schema.schema_file"
        );
        assert!(
            wire_schema("source", ValueFormat::JsonSchema, None, js(reg, Some(json)), true)
                .unwrap()
                .is_some()
        );
        assert!(wire_schema("source", ValueFormat::Json, None, None, false)
            .unwrap()
            .is_none());
    }
}
