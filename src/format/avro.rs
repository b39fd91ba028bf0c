//! Avro both ways. Reading: the Confluent wire format (magic byte, schema id, datum) through
//! schema_registry_converter, whose decoder fetches each schema once and caches it by id; or raw
//! datums with a local `.avsc`. Writing: registering the schema under the subject its
//! strategy names (`<topic>-value` by default) and prefixing the id, or raw datums with a local schema. Decoded
//! values become JSON for the end-of-stream expression and the JSON-lines envelope.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value as Avro;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use base64::Engine;
use schema_registry_converter::blocking::schema_registry::post_schema;
use schema_registry_converter::schema_registry_common::{SchemaType, SuppliedSchema};
use serde_json::{Map, Number, Value as Json};

use super::codec::{DecodeError, ValueDecoder, ValueEncoder};
use super::registry::{fetch_schema, registry_call, RegistryError, RegistrySettings};
use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// Read a `.avsc` file; errors name the config key.
pub fn read_schema(key: &str, path: &Path) -> Result<Schema> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config(key, format!("cannot read {}: {e}", path.display())))?;
    Schema::parse_str(&text)
        .map_err(|e| Error::config(key, format!("{} is not a valid Avro schema: {e}", path.display())))
}

/// Avro to JSON: records and maps become objects, unions their value, bytes and fixed base64,
/// logical types their underlying number or text.
pub fn avro_to_json(value: &Avro) -> Json {
    let float = |x: f64| Number::from_f64(x).map(Json::Number).unwrap_or(Json::Null);
    match value {
        Avro::Null => Json::Null,
        Avro::Boolean(b) => Json::Bool(*b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Json::from(*i),
        Avro::Long(i)
        | Avro::TimeMicros(i)
        | Avro::TimestampMillis(i)
        | Avro::TimestampMicros(i)
        | Avro::TimestampNanos(i)
        | Avro::LocalTimestampMillis(i)
        | Avro::LocalTimestampMicros(i)
        | Avro::LocalTimestampNanos(i) => Json::from(*i),
        Avro::Float(x) => float(f64::from(*x)),
        Avro::Double(x) => float(*x),
        Avro::String(s) | Avro::Enum(_, s) => Json::String(s.clone()),
        Avro::Uuid(u) => Json::String(u.to_string()),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Avro::Union(_, inner) => avro_to_json(inner),
        Avro::Array(items) => Json::Array(items.iter().map(avro_to_json).collect()),
        Avro::Map(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), avro_to_json(v))).collect()),
        Avro::Record(fields) => {
            let mut m = Map::with_capacity(fields.len());
            for (k, v) in fields {
                m.insert(k.clone(), avro_to_json(v));
            }
            Json::Object(m)
        }
        other => Json::String(format!("{other:?}")),
    }
}

/// JSON to an Avro value of `schema`: objects become records by the schema's fields, integers
/// longs, other numbers doubles; `resolve` then fits them to the schema (ints, unions, defaults).
pub fn json_to_avro(json: &Json, schema: &Schema) -> std::result::Result<Avro, String> {
    fn plain(j: &Json) -> Avro {
        match j {
            Json::Null => Avro::Null,
            Json::Bool(b) => Avro::Boolean(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Avro::Long(i),
                None => Avro::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            Json::String(s) => Avro::String(s.clone()),
            Json::Array(a) => Avro::Array(a.iter().map(plain).collect()),
            Json::Object(m) => Avro::Map(m.iter().map(|(k, v)| (k.clone(), plain(v))).collect()),
        }
    }
    plain(json)
        .resolve(schema)
        .map_err(|e| format!("the value does not fit the Avro schema: {e}"))
}

/// Schemas live as long as the process: `GenericDatumReader`/`Writer` borrow their schema, and a
/// decoder holds its reader next to it. Leaking is bounded by the distinct schemas a process
/// meets (one per schema file, one per registry id), a handful.
fn leak(schema: Schema) -> &'static Schema {
    Box::leak(Box::new(schema))
}

/// Reads datums of one writer schema into JSON, through apache-avro's generic `Value`.
///
/// The serde path (`GenericDatumReader::read_deser`) is faster for typed structs (see
/// benches/formats.rs), but a daemon decoding any schema needs a generic target, and apache-avro
/// 0.22's schema-aware deserializer cannot fill a `serde_json::Value` (it rejects
/// `deserialize_any` on records), so the generic `Value` it is.
pub struct DatumDecoder {
    reader: GenericDatumReader<'static>,
}

impl DatumDecoder {
    /// A reader of datums of `schema`; an error if the schema cannot be prepared.
    pub fn new(schema: Schema) -> Result<Self> {
        let reader = GenericDatumReader::builder(leak(schema))
            .build()
            .map_err(|e| Error::runtime("preparing the Avro schema", e))?;
        Ok(DatumDecoder { reader })
    }

    /// One datum, all of `bytes`, to JSON.
    pub fn decode(&self, bytes: &[u8]) -> std::result::Result<Json, String> {
        let mut rest = bytes;
        let json = self
            .reader
            .read_value(&mut rest)
            .map(|v| avro_to_json(&v))
            .map_err(|e| format!("not an Avro datum of the schema: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("{} bytes left after the Avro datum", rest.len()));
        }
        Ok(json)
    }
}

/// Decodes the Confluent wire format (magic byte 0, 4-byte schema id, datum), fetching each
/// schema once from the registry (schema_registry_converter) and caching it by id.
pub struct RegistryDecoder {
    registry: RegistrySettings,
    /// How long an unreachable registry is retried before decoding fails the job.
    timeout: Duration,
    schemas: HashMap<u32, DatumDecoder>,
}

impl RegistryDecoder {
    /// A decoder fetching schemas from `registry`, retrying an unreachable one for `timeout`.
    pub fn new(registry: RegistrySettings, timeout: Duration) -> Self {
        RegistryDecoder {
            registry,
            timeout,
            schemas: HashMap::new(),
        }
    }
}

impl ValueDecoder for RegistryDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Avro
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        if bytes.len() < 5 || bytes[0] != 0 {
            return Err("not in the Confluent wire format (magic byte 0, then a 4-byte schema id)".into());
        }
        let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        if !self.schemas.contains_key(&id) {
            let text = match tokio::runtime::Handle::try_current() {
                Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                    tokio::task::block_in_place(|| fetch_schema(&self.registry, id, self.timeout))?
                }
                _ => fetch_schema(&self.registry, id, self.timeout)?,
            };
            let schema = Schema::parse_str(&text).map_err(|e| format!("schema {id} is not valid Avro: {e}"))?;
            let decoder = DatumDecoder::new(schema).map_err(|e| e.to_string())?;
            self.schemas.insert(id, decoder);
        }
        let decoder = &self.schemas[&id];
        Ok(decoder.decode(&bytes[5..]).map(Some)?)
    }
}

/// Decodes raw Avro datums with a local schema.
pub struct SchemaFileDecoder {
    decoder: DatumDecoder,
}

impl SchemaFileDecoder {
    /// A decoder of datums of `schema` (see [`read_schema`]).
    pub fn new(schema: Schema) -> Result<Self> {
        Ok(SchemaFileDecoder {
            decoder: DatumDecoder::new(schema)?,
        })
    }
}

impl ValueDecoder for SchemaFileDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Avro
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        Ok(self.decoder.decode(bytes).map(Some)?)
    }
}

/// Writes datums of one schema from JSON values.
pub struct DatumEncoder {
    schema: &'static Schema,
    writer: GenericDatumWriter<'static>,
}

impl DatumEncoder {
    /// A writer of datums of `schema`; an error if the schema cannot be prepared.
    pub fn new(schema: Schema) -> Result<Self> {
        let schema = leak(schema);
        let writer = GenericDatumWriter::builder(schema)
            .build()
            .map_err(|e| Error::runtime("preparing the Avro schema", e))?;
        Ok(DatumEncoder { schema, writer })
    }

    /// One JSON value as a datum of the schema; an error names what does not fit.
    pub fn encode(&self, value: &Json) -> std::result::Result<Vec<u8>, String> {
        let avro = json_to_avro(value, self.schema)?;
        let mut out = Vec::with_capacity(64);
        self.writer
            .write_value_ref(&mut out, &avro)
            .map_err(|e| format!("Avro encoding failed: {e}"))?;
        Ok(out)
    }
}

/// Encodes values as raw Avro datums of a local schema.
pub struct SchemaFileEncoder {
    encoder: DatumEncoder,
}

impl SchemaFileEncoder {
    /// An encoder of values as datums of `schema` (see [`read_schema`]).
    pub fn new(schema: Schema) -> Result<Self> {
        Ok(SchemaFileEncoder {
            encoder: DatumEncoder::new(schema)?,
        })
    }
}

impl ValueEncoder for SchemaFileEncoder {
    fn encode(&self, value: &Json) -> std::result::Result<Vec<u8>, String> {
        self.encoder.encode(value)
    }
}

/// Encodes values in the Confluent wire format after registering the schema under its subject
/// (named by the subject name strategy) through schema_registry_converter. It registers when it
/// is made, so a refused schema or refused credentials stop the job before anything is written.
pub struct RegistryEncoder {
    id: u32,
    encoder: DatumEncoder,
}

impl RegistryEncoder {
    /// Registers `schema` under `subject` in `registry` now; a refusal is the error.
    pub fn new(registry: RegistrySettings, subject: String, schema: Schema) -> Result<Self> {
        // the full schema, not its Parsing Canonical Form: that drops field defaults, and the
        // registry's compatibility check needs them (a defaulted new field is BACKWARD compatible)
        let text = serde_json::to_string(&schema)
            .map_err(|e| Error::runtime(format!("registering the Avro schema under subject {subject}"), e))?;
        let supplied = SuppliedSchema::new(None, SchemaType::Avro, text);
        let s = subject.clone();
        let id = registry_call(&registry, move |client| post_schema(client, s, supplied).map(|r| r.id)).map_err(
            |e| match e {
                RegistryError::Rejected { status, message } => Error::runtime(
                    format!("registering the Avro schema under subject {subject}"),
                    format!(
                        "the schema registry {} refused it{}: {message}",
                        registry.url,
                        status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
                    ),
                ),
                e => e.into_error(format!("registering the Avro schema under subject {subject}")),
            },
        )?;
        tracing::info!(registry = %registry.url, subject = %subject, id, "Avro schema registered");
        Ok(RegistryEncoder {
            id,
            encoder: DatumEncoder::new(schema)?,
        })
    }
}

impl ValueEncoder for RegistryEncoder {
    fn encode(&self, value: &Json) -> std::result::Result<Vec<u8>, String> {
        let id = self.id;
        let datum = self.encoder.encode(value)?;
        let mut out = Vec::with_capacity(5 + datum.len());
        out.push(0);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&datum);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRADE: &str = r#"{"type":"record","name":"Trade","namespace":"tidegate.test","fields":[
        {"name":"type","type":"string"},{"name":"seq","type":"long"},{"name":"price","type":"double"},
        {"name":"size","type":"int"},{"name":"venue","type":["null","string"],"default":null}]}"#;

    #[test]
    fn raw_datums_round_trip_through_json() {
        let schema = Schema::parse_str(TRADE).unwrap();
        let value = json!({"type": "TRADE", "seq": 7, "price": 101.25, "size": 30, "venue": "XNAS"});
        let bytes = SchemaFileEncoder::new(schema.clone()).unwrap().encode(&value).unwrap();
        let decoded = SchemaFileDecoder::new(schema.clone())
            .unwrap()
            .decode(&bytes)
            .unwrap()
            .unwrap();
        assert_eq!(decoded, value);
        let null_venue = json!({"type": "TRADE", "seq": 8, "price": 1.0, "size": 1, "venue": null});
        let bytes = SchemaFileEncoder::new(schema.clone())
            .unwrap()
            .encode(&null_venue)
            .unwrap();
        assert_eq!(
            SchemaFileDecoder::new(schema).unwrap().decode(&bytes).unwrap().unwrap(),
            null_venue
        );
    }

    #[test]
    fn values_that_do_not_fit_are_errors_not_panics() {
        let schema = Schema::parse_str(TRADE).unwrap();
        assert!(SchemaFileEncoder::new(schema.clone())
            .unwrap()
            .encode(&json!({"type": 1}))
            .is_err());
        assert!(SchemaFileDecoder::new(schema.clone())
            .unwrap()
            .decode(&[0xff, 0xff, 0xff])
            .is_err());
        assert!(SchemaFileDecoder::new(schema).unwrap().decode(b"").is_err());
    }
}
