//! Unit tests of the Kafka emitter's filter: before or after decoding, the position, the end.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::core::EofOnRecordEvaluator;
use crate::metrics::KafkaMetrics;
use crate::record::{Header, ValueFormat};

fn record(offset: i64, value: &[u8], region: &str) -> Record {
    Record {
        topic: Some(Arc::from("t")),
        partition: Some(0),
        offset: Some(offset),
        timestamp: Some(1_000 + offset),
        key: None,
        value: Some(Bytes::copy_from_slice(value)),
        decoded: None,
        format: ValueFormat::Bytes,
        decoded_key: None,
        headers: vec![Header {
            key: "region".into(),
            value: Some(region.as_bytes().to_vec()),
        }],
        dead_letter: None,
    }
}

fn emitter(filter: &str, eof_reads: Decoded) -> KafkaRecordEmitter {
    let decoder = crate::format::simple_decoder(ValueFormat::Json).expect("the JSON decoder");
    let filter = RecordExpression::compile(filter).expect("a filter");
    KafkaRecordEmitter::new(decoder, DecodeErrorPolicy::Fail, KafkaMetrics::noop().reader(0))
        .filter(Some(Arc::new(filter)), eof_reads)
}

fn eof(expression: &str) -> Option<Arc<dyn EofOnRecordEvaluator<Record>>> {
    Some(Arc::new(
        RecordExpression::compile(expression).expect("an eof expression"),
    ))
}

#[test]
fn a_header_filter_rejects_an_undecodable_value_without_decoding_it() {
    let mut e = emitter("headers.region == 'eu'", Decoded::NOTHING);
    let mut out = ReaderOutput::new(None, false);
    let mut split = KafkaPartitionSplit::new("t", 0, 0, None);
    e.emit_record(record(0, b"{not json", "us"), &mut out, &mut split)
        .expect("never decoded, so no decode error under the fail policy");
    assert_eq!(split.next_offset, 1, "a rejected record advances the split");
    e.emit_record(record(1, br#"{"n":1}"#, "eu"), &mut out, &mut split)
        .unwrap();
    let emitted = out.take_records();
    assert_eq!(emitted.len(), 1);
    assert_eq!(emitted[0].decoded, Some(serde_json::json!({"n": 1})));
    assert_eq!(out.take_filtered(), 1);
    // one it accepts is decoded, and an undecodable one follows the policy
    let failed = e.emit_record(record(2, b"{not json", "eu"), &mut out, &mut split);
    assert!(matches!(failed, Err(Error::Decode { offset: 2, .. })), "{failed:?}");
    assert_eq!(split.next_offset, 2, "not advanced past the failed record");
}

#[test]
fn a_value_filter_runs_on_the_decoded_value_and_an_undecodable_one_follows_the_policy() {
    let mut e = emitter("value.n > 1", Decoded::NOTHING);
    let mut out = ReaderOutput::new(None, false);
    let mut split = KafkaPartitionSplit::new("t", 0, 0, None);
    e.emit_record(record(0, br#"{"n":1}"#, "eu"), &mut out, &mut split)
        .unwrap();
    e.emit_record(record(1, br#"{"n":2}"#, "eu"), &mut out, &mut split)
        .unwrap();
    // a missing field fails the evaluation: rejected
    e.emit_record(record(2, br#"{"m":5}"#, "eu"), &mut out, &mut split)
        .unwrap();
    assert_eq!(
        out.take_records().iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![Some(1)]
    );
    assert_eq!((out.take_filtered(), split.next_offset), (2, 3));
    let failed = e.emit_record(record(3, b"nope", "eu"), &mut out, &mut split);
    assert!(matches!(failed, Err(Error::Decode { offset: 3, .. })), "{failed:?}");
}

#[test]
fn the_end_of_stream_sees_a_rejected_record_decoded_for_it() {
    // the filter reads headers only, the end the value: a rejected marker still ends the split,
    // and is not emitted though markers are
    for emit_marker in [false, true] {
        let mut e = emitter(
            "headers.region == 'eu'",
            Decoded {
                key: false,
                value: true,
            },
        );
        let mut out = ReaderOutput::new(eof("value.type == 'CLOSE'"), emit_marker);
        let mut split = KafkaPartitionSplit::new("t", 0, 0, None);
        e.emit_record(record(0, br#"{"type":"T"}"#, "eu"), &mut out, &mut split)
            .unwrap();
        // undecodable and rejected: no error, and not an end
        e.emit_record(record(1, b"{not json", "us"), &mut out, &mut split)
            .unwrap();
        assert!(!out.is_end_of_split());
        e.emit_record(record(2, br#"{"type":"CLOSE"}"#, "us"), &mut out, &mut split)
            .unwrap();
        assert!(out.is_end_of_split(), "emit_marker {emit_marker}");
        assert_eq!(
            out.take_records().len(),
            1,
            "only the accepted record before the marker"
        );
        assert_eq!((out.take_filtered(), split.next_offset), (2, 3));
    }
}

#[test]
fn a_marker_the_sink_cannot_route_still_ends_its_split() {
    // a topic template needs a header the marker lacks: a marker that is not written needs no
    // route; one that is follows the decode policy, and the split ends there either way
    let check: crate::connector::RecordCheck = Arc::new(|r: &Record| {
        if r.headers.iter().any(|h| h.key == "route") {
            Ok(())
        } else {
            Err("no header route".to_string())
        }
    });
    for (emit_marker, policy) in [
        (false, DecodeErrorPolicy::Fail),
        (true, DecodeErrorPolicy::Skip),
        (true, DecodeErrorPolicy::DeadLetter),
    ] {
        let decoder = crate::format::simple_decoder(ValueFormat::Json).expect("the JSON decoder");
        let mut e =
            KafkaRecordEmitter::new(decoder, policy, KafkaMetrics::noop().reader(0)).sink_check(Some(check.clone()));
        let mut out = ReaderOutput::new(eof("value.type == 'CLOSE'"), emit_marker);
        let mut split = KafkaPartitionSplit::new("t", 0, 0, None);
        let mut routed = record(0, br#"{"type":"T"}"#, "eu");
        routed.headers.push(Header {
            key: "route".into(),
            value: Some(b"x".to_vec()),
        });
        e.emit_record(routed, &mut out, &mut split).unwrap();
        e.emit_record(record(1, br#"{"type":"CLOSE"}"#, "eu"), &mut out, &mut split)
            .unwrap_or_else(|err| panic!("emit_marker {emit_marker}, {policy:?}: {err}"));
        assert!(out.is_end_of_split(), "emit_marker {emit_marker}, {policy:?}");
        assert_eq!(split.next_offset, 2);
    }
}
