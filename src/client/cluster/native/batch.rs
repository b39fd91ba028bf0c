//! Batched production: librdkafka's `rd_kafka_produce_batch` over a topic handle kept per topic.
//!
//! Hand-written over rdkafka's bindings because rust-rdkafka offers only one message per call
//! (`rd_kafka_producev`, which looks the topic up by name, takes the topic's lock and reads the
//! clock twice for every message); a batch does that once. librdkafka's batch call carries no
//! headers and stamps every message with the time of the call, so only records without headers
//! and without a timestamp of their own go this way (see [`batchable`]).

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use rdkafka::bindings as rd;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::super::seam::{KafkaResult, Outgoing};

/// librdkafka's `RD_KAFKA_PARTITION_UA` (a macro, absent from the bindings): the partitioner
/// chooses.
const PARTITION_UA: i32 = -1;

/// The most messages handed to librdkafka in one call (a bound on the call's message array).
const CHUNK: usize = 4096;

/// Whether librdkafka's batch call can produce `record` as `rd_kafka_producev` would.
pub(super) fn batchable(record: &Outgoing<'_>) -> bool {
    record.headers.is_empty() && record.timestamp.is_none()
}

/// An application handle on one of the producer's topics (`rd_kafka_topic_new`), released when
/// dropped: before the producer is (the owner declares it first).
struct TopicHandle(NonNull<rd::rd_kafka_topic_t>);

// SAFETY: librdkafka's topic handles are thread-safe (its calls take the topic's own lock);
// the handle is only a reference count on the topic.
unsafe impl Send for TopicHandle {}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_topic_new and released once, here
        unsafe { rd::rd_kafka_topic_destroy(self.0.as_ptr()) }
    }
}

/// The topic handles of one producer, made at a topic's first batch.
#[derive(Default)]
pub(super) struct Topics(Mutex<HashMap<String, TopicHandle>>);

impl Topics {
    /// Queue `records` (all of `topic`, each [`batchable`]) in one call, in order: how many were
    /// queued from the first, and the error of the first that was not. After a `QueueFull` none
    /// of the rest was queued (librdkafka refuses them all), so sending the rest again keeps the
    /// order.
    pub(super) fn produce(
        &self,
        rk: *mut rd::rd_kafka_t,
        topic: &str,
        records: &[Outgoing<'_>],
    ) -> (usize, Option<KafkaError>) {
        let rkt = match self.handle(rk, topic) {
            Ok(rkt) => rkt,
            Err(e) => return (0, Some(e)),
        };
        let mut queued = 0;
        for chunk in records.chunks(CHUNK) {
            let mut messages: Vec<rd::rd_kafka_message_t> = chunk.iter().map(message_of).collect();
            // SAFETY: `rkt` is a live handle of `rk`'s (kept in the map until the producer
            // goes); the messages point into `records`, which outlive the call, and
            // RD_KAFKA_MSG_F_COPY has librdkafka copy key and value before it returns
            unsafe {
                rd::rd_kafka_produce_batch(
                    rkt,
                    PARTITION_UA,
                    rd::RD_KAFKA_MSG_F_COPY | rd::RD_KAFKA_MSG_F_PARTITION,
                    messages.as_mut_ptr(),
                    chunk.len() as c_int, // at most CHUNK
                )
            };
            let ok = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
            if let Some(i) = messages.iter().position(|m| m.err != ok) {
                let code = RDKafkaErrorCode::from(messages[i].err);
                return (queued + i, Some(KafkaError::MessageProduction(code)));
            }
            queued += chunk.len();
        }
        (queued, None)
    }

    /// `topic`'s handle, made at its first use.
    fn handle(&self, rk: *mut rd::rd_kafka_t, topic: &str) -> KafkaResult<*mut rd::rd_kafka_topic_t> {
        let mut handles = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(handle) = handles.get(topic) {
            return Ok(handle.0.as_ptr());
        }
        let name = CString::new(topic).map_err(|_| KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTopic))?;
        // SAFETY: `rk` is the producer's live client; a null configuration takes its defaults
        let rkt = unsafe { rd::rd_kafka_topic_new(rk, name.as_ptr(), ptr::null_mut()) };
        let Some(rkt) = NonNull::new(rkt) else {
            // SAFETY: reads this thread's last librdkafka error
            let code = RDKafkaErrorCode::from(unsafe { rd::rd_kafka_last_error() });
            return Err(KafkaError::MessageProduction(code));
        };
        handles.insert(topic.to_string(), TopicHandle(rkt));
        Ok(rkt.as_ptr())
    }
}

/// `record` as librdkafka's batch call takes it: key and value borrowed (copied by the call),
/// its partition or the partitioner's choice.
fn message_of(record: &Outgoing<'_>) -> rd::rd_kafka_message_t {
    let (payload, len) = record
        .value
        .map_or((ptr::null_mut(), 0), |v| (v.as_ptr() as *mut c_void, v.len()));
    let (key, key_len) = record
        .key
        .map_or((ptr::null_mut(), 0), |k| (k.as_ptr() as *mut c_void, k.len()));
    rd::rd_kafka_message_t {
        err: rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
        rkt: ptr::null_mut(),
        partition: record.partition.unwrap_or(PARTITION_UA),
        payload,
        len,
        key,
        key_len,
        offset: 0,
        _private: ptr::null_mut(),
    }
}
