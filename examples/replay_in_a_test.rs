//! How another crate tests against Kafka with tidegate as a dev-dependency
//! (`tidegate = { ..., features = ["testing"] }`): reach a broker (or start one in a container),
//! seed a topic with a data generator written as TOML, then replay it into memory three ways.
//! CI runs it: `cargo run --example replay_in_a_test` (KAFKA_BOOTSTRAP_SERVERS, or Docker).

use tidegate::testing::{run_job, Kafka, Replay};

fn main() -> Result<(), tidegate::Error> {
    let kafka = Kafka::get()?;
    let topic = format!("example-trades-{}", std::process::id());
    kafka.create_topic(&topic, 3)?;

    // 300 trades over three partitions, then a CLOSE record in each
    let seeded = run_job(&format!(
        r#"
        [job]
        name = "{topic}-seed"
        parallelism = 3

        [source]
        type = "datagen"
        count = 300
        seed = 1
        format = "json"
        key = "{{seq}}"

        [source.fields]
        type = {{ value = "TRADE" }}
        seq = {{ sequence = {{}} }}
        price = {{ uniform = {{ min = 1.0, max = 100.0 }} }}

        [source.end_marker]
        value = {{ type = "CLOSE" }}

        [sink]
        type = "kafka"
        bootstrap_servers = "{}"
        topic = "{topic}"
        "#,
        kafka.bootstrap()
    ))?;
    assert_eq!(seeded.records_written, 300);

    // until the market close, in each partition (the CLOSE records are not collected)
    let trades = Replay::topic(kafka.bootstrap(), &topic)
        .json()
        .parallelism(2)
        .until_eof(r#"value.type == "CLOSE""#)?
        .collect()?;
    assert_eq!(trades.len(), 300);
    assert!(trades
        .iter()
        .all(|r| r.decoded.as_ref().is_some_and(|v| v["type"] == "TRADE")));

    // until a Rust closure says so: each partition stops at its first trade priced over 90, or
    // at its close (an `until` waits for its record: without the close, a partition with no
    // such trade would wait for the replay's timeout, then fail)
    let cheap = Replay::topic(kafka.bootstrap(), &topic)
        .json()
        .until(|r| {
            r.decoded
                .as_ref()
                .is_some_and(|v| v["type"] == "CLOSE" || v["price"].as_f64().is_some_and(|p| p > 90.0))
        })
        .collect()?;
    assert!(cheap.len() < 300);
    assert!(cheap.iter().all(|r| r
        .decoded
        .as_ref()
        .and_then(|v| v["price"].as_f64())
        .is_some_and(|p| p <= 90.0)));

    // bounded by the end of each partition, with checkpoints: a second run resumes at the end
    let dir = std::env::temp_dir().join(format!("tidegate-example-{}", std::process::id()));
    let everything = Replay::topic(kafka.bootstrap(), &topic)
        .state_file(dir.join("replay.state"))
        .run()?;
    assert_eq!(everything.0.len(), 303, "300 trades and 3 closes");
    let again = Replay::topic(kafka.bootstrap(), &topic)
        .state_file(dir.join("replay.state"))
        .collect()?;
    assert!(again.is_empty(), "resumed at the end: nothing left");
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "replay_in_a_test: {} trades to the close, {} before a price over 90, {} records in all, none again after a restart",
        trades.len(),
        cheap.len(),
        everything.0.len()
    );
    Ok(())
}
