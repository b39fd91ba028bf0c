//! Unit tests of the registry settings, their errors and the subject names (`registry`).

use super::*;

fn raw(json: serde_json::Value) -> RawRegistry {
    serde_json::from_value(json).unwrap()
}

#[test]
fn a_url_or_a_table_and_the_password_never_shows() {
    let s =
        RegistrySettings::from_raw("source.avro.schema_registry", raw(serde_json::json!("http://r:8081/"))).unwrap();
    assert_eq!(s.url, "http://r:8081");
    let s = RegistrySettings::from_raw(
        "k",
        raw(serde_json::json!({"url": "https://r", "username": "u", "password": "hunter2"})),
    )
    .unwrap();
    assert_eq!(s.to_string(), "https://r (user u)");
    let debug = format!("{s:?}");
    assert!(!debug.contains("hunter2") && debug.contains("redacted"), "{debug}");
    let e = RegistrySettings::from_raw("k", raw(serde_json::json!({"url": "https://r", "password": "p"})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("k.username"), "{e}");
    let e = RegistrySettings::from_raw("k", raw(serde_json::json!({"url": "r:8081"})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("k.url") && e.contains("not an http"), "{e}");
    // the CA is read when a client is made: a missing file fails the call, not the load
    let s = RegistrySettings::from_raw(
        "k",
        raw(serde_json::json!({"url": "https://r", "ca_file": "/nonexistent.pem"})),
    )
    .unwrap();
    let e = registry_call(&s, get_all_subjects).unwrap_err();
    assert!(!e.retryable());
    assert!(
        e.to_string().contains(
            "the CA file /nonexistent.pem (schema_registry.ca_file) for the schema registry https://r: cannot read it"
        ),
        "{e}"
    );
    assert!(serde_json::from_value::<RawRegistry>(serde_json::json!({"url": "x", "user": "u"})).is_err());
}

#[test]
fn subject_names_follow_confluents_strategies() {
    let t = SubjectNameStrategy::Topic;
    assert_eq!(t.subject("trades", Some("a.Trade"), false).unwrap(), "trades-value");
    assert_eq!(t.subject("trades", None, true).unwrap(), "trades-key");
    assert_eq!(
        SubjectNameStrategy::Record
            .subject("trades", Some("a.Trade"), false)
            .unwrap(),
        "a.Trade"
    );
    assert_eq!(
        SubjectNameStrategy::TopicRecord
            .subject("trades", Some("a.Trade"), true)
            .unwrap(),
        "trades-a.Trade"
    );
    assert!(SubjectNameStrategy::Record.subject("trades", None, false).is_err());
}

#[test]
fn refused_credentials_name_the_registry_and_the_user_and_are_not_retried() {
    let s = RegistrySettings::from_raw(
        "k",
        raw(serde_json::json!({"url": "https://r/apis/ccompat/v7", "username": "tide", "password": "x"})),
    )
    .unwrap();
    let e =
        SRCError::non_retryable_without_cause("HTTP request to schema registry failed with status 401 Unauthorized");
    let c = classify(&s, &e);
    assert!(!c.retryable());
    assert_eq!(
        c.to_string(),
        "the schema registry https://r/apis/ccompat/v7 refused user tide (HTTP 401)"
    );
    let e = SRCError::new(
        "HTTP request to schema registry failed with status 503 Service Unavailable",
        None,
        true,
    );
    assert!(classify(&s, &e).retryable());
    // asked to come back later: retried
    let e = SRCError::non_retryable_without_cause(
        "HTTP request to schema registry failed with status 429 Too Many Requests",
    );
    assert!(classify(&s, &e).retryable());
    // only a schema the registry says it does not have makes a record undecodable
    let e = SRCError::new(
        "HTTP request to schema registry failed with status 404 Not Found",
        Some("error_code: 40403, message: Schema 7 not found".into()),
        false,
    );
    assert_eq!(
        classify(&s, &e),
        RegistryError::UnknownSchema("Schema 7 not found".into())
    );
    let e = SRCError::non_retryable_without_cause("HTTP request to schema registry failed with status 404 Not Found");
    assert!(matches!(
        classify(&s, &e),
        RegistryError::Rejected { status: Some(404), .. }
    ));
}

#[test]
fn credentials_in_the_url_are_refused_as_they_would_be_shown() {
    let e = RegistrySettings::from_raw("k", raw(serde_json::json!("https://key:secret@r/apis/ccompat/v7")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("k: ") && e.contains("username") && !e.contains("secret"),
        "{e}"
    );
    let e = RegistrySettings::from_raw("k", raw(serde_json::json!({"url": "http://u@r"})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("k.url"), "{e}");
}
