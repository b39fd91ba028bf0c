//! Tests of the end-of-stream expressions: compile-time checks, evaluation over records.

use super::*;
use crate::record::Header;
use bytes::Bytes;
use serde_json::json;

fn record(value: serde_json::Value) -> Record {
    Record {
        topic: Some(Arc::from("trades")),
        partition: Some(2),
        offset: Some(41),
        timestamp: Some(1_700_000_000_000),
        key: Some(Bytes::from_static(b"AAPL")),
        value: Some(serde_json::to_vec(&value).unwrap().into()),
        decoded: Some(value),
        format: ValueFormat::Json,
        decoded_key: None,
        headers: vec![Header {
            key: "source".into(),
            value: Some(b"nyse".to_vec()),
        }],
        dead_letter: None,
    }
}

#[test]
fn matches_on_value_fields_and_metadata() {
    let close = record(json!({"type": "MARKET_CLOSE", "price": 10.5, "size": 3}));
    let trade = record(json!({"type": "TRADE", "price": 10.5, "size": 3}));
    let e = RecordExpression::compile(r#"value.type == "MARKET_CLOSE""#).unwrap();
    assert_eq!(e.evaluate(&close), Ok(true));
    assert_eq!(e.evaluate(&trade), Ok(false));
    for (expr, expected) in [
        ("offset == 41 && partition == 2", true),
        ("topic == 'trades' && key == 'AAPL'", true),
        ("headers.source == 'nyse'", true),
        ("value.size > 2 && value.price > 10.0", true),
        ("timestamp >= 1700000000000", true),
        ("has(value.missing)", false),
    ] {
        let e = RecordExpression::compile(expr).unwrap();
        assert_eq!(e.evaluate(&close), Ok(expected), "{expr}");
    }
}

#[test]
fn a_decoded_key_is_the_key() {
    let mut r = record(json!({"type": "TRADE"}));
    let e = RecordExpression::compile("key.seq == 3").unwrap();
    assert!(
        e.evaluate(&r).is_err() || e.evaluate(&r) == Ok(false),
        "a text key has no fields"
    );
    r.decoded_key = Some(json!({"seq": 3}));
    assert_eq!(e.evaluate(&r), Ok(true));
}

#[test]
fn only_the_selected_fields_of_value_are_needed() {
    let fields = |e: &str| RecordExpression::compile(e).unwrap().value_fields;
    assert_eq!(fields(r#"value.type == "X""#), Some(vec!["type".to_string()]));
    assert_eq!(
        fields("has(value.a) && value.b > 1 || offset > 3"),
        Some(vec!["a".to_string(), "b".to_string()])
    );
    assert_eq!(fields("size(value) > 2"), None);
    assert_eq!(fields("value == {'a': 1}"), None);
    assert_eq!(fields("[1, 2].exists(value, value > 1)"), None);
    // and evaluating through them gives the same answers as the whole value
    let r = record(json!({"type": "MARKET_CLOSE", "a": 1, "b": 2, "c": [1, 2, 3]}));
    for (e, want) in [
        (r#"value.type == "MARKET_CLOSE""#, true),
        ("has(value.a) && value.b > 1", true),
        ("has(value.zzz)", false),
        ("size(value) == 4", true),
        ("size(value.c) == 3", true),
    ] {
        assert_eq!(RecordExpression::compile(e).unwrap().evaluate(&r), Ok(want), "{e}");
    }
}

#[test]
fn a_failing_evaluation_is_no_match_and_counted() {
    let e = RecordExpression::compile("value.missing == 1").unwrap();
    let r = record(json!({"type": "TRADE"}));
    assert!(e.evaluate(&r).is_err());
    assert!(!e.is_end_of_stream(&r));
    assert_eq!(e.errors(), 1);
}

#[test]
fn a_repeated_header_is_a_list_as_in_the_envelope() {
    let mut r = record(json!({}));
    r.headers = vec![
        Header {
            key: "tag".into(),
            value: Some(b"a".to_vec()),
        },
        Header {
            key: "tag".into(),
            value: Some(b"b".to_vec()),
        },
        Header {
            key: "one".into(),
            value: Some(b"x".to_vec()),
        },
    ];
    for (expr, want) in [
        ("headers.tag == ['a', 'b']", true),
        ("'b' in headers.tag", true),
        ("headers.one == 'x'", true),
    ] {
        assert_eq!(
            RecordExpression::compile(expr).unwrap().evaluate(&r),
            Ok(want),
            "{expr}"
        );
    }
}

#[test]
fn unknown_functions_and_non_conditions_are_compile_errors() {
    for (expr, says) in [
        ("foo(value)", "unknown function foo"),
        ("value.i + 1", "gives a number"),
        ("offset * 2", "gives a number"),
        ("'text'", "gives text"),
        ("size(value.c)", "gives a number"),
        ("offset > 1 ? 'a' : 'b'", "gives text"),
    ] {
        let err = RecordExpression::compile(expr).unwrap_err();
        assert!(err.contains(says), "{expr}: {err}");
    }
    // conditions, or values known only when evaluated, compile
    for expr in [
        "value.flag",
        "value.type.startsWith('MARKET')",
        "has(value.a) && !value.b",
        "value.list.exists(x, x > 1)",
        "offset in [1, 2]",
        "size(value.c) > 2",
    ] {
        assert!(RecordExpression::compile(expr).is_ok(), "{expr}");
    }
}

#[test]
fn compile_errors_say_where_and_unknown_variables_are_named() {
    let err = RecordExpression::compile("value.type == ").unwrap_err();
    assert!(err.contains("1:"), "{err}");
    let err = RecordExpression::compile("vaule.type == 'X'").unwrap_err();
    assert!(err.contains("vaule"), "{err}");
}

#[test]
fn direct_checks_agree_with_cel_on_generated_records() {
    use rand::{Rng, SeedableRng};
    let direct = [
        r#"value.type == "MARKET_CLOSE""#,
        r#""MARKET_CLOSE" == value.type"#,
        r#"value.type != "TRADE""#,
        r#"has(value.type) && value.type == "MARKET_CLOSE""#,
        r#"value.type == "MARKET_CLOSE" || value.n == 3"#,
        r#"!(value.flag == true) && value.n != -1"#,
        "has(value.n) || has(value.flag)",
        r#"value.type == "" && !has(value.n)"#,
    ];
    // left to CEL entirely: other operators, literals that compare across types, other variables
    let cel_only = [
        "value.n == 3.0",
        "value.n > 2",
        r#"value.type.startsWith("MARKET")"#,
        r#"key == "AAPL""#,
        "value.flag",
        "value.n == null",
    ];
    let pool = [
        None,
        Some(json!("MARKET_CLOSE")),
        Some(json!("TRADE")),
        Some(json!("")),
        Some(json!(3)),
        Some(json!(3.0)),
        Some(json!(-1)),
        Some(json!(18446744073709551615u64)),
        Some(json!(true)),
        Some(json!(false)),
        Some(json!(null)),
        Some(json!([3])),
        Some(json!({"type": "MARKET_CLOSE"})),
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let records: Vec<Record> = (0..400)
        .map(|i| {
            if i % 50 == 0 {
                return record(json!(["not", "an", "object"]));
            }
            let mut object = serde_json::Map::new();
            for field in ["type", "n", "flag"] {
                if let Some(v) = &pool[rng.random_range(0..pool.len())] {
                    object.insert(field.to_string(), v.clone());
                }
            }
            record(serde_json::Value::Object(object))
        })
        .collect();
    for (source, expect_direct) in direct
        .iter()
        .map(|s| (s, true))
        .chain(cel_only.iter().map(|s| (s, false)))
    {
        let e = RecordExpression::compile(source).unwrap();
        assert_eq!(e.is_direct(), expect_direct, "{source}");
        let (mut decided, mut matched) = (0, 0);
        for r in &records {
            let cel = e.evaluate_with_cel(r);
            assert_eq!(e.evaluate(r), cel, "{source} on {:?}", r.decoded);
            decided += usize::from(cel.is_ok());
            matched += usize::from(cel == Ok(true));
        }
        // the generated records reach both outcomes and the failures, so the comparison means something
        assert!(
            matched > 0 && decided > matched && decided < records.len() || !expect_direct,
            "{source}: {matched} matched, {decided} decided"
        );
    }
}

#[test]
fn what_an_expression_reads_decides_whether_it_runs_before_decoding() {
    let reads = |e: &str| {
        let e = RecordExpression::compile(e).unwrap();
        (e.reads_value(), e.reads_key())
    };
    assert_eq!(reads("headers.source == 'nyse'"), (false, false));
    assert_eq!(
        reads("topic == 't' && partition == 1 && offset > 3 && timestamp > 0"),
        (false, false)
    );
    assert_eq!(reads("key == 'AAPL'"), (false, true));
    assert_eq!(reads("value.type == 'TRADE'"), (true, false));
    assert_eq!(reads("has(headers.x) || value == 'x'"), (true, false));
    // inside a comprehension, and a comprehension variable that shadows `value`: decoded, to be safe
    assert_eq!(reads("[1, 2].exists(x, x == value.n)"), (true, false));
    assert_eq!(reads("[1, 2].exists(value, value > 1)"), (true, false));
}

#[test]
fn a_filter_is_evaluated_on_an_undecoded_record() {
    // a value that is not JSON, never decoded: a filter over headers still answers
    let mut r = record(json!(null));
    r.value = Some(Bytes::from_static(b"{not json"));
    r.decoded = None;
    let e = RecordExpression::compile("headers.source == 'nyse'").unwrap();
    assert!(e.matches(&r));
    let e = RecordExpression::compile("headers.source == 'lse'").unwrap();
    assert!(!e.matches(&r));
    // a missing header fails the evaluation: no match, counted
    let e = RecordExpression::compile("headers.region == 'eu'")
        .unwrap()
        .in_role("filter");
    assert!(!e.matches(&r));
    assert_eq!(e.errors(), 1);
}

#[test]
fn direct_header_checks_agree_with_cel_on_generated_headers() {
    use rand::{Rng, SeedableRng};
    let direct = [
        r#"headers.region == "eu""#,
        r#""eu" != headers.region"#,
        "has(headers.region)",
        r#"has(headers.region) && headers.region == "eu" || headers.desk == "fx""#,
        r#"headers.region == "eu" && value.type == "TRADE""#,
    ];
    let cel_only = [
        r#"headers.region.startsWith("e")"#,
        "headers.region == 1",
        r#"headers == {"a": "b"}"#,
    ];
    let values: [Option<&[u8]>; 5] = [Some(b"eu"), Some(b"us"), Some(b""), Some(&[0xff, 0xfe]), None];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let records: Vec<Record> = (0..400)
        .map(|i| {
            let mut r = record(if i % 2 == 0 {
                json!({"type": "TRADE"})
            } else {
                json!("text")
            });
            r.headers.clear();
            for name in ["region", "region", "desk"] {
                if rng.random_range(0..3) > 0 {
                    let value = values[rng.random_range(0..values.len())];
                    r.headers.push(Header {
                        key: name.into(),
                        value: value
                            .map(|v| v.to_vec())
                            .or(Some(b"fx".to_vec()).filter(|_| name == "desk")),
                    });
                }
            }
            r
        })
        .collect();
    for (source, expect_direct) in direct
        .iter()
        .map(|s| (s, true))
        .chain(cel_only.iter().map(|s| (s, false)))
    {
        let e = RecordExpression::compile(source).unwrap();
        assert_eq!(e.is_direct(), expect_direct, "{source}");
        let (mut decided, mut matched) = (0, 0);
        for r in &records {
            let cel = e.evaluate_with_cel(r);
            assert_eq!(e.evaluate(r), cel, "{source} on {:?}", r.headers);
            decided += usize::from(cel.is_ok());
            matched += usize::from(cel == Ok(true));
        }
        assert!(
            matched > 0 && decided > matched || !expect_direct,
            "{source}: {matched} matched, {decided} decided"
        );
    }
}
