//! The format settings every connector shares: `format` (which value formats a connector
//! accepts) and the `avro` table (a schema registry, a local schema, or both).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// `source.avro`: where Avro schemas come from.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAvro {
    /// Confluent Schema Registry URL: values are in the Confluent wire format (magic byte, schema
    /// id, datum). Reading fetches each schema once by id; writing registers `schema_file` under
    /// the subject `<topic>-value`.
    pub schema_registry: Option<String>,
    /// A local `.avsc` schema: without a registry, values are raw Avro datums of it. Writing
    /// always needs it.
    pub schema_file: Option<String>,
}

/// Validated Avro settings.
#[derive(Debug, Clone)]
pub struct AvroConfig {
    pub schema_registry: Option<String>,
    pub schema_file: Option<PathBuf>,
}

/// As the config says it.
impl std::fmt::Display for AvroConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.schema_file, &self.schema_registry) {
            (Some(file), Some(url)) => write!(f, "schema_file {}, registered at {url}", file.display()),
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

/// The format and Avro settings of a source that produces values (datagen, periodic): `json`
/// (default), `string`, `avro`, `protobuf` or `json_schema` (the last two set up by
/// [`super::schema_config::wire_schema`]).
pub fn produced_format(format: Option<&str>, raw_avro: Option<RawAvro>) -> Result<(ValueFormat, Option<AvroConfig>)> {
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
    let avro = avro("source.avro", format, raw_avro)?;
    if avro.as_ref().is_some_and(|a| a.schema_file.is_none()) {
        return Err(Error::config(
            "source.avro.schema_file",
            "writing Avro needs the schema (a .avsc file); the registry only registers it",
        ));
    }
    Ok((format, avro))
}

/// Avro settings. Reading needs a registry or a schema file; writing needs the schema file, and
/// with a registry too the schema is registered and the wire format is Confluent's.
pub fn avro(key: &str, format: ValueFormat, raw: Option<RawAvro>) -> Result<Option<AvroConfig>> {
    match (format, raw) {
        (ValueFormat::Avro, Some(a)) => {
            if a.schema_registry.is_none() && a.schema_file.is_none() {
                return Err(Error::config(key, "set schema_registry, schema_file, or both"));
            }
            // a missing or invalid schema file is a config error now, not at the first record
            if let Some(file) = &a.schema_file {
                super::avro::read_schema(&format!("{key}.schema_file"), std::path::Path::new(file))?;
            }
            Ok(Some(AvroConfig {
                schema_registry: a.schema_registry,
                schema_file: a.schema_file.map(PathBuf::from),
            }))
        }
        (ValueFormat::Avro, None) => Err(Error::config(
            key,
            "format \"avro\" needs schema_registry or schema_file",
        )),
        (_, Some(_)) => Err(Error::config(key, "only applies to format = \"avro\"")),
        (_, None) => Ok(None),
    }
}
