//! Broker-free tests of partition errors (not authorized, gone) in the split reader, on
//! librdkafka's mock cluster: an error that stops must not fail the reader, one that persists
//! must, once it lasted for the source's request timeout.

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::faults::{produce, reader, settings, wait_until};
use crate::core::{SplitReader, SplitsChange};
use crate::kafka::split::KafkaPartitionSplit;
use crate::kafka::split_reader::KafkaPartitionSplitReader;

/// A reader on the mock cluster, caught up with the `n` records of `topic`'s partition 0 (idle at
/// its end), whose errors fail it after `timeout`.
fn caught_up_reader(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    topic: &str,
    timeout: Duration,
) -> KafkaPartitionSplitReader {
    cluster.create_topic(topic, 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), topic, 1, 0, 5);
    let mut s = settings(&cluster.bootstrap_servers(), topic);
    s.request_timeout = timeout;
    // an authorization failure backs a partition's fetch off by 10 times this (at least 1 s)
    s.properties.insert("fetch.error.backoff.ms".into(), "100".into());
    let mut reader = reader(&s);
    reader
        .handle_splits_changes(SplitsChange::Add(vec![KafkaPartitionSplit::new(topic, 0, 0, None)]))
        .expect("assign");
    let (mut read, mut caught_up) = (0, false);
    wait_until("the records", Duration::from_secs(30), || {
        let batch = reader.fetch().expect("fetch");
        read += batch.record_count();
        caught_up |= !batch.caught_up.is_empty();
        read >= 5 && caught_up
    });
    reader
}

/// An error that says a partition cannot be read (here: the broker refuses one fetch as not
/// authorized, as while an ACL is changed) and then stops must not fail the job once the request
/// timeout passed, though the partition, idle at its end, delivers no record to prove it healthy.
#[test]
fn a_partition_error_that_stops_does_not_fail_the_reader() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let timeout = Duration::from_secs(3);
    let mut reader = caught_up_reader(&cluster, "mock-flaky", timeout);
    cluster.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    wait_until("the reader to see the error", Duration::from_secs(30), || {
        reader.fetch().expect("fetch during the error");
        reader.open_partition_errors() == 1
    });
    // the next fetches succeed: well past the timeout, the reader must not fail
    let seen = Instant::now();
    while seen.elapsed() < 3 * timeout {
        if let Err(e) = reader.fetch() {
            panic!("an error that stopped failed the reader: {e}");
        }
    }
    assert_eq!(reader.open_partition_errors(), 0);
}

/// The same error, when it does not stop, fails the reader after the request timeout, naming
/// the partition.
#[test]
fn a_partition_error_that_persists_fails_the_reader() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let mut reader = caught_up_reader(&cluster, "mock-lost", Duration::from_secs(2));
    cluster.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 200],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "a persistent partition error never failed the reader"
        );
        if let Err(e) = reader.fetch() {
            break e;
        }
    };
    let text = err.to_string();
    assert!(
        text.contains("mock-lost:0") && text.contains("request_timeout"),
        "{text}"
    );
}
