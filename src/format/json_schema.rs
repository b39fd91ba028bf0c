//! JSON Schema both ways: JSON values checked against a JSON Schema (boon; draft 7 unless the
//! schema names its `$schema`, as Confluent assumes). Reading: the Confluent wire format (magic
//! byte, schema id, JSON text), each schema fetched once by id; or plain JSON checked against a
//! local schema. Writing: registering the schema under `<topic>-value` and framing each value, or
//! plain JSON. A value that breaks its schema is a decode error (read) or an encoding error
//! (write); schemas never load `$ref`s from files or the network.

use std::path::Path;
use std::time::Duration;

use schema_registry_converter::schema_registry_common::SchemaType;
use serde_json::Value as Json;

use super::codec::{DecodeError, ValueDecoder, ValueEncoder};
use super::registry_wire::{frame, split_frame, Registration, SchemaCache};
use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// A compiled JSON Schema.
pub struct Validator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON Schema validator")
    }
}

impl Validator {
    /// Compiles `schema`, known as `location` in error messages and to its own `$ref`s.
    pub fn compile(location: &str, schema: Json) -> std::result::Result<Validator, String> {
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V7);
        // no loader: a `$ref` outside the schema is an error, not a file read or a request
        compiler.use_loader(Box::new(boon::SchemeUrlLoader::new()));
        compiler
            .add_resource(location, schema)
            .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        let mut schemas = boon::Schemas::new();
        let index = compiler
            .compile(location, &mut schemas)
            .map_err(|e| format!("not a valid JSON Schema: {}", one_line(&format!("{e:#}"))))?;
        Ok(Validator { schemas, index })
    }

    /// Compiles the schema `text`.
    pub fn parse(location: &str, text: &str) -> std::result::Result<Validator, String> {
        let schema = serde_json::from_str(text).map_err(|e| format!("not a valid JSON Schema: not JSON: {e}"))?;
        Validator::compile(location, schema)
    }

    /// Whether `value` is valid; the error says where it is not.
    pub fn validate(&self, value: &Json) -> std::result::Result<(), String> {
        self.schemas
            .validate(value, self.index)
            .map_err(|e| format!("the value breaks its JSON Schema: {}", one_line(&e.to_string())))
    }
}

/// boon's errors span lines, one per cause: one line for logs and the dead-letter header.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A local schema file, compiled, with its text; errors name the config key.
pub fn read_schema(key: &str, path: &Path) -> Result<(Validator, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config(key, format!("cannot read {}: {e}", path.display())))?;
    let validator = Validator::parse("urn:tidegate:schema-file", &text)
        .map_err(|e| Error::config(key, format!("{}: {e}", path.display())))?;
    Ok((validator, text))
}

fn parse_and_validate(validator: &Validator, json: &[u8]) -> std::result::Result<Json, DecodeError> {
    let value: Json = serde_json::from_slice(json).map_err(|e| format!("not valid JSON: {e}"))?;
    validator.validate(&value)?;
    Ok(value)
}

/// Decodes the Confluent wire format, compiling each schema once by id.
pub struct RegistryDecoder {
    schemas: SchemaCache<Validator>,
}

impl RegistryDecoder {
    pub fn new(registry: &super::registry::RegistrySettings, timeout: Duration) -> Self {
        RegistryDecoder {
            schemas: SchemaCache::new(registry, SchemaType::Json, timeout),
        }
    }
}

impl ValueDecoder for RegistryDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::JsonSchema
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        let (id, json) = split_frame(bytes)?;
        let validator = self.schemas.get(id, |fetched| {
            if !fetched.references.is_empty() {
                return Err("schema references are not supported for JSON Schema".into());
            }
            Validator::parse(&format!("urn:tidegate:registry-schema-{id}"), &fetched.schema)
        })?;
        parse_and_validate(validator, json).map(Some)
    }
}

/// Decodes plain JSON values checked against a local schema.
pub struct SchemaFileDecoder {
    validator: std::sync::Arc<Validator>,
}

impl SchemaFileDecoder {
    pub fn new(validator: std::sync::Arc<Validator>) -> Self {
        SchemaFileDecoder { validator }
    }
}

impl ValueDecoder for SchemaFileDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::JsonSchema
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        parse_and_validate(&self.validator, bytes).map(Some)
    }
}

/// Encodes JSON values checked against a schema: framed after registering it, or plain.
pub struct Encoder {
    validator: Validator,
    registration: Option<Registration>,
}

impl Encoder {
    pub fn raw(validator: Validator) -> Self {
        Encoder {
            validator,
            registration: None,
        }
    }

    /// The wire format, the schema `text` registered at `url` under `<topic>-value`.
    pub fn registered(
        validator: Validator,
        text: String,
        registry: &super::registry::RegistrySettings,
        topic: &str,
    ) -> Self {
        Encoder {
            validator,
            registration: Some(Registration::new(registry, topic, SchemaType::Json, text)),
        }
    }
}

impl ValueEncoder for Encoder {
    fn encode(&self, value: &Json) -> std::result::Result<Vec<u8>, String> {
        self.validator.validate(value)?;
        let json = serde_json::to_vec(value).map_err(|e| format!("JSON encoding failed: {e}"))?;
        let Some(registration) = &self.registration else {
            return Ok(json);
        };
        let mut out = frame(registration.id()?, json.len());
        out.extend_from_slice(&json);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRADE: &str = r#"{"type":"object","properties":{
        "type":{"type":"string"},"seq":{"type":"integer","minimum":0},"price":{"type":"number"}},
        "required":["type","seq"],"additionalProperties":false}"#;

    #[test]
    fn plain_values_round_trip_and_are_checked_both_ways() {
        let value = json!({"type": "TRADE", "seq": 7, "price": 101.25});
        let bytes = Encoder::raw(Validator::parse("urn:t", TRADE).unwrap())
            .encode(&value)
            .unwrap();
        let mut decoder = SchemaFileDecoder::new(std::sync::Arc::new(Validator::parse("urn:t", TRADE).unwrap()));
        assert_eq!(decoder.decode(&bytes), Ok(Some(value)));
        let encoder = Encoder::raw(Validator::parse("urn:t", TRADE).unwrap());
        let missing = encoder.encode(&json!({"type": "TRADE"})).unwrap_err();
        assert!(missing.contains("seq") && !missing.contains('\n'), "{missing}");
        assert!(encoder.encode(&json!({"type": "TRADE", "seq": -1})).is_err());
        assert!(encoder
            .encode(&json!({"type": "TRADE", "seq": 1, "extra": true}))
            .is_err());
        let broken = decoder.decode(br#"{"type":"TRADE","seq":"one"}"#).unwrap_err();
        assert!(
            matches!(&broken, DecodeError::Invalid(m) if m.contains("/seq")),
            "{broken}"
        );
        assert!(decoder
            .decode(b"{not json")
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
    }

    #[test]
    fn invalid_schemas_and_outside_refs_are_errors() {
        assert!(Validator::parse("urn:t", "{not json").unwrap_err().contains("not JSON"));
        assert!(Validator::parse("urn:t", r#"{"type": 12}"#).is_err());
        // no file is read for a `$ref` (boon's default loader would read it)
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("n.json");
        std::fs::write(&file, r#"{"type": "integer"}"#).unwrap();
        let outside = format!(r#"{{"$ref": "file://{}"}}"#, file.display());
        assert!(Validator::parse("urn:t", &outside).is_err());
        let local =
            r##"{"definitions": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/definitions/n"}}}"##;
        let v = Validator::parse("urn:t", local).unwrap();
        assert!(v.validate(&json!({"a": 1})).is_ok());
        assert!(v.validate(&json!({"a": "x"})).is_err());
    }
}
