//! The contract between a record format and the connectors that use it: the value decoder and
//! encoder traits, the shareable handles connectors hold (`EncoderHandle`, `DecoderFactory`),
//! why a value was not decoded (`DecodeError`) and what then happens to its record
//! (`DecodeErrorPolicy`).

use std::sync::Arc;

use crate::error::Result;
use crate::record::ValueFormat;

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

/// Creates the value decoder of each reader.
pub type DecoderFactory = Arc<dyn Fn() -> Result<Box<dyn ValueDecoder>> + Send + Sync>;
