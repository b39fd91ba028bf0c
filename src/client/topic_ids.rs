//! Topic ids (KIP-516), which tell a deleted and recreated topic from the one a split's offsets
//! belong to. librdkafka's metadata API leaves them out; its Admin API's DescribeTopics has
//! them, and rust-rdkafka does not wrap it, so this calls it through the raw bindings.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;

use super::TracingContext;
use crate::error::{Error, Result};

/// Frees what the DescribeTopics call allocated, whichever way it ends.
struct Call {
    collection: *mut rd::rd_kafka_TopicCollection_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    queue: *mut rd::rd_kafka_queue_t,
    event: *mut rd::rd_kafka_event_t,
}

impl Drop for Call {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or was created by this call and is destroyed once, here.
        unsafe {
            if !self.event.is_null() {
                rd::rd_kafka_event_destroy(self.event);
            }
            if !self.queue.is_null() {
                rd::rd_kafka_queue_destroy(self.queue);
            }
            if !self.options.is_null() {
                rd::rd_kafka_AdminOptions_destroy(self.options);
            }
            if !self.collection.is_null() {
                rd::rd_kafka_TopicCollection_destroy(self.collection);
            }
        }
    }
}

/// The ids of the existing ones of `topics` (base64, as Kafka's tools print them), asked of
/// broker `broker` (any broker answers; librdkafka would wait for the controller, which some
/// clusters, its mock among them, never name). Topics the broker does not describe, and brokers
/// without topic ids, give no entry.
pub fn topic_ids(
    consumer: &BaseConsumer<TracingContext>,
    topics: &[String],
    broker: i32,
    timeout: Duration,
) -> Result<HashMap<String, String>> {
    let mut ids = HashMap::new();
    if topics.is_empty() {
        return Ok(ids);
    }
    let names = topics
        .iter()
        .map(|t| CString::new(t.as_str()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::runtime("describing topics", e))?;
    let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128 - 1_000) as i32;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the consumer's live handle; the names outlive the call that copies them; the
    // event's descriptions are read before the event is destroyed (by `Call`'s drop).
    unsafe {
        let mut call = Call {
            collection: rd::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len()),
            options: rd::rd_kafka_AdminOptions_new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS),
            queue: rd::rd_kafka_queue_new(rk),
            event: std::ptr::null_mut(),
        };
        if call.collection.is_null() || call.options.is_null() || call.queue.is_null() {
            return Err(Error::runtime(
                "describing topics",
                "librdkafka could not set the call up",
            ));
        }
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(call.options, timeout_ms, errstr.as_mut_ptr(), errstr.len());
        if broker >= 0 {
            rd::rd_kafka_AdminOptions_set_broker(call.options, broker, errstr.as_mut_ptr(), errstr.len());
        }
        rd::rd_kafka_DescribeTopics(rk, call.collection, call.options, call.queue);
        call.event = rd::rd_kafka_queue_poll(call.queue, timeout_ms + 1_000);
        if call.event.is_null() {
            return Err(Error::runtime(
                "describing topics",
                format!("no answer within {timeout:?}"),
            ));
        }
        if rd::rd_kafka_event_error(call.event) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            let text = rd::rd_kafka_event_error_string(call.event);
            let text = if text.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(text).to_string_lossy()
            };
            return Err(Error::runtime("describing topics", text));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(call.event);
        if result.is_null() {
            return Err(Error::runtime("describing topics", "an answer of another kind"));
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        for i in 0..count {
            let description = *descriptions.add(i);
            let error = rd::rd_kafka_TopicDescription_error(description);
            if !error.is_null() && rd::rd_kafka_error_code(error) != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                continue;
            }
            let id = rd::rd_kafka_TopicDescription_topic_id(description);
            if id.is_null()
                || (rd::rd_kafka_Uuid_most_significant_bits(id) == 0
                    && rd::rd_kafka_Uuid_least_significant_bits(id) == 0)
            {
                continue;
            }
            let (name, text) = (
                rd::rd_kafka_TopicDescription_name(description),
                rd::rd_kafka_Uuid_base64str(id),
            );
            if name.is_null() || text.is_null() {
                continue;
            }
            ids.insert(
                CStr::from_ptr(name).to_string_lossy().into_owned(),
                CStr::from_ptr(text).to_string_lossy().into_owned(),
            );
        }
    }
    Ok(ids)
}
