//! The `bytes` and `string` formats: decoders that only check a value (`string`: valid UTF-8)
//! and leave it as it is.

use super::codec::{DecodeError, ValueDecoder};
use crate::record::ValueFormat;

/// `bytes`: anything goes.
pub struct BytesDecoder;

impl ValueDecoder for BytesDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Bytes
    }
    fn decode(&mut self, _bytes: &[u8]) -> Result<Option<serde_json::Value>, DecodeError> {
        Ok(None)
    }
}

/// `string`: valid UTF-8.
pub struct StringDecoder;

impl ValueDecoder for StringDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::String
    }
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, DecodeError> {
        std::str::from_utf8(bytes)
            .map(|_| None)
            .map_err(|e| DecodeError::Invalid(format!("not valid UTF-8: {e}")))
    }
}
