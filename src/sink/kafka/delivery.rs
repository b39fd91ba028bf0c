//! The sink's deliveries: the producer context that records the first failed delivery, the
//! check that turns it (or a fencing) into the job's error, and a flush that waits for the last
//! acknowledgement.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::Message;

use super::transaction;
use crate::error::{Error, Result};
use crate::kafka::client::{client_context_through, TracingContext};

/// The first failed delivery: its message, and librdkafka's error code.
pub(super) type DeliveryFailure = Arc<Mutex<Option<(String, Option<RDKafkaErrorCode>)>>>;

/// Records the first failed delivery; librdkafka calls it from its own thread.
pub(super) struct DeliveryContext {
    pub(super) log: TracingContext,
    pub(super) failure: DeliveryFailure,
}

client_context_through!(DeliveryContext, log);

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        if let Err((e, message)) = result {
            let mut slot = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some((
                    format!("delivery to {}:{} failed: {e}", message.topic(), message.partition()),
                    e.rdkafka_error_code(),
                ));
            }
        }
    }
}
/// librdkafka's `rd_kafka_flush` with the whole timeout: it sends lingering messages at once and
/// returns within 10 ms of the last acknowledgement. rust-rdkafka's `flush` calls it with no
/// timeout and then polls the main queue for up to 100 ms; the `ThreadedProducer`'s own thread
/// takes the delivery reports from that queue first, so every flush (every checkpoint) lasted
/// 100 ms, and a paced replay stalled that long at each checkpoint.
pub(super) fn flush_now(
    producer: &ThreadedProducer<DeliveryContext>,
    timeout: Duration,
) -> std::result::Result<(), KafkaError> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the producer's handle is valid for as long as `producer` lives; rd_kafka_flush is
    // thread-safe (the poll thread may serve delivery reports meanwhile).
    let code = unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), ms) };
    match code {
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
        code => Err(KafkaError::Flush(code.into())),
    }
}
/// The first failed delivery (or a refused authentication) as the job's error. A producer in a
/// fatal state purges its queue, so its deliveries fail as "purged": the cause is librdkafka's
/// fatal error (a fencing, when another process took over).
pub(super) fn check_failure(
    producer: &ThreadedProducer<DeliveryContext>,
    failure: &DeliveryFailure,
    properties: &BTreeMap<String, String>,
    fenced: impl Fn() -> Error,
) -> Result<()> {
    if let Some(e) = producer.context().log.authentication_failure(properties) {
        return Err(e);
    }
    let Some((message, code)) = failure.lock().unwrap_or_else(|p| p.into_inner()).clone() else {
        return Ok(());
    };
    match (producer.client().fatal_error(), code) {
        (Some((fatal, _)), _) if transaction::is_fencing(fatal) => Err(fenced()),
        (Some((_, reason)), _) => Err(Error::runtime(
            "kafka sink",
            format!("fatal producer error: {reason} ({message})"),
        )),
        (None, Some(code)) if transaction::is_fencing(code) => Err(fenced()),
        (None, _) => Err(Error::runtime("kafka sink", message)),
    }
}
