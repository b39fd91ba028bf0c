//! The Kafka checkpoint store's records written in the sink's transactions (KIP-618).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::delivery::check_failure;
use super::transaction::{self, lock, Transactions};
use crate::client::cluster::{self, Outgoing, Producer};
use crate::client::exactly_once::StateInTransaction;
use crate::core::sim;
use crate::error::Result;

/// The Kafka checkpoint store's way into the sink's transactions (KIP-618). The coordinator
/// writes a checkpoint's state after the sink prepared it and before it commits: the sink's
/// thread waits meanwhile, so the two never write into a transaction at once.
pub(super) struct SinkStateWriter {
    pub(super) producer: Arc<dyn Producer>,
    pub(super) transactions: Arc<Mutex<Transactions>>,
    pub(super) properties: BTreeMap<String, String>,
    /// How long the state records' acknowledgements may take (`sink.flush_timeout`).
    pub(super) timeout: Duration,
}

impl StateInTransaction for SinkStateWriter {
    fn write_in_transaction(
        &self,
        topic: &str,
        records: &[(String, Vec<u8>)],
        fence: Option<&crate::client::exactly_once::GroupFence>,
    ) -> Result<()> {
        let mut transactions = lock(&self.transactions);
        transactions.begin_if_needed(&self.producer, topic)?;
        let fenced = || transactions.fenced();
        // a fenced producer answers every call with the generic `Fatal`: its fatal error says why
        let failed = |what: String, e: KafkaError| {
            let code = match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::Fatal) => self.producer.fatal_error().map(|(code, _)| code),
                code => code,
            };
            match code {
                Some(code) if cluster::is_fencing(code) => fenced(),
                _ => crate::error::kafka(what, e),
            }
        };
        let deadline = sim::now() + self.timeout;
        for (key, value) in records {
            let mut record = Outgoing::to(topic);
            record.partition = Some(0);
            record.key = Some(key.as_bytes());
            record.value = Some(value.as_slice());
            loop {
                match self.producer.send(&record) {
                    Ok(()) => break,
                    Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) if sim::now() < deadline => {
                        // librdkafka's queue is full: deliveries make room
                        check_failure(self.producer.as_ref(), &self.properties, fenced)?;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(failed(format!("writing state record {key} to {topic}"), e)),
                }
            }
        }
        loop {
            let slice = deadline
                .saturating_duration_since(sim::now())
                .min(Duration::from_millis(500));
            let result = self.producer.flush(slice);
            check_failure(self.producer.as_ref(), &self.properties, fenced)?;
            match result {
                Ok(()) => break,
                Err(e) if sim::now() >= deadline || sim::active() => {
                    return Err(failed(
                        format!("waiting for the state records' acknowledgements from {topic}"),
                        e,
                    ))
                }
                Err(_) => {}
            }
        }
        match fence.filter(|f| !f.offsets.is_empty()) {
            Some(fence) => transaction::send_group_offsets(&self.producer, fence, self.timeout).inspect_err(|_| {
                // refused: abort now, so that the members reading the topics after this one
                // need not wait for the broker to time the transaction out
                transactions.abort_open(&self.producer);
            }),
            None => Ok(()),
        }
    }
}
