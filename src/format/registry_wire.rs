//! The Confluent wire format shared by the registry-backed Protobuf and JSON Schema formats: the
//! frame (magic byte 0, 4-byte big-endian schema id, payload), schemas fetched by id (with the
//! schemas they reference) and retried while the registry is out of reach, and a schema
//! registered once under the topic-name-strategy subject `<topic>-value`. The registry calls go
//! through [`super::registry::registry_call`], the one place that builds the client.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use schema_registry_converter::blocking::schema_registry::{get_referenced_schema, get_schema_by_id, post_schema};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{RegisteredSchema, SchemaType, SuppliedSchema};

use super::codec::DecodeError;
use super::registry::{fetch_retried, registry_call, RegistrySettings};

/// The schema id and the payload of a value in the Confluent wire format.
pub fn split_frame(bytes: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    if bytes.len() < 5 || bytes[0] != 0 {
        return Err("not in the Confluent wire format (magic byte 0, then a 4-byte schema id)".into());
    }
    Ok((
        u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]),
        &bytes[5..],
    ))
}

/// A new value in the Confluent wire format: magic byte, `id`, then the caller appends the payload.
pub fn frame(id: u32, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + capacity);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    out
}

/// How the registry names a schema type in errors (as its API spells it).
pub fn type_name(t: &SchemaType) -> String {
    match t {
        SchemaType::Avro => "AVRO".into(),
        SchemaType::Protobuf => "PROTOBUF".into(),
        SchemaType::Json => "JSON".into(),
        SchemaType::Other(other) => other.clone(),
        other => format!("{other:?}"),
    }
}

/// A schema as the registry gave it: its text, and the text of every schema it references
/// (transitively), keyed by the name it is imported by.
#[derive(Debug, Clone)]
pub struct FetchedSchema {
    pub schema: String,
    pub references: HashMap<String, String>,
}

/// Runs `f` where blocking is allowed: on a multi-threaded runtime the worker hands its other
/// tasks over first (the retries below sleep; readers decode on runtime threads).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The schema `id` and its references, retried with backoff while the registry is out of reach
/// (until `timeout`, then [`DecodeError::Unavailable`]: the job fails); a registry answer that
/// the schema is missing, or is not of `expected` type, is [`DecodeError::Invalid`] (the record
/// names a schema it cannot have: a poison record for the decode-error policy).
pub fn fetch_schema(
    registry: &RegistrySettings,
    id: u32,
    expected: SchemaType,
    timeout: Duration,
) -> Result<FetchedSchema, DecodeError> {
    blocking(|| {
        let (root, references) = fetch_retried(registry, id, timeout, move |settings| {
            let root = get_schema_by_id(id, settings)?;
            let mut references = HashMap::new();
            add_references(settings, &root, &mut references)?;
            Ok((root, references))
        })?;
        if root.schema_type != expected {
            return Err(DecodeError::Invalid(format!(
                "schema {id} is {}, not {}",
                type_name(&root.schema_type),
                type_name(&expected)
            )));
        }
        Ok(FetchedSchema {
            schema: root.schema,
            references,
        })
    })
}

/// The schemas `schema` references, and those they reference, each fetched once.
fn add_references(
    settings: &schema_registry_converter::blocking::schema_registry::SrSettings,
    schema: &RegisteredSchema,
    into: &mut HashMap<String, String>,
) -> Result<(), SRCError> {
    for r in &schema.references {
        if into.contains_key(&r.name) {
            continue;
        }
        let child = get_referenced_schema(settings, r)?;
        add_references(settings, &child, into)?;
        into.insert(r.name.clone(), child.schema);
    }
    Ok(())
}

/// Per-reader cache of compiled schemas by id. A schema the registry does not have, or that does
/// not compile, is remembered as an error too, so each poison record costs no registry call.
pub struct SchemaCache<T> {
    registry: RegistrySettings,
    /// How long an unreachable registry is retried before decoding fails the job.
    timeout: Duration,
    expected: SchemaType,
    schemas: HashMap<u32, Result<T, String>>,
}

impl<T> SchemaCache<T> {
    pub fn new(registry: &RegistrySettings, expected: SchemaType, timeout: Duration) -> Self {
        SchemaCache {
            registry: registry.clone(),
            timeout,
            expected,
            schemas: HashMap::new(),
        }
    }

    /// The compiled schema `id`, fetched and compiled by `compile` at its first use.
    pub fn get(
        &mut self,
        id: u32,
        compile: impl FnOnce(FetchedSchema) -> Result<T, String>,
    ) -> Result<&T, DecodeError> {
        if !self.schemas.contains_key(&id) {
            let compiled = match fetch_schema(&self.registry, id, self.expected.clone(), self.timeout) {
                Ok(fetched) => compile(fetched).map_err(|e| format!("schema {id}: {e}")),
                Err(DecodeError::Invalid(e)) => Err(e),
                // not remembered: the next record asks the registry again
                Err(unavailable) => return Err(unavailable),
            };
            self.schemas.insert(id, compiled);
        }
        match self.schemas.get(&id) {
            Some(Ok(schema)) => Ok(schema),
            Some(Err(e)) => Err(DecodeError::Invalid(e.clone())),
            None => Err(DecodeError::Invalid(format!("schema {id} is not cached"))),
        }
    }
}

/// A schema registered once, at the first value written, under `<topic>-value`.
pub struct Registration {
    registry: RegistrySettings,
    subject: String,
    schema: SuppliedSchema,
    id: OnceLock<Result<u32, String>>,
}

impl Registration {
    pub fn new(registry: &RegistrySettings, topic: &str, schema_type: SchemaType, schema: String) -> Self {
        Registration {
            registry: registry.clone(),
            subject: format!("{topic}-value"),
            schema: SuppliedSchema::new(None, schema_type, schema),
            id: OnceLock::new(),
        }
    }

    /// The id the registry gave the schema (registering it on the first call).
    pub fn id(&self) -> Result<u32, String> {
        self.id
            .get_or_init(|| {
                let supplied = self.schema.clone();
                let subject = self.subject.clone();
                registry_call(&self.registry, move |settings| {
                    post_schema(settings, subject, supplied).map(|r| r.id)
                })
                .map_err(|e| {
                    format!(
                        "registering the schema under {} at {}: {e}",
                        self.subject, self.registry.url
                    )
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_back_into_id_and_payload() {
        let mut bytes = frame(258, 3);
        bytes.extend_from_slice(b"abc");
        assert_eq!(bytes[..5], [0, 0, 0, 1, 2]);
        assert_eq!(split_frame(&bytes), Ok((258, &b"abc"[..])));
        assert!(split_frame(&[0, 0, 0]).is_err());
        assert!(split_frame(b"{\"a\":1}").is_err());
    }

    #[test]
    fn an_unreachable_registry_is_unavailable_after_the_timeout_not_invalid() {
        // a closed port: connection refused, retried until the timeout
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let mut cache: SchemaCache<()> = SchemaCache::new(
            &RegistrySettings::from_url(&url),
            SchemaType::Protobuf,
            Duration::from_millis(300),
        );
        match cache.get(1, |_| Ok(())) {
            Err(DecodeError::Unavailable(m)) => assert!(m.contains("did not give schema 1"), "{m}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}
