//! Every Kafka client a run of the job makes, made as the run makes it (each feature's own spec
//! functions) and created once at load: librdkafka checks properties only when a client is
//! created, so a property `run` would refuse in any of them is refused by `validate` and at the
//! start of `run` alike, naming its key (exit 2).

use crate::checkpoint_store::StoreConfig;
use crate::client::probe::Probe;
use crate::connector::registry::{SinkConfig, SourceConfig};
use crate::connector::JobConfig;
use crate::error::Result;

/// The clients of a job of these sections.
pub(super) fn probes(
    job: &JobConfig,
    source: &SourceConfig,
    sink: &SinkConfig,
    store: &StoreConfig,
) -> Result<Vec<Probe>> {
    let mut probes = Vec::new();
    if let SourceConfig::Kafka(k) = source {
        probes.extend(crate::kafka::probes(k)?);
        if let (Some(member), StoreConfig::Kafka(store)) = (&job.member, store) {
            probes.extend(crate::coordination::clients::probes(
                k,
                store,
                member,
                job.static_member,
            ));
        }
    }
    if let SinkConfig::Kafka(k) = sink {
        probes.extend(crate::sink::kafka::probes(&k.settings)?);
    }
    if let StoreConfig::Kafka(store) = store {
        probes.extend(crate::checkpoint_store::kafka::probes(store));
    }
    Ok(probes)
}

/// Create each of the job's clients once.
pub(super) fn check(job: &JobConfig, source: &SourceConfig, sink: &SinkConfig, store: &StoreConfig) -> Result<()> {
    crate::client::probe::check_all(&probes(job, source, sink, store)?)
}

#[cfg(test)]
#[path = "clients_tests.rs"]
mod tests;
