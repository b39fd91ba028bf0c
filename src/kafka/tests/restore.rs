//! Broker-free tests of a restore onto a recreated topic: two mock clusters stand for the topic
//! before and after it was deleted and created again (another topic id, other records).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use super::faults::{settings, source, wait_until, Running};
use crate::core::{CollectSink, Job, JobOptions, JobStats, StateStore};
use crate::kafka::{KafkaSource, StoppingOffsets};

fn produce_to(servers: &str, topic: &str, partition: i32, values: std::ops::Range<u64>) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("producer");
    for v in values {
        let value = v.to_string();
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value).partition(partition))
            .expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

/// Stops past partition 0's records, at partition 1's end.
fn bounded(servers: &str, offset_reset: &str) -> KafkaSource {
    let mut s = settings(servers, "mock-again");
    s.stopping =
        StoppingOffsets::Specific([(("mock-again".to_string(), 0), 20), (("mock-again".to_string(), 1), 5)].into());
    s.offset_reset = offset_reset.to_string();
    source(s)
}

/// A restart after the topic was recreated checks the unfinished splits (an error naming them,
/// or with `offset_reset` a start in the new log) and leaves the finished ones finished.
#[test]
fn a_restore_onto_a_recreated_topic_resets_only_the_unfinished_splits() {
    let before = MockCluster::new(1).expect("mock cluster");
    before.create_topic("mock-again", 2, 1).expect("topic");
    produce_to(&before.bootstrap_servers(), "mock-again", 0, 0..10);
    produce_to(&before.bootstrap_servers(), "mock-again", 1, 100..105);
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("job.state");
    // partition 1 ends at its stop; partition 0 waits for offset 20
    let job = Running::start(bounded(&before.bootstrap_servers(), "error"), Some(&state));
    wait_until("the records", Duration::from_secs(30), || job.records() >= 15);
    let (report, _) = job.stop();
    assert_eq!(report.splits.iter().filter(|s| s.finished.is_some()).count(), 1);

    let after = MockCluster::new(1).expect("mock cluster");
    after.create_topic("mock-again", 2, 1).expect("topic");
    produce_to(&after.bootstrap_servers(), "mock-again", 0, 1000..1020);
    produce_to(&after.bootstrap_servers(), "mock-again", 1, 2000..2005);
    let (sink, _) = CollectSink::new();
    let err = Job::new(
        bounded(&after.bootstrap_servers(), "error"),
        JobOptions::new("mock-faults", 1),
    )
    .with_state(StateStore::open(&state).expect("state store"))
    .run_blocking(Box::new(sink))
    .expect_err("the recreated topic is an error by default");
    let text = err.to_string();
    assert!(
        text.contains("mock-again:0") && text.contains("since the last checkpoint was written"),
        "{text}"
    );
    assert!(
        !text.contains("mock-again:1"),
        "the finished split is not in question: {text}"
    );

    let job = Running::start(bounded(&after.bootstrap_servers(), "earliest"), Some(&state));
    let (_, values) = job.join(Duration::from_secs(60));
    assert_eq!(
        values,
        (1000..1020).collect::<Vec<_>>(),
        "partition 0 read in the new log, partition 1 left finished"
    );
}

/// A session runs its job again on one `JobStats` (a group member's next assignment): metrics,
/// `/status` and `POST /control` must reach the run going on, and a speed changed during the
/// run before carries over (the clock used to stay the first run's: a change of speed after a
/// rebalance went to a clock no reader used).
#[test]
fn a_job_run_again_on_the_same_stats_shows_its_own_clock_at_the_speed_changed_before() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("mock-again", 2, 1).expect("topic");
    produce_to(&cluster.bootstrap_servers(), "mock-again", 0, 0..20);
    produce_to(&cluster.bootstrap_servers(), "mock-again", 1, 100..105);
    let stats = Arc::new(JobStats::default());
    let run = || {
        let mut source = bounded(&cluster.bootstrap_servers(), "error");
        source.event_time.speed = Some(1000.0);
        let (sink, out) = CollectSink::new();
        Job::new(source, JobOptions::new("mock-again", 1))
            .with_stats(Arc::clone(&stats))
            .run_blocking(Box::new(sink))
            .expect("the replay");
        let written = out.lock().unwrap().len();
        written
    };
    assert_eq!(run(), 25);
    let first = stats.event_time.get().expect("the first run's clock");
    first.set_speed(Some(500.0));
    assert_eq!(run(), 25);
    let second = stats.event_time.get().expect("the second run's clock");
    assert!(
        !Arc::ptr_eq(&first, &second),
        "the stats still show the first run's clock"
    );
    assert_eq!(
        second.speed(),
        Some(500.0),
        "the speed changed before was not carried over"
    );
    assert!(
        second.replayed_to().is_some(),
        "the second run's clock replayed nothing"
    );
}
