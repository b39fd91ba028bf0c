//! The harness itself: a topic is created, written and read back through rust-rdkafka.

use crate::common::{TestKafka, TestRecord};

#[test]
fn produce_and_consume_through_the_real_broker() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("harness", 2);
    let records: Vec<TestRecord> = (0..10)
        .map(|i| {
            TestRecord::to(i % 2, format!("v{i}"))
                .key(format!("k{i}"))
                .at(1_700_000_000_000 + i as i64)
                .header("h", "x")
        })
        .collect();
    kafka.produce(&topic, &records);
    let back = kafka.read_all(&topic);
    assert_eq!(back.len(), 10);
    for r in &back {
        let i: i64 = String::from_utf8(r.value.clone().unwrap()).unwrap()[1..]
            .parse()
            .unwrap();
        assert_eq!(r.partition as i64, i % 2);
        assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
        assert_eq!(r.timestamp, Some(1_700_000_000_000 + i));
        assert_eq!(r.headers, vec![("h".to_string(), Some("x".to_string()))]);
    }
    assert_eq!(kafka.end_offsets(&topic).values().sum::<i64>(), 10);
}

#[test]
fn aborted_transactions_are_invisible_to_read_committed() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("harness-tx", 1);
    kafka.produce_transactions(
        &topic,
        &[
            (vec![TestRecord::to(0, "a"), TestRecord::to(0, "b")], true),
            (vec![TestRecord::to(0, "x")], false),
            (vec![TestRecord::to(0, "c")], true),
        ],
    );
    let values: Vec<String> = kafka
        .read_all(&topic)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(values, ["a", "b", "c"]);
}

/// A transaction's records appended but not yet committed (as just after a sink's
/// `commit_transaction` returned, before the broker wrote the commit markers): the last stable
/// offset is still before them, and `read_all` must read to where they end, not to it (it took
/// the last stable offset for the end and read back nothing).
#[test]
fn read_all_reads_to_the_end_of_a_transaction_still_settling() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("harness-settling", 2);
    let tx = kafka.transactional_producer();
    tx.begin();
    tx.send_and_flush(&topic, &[TestRecord::to(0, "a"), TestRecord::to(1, "b")]);
    let stable: Vec<i64> = kafka.end_offsets(&topic).into_values().collect();
    assert_eq!(stable, [0, 0], "the last stable offsets, before the commit");
    let ends: Vec<i64> = kafka.read_all_ends(&topic).into_values().collect();
    assert_eq!(ends, [1, 1], "where read_all reads to");
    tx.commit();
    let values: Vec<String> = kafka
        .read_all(&topic)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(values, ["a", "b"]);
}
