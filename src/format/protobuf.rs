//! Protobuf both ways. Reading: the Confluent wire format (magic byte, schema id, message
//! indexes, message), each schema fetched once by id from the registry (as `.proto` text or a
//! base64 `FileDescriptorProto`, it and its references) and compiled with protox;
//! or raw messages of one message type of a local `.proto`. Writing: registering the `.proto`
//! under `<topic>-value` and framing each message, or raw messages. Messages become JSON by the
//! protobuf JSON mapping with the `.proto`'s field names and every field present (defaults
//! included, 64-bit integers as numbers), so an expression reads them as the generator wrote them.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use prost::Message as _;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FileDescriptor, MessageDescriptor, ReflectMessage, SerializeOptions,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver};
use schema_registry_converter::schema_registry_common::SchemaType;
use serde_json::Value as Json;

use super::codec::{DecodeError, ValueDecoder, ValueEncoder};
use super::registry_wire::{frame, split_frame, Registration, SchemaCache};
use crate::error::{Error, Result};
use crate::record::ValueFormat;

/// Schema texts by the name they are imported by (the root one among them), each in either
/// form [`parse_file`] reads.
struct Sources(HashMap<String, String>);

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> std::result::Result<File, protox::Error> {
        match self.0.get(name) {
            Some(text) => parse_file(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Whether a (trimmed) schema text is nothing but base64: the descriptor form. A `.proto` text
/// always holds a space, a quote or a semicolon.
fn is_base64(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// The file `name` from a schema text in either form the Confluent wire protocol allows: `.proto`
/// text, or a serialized `FileDescriptorProto` in base64 (as confluent-kafka-python's serializer
/// registers schemas). A descriptor is renamed `name`, the name it is imported or opened by: its
/// own may be another (the producer's file name; the root's is one tidegate picks).
fn parse_file(name: &str, text: &str) -> std::result::Result<File, protox::Error> {
    use base64::Engine as _;
    let trimmed = text.trim();
    if !is_base64(trimmed) {
        return File::from_source(name, text);
    }
    let bad = |why: String| {
        protox::Error::new(format!(
            "{name} is base64 but not a serialized FileDescriptorProto: {why}"
        ))
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(trimmed)
        .map_err(|e| bad(e.to_string()))?;
    let mut descriptor = prost_types::FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| bad(e.to_string()))?;
    descriptor.name = Some(name.to_string());
    Ok(File::from_file_descriptor_proto(descriptor))
}

/// Compiles `text` (named `name`) with its imports: the `references` texts first, then files in
/// `include` (beside a local schema), then the well-known `google/protobuf/*` types. `text` and
/// the references are each `.proto` text or a base64 `FileDescriptorProto` ([`parse_file`]).
pub fn compile(
    name: &str,
    text: &str,
    mut references: HashMap<String, String>,
    include: Option<&Path>,
) -> std::result::Result<FileDescriptor, String> {
    references.insert(name.to_string(), text.to_string());
    let mut resolver = ChainFileResolver::new();
    resolver.add(Sources(references));
    if let Some(dir) = include {
        resolver.add(IncludeFileResolver::new(dir.to_path_buf()));
    }
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(name)
        .map_err(|e| format!("not a valid Protobuf schema: {e}"))?;
    compiler
        .descriptor_pool()
        .get_file_by_name(name)
        .ok_or_else(|| format!("the compiled schema lacks {name}"))
}

/// A local `.proto` file, compiled (its imports from its directory or the well-known types),
/// with its text; errors name the config key.
pub fn read_schema(key: &str, path: &Path) -> Result<(FileDescriptor, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config(key, format!("cannot read {}: {e}", path.display())))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "schema.proto".into());
    let file = compile(&name, &text, HashMap::new(), path.parent())
        .map_err(|e| Error::config(key, format!("{}: {e}", path.display())))?;
    Ok((file, text))
}

/// The message to write (and to read raw values as): `name` (a full name, `package.Message`), or
/// the only top-level message of the file. Errors name `key`.
pub fn pick_message(key: &str, file: &FileDescriptor, name: Option<&str>) -> Result<MessageDescriptor> {
    let declared: Vec<MessageDescriptor> = message_indexes(file).into_iter().map(|(_, m)| m).collect();
    let names = || {
        declared
            .iter()
            .map(|m| m.full_name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(name) => declared.iter().find(|m| m.full_name() == name).cloned().ok_or_else(|| {
            Error::config(
                key,
                format!("the schema declares no message {name:?} (it declares {})", names()),
            )
        }),
        None => {
            let top: Vec<&MessageDescriptor> = declared.iter().filter(|m| m.parent_message().is_none()).collect();
            match top.as_slice() {
                [only] => Ok((*only).clone()),
                [] => Err(Error::config(key, "the schema declares no message")),
                _ => Err(Error::config(
                    key,
                    format!("the schema declares several messages: name one ({})", names()),
                )),
            }
        }
    }
}

/// Every message declared in `file` with its Confluent message index: its position among the
/// messages declared at its level, from the top (the messages protobuf generates for `map` and
/// `group` fields are not declared, and do not count).
pub fn message_indexes(file: &FileDescriptor) -> Vec<(Vec<i32>, MessageDescriptor)> {
    fn walk(
        messages: Vec<MessageDescriptor>,
        parent: Option<&MessageDescriptor>,
        path: &mut Vec<i32>,
        out: &mut Vec<(Vec<i32>, MessageDescriptor)>,
    ) {
        let is_group = |m: &MessageDescriptor| {
            parent.is_some_and(|p| p.fields().any(|f| f.is_group() && f.kind().as_message() == Some(m)))
        };
        let declared = messages.into_iter().filter(|m| !m.is_map_entry() && !is_group(m));
        for (i, message) in declared.enumerate() {
            path.push(i as i32);
            out.push((path.clone(), message.clone()));
            walk(message.child_messages().collect(), Some(&message), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(file.messages().collect(), None, &mut Vec::new(), &mut out);
    out
}

fn zigzag(n: i32) -> u64 {
    u64::from(((n << 1) ^ (n >> 31)) as u32)
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends the message index as Confluent writes it: zigzag varints of the count, then of each
/// index; `[0]` (the first message, by far the most common) as the single byte 0.
pub fn write_index(index: &[i32], out: &mut Vec<u8>) {
    if index == [0] {
        out.push(0);
        return;
    }
    prost::encoding::encode_varint(zigzag(index.len() as i32), out);
    for &i in index {
        prost::encoding::encode_varint(zigzag(i), out);
    }
}

/// The message index at the start of `bytes`, and the message after it.
pub fn read_index(mut bytes: &[u8]) -> std::result::Result<(Vec<i32>, &[u8]), String> {
    let bad = |e: prost::DecodeError| format!("no Confluent message index: {e}");
    let count = unzigzag(prost::encoding::decode_varint(&mut bytes).map_err(bad)?);
    if count == 0 {
        return Ok((vec![0], bytes));
    }
    // a message nests a handful of levels deep: a larger count is not an index
    if !(1..=64).contains(&count) {
        return Err(format!("no Confluent message index: {count} levels"));
    }
    let mut index = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let i = unzigzag(prost::encoding::decode_varint(&mut bytes).map_err(bad)?);
        index.push(i32::try_from(i).map_err(|_| format!("no Confluent message index: {i} is out of range"))?);
    }
    Ok((index, bytes))
}

/// A message as JSON: the `.proto`'s field names, every field (defaults too), 64-bit integers as
/// numbers, enums by name, bytes as base64.
pub fn message_to_json(message: &DynamicMessage) -> std::result::Result<Json, String> {
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| {
            format!(
                "cannot render message {} as JSON: {e}",
                message.descriptor().full_name()
            )
        })
}

/// A JSON object as a message of `descriptor` (field names as in the `.proto` or in camelCase; an
/// unknown field is an error).
pub fn json_to_message(descriptor: &MessageDescriptor, value: &Json) -> std::result::Result<DynamicMessage, String> {
    DynamicMessage::deserialize_with_options(descriptor.clone(), value, &DeserializeOptions::new())
        .map_err(|e| format!("the value does not fit message {}: {e}", descriptor.full_name()))
}

fn decode_message(descriptor: &MessageDescriptor, data: &[u8]) -> std::result::Result<Json, DecodeError> {
    let message = DynamicMessage::decode(descriptor.clone(), data)
        .map_err(|e| format!("not a Protobuf message {}: {e}", descriptor.full_name()))?;
    Ok(message_to_json(&message)?)
}

/// Decodes the Confluent wire format, compiling each schema once by id.
pub struct RegistryDecoder {
    schemas: SchemaCache<HashMap<Vec<i32>, MessageDescriptor>>,
}

impl RegistryDecoder {
    pub fn new(registry: &super::registry::RegistrySettings, timeout: Duration) -> Self {
        RegistryDecoder {
            schemas: SchemaCache::new(registry, SchemaType::Protobuf, timeout),
        }
    }
}

impl ValueDecoder for RegistryDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Protobuf
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        let (id, rest) = split_frame(bytes)?;
        // the schema first: a value framed for another schema type says so, not "no index"
        let messages = self.schemas.get(id, |fetched| {
            let file = compile(&format!("schema-{id}.proto"), &fetched.schema, fetched.references, None)?;
            Ok(message_indexes(&file).into_iter().collect())
        })?;
        let (index, data) = read_index(rest)?;
        let descriptor = messages
            .get(&index)
            .ok_or_else(|| format!("schema {id} has no message at index {index:?}"))?;
        decode_message(descriptor, data).map(Some)
    }
}

/// Decodes raw messages (no frame) of one message type of a local schema.
pub struct SchemaFileDecoder {
    message: MessageDescriptor,
}

impl SchemaFileDecoder {
    pub fn new(message: MessageDescriptor) -> Self {
        SchemaFileDecoder { message }
    }
}

impl ValueDecoder for SchemaFileDecoder {
    fn format(&self) -> ValueFormat {
        ValueFormat::Protobuf
    }

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Json>, DecodeError> {
        decode_message(&self.message, bytes).map(Some)
    }
}

/// Encodes JSON values as messages of one type: framed after registering the schema, or raw.
pub struct Encoder {
    message: MessageDescriptor,
    /// Its Confluent message index in the schema.
    index: Vec<i32>,
    registration: Option<Registration>,
}

impl Encoder {
    /// Raw messages of `message`.
    pub fn raw(message: MessageDescriptor) -> Self {
        Encoder {
            message,
            index: Vec::new(),
            registration: None,
        }
    }

    /// The wire format, `text` (the schema `message` was compiled from) registered at `url`
    /// under `<topic>-value`.
    pub fn registered(
        message: MessageDescriptor,
        text: String,
        registry: &super::registry::RegistrySettings,
        topic: &str,
    ) -> Self {
        let index = message_indexes(&message.parent_file())
            .into_iter()
            .find(|(_, m)| m == &message)
            .map(|(index, _)| index)
            .unwrap_or_else(|| vec![0]);
        Encoder {
            message,
            index,
            registration: Some(Registration::new(registry, topic, SchemaType::Protobuf, text)),
        }
    }
}

impl ValueEncoder for Encoder {
    fn encode(&self, value: &Json) -> std::result::Result<Vec<u8>, String> {
        let message = json_to_message(&self.message, value)?;
        let Some(registration) = &self.registration else {
            return Ok(message.encode_to_vec());
        };
        let mut out = frame(registration.id()?, self.index.len() + message.encoded_len());
        write_index(&self.index, &mut out);
        message
            .encode(&mut out)
            .map_err(|e| format!("Protobuf encoding failed: {e}"))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRADES: &str = r#"syntax = "proto3";
package tidegate.test;
message Trade {
  string type = 1;
  int64 seq = 2;
  double price = 3;
  int32 size = 4;
  map<string, string> tags = 5;
  message Leg { string venue = 1; }
  repeated Leg legs = 6;
}
message Close { string type = 1; }
"#;

    fn file() -> FileDescriptor {
        compile("trades.proto", TRADES, HashMap::new(), None).unwrap()
    }

    /// `file` as a producer registers it in the descriptor form: its serialized
    /// `FileDescriptorProto` (under the producer's own name for it) in base64.
    fn descriptor_form(file: &FileDescriptor) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(file.file_descriptor_proto().encode_to_vec())
    }

    /// Each declared message by its Confluent index, with its whole declaration.
    fn declared(file: &FileDescriptor) -> Vec<(Vec<i32>, String, prost_types::DescriptorProto)> {
        message_indexes(file)
            .into_iter()
            .map(|(i, m)| (i, m.full_name().to_string(), m.descriptor_proto().clone()))
            .collect()
    }

    #[test]
    fn a_schema_in_its_descriptor_form_compiles_as_its_text_does() {
        let text = file();
        // opened by another name than the producer's ("trades.proto"), with a line break after it
        let encoded = format!("{}\n", descriptor_form(&text));
        let descriptor = compile("schema-7.proto", &encoded, HashMap::new(), None).unwrap();
        assert_eq!(descriptor.name(), "schema-7.proto");
        assert_eq!(declared(&descriptor), declared(&text));
        assert_eq!(declared(&text).len(), 3, "the messages compared");
        // a message written with the text's descriptor reads the same with the other
        let value = json!({"type": "TRADE", "seq": 7, "price": 1.5, "size": 2, "tags": {"desk": "b"},
                           "legs": [{"venue": "XLON"}]});
        let written = pick_message("k", &text, Some("tidegate.test.Trade")).unwrap();
        let bytes = Encoder::raw(written).encode(&value).unwrap();
        let read = pick_message("k", &descriptor, Some("tidegate.test.Trade")).unwrap();
        assert_eq!(SchemaFileDecoder::new(read).decode(&bytes).unwrap().unwrap(), value);
    }

    #[test]
    fn a_descriptor_form_root_imports_descriptor_form_references_and_well_known_types() {
        let venue_text = "syntax = \"proto3\"; package ref; message Venue { string mic = 1; }";
        let root_text = "syntax = \"proto3\"; package tidegate.test;
                         import \"ref/venue.proto\"; import \"google/protobuf/timestamp.proto\";
                         message Fill { ref.Venue venue = 1; google.protobuf.Timestamp at = 2; }";
        // compiled as a producer compiles them, the root under a name of its own
        let texts = HashMap::from([("ref/venue.proto".to_string(), venue_text.to_string())]);
        let root = compile("acc_fill.proto", root_text, texts.clone(), None).unwrap();
        let imported = |name: &str| {
            let file = root.dependencies().find(|f| f.name() == name).unwrap();
            descriptor_form(&file)
        };
        let venue = HashMap::from([("ref/venue.proto".to_string(), imported("ref/venue.proto"))]);
        let value = json!({"venue": {"mic": "XNAS"}, "at": "2026-11-27T14:30:00.250Z"});
        let round_trip = |file: FileDescriptor| {
            let fill = pick_message("k", &file, None).unwrap();
            let bytes = Encoder::raw(fill.clone()).encode(&value).unwrap();
            SchemaFileDecoder::new(fill).decode(&bytes).unwrap().unwrap()
        };
        // the well-known type from protox's own copy, the reference from its descriptor
        let file = compile("schema-9.proto", &descriptor_form(&root), venue.clone(), None).unwrap();
        assert_eq!(round_trip(file), value);
        // the forms mix, root and references each in its own
        let file = compile("schema-9.proto", &descriptor_form(&root), texts, None).unwrap();
        assert_eq!(round_trip(file), value);
        let file = compile("schema-9.proto", root_text, venue.clone(), None).unwrap();
        assert_eq!(round_trip(file), value);
        // a well-known type registered as a reference in the descriptor form is taken too
        let mut with_timestamp = venue;
        let timestamp = "google/protobuf/timestamp.proto";
        with_timestamp.insert(timestamp.to_string(), imported(timestamp));
        let file = compile("schema-9.proto", &descriptor_form(&root), with_timestamp, None).unwrap();
        assert_eq!(round_trip(file), value);
        // without its reference the root cannot compile, and says what it lacks
        let missing = compile("schema-9.proto", &descriptor_form(&root), HashMap::new(), None).unwrap_err();
        assert!(missing.contains("ref/venue.proto"), "{missing}");
    }

    #[test]
    fn base64_that_is_no_descriptor_is_an_error_naming_the_schema() {
        // not a message at all; a tag 0; a truncated varint; not whole base64
        for garbage in ["bm90IGEgZGVzY3JpcHRvcg==", "AAAA", "////", "abc"] {
            let e = compile("schema-5.proto", garbage, HashMap::new(), None).unwrap_err();
            assert!(
                e.contains("schema-5.proto is base64 but not a serialized FileDescriptorProto"),
                "{garbage}: {e}"
            );
        }
        let references = HashMap::from([("ref/venue.proto".to_string(), "AAAA".to_string())]);
        let root = "syntax = \"proto3\"; import \"ref/venue.proto\"; message A { int32 x = 1; }";
        let e = compile("schema-6.proto", root, references, None).unwrap_err();
        assert!(e.contains("ref/venue.proto is base64 but not"), "{e}");
    }

    #[test]
    fn message_indexes_follow_confluent_skipping_map_entries() {
        let indexes: Vec<(Vec<i32>, String)> = message_indexes(&file())
            .into_iter()
            .map(|(i, m)| (i, m.full_name().to_string()))
            .collect();
        assert_eq!(
            indexes,
            vec![
                (vec![0], "tidegate.test.Trade".to_string()),
                (vec![0, 0], "tidegate.test.Trade.Leg".to_string()),
                (vec![1], "tidegate.test.Close".to_string()),
            ]
        );
        for index in [vec![0], vec![1], vec![0, 0], vec![3, -2, 70000]] {
            let mut bytes = Vec::new();
            write_index(&index, &mut bytes);
            bytes.push(0xaa);
            assert_eq!(read_index(&bytes), Ok((index.clone(), &[0xaa][..])), "{index:?}");
        }
        assert!(read_index(&[0x80]).is_err(), "a truncated varint");
        assert!(read_index(&[0x7f]).is_err(), "a count of -64");
        assert!(read_index(&[0x7e]).is_err(), "a count of 63 without the indexes");
    }

    #[test]
    fn the_message_is_named_or_the_only_one() {
        let f = file();
        assert_eq!(
            pick_message("k", &f, Some("tidegate.test.Close")).unwrap().name(),
            "Close"
        );
        let several = pick_message("k", &f, None).unwrap_err().to_string();
        assert!(
            several.contains("several messages") && several.contains("tidegate.test.Close"),
            "{several}"
        );
        assert!(pick_message("k", &f, Some("Trade"))
            .unwrap_err()
            .to_string()
            .contains("no message \"Trade\""));
        let one = compile(
            "one.proto",
            "syntax = \"proto3\"; message A { int32 x = 1; }",
            HashMap::new(),
            None,
        )
        .unwrap();
        assert_eq!(pick_message("k", &one, None).unwrap().full_name(), "A");
        assert!(compile("bad.proto", "syntax = \"proto3\"; message {", HashMap::new(), None).is_err());
    }

    #[test]
    fn raw_messages_round_trip_through_json() {
        let trade = pick_message("k", &file(), Some("tidegate.test.Trade")).unwrap();
        let value = json!({"type": "TRADE", "seq": 9_007_199_254_740_993_i64, "price": 101.25, "size": 30,
                           "tags": {"desk": "a"}, "legs": [{"venue": "XNAS"}]});
        let bytes = Encoder::raw(trade.clone()).encode(&value).unwrap();
        let decoded = SchemaFileDecoder::new(trade.clone()).decode(&bytes).unwrap().unwrap();
        assert_eq!(decoded, value);
        // absent fields come back with their defaults, so an expression can compare them
        let bytes = Encoder::raw(trade.clone()).encode(&json!({"type": "CLOSE"})).unwrap();
        assert_eq!(
            SchemaFileDecoder::new(trade).decode(&bytes).unwrap().unwrap(),
            json!({"type": "CLOSE", "seq": 0, "price": 0.0, "size": 0, "tags": {}, "legs": []})
        );
    }

    #[test]
    fn well_known_types_are_imported_and_mapped_as_protobuf_json() {
        let text = "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\";
                    message At { google.protobuf.Timestamp ts = 1; }";
        let file = compile("at.proto", text, HashMap::new(), None).unwrap();
        let at = pick_message("k", &file, None).unwrap();
        // an RFC 3339 text (the generator's timestamps) is a Timestamp, and comes back as one
        let value = json!({"ts": "2026-11-27T14:30:00.250Z"});
        let bytes = Encoder::raw(at.clone()).encode(&value).unwrap();
        assert_eq!(SchemaFileDecoder::new(at).decode(&bytes).unwrap().unwrap(), value);
    }

    #[test]
    fn values_that_do_not_fit_and_garbage_are_errors_not_panics() {
        let trade = pick_message("k", &file(), Some("tidegate.test.Trade")).unwrap();
        let encoder = Encoder::raw(trade.clone());
        assert!(encoder.encode(&json!({"nope": 1})).unwrap_err().contains("nope"));
        assert!(encoder.encode(&json!({"size": "big"})).is_err());
        assert!(encoder.encode(&json!([1, 2])).is_err());
        let mut decoder = SchemaFileDecoder::new(trade);
        assert!(decoder.decode(&[0xff, 0xff, 0xff]).is_err());
        assert!(
            decoder.decode(&[0x0a, 0x10, b'x']).is_err(),
            "a string longer than the bytes"
        );
        // the wire decoder rejects what is not framed before it asks any registry
        let mut wire = RegistryDecoder::new(
            &crate::format::registry::RegistrySettings::from_url("http://127.0.0.1:9"),
            Duration::from_millis(1),
        );
        assert!(wire
            .decode(b"{}")
            .unwrap_err()
            .to_string()
            .contains("Confluent wire format"));
    }
}
