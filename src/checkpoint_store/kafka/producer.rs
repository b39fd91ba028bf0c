//! The Kafka store's transactional producers: its own, the sink's id it takes over when the
//! checkpoints travel in the sink's transactions, and the one-off producers that fence an id.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::config::KafkaStoreConfig;
use super::store::TIMEOUT;
use crate::client::cluster::{self, ClientSpec, Producer};
use crate::error::{kafka, Result};

/// The store's producer, its transactions initialised: under the sink's transactional id when
/// the checkpoints travel in the sink's transactions (the store's own id initialised once too:
/// a process of this job that writes its state in its own transactions, an older tidegate or a
/// config that names the sink's cluster otherwise, is fenced, and a store transaction it left
/// open aborted, before the restore reads), else under the store's own.
pub(super) fn producer_of(config: &KafkaStoreConfig) -> Result<Arc<dyn Producer>> {
    match &config.sink_transactional_id {
        Some(sink_id) => {
            drop(transactional_producer(
                config,
                &config.own_transactional_id(),
                &config.properties,
            )?);
            // the sink's principal: its producer writes the state records from now on
            transactional_producer(config, sink_id, &config.sink_properties)
        }
        None => transactional_producer(config, &config.transactional_id(), &config.properties),
    }
}

/// The store's transactional producer under `id`, of `properties`.
pub(crate) fn producer_spec<'a>(
    config: &'a KafkaStoreConfig,
    id: &str,
    properties: &'a BTreeMap<String, String>,
) -> ClientSpec<'a> {
    ClientSpec::new(&config.bootstrap_servers, properties, "state-store")
        .set("transactional.id", id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("transaction.timeout.ms", "60000")
        .set("client.id", "tidegate-state")
        // a checkpoint's records leave at once: nothing else would join them
        .set("linger.ms", "0")
}

/// A transactional producer of the store's cluster under `id`, its transactions initialised: a
/// transaction a crashed process left open under `id` is aborted, and a process still running
/// with it is fenced.
pub(super) fn transactional_producer(
    config: &KafkaStoreConfig,
    id: &str,
    properties: &BTreeMap<String, String>,
) -> Result<Arc<dyn Producer>> {
    let spec = producer_spec(config, id, properties);
    let producer = cluster::of(&config.bootstrap_servers).producer(&spec)?;
    producer.init_transactions(TIMEOUT).map_err(|e| {
        kafka(
            format!(
                "initialising the checkpoint store's transactions (transactional.id {id}) at {}",
                config.bootstrap_servers
            ),
            e,
        )
    })?;
    Ok(producer)
}
