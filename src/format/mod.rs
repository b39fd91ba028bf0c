//! Record formats: decoding values read from Kafka (`bytes`, `string`, `json`, `avro`) into the
//! form the end-of-stream expression and the JSON-lines envelope use, and the decode-error policy.

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

/// Decodes record values of one format. One per reader: decoders may cache (Avro schemas).
pub trait ValueDecoder: Send {
    fn format(&self) -> ValueFormat;
    /// The decoded value for structured formats, `None` for `bytes` and `string`;
    /// an error message if the bytes are not valid for the format.
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, String>;
}

/// `bytes`: anything goes.
pub struct BytesDecoder;

impl ValueDecoder for BytesDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Bytes
    }
    fn decode(&mut self, _bytes: &[u8]) -> Result<Option<serde_json::Value>, String> {
        Ok(None)
    }
}

/// `string`: valid UTF-8.
pub struct StringDecoder;

impl ValueDecoder for StringDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::String
    }
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, String> {
        std::str::from_utf8(bytes)
            .map(|_| None)
            .map_err(|e| format!("not valid UTF-8: {e}"))
    }
}

/// `json`: one JSON document.
pub struct JsonDecoder;

impl ValueDecoder for JsonDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Json
    }
    fn decode(&mut self, bytes: &[u8]) -> Result<Option<serde_json::Value>, String> {
        serde_json::from_slice(bytes)
            .map(Some)
            .map_err(|e| format!("not valid JSON: {e}"))
    }
}

/// The decoder for a format without external dependencies (Avro needs a schema source).
pub fn simple_decoder(format: ValueFormat) -> Option<Box<dyn ValueDecoder>> {
    match format {
        ValueFormat::Bytes => Some(Box::new(BytesDecoder)),
        ValueFormat::String => Some(Box::new(StringDecoder)),
        ValueFormat::Json => Some(Box::new(JsonDecoder)),
        ValueFormat::Avro => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_accept_their_format_and_reject_others() {
        assert_eq!(JsonDecoder.decode(br#"{"a":1}"#), Ok(Some(serde_json::json!({"a": 1}))));
        assert!(JsonDecoder.decode(b"{not json").unwrap_err().contains("not valid JSON"));
        assert_eq!(StringDecoder.decode("héllo".as_bytes()), Ok(None));
        assert!(StringDecoder.decode(&[0xff, 0xfe]).is_err());
        assert_eq!(BytesDecoder.decode(&[0xff]), Ok(None));
    }
}
