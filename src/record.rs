//! The record that travels from a source to a sink: Kafka coordinates, key, value (raw bytes and,
//! for structured formats, the decoded value), headers and timestamp.

use std::sync::Arc;

use bytes::Bytes;

use crate::core::RecordPosition;

/// How a record's value is to be read and rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueFormat {
    /// Opaque bytes (rendered as base64 in JSON lines).
    #[default]
    Bytes,
    /// UTF-8 text.
    String,
    /// A JSON document.
    Json,
    /// Avro (Confluent wire format with a schema registry, or raw with a local schema).
    Avro,
    /// Protobuf (Confluent wire format with a schema registry, or raw with a local `.proto`).
    Protobuf,
    /// JSON validated by a JSON Schema (Confluent wire format with a schema registry, or plain
    /// JSON with a local schema).
    JsonSchema,
}

impl ValueFormat {
    /// Whether values have a decoded form (JSON, Avro, Protobuf, JSON Schema): the expression
    /// and the envelope see it as a JSON value.
    pub fn is_structured(self) -> bool {
        !matches!(self, ValueFormat::Bytes | ValueFormat::String)
    }

    /// Whether the envelope prints the value from its decoded form rather than its bytes (all
    /// structured formats but plain JSON, whose bytes are the JSON itself).
    pub fn prints_decoded(self) -> bool {
        self.is_structured() && self != ValueFormat::Json
    }
}

/// As the config spells it.
impl std::fmt::Display for ValueFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueFormat::Bytes => "bytes",
            ValueFormat::String => "string",
            ValueFormat::Json => "json",
            ValueFormat::Avro => "avro",
            ValueFormat::Protobuf => "protobuf",
            ValueFormat::JsonSchema => "json_schema",
        })
    }
}

/// One record header; Kafka allows repeated names and null values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's name.
    pub key: String,
    /// Its value; `None` for a null header value.
    pub value: Option<Vec<u8>>,
}

/// A record as sources emit it and sinks write it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// The topic it was read from (Kafka source), if any.
    pub topic: Option<Arc<str>>,
    /// The partition it was read from (Kafka source), if any.
    pub partition: Option<i32>,
    /// Its offset in the partition (Kafka source) or its index (data generator).
    pub offset: Option<i64>,
    /// Milliseconds since the epoch.
    pub timestamp: Option<i64>,
    /// The key's bytes; `None` for a record without a key.
    pub key: Option<Bytes>,
    /// The value as it is (or will be) stored in Kafka. A Kafka source's reader lends it from
    /// librdkafka's fetch buffer (no copy): holding a record holds that buffer.
    pub value: Option<Bytes>,
    /// The decoded value for `json` and `avro` (the whole value in records a
    /// `tidegate::testing::Replay` collects; in the daemon only what the end-of-stream expression
    /// reads, kept for the sink only when it prints Avro); `None` for `bytes` and `string`.
    pub decoded: Option<serde_json::Value>,
    /// How `value` is to be read and rendered.
    pub format: ValueFormat,
    /// The decoded key when the source decodes keys (`key_format = "json"` or `"avro"`); the
    /// end-of-stream expression's `key` and the envelope's `key` are then this value.
    pub decoded_key: Option<serde_json::Value>,
    /// Its headers, in order (a name may repeat).
    pub headers: Vec<Header>,
    /// Set when the record could not be decoded and goes to the dead-letter topic instead.
    pub dead_letter: Option<String>,
}

impl RecordPosition for Record {
    fn position(&self) -> Option<i64> {
        self.offset
    }

    fn size_bytes(&self) -> u64 {
        (self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len)) as u64
    }

    fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
}
