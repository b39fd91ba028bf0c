//! Decode throughput of the record formats, as ratios to raw bytes: the Kafka emitter path for a
//! 100-byte trade record as `bytes` (no decoding), `string`, `json`, `json` with only the fields an
//! end-of-stream expression selects (also with the decoded fields recycled, as the emitter does
//! when no sink prints them), and Avro (a local schema); plus Avro decoded through serde into
//! a typed struct, the path a typed consumer would take and a generic daemon cannot.
//!
//!   cargo bench --bench formats

use apache_avro::Schema;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde::Deserialize;
use tidegate::format::avro::{SchemaFileDecoder, SchemaFileEncoder};
use tidegate::format::{BytesDecoder, JsonDecoder, JsonFieldsDecoder, StringDecoder, ValueDecoder, ValueEncoder};

const TRADE_AVSC: &str = include_str!("../config/trade.avsc");
const N: usize = 1000;

fn trade(i: usize) -> serde_json::Value {
    serde_json::json!({
        "type": "TRADE", "seq": i, "trade_id": "5b1c6c8e-2f1e-4d7a-9c3b-0e8f6a1d2c3b",
        "ts": "2026-11-27T14:30:05.123Z", "symbol": "AAPL", "side": "BUY",
        "price": 187.25, "size": 300, "venue": "XNAS", "date": null
    })
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Trade {
    r#type: String,
    seq: Option<i64>,
    trade_id: Option<String>,
    ts: String,
    symbol: Option<String>,
    side: Option<String>,
    price: Option<f64>,
    size: Option<i64>,
    venue: Option<String>,
    date: Option<String>,
}

fn decode_all(d: &mut dyn ValueDecoder, values: &[Vec<u8>]) {
    for v in values {
        std::hint::black_box(d.decode(std::hint::black_box(v)).expect("decodes"));
    }
}

/// As the Kafka emitter decodes for an expression that reads the fields (no sink prints them): each
/// decoded value goes back to the decoder once evaluated.
fn decode_recycled(d: &mut dyn ValueDecoder, values: &[Vec<u8>]) {
    for v in values {
        if let Some(decoded) = d.decode(std::hint::black_box(v)).expect("decodes") {
            d.recycle(std::hint::black_box(decoded));
        }
    }
}

fn formats(c: &mut Criterion) {
    let json: Vec<Vec<u8>> = (0..N).map(|i| serde_json::to_vec(&trade(i)).unwrap()).collect();
    let schema = Schema::parse_str(TRADE_AVSC).unwrap();
    let encoder = SchemaFileEncoder::new(schema.clone()).unwrap();
    let avro: Vec<Vec<u8>> = (0..N).map(|i| encoder.encode(&trade(i)).unwrap()).collect();

    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("bytes", |b| b.iter(|| decode_all(&mut BytesDecoder, &json)));
    g.bench_function("string", |b| b.iter(|| decode_all(&mut StringDecoder, &json)));
    g.bench_function("json", |b| b.iter(|| decode_all(&mut JsonDecoder, &json)));
    let mut fields = JsonFieldsDecoder::new(vec!["type".into()]);
    g.bench_function("json_selected_field", |b| b.iter(|| decode_all(&mut fields, &json)));
    g.bench_function("json_selected_field_recycled", |b| {
        b.iter(|| decode_recycled(&mut fields, &json))
    });
    let mut avro_decoder = SchemaFileDecoder::new(schema.clone()).unwrap();
    g.bench_function("avro_generic_value_to_json", |b| {
        b.iter(|| decode_all(&mut avro_decoder, &avro))
    });
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
        .build()
        .unwrap();
    g.bench_function("avro_serde_typed_struct", |b| {
        b.iter(|| {
            for v in &avro {
                let mut slice = v.as_slice();
                std::hint::black_box(reader.read_deser::<Trade>(&mut slice).expect("decodes"));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, formats);
criterion_main!(benches);
