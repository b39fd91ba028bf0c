//! The format settings every connector shares: `format` (which value formats a connector
//! accepts) and the `avro` table (a schema registry, a local schema, or both).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::{RawRegistry, RegistrySettings, SubjectNameStrategy};
use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// `source.avro`: where Avro schemas come from.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAvro {
    /// Confluent Schema Registry: its URL, or `{ url, username, password, ca_file }` (basic auth,
    /// the password as text, `{ file = … }` or `{ env = … }`; a PEM CA for `https`). Values are
    /// in the Confluent wire format (magic byte, schema id, datum). Reading fetches each schema
    /// once by id; writing registers `schema_file` under the subject `subject_name_strategy` names.
    pub schema_registry: Option<RawRegistry>,
    /// A local `.avsc` schema: without a registry, values are raw Avro datums of it. Writing
    /// always needs it.
    pub schema_file: Option<String>,
    /// The `.avsc` of Avro keys (`key_format = "avro"`): without a registry, keys are raw Avro
    /// datums of it; writing Avro keys always needs it (registered under the key subject).
    pub key_schema_file: Option<String>,
    /// Writing with a registry: the subject the schema is registered under. `topic` (default,
    /// Confluent's TopicNameStrategy: `<topic>-value`, `<topic>-key` for keys), `record`
    /// (RecordNameStrategy: the schema's full name) or `topic_record` (`<topic>-<full name>`).
    pub subject_name_strategy: Option<SubjectNameStrategy>,
}

/// Validated Avro settings.
#[derive(Debug, Clone)]
pub struct AvroConfig {
    pub schema_registry: Option<RegistrySettings>,
    pub schema_file: Option<PathBuf>,
    pub key_schema_file: Option<PathBuf>,
    pub subject_name_strategy: SubjectNameStrategy,
}

/// As the config says it.
impl std::fmt::Display for AvroConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.schema_file, &self.schema_registry) {
            (Some(file), Some(url)) => {
                write!(f, "schema_file {}, registered at {url}", file.display())?;
                match self.subject_name_strategy {
                    SubjectNameStrategy::Topic => Ok(()),
                    s => write!(f, " (subject name strategy {s:?})"),
                }
            }
            (Some(file), None) => write!(f, "schema_file {}", file.display()),
            (None, Some(url)) => write!(f, "schema_registry {url}"),
            (None, None) => f.write_str("no schema"),
        }
    }
}

/// The value format at `key` (`default` when absent), one of `allowed`.
pub fn value_format(
    key: &str,
    text: Option<&str>,
    default: ValueFormat,
    allowed: &[ValueFormat],
) -> Result<ValueFormat> {
    let f = match text {
        None => default,
        Some("bytes") => ValueFormat::Bytes,
        Some("string") => ValueFormat::String,
        Some("json") => ValueFormat::Json,
        Some("avro") => ValueFormat::Avro,
        Some("protobuf") => ValueFormat::Protobuf,
        Some("json_schema") => ValueFormat::JsonSchema,
        Some(other) => return Err(Error::config(key, format!("unknown format {other:?}"))),
    };
    if !allowed.contains(&f) {
        let names: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
        return Err(Error::config(key, format!("must be one of {}", names.join(", "))));
    }
    Ok(f)
}

/// `key_format`: absent keeps keys as they are (text when UTF-8, else base64 in the envelope);
/// `string`, `json` or `avro` decode them (or, for a writer, encode them).
pub fn key_format(key: &str, text: Option<&str>, allowed: &[ValueFormat]) -> Result<Option<ValueFormat>> {
    text.map(|t| value_format(key, Some(t), ValueFormat::Bytes, allowed))
        .transpose()
}

/// The format and Avro settings of a source that produces values (datagen, periodic): `json`
/// (default), `string`, `avro`, `protobuf` or `json_schema` (the last two set up by
/// [`super::schema_config::wire_schema`]); `key_format` `avro` writes Avro keys.
pub fn produced_format(
    format: Option<&str>,
    key_format: Option<ValueFormat>,
    raw_avro: Option<RawAvro>,
) -> Result<(ValueFormat, Option<AvroConfig>)> {
    let format = value_format(
        "source.format",
        format,
        ValueFormat::Json,
        &[
            ValueFormat::Json,
            ValueFormat::String,
            ValueFormat::Avro,
            ValueFormat::Protobuf,
            ValueFormat::JsonSchema,
        ],
    )?;
    let avro = avro("source.avro", format, key_format, raw_avro)?;
    if format == ValueFormat::Avro && avro.as_ref().is_some_and(|a| a.schema_file.is_none()) {
        return Err(Error::config(
            "source.avro.schema_file",
            "writing Avro needs the schema (a .avsc file); the registry only registers it",
        ));
    }
    if key_format == Some(ValueFormat::Avro) && avro.as_ref().is_some_and(|a| a.key_schema_file.is_none()) {
        return Err(Error::config(
            "source.avro.key_schema_file",
            "writing Avro keys needs their schema (a .avsc file); the registry only registers it",
        ));
    }
    Ok((format, avro))
}

/// Avro settings, for Avro values (`format`) or keys (`key_format`). Reading needs a registry or
/// a schema file; writing needs the schema file, and with a registry too the schema is
/// registered and the wire format is Confluent's.
pub fn avro(
    key: &str,
    format: ValueFormat,
    key_format: Option<ValueFormat>,
    raw: Option<RawAvro>,
) -> Result<Option<AvroConfig>> {
    let values = format == ValueFormat::Avro;
    let keys = key_format == Some(ValueFormat::Avro);
    match raw {
        Some(a) if values || keys => {
            if values && a.schema_registry.is_none() && a.schema_file.is_none() {
                return Err(Error::config(key, "set schema_registry, schema_file, or both"));
            }
            if keys && a.schema_registry.is_none() && a.key_schema_file.is_none() {
                return Err(Error::config(
                    format!("{key}.key_schema_file"),
                    "key_format = \"avro\" needs schema_registry or key_schema_file",
                ));
            }
            // a missing or invalid schema file is a config error now, not at the first record
            for (name, file) in [("schema_file", &a.schema_file), ("key_schema_file", &a.key_schema_file)] {
                if let Some(file) = file {
                    super::avro::read_schema(&format!("{key}.{name}"), std::path::Path::new(file))?;
                }
            }
            let schema_registry = match a.schema_registry {
                Some(r) => Some(RegistrySettings::from_raw(&format!("{key}.schema_registry"), r)?),
                None => None,
            };
            if a.subject_name_strategy.is_some() && schema_registry.is_none() {
                return Err(Error::config(
                    format!("{key}.subject_name_strategy"),
                    "only applies with a schema_registry",
                ));
            }
            Ok(Some(AvroConfig {
                schema_registry,
                schema_file: a.schema_file.map(PathBuf::from),
                key_schema_file: a.key_schema_file.map(PathBuf::from),
                subject_name_strategy: a.subject_name_strategy.unwrap_or_default(),
            }))
        }
        None if values => Err(Error::config(
            key,
            "format \"avro\" needs schema_registry or schema_file",
        )),
        None if keys => Err(Error::config(
            key,
            "key_format \"avro\" needs schema_registry or key_schema_file",
        )),
        Some(_) => Err(Error::config(
            key,
            "only applies to format = \"avro\" or key_format = \"avro\"",
        )),
        None => Ok(None),
    }
}
