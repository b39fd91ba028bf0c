//! Topic templates and header rules, without a broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::*;

fn header(k: &str, v: Option<&[u8]>) -> Header {
    Header {
        key: k.into(),
        value: v.map(<[u8]>::to_vec),
    }
}

fn record() -> Record {
    Record {
        topic: Some(Arc::from("orders")),
        partition: Some(3),
        key: Some(Bytes::from_static(b"eu")),
        headers: vec![
            header("tidegate-source-topic", Some(b"payments")),
            header("tidegate-source-topic", Some(b"second")),
            header("null", None),
            header("bin", Some(&[0xff, 0xfe])),
        ],
        ..Record::default()
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn globs_match_stars_anywhere() {
    assert!(glob_matches("x-replicator-*", "x-replicator-hop"));
    assert!(glob_matches("x-replicator-*", "x-replicator-"));
    assert!(!glob_matches("x-replicator-*", "x-replicator"));
    assert!(glob_matches("*-id", "trace-id"));
    assert!(glob_matches("a*b*c", "aXXbYYc"));
    assert!(!glob_matches("a*b*c", "aXXcYYb"));
    assert!(glob_matches("exact", "exact"));
    assert!(!glob_matches("exact", "exactly"));
    assert!(glob_matches("*", "anything"));
    assert!(!glob_matches("ab*ba", "aba"), "the prefix and suffix must not overlap");
}

#[test]
fn templates_resolve_over_the_record() {
    let r = record();
    let t = |s: &str| TopicTemplate::parse(s).unwrap().resolve(&r).map(|c| c.into_owned());
    assert_eq!(t("{topic}-replay").as_deref(), Ok("orders-replay"));
    assert_eq!(
        t("{headers.tidegate-source-topic}").as_deref(),
        Ok("payments"),
        "the first value"
    );
    assert_eq!(t("p{partition}.{key}").as_deref(), Ok("p3.eu"));
    assert_eq!(t("plain").as_deref(), Ok("plain"));
    assert!(TopicTemplate::parse("plain").unwrap().literal().is_some());
    assert!(TopicTemplate::parse("{topic}").unwrap().literal().is_none());

    let missing = t("{headers.nope}").unwrap_err();
    assert!(missing.contains("no header \"nope\""), "{missing}");
    assert!(t("{headers.null}").unwrap_err().contains("is null"));
    assert!(t("{headers.bin}").unwrap_err().contains("not UTF-8"));
    let datagen = Record::default();
    let none = TopicTemplate::parse("{topic}").unwrap().resolve(&datagen).unwrap_err();
    assert!(none.contains("no topic"), "{none}");
    let mut spaced = record();
    spaced.key = Some(Bytes::from_static(b"a b"));
    let bad = TopicTemplate::parse("{key}").unwrap().resolve(&spaced).unwrap_err();
    assert!(bad.contains("not a valid topic name"), "{bad}");
    let mut empty = record();
    empty.key = Some(Bytes::new());
    assert!(TopicTemplate::parse("{key}")
        .unwrap()
        .resolve(&empty)
        .unwrap_err()
        .contains("empty"));
}

#[test]
fn bad_templates_are_config_errors() {
    for (text, wanted) in [
        ("{topik}", "unknown field {topik}"),
        ("{headers.}", "unknown field"),
        ("{topic", "without its '}'"),
        ("topic}", "without its '{'"),
        ("", "must not be empty"),
        ("a topic", "not a valid topic name"),
    ] {
        let e = TopicTemplate::parse(text).unwrap_err().to_string();
        assert!(e.contains("sink.topic") && e.contains(wanted), "{text:?}: {e}");
    }
}

#[test]
fn the_source_check_names_the_template() {
    let check = TopicTemplate::parse("{headers.tidegate-source-topic}")
        .unwrap()
        .record_check()
        .expect("a template has a check");
    assert_eq!(check(&record()), Ok(()));
    let e = check(&Record::default()).unwrap_err();
    assert!(e.starts_with("sink.topic \"{headers.tidegate-source-topic}\""), "{e}");
    assert!(TopicTemplate::parse("plain").unwrap().record_check().is_none());
}

#[test]
fn header_rules_drop_then_rename_then_set() {
    let rules = HeaderRules::validate(RawHeaders {
        drop: vec!["x-replicator-*".into(), "null".into()],
        rename: map(&[("tidegate-source-topic", "origin")]),
        set: map(&[("x-replayed-by", "tidegate"), ("bin", "text")]),
    })
    .unwrap();
    let mut input = record().headers;
    input.insert(1, header("x-replicator-hop", Some(b"1")));
    input.push(header("x-replayed-by", Some(b"someone-else")));
    assert_eq!(
        rules.apply(&input),
        vec![
            header("origin", Some(b"payments")),
            header("origin", Some(b"second")),
            header("bin", Some(b"text")),
            header("x-replayed-by", Some(b"tidegate")),
        ]
    );
    assert!(HeaderRules::default().is_empty());
    assert_eq!(HeaderRules::default().apply(&record().headers), record().headers);
}

#[test]
fn contradictory_header_rules_name_their_key() {
    let cases = [
        (
            RawHeaders {
                drop: vec!["x-*".into()],
                rename: map(&[("a", "x-a")]),
                ..RawHeaders::default()
            },
            "sink.headers.rename.\"a\"",
            "a name sink.headers.drop removes",
        ),
        (
            RawHeaders {
                drop: vec!["x-*".into()],
                rename: map(&[("x-a", "a")]),
                ..RawHeaders::default()
            },
            "sink.headers.rename.\"x-a\"",
            "could never apply",
        ),
        (
            RawHeaders {
                drop: vec!["x-*".into()],
                set: map(&[("x-by", "me")]),
                ..RawHeaders::default()
            },
            "sink.headers.set.\"x-by\"",
            "a name sink.headers.drop removes",
        ),
        (
            RawHeaders {
                rename: map(&[("a", "b")]),
                set: map(&[("b", "v")]),
                ..RawHeaders::default()
            },
            "sink.headers.rename.\"a\"",
            "sink.headers.set replaces",
        ),
        (
            RawHeaders {
                rename: map(&[("a", "a")]),
                ..RawHeaders::default()
            },
            "sink.headers.rename.\"a\"",
            "its own name",
        ),
        (
            RawHeaders {
                drop: vec![String::new()],
                ..RawHeaders::default()
            },
            "sink.headers.drop[0]",
            "must not be empty",
        ),
    ];
    for (raw, key, wanted) in cases {
        let e = HeaderRules::validate(raw).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(wanted), "{key}: {e}");
    }
}
