//! The Kafka store's topic: whether it exists, and its creation (compacted) or the check of an
//! existing one.

use super::*;

/// The settings of a topic the store creates: compacted; a segment rolls every hour so the
/// cleaner can drop superseded values; a value stays at least a minute before it may be compacted.
const TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.ms", "3600000"),
    ("min.compaction.lag.ms", "60000"),
    ("delete.retention.ms", "86400000"),
];

/// Whether the topic exists; an unreachable cluster is an error naming its address.
pub(super) fn topic_exists(config: &KafkaStoreConfig) -> Result<bool> {
    let reader = reader(config, &config.owner, "read_committed")?;
    let what = format!(
        "reaching the checkpoint store's cluster at {} ({}.bootstrap_servers)",
        config.bootstrap_servers, config.cluster_of
    );
    let metadata = fetch_metadata(&reader, None, TIMEOUT, &config.properties, &what)?;
    Ok(metadata
        .topics()
        .iter()
        .any(|t| t.name() == config.topic && t.error().is_none() && !t.partitions().is_empty()))
}

/// Create the topic (`exists == false`), or check the existing one is compacted only.
pub(super) fn admin_call(config: &KafkaStoreConfig, exists: bool) -> Result<()> {
    let topic = config.topic.as_str();
    let context = format!("checkpoint topic {topic} at {}", config.bootstrap_servers);
    let admin: AdminClient<TracingContext> = client_config(&config.bootstrap_servers, &[], &config.properties)
        .create_with_context(TracingContext::new("state-admin"))
        .map_err(|e| kafka("creating the checkpoint store's admin client", e))?;
    let options = AdminOptions::new()
        .operation_timeout(Some(TIMEOUT))
        .request_timeout(Some(TIMEOUT));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting a runtime for the admin client", e))?;
    if !exists {
        let mut new_topic = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
        for (k, v) in TOPIC_CONFIG {
            new_topic = new_topic.set(k, v);
        }
        let results = runtime
            .block_on(admin.create_topics([&new_topic], &options))
            .map_err(|e| kafka(format!("creating {context}"), e))?;
        for r in results {
            match r {
                Ok(_) => {
                    // created with TOPIC_CONFIG: compacted by construction (a describe right
                    // after the creation may not list the topic's configs yet)
                    info!(topic, "checkpoint topic created (cleanup.policy=compact)");
                    return Ok(());
                }
                // another process created it meanwhile: checked below like any existing topic
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(Error::runtime(format!("creating {context}"), code)),
            }
        }
    }
    // a topic created a moment ago may be described without its configs: ask again, a while
    let deadline = Instant::now() + Duration::from_secs(10);
    let policy = loop {
        let described = runtime
            .block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options))
            .map_err(|e| kafka(format!("describing {context}"), e))?;
        let policy = match described.into_iter().next() {
            Some(Ok(resource)) => resource.get("cleanup.policy").and_then(|e| e.value.clone()),
            // created by another process a moment ago and not known to every broker yet (several
            // instances create the topic at once): ask again, like a topic without configs
            Some(Err(RDKafkaErrorCode::UnknownTopicOrPartition)) if Instant::now() < deadline => None,
            Some(Err(code)) => return Err(Error::runtime(format!("describing {context}"), code)),
            None => None,
        };
        if policy.is_some() || Instant::now() >= deadline {
            break policy;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    match policy.as_deref() {
        Some("compact") => Ok(()),
        other => Err(Error::config(
            "checkpoint.topic",
            format!(
                "{context} has cleanup.policy={}: the checkpoint store needs a compacted topic \
                 (cleanup.policy=compact, without delete, or retention would remove a job's state); \
                 choose another topic or change its policy",
                other.unwrap_or("unknown")
            ),
        )),
    }
}
