//! Unit tests of the Kafka clients' settings: secrets redacted, connection properties kept.

use super::*;

#[test]
fn secrets_are_redacted() {
    let props: BTreeMap<String, String> = [
        ("sasl.password", "hunter2"),
        ("ssl.key.password", "k"),
        ("sasl.oauthbearer.client.secret", "s"),
        ("ssl.key.pem", "-----BEGIN PRIVATE KEY-----"),
        ("ssl.keystore.password", "k"),
        ("sasl.oauthbearer.assertion.private.key.passphrase", "p"),
        ("ssl.ca.location", "/ca.pem"),
        ("fetch.min.bytes", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let shown = redacted(&props);
    assert_eq!(shown["sasl.password"], "***");
    assert_eq!(shown["ssl.key.password"], "***");
    assert_eq!(shown["sasl.oauthbearer.assertion.private.key.passphrase"], "***");
    assert_eq!(shown["sasl.oauthbearer.client.secret"], "***");
    assert_eq!(shown["ssl.key.pem"], "***");
    assert_eq!(shown["ssl.keystore.password"], "***");
    assert_eq!(shown["ssl.ca.location"], "/ca.pem");
    assert_eq!(shown["fetch.min.bytes"], "1");
    assert!(!format!("{shown:?}").contains("hunter2"));
}

#[test]
fn transport_trouble_is_warned_once_per_cause_and_kept_cleaned() {
    let context = TracingContext::new("t");
    let refused = "[thrd:unit.test:1/bootstrap]: unit.test:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)";
    let again = "unit.test:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT, 1 identical error(s) suppressed)";
    assert!(context.transport_trouble(refused, true), "the first is news");
    assert!(!context.transport_trouble(again, true), "the same cause again is not");
    assert!(context.transport_trouble("1/1 unit brokers are down", false));
    assert!(!context.transport_trouble("0/1 unit brokers are down", false));
    assert!(
        !TracingContext::new("other").transport_trouble(again, true),
        "nor from another client"
    );
    assert_eq!(
        context.last_transport_trouble().as_deref(),
        Some("unit.test:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused")
    );
}

/// A reader's consumer warns of a refusal, which librdkafka retries (a token service's
/// hiccup, a certificate being rotated), and keeps none; any other client keeps the first.
#[test]
fn a_context_passing_refusals_warns_and_keeps_none() {
    use rdkafka::types::RDKafkaErrorCode::Authentication;
    let reason = "sasl.unit.test:9093/bootstrap: SASL authentication error: Authentication failed (unit)";
    let passing = TracingContext::new("reader-unit").passing_refusals();
    passing.error(KafkaError::Global(Authentication), reason);
    passing.log(
        RDKafkaLogLevel::Error,
        "FAIL",
        "ssl.unit.test:9093/bootstrap: SSL handshake failed: certificate verify failed (unit)",
    );
    assert!(!passing.refused());
    assert!(passing.authentication_failure(&BTreeMap::new()).is_none());
    assert_eq!(
        passing.last_transport_trouble().as_deref(),
        Some(reason),
        "warned of as a trouble"
    );
    let keeping = TracingContext::new("enumerator-unit");
    keeping.error(KafkaError::Global(Authentication), reason);
    assert!(keeping.refused());
}

#[test]
fn connection_properties_keep_security_and_drop_client_roles() {
    let props: BTreeMap<String, String> = [
        ("security.protocol", "SASL_SSL"),
        ("sasl.username", "u"),
        ("ssl.ca.location", "/ca.pem"),
        ("fetch.min.bytes", "1"),
        ("linger.ms", "5"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let kept: Vec<String> = connection_properties(&props).into_keys().collect();
    assert_eq!(kept, ["sasl.username", "security.protocol", "ssl.ca.location"]);
}

/// A user's small `fetch.max.bytes` and every consumer tidegate makes from it: each one's config
/// is one librdkafka creates (the enumerator's used not to be: `validate` passed what `run`
/// refused); both sizes set and inconsistent, each probe refuses it naming a key.
#[test]
fn every_consumer_fits_its_message_size_to_a_small_fetch_size() {
    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
    fn specs(p: &BTreeMap<String, String>) -> [cluster::ClientSpec<'_>; 3] {
        [
            cluster::ClientSpec::new("127.0.0.1:1", p, "enumerator").set("isolation.level", "read_committed"),
            cluster::ClientSpec::new("127.0.0.1:1", p, "group").set("group.id", "g"),
            cluster::ClientSpec::new("127.0.0.1:1", p, "state-reader"),
        ]
    }
    let small = props(&[("fetch.max.bytes", "1000")]);
    for spec in specs(&small) {
        let config = spec.consumer_config();
        assert_eq!(config.get("message.max.bytes"), Some("1000"), "{}", spec.name);
        check_properties::<rdkafka::consumer::BaseConsumer>(&config, "source", &small)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    }
    // the config without the fit is what librdkafka refused
    let mut raw = client_config("127.0.0.1:1", &[], &small);
    raw.remove("bootstrap.servers");
    raw.set("log_level", "0");
    assert!(raw.create::<rdkafka::consumer::BaseConsumer>().is_err());
    let both = props(&[("fetch.max.bytes", "1000"), ("message.max.bytes", "5000")]);
    for spec in specs(&both) {
        let e = check_properties::<rdkafka::consumer::BaseConsumer>(&spec.consumer_config(), "source", &both)
            .expect_err(spec.name);
        assert!(
            matches!(&e, crate::error::Error::Config { key, .. } if key.contains("max.bytes")),
            "{e}"
        );
    }
}
