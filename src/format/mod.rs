//! Record formats: decoding values read from Kafka (`bytes`, `string`, `json`, `avro`,
//! `protobuf`, `json_schema`) into the
//! form the end-of-stream expression and the JSON-lines envelope use, encoding generated values,
//! and the decode-error policy.

pub mod avro;
mod codec;
pub(crate) mod config;
mod factory;
mod json;
mod json_scan;
pub(crate) mod json_schema;
mod plain;
pub(crate) mod protobuf;
pub(crate) mod registry;
pub(crate) mod registry_wire;
pub(crate) mod schema_config;

pub use codec::{DecodeError, DecodeErrorPolicy, DecoderFactory, EncoderHandle, ValueDecoder, ValueEncoder};
pub(crate) use config::AvroConfig;
pub use factory::{decoder_factory, encoder_for, key_decoder_factory, key_encoder_for, simple_decoder};
pub use json::{JsonDecoder, JsonFieldsDecoder};
pub use plain::{BytesDecoder, StringDecoder};
pub(crate) use schema_config::WireSchema;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_accept_their_format_and_reject_others() {
        assert_eq!(JsonDecoder.decode(br#"{"a":1}"#), Ok(Some(serde_json::json!({"a": 1}))));
        assert!(JsonDecoder
            .decode(b"{not json")
            .unwrap_err()
            .to_string()
            .contains("not valid JSON"));
        assert_eq!(StringDecoder.decode("héllo".as_bytes()), Ok(None));
        assert!(StringDecoder.decode(&[0xff, 0xfe]).is_err());
        assert_eq!(BytesDecoder.decode(&[0xff]), Ok(None));
    }
}
