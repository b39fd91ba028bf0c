//! A TEST DOUBLE of the Confluent Schema Registry: a small in-process HTTP server implementing the
//! parts of its REST API that schema_registry_converter calls, as Confluent documents them
//! (docs.confluent.io, "Schema Registry API Reference"):
//!
//! - `POST /subjects/{subject}/versions` `{"schema": "...", "schemaType"?, "references"?}` →
//!   `{"id": N}`: an identical schema already registered (under any subject) keeps its id;
//! - `POST /subjects/{subject}` (look a schema up) → `{"subject","id","version","schema"}` or 404
//!   with `error_code` 40403;
//! - `GET /subjects/{subject}/versions/latest` and `/versions/{n}` → the same shape, or 404 with
//!   40401 (subject not found) / 40402 (version not found);
//! - `GET /schemas/ids/{id}` → `{"schema": "..."}`, or 404 with 40403;
//! - `GET /subjects` → the subject names.
//!
//! Content type `application/vnd.schemaregistry.v1+json`. No Confluent registry can be installed
//! on these machines (it is not on Maven Central), hence the double; it is not shipped.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

#[derive(Default)]
struct Registry {
    /// Schemas by id (ids from 1).
    schemas: Vec<String>,
    /// Subject -> versions (schema ids, version n at index n-1).
    subjects: BTreeMap<String, Vec<u32>>,
    /// Requests seen, as "METHOD path", for assertions on caching.
    requests: Vec<String>,
}

/// A running schema registry double.
pub struct SchemaRegistryDouble {
    pub url: String,
    state: Arc<Mutex<Registry>>,
}

impl SchemaRegistryDouble {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(Registry::default()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = serve(stream, &state);
                });
            }
        });
        SchemaRegistryDouble { url, state }
    }

    /// How many requests matched `prefix` (e.g. "GET /schemas/ids/").
    pub fn requests(&self, prefix: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.starts_with(prefix))
            .count()
    }

    /// Register directly (as another producer would).
    pub fn register(&self, subject: &str, schema: &str) -> u32 {
        register(&mut self.state.lock().unwrap(), subject, schema)
    }
}

fn register(r: &mut Registry, subject: &str, schema: &str) -> u32 {
    let id = match r.schemas.iter().position(|s| same_schema(s, schema)) {
        Some(i) => i as u32 + 1,
        None => {
            r.schemas.push(schema.to_string());
            r.schemas.len() as u32
        }
    };
    let versions = r.subjects.entry(subject.to_string()).or_default();
    if !versions.contains(&id) {
        versions.push(id);
    }
    id
}

/// Schemas compare as JSON documents, not as text.
fn same_schema(a: &str, b: &str) -> bool {
    match (serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn error(status: u16, code: u32, message: &str) -> (u16, Value) {
    (status, json!({"error_code": code, "message": message}))
}

fn handle(r: &mut Registry, method: &str, path: &str, body: &str) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    r.requests.push(format!("{method} {path}"));
    let schema_of = |body: &str| -> Option<String> {
        let v: Value = serde_json::from_str(body).ok()?;
        if v.get("schemaType").and_then(Value::as_str).is_some_and(|t| t != "AVRO") {
            return None;
        }
        v.get("schema")?.as_str().map(str::to_string)
    };
    match (method, parts.as_slice()) {
        ("GET", ["subjects"]) => (200, json!(r.subjects.keys().collect::<Vec<_>>())),
        ("POST", ["subjects", subject, "versions"]) => match schema_of(body) {
            Some(schema) => (200, json!({"id": register(r, subject, &schema)})),
            None => error(422, 42201, "Invalid schema"),
        },
        ("POST", ["subjects", subject]) => {
            let Some(schema) = schema_of(body) else {
                return error(422, 42201, "Invalid schema");
            };
            let Some(versions) = r.subjects.get(*subject) else {
                return error(404, 40401, "Subject not found");
            };
            match versions
                .iter()
                .position(|id| same_schema(&r.schemas[*id as usize - 1], &schema))
            {
                Some(i) => {
                    let id = versions[i];
                    (
                        200,
                        json!({"subject": subject, "id": id, "version": i + 1, "schema": r.schemas[id as usize - 1]}),
                    )
                }
                None => error(404, 40403, "Schema not found"),
            }
        }
        ("GET", ["subjects", subject, "versions", version]) => {
            let Some(versions) = r.subjects.get(*subject) else {
                return error(404, 40401, "Subject not found");
            };
            let index = match *version {
                "latest" => versions.len(),
                n => n.parse().unwrap_or(0),
            };
            match index.checked_sub(1).and_then(|i| versions.get(i)) {
                Some(id) => (
                    200,
                    json!({"subject": subject, "id": id, "version": index, "schema": r.schemas[*id as usize - 1]}),
                ),
                None => error(404, 40402, "Version not found"),
            }
        }
        ("GET", ["schemas", "ids", id]) => match id
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| r.schemas.get(i))
        {
            Some(schema) => (200, json!({"schema": schema})),
            None => error(404, 40403, "Schema not found"),
        },
        _ => error(404, 404, "Not found"),
    }
}

fn serve(stream: TcpStream, state: &Mutex<Registry>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let (status, value) = handle(
            &mut state.lock().unwrap(),
            &method,
            &path,
            &String::from_utf8_lossy(&body),
        );
        let body = value.to_string();
        let reason = if status == 200 { "OK" } else { "Error" };
        write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        out.flush()?;
    }
}
