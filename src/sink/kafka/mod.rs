//! The `kafka` sink: an idempotent producer (`acks=all`) with many sends in flight. At least once
//! (default): a checkpoint waits until every send before it is acknowledged. Exactly once: the
//! records of each checkpoint go out in one Kafka transaction, committed after the checkpoint is
//! in the state file (its `transaction` module says how a restart knows whether it was), or, with
//! the Kafka checkpoint store on the same cluster, with the checkpoint's state records in the same
//! transaction (KIP-618). The first failed delivery fails the job.

pub mod config;
mod delivery;
mod keyless;
pub mod routing;
mod settings;
mod state_writer;
mod targets;
mod transaction;
mod writer;

pub use config::KafkaSinkConfig;
pub use settings::{producer_spec, KafkaSinkSettings};
pub use writer::KafkaSink;

/// Every client the Kafka sink makes, as it makes it (for `validate`): its producer, the
/// consumers that look its topics up and read its commit markers, and the admin client that
/// creates its topic.
pub(crate) fn probes(settings: &KafkaSinkSettings) -> crate::error::Result<Vec<crate::client::probe::Probe>> {
    use crate::client::probe::Probe;
    let mut probe = settings.clone();
    if probe.delivery == crate::client::exactly_once::Delivery::ExactlyOnce {
        probe.transactional_id = Some("tidegate-validate".into());
    }
    let connection = crate::client::connection_properties(&settings.properties);
    let mut probes = vec![
        Probe::producer("sink", &settings::producer_spec(&probe)?),
        Probe::consumer("sink", &targets::lookup_spec(settings, &connection, false)),
        Probe::admin("sink", &targets::create_spec(settings)),
    ];
    if probe.transactional_id.is_some() {
        probes.push(Probe::consumer(
            "sink",
            &transaction::markers_spec(settings, "tidegate-validate", &connection),
        ));
    }
    Ok(probes)
}

#[cfg(test)]
mod tests;
