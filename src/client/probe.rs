//! What `validate` makes of every Kafka client a run makes: its final librdkafka config, created
//! once and dropped (librdkafka checks names, values and their combinations only when a client
//! is created), so a config `run` would refuse is refused by `validate` too, naming its key.

use std::collections::BTreeMap;

use rdkafka::config::ClientConfig;

use super::cluster::{ClientSpec, GroupSpec};
use crate::error::Result;

/// One client as a run makes it.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The client's name in the logs ([`ClientSpec::name`]).
    pub name: &'static str,
    /// The config section its properties come from (an error names `<section>.properties`).
    pub section: String,
    config: ClientConfig,
    producer: bool,
    properties: BTreeMap<String, String>,
    /// A simulated cluster's client: nothing of librdkafka's to check.
    simulated: bool,
}

impl Probe {
    fn of(section: &str, spec: &ClientSpec<'_>, config: ClientConfig, producer: bool) -> Self {
        Probe {
            name: spec.name,
            section: section.to_string(),
            config,
            producer,
            properties: spec.properties.clone(),
            simulated: super::cluster::is_simulated(spec.bootstrap_servers),
        }
    }

    /// A consumer of `spec`.
    pub fn consumer(section: &str, spec: &ClientSpec<'_>) -> Self {
        Self::of(section, spec, spec.consumer_config(), false)
    }

    /// A producer of `spec`.
    pub fn producer(section: &str, spec: &ClientSpec<'_>) -> Self {
        Self::of(section, spec, spec.client_config(), true)
    }

    /// An admin client of `spec` (librdkafka makes it a producer handle).
    pub fn admin(section: &str, spec: &ClientSpec<'_>) -> Self {
        Self::producer(section, spec)
    }

    /// A group member's consumer of `spec` in `group`.
    pub fn member(section: &str, spec: &ClientSpec<'_>, group: &GroupSpec) -> Self {
        let config = super::cluster::native::membership_config(&spec.consumer_config(), group, group.protocol);
        Self::of(section, spec, config, false)
    }

    /// A consumer whose config is made without a [`ClientSpec`] (the split readers').
    pub fn consumer_config(
        name: &'static str,
        section: &str,
        config: ClientConfig,
        properties: &BTreeMap<String, String>,
    ) -> Self {
        let simulated = config
            .get("bootstrap.servers")
            .is_some_and(super::cluster::is_simulated);
        Probe {
            name,
            section: section.to_string(),
            config,
            producer: false,
            properties: properties.clone(),
            simulated,
        }
    }

    /// Create the client and drop it: an error names `<section>.properties` (and the property,
    /// when librdkafka's message names one of the user's).
    pub fn check(&self) -> Result<()> {
        if self.simulated {
            return Ok(());
        }
        let checked = if self.producer {
            super::check_properties::<rdkafka::producer::BaseProducer>(&self.config, &self.section, &self.properties)
        } else {
            super::check_properties::<rdkafka::consumer::BaseConsumer>(&self.config, &self.section, &self.properties)
        };
        // which of the job's clients refused it
        checked.map_err(|e| match e {
            crate::error::Error::Config { key, message } => crate::error::Error::Config {
                key,
                message: format!("{message} (in the {} client)", self.name),
            },
            other => other,
        })
    }
}

/// [`Probe::check`] each of `probes` at once (creating and dropping a librdkafka client takes tens
/// of milliseconds, mostly waiting on its threads): the first error in their order.
pub fn check_all(probes: &[Probe]) -> Result<()> {
    std::thread::scope(|scope| {
        let checks: Vec<_> = probes.iter().map(|p| scope.spawn(move || p.check())).collect();
        checks
            .into_iter()
            .map(|c| {
                c.join()
                    .unwrap_or_else(|_| Err(crate::error::Error::runtime("validate", "a client check panicked")))
            })
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    })
}
