//! Broker-free tests of partition errors (not authorized, gone) in the split reader, on
//! librdkafka's mock cluster: an error that stops must not fail the reader, one that persists
//! must, once it lasted for the source's request timeout, and only a sign of health that came
//! after the error (not records fetched before it, not the mock's answer to a refused fetch)
//! clears it.

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::ClientConfig;

use super::faults::{produce, reader, settings, wait_until, TrackedCluster};
use crate::core::{SplitReader, SplitsChange};
use crate::kafka::split::KafkaPartitionSplit;
use crate::kafka::split_reader::KafkaPartitionSplitReader;

/// Fetch requests, as librdkafka numbers them.
const FETCH: i16 = 1;

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
/// timeout passed, though the partition, idle at its end, delivers no record to prove it healthy:
/// the end it reports after the reader's probe, with no error coming back, clears the error.
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

/// The same error, when it does not stop, fails the reader once it lasted for the request
/// timeout, naming the partition: within 3 timeouts of the reader first seeing it. Each probe's
/// seek makes librdkafka report the next refused fetch as the end of the partition (the mock
/// cluster answers an error with the partition's high watermark, and librdkafka turns an answer
/// at the fetch position into an end-of-partition event before it looks at the error), so this
/// holds only if that end is not taken for health.
#[test]
fn a_partition_error_that_persists_fails_the_reader() {
    let mock = TrackedCluster::new();
    let timeout = Duration::from_secs(2);
    let bound = 3 * timeout;
    let mut reader = caught_up_reader(&mock.cluster(), "mock-lost", timeout);
    // the mock holds an answer without records (an error's too) for fetch.wait.max.ms (500 ms),
    // so at most 2 fetches a second meet an error: these last 50 times the bound
    let errors = 2 * 50 * bound.as_secs() as usize;
    mock.cluster().request_errors(
        RDKafkaApiKey::Fetch,
        &vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; errors],
    );
    mock.clear_requests();
    let injected = Instant::now();
    wait_until("the reader to see the error", Duration::from_secs(30), || {
        reader.fetch().expect("fetch before the timeout");
        reader.open_partition_errors() == 1
    });
    let first = Instant::now();
    let err = loop {
        match reader.fetch() {
            Err(e) => break e,
            Ok(_) => assert!(
                first.elapsed() < bound,
                "a persistent partition error did not fail the reader within {bound:?} (3 × request_timeout) of the reader seeing it"
            ),
        }
    };
    let fetches = mock.requests(FETCH);
    assert!(
        injected.elapsed() >= timeout,
        "the reader failed {:?} after the error, before the request timeout",
        injected.elapsed()
    );
    assert!(
        fetches < errors,
        "{fetches} fetches met the {errors} injected errors: they ran out"
    );
    let text = err.to_string();
    assert!(
        text.contains("mock-lost:0") && text.contains("request_timeout"),
        "{text}"
    );
}

/// Records fetched before an error and handed over in the same batch, behind which librdkafka
/// queued the error, say nothing of the partition after it: the error stays open (cleared, it
/// would never be reported again, and a bounded replay would wait forever without a word).
#[test]
fn records_fetched_before_a_partition_error_do_not_clear_it() {
    let mock = TrackedCluster::new();
    mock.cluster().create_topic("mock-revoked", 1, 1).expect("topic");
    // one produce request per record, so one message set each: the mock answers a fetch with
    // one set at most, and the first 5 fetches bring a record each
    let records = 5;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", mock.servers())
        .create()
        .expect("producer");
    for i in 0..records {
        let value = i.to_string();
        producer
            .send(BaseRecord::<(), _>::to("mock-revoked").payload(&value).partition(0))
            .expect("send");
        producer.flush(Duration::from_secs(10)).expect("flush");
    }
    // the first fetches bring the records, every later one is refused
    let mut errors = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 100];
    errors[..records].fill(RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
    mock.cluster().request_errors(RDKafkaApiKey::Fetch, &errors);
    mock.clear_requests();
    let mut s = settings(&mock.servers(), "mock-revoked");
    s.request_timeout = Duration::from_secs(60);
    let mut reader = reader(&s);
    reader
        .handle_splits_changes(SplitsChange::Add(vec![KafkaPartitionSplit::new(
            "mock-revoked",
            0,
            0,
            None,
        )]))
        .expect("assign");
    // librdkafka reports the first refusal as the end of the partition (see above), the second as
    // the error, and backs the partition off before it fetches again: once it did, the records
    // and the error wait in the queue, in that order
    wait_until("the fetch after the reported error", Duration::from_secs(30), || {
        mock.requests(FETCH) >= records + 3
    });
    let batch = reader.fetch().expect("fetch");
    assert_eq!(batch.record_count(), records, "the records come in the error's batch");
    assert_eq!(
        reader.open_partition_errors(),
        1,
        "records fetched before the error cleared it"
    );
}
