//! The sink's deliveries: the check that turns the first failed delivery (or a fencing, or a
//! refused authentication) into the job's error.

use std::collections::BTreeMap;

use crate::client::cluster::{self, Producer};
use crate::error::{Error, Result};

/// The first failed delivery (or a refused authentication) as the job's error. A producer in a
/// fatal state purges its queue, so its deliveries fail as "purged": the cause is librdkafka's
/// fatal error (a fencing, when another process took over).
pub(super) fn check_failure(
    producer: &dyn Producer,
    properties: &BTreeMap<String, String>,
    fenced: impl Fn() -> Error,
) -> Result<()> {
    if let Some(e) = producer.refusal(properties) {
        return Err(e);
    }
    let Some((message, code)) = producer.deliveries().first_failure() else {
        return Ok(());
    };
    match (producer.fatal_error(), code) {
        (Some((fatal, _)), _) if cluster::is_fencing(fatal) => Err(fenced()),
        (Some((_, reason)), _) => Err(Error::runtime(
            "kafka sink",
            format!("fatal producer error: {reason} ({message})"),
        )),
        (None, Some(code)) if cluster::is_fencing(code) => Err(fenced()),
        (None, _) => Err(Error::runtime("kafka sink", message)),
    }
}
