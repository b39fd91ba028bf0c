//! A consumer group's members as librdkafka's `DescribeConsumerGroups` admin call lists them:
//! members of both protocols (the classic `DescribeGroups`, which rust-rdkafka's group list
//! asks, answers a consumer-protocol group (KIP-848) as dead, with no member). rust-rdkafka has
//! no binding of the call, so it is made here on the client's own handle, answered on a queue of
//! its own.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};

/// The members of `group` (each one's client id and host), asked of the cluster `client`
/// reaches, waiting up to `timeout`. A group the broker does not know has none.
pub(super) fn group_members(
    client: *mut rd::rd_kafka_t,
    group: &str,
    timeout: Duration,
) -> KafkaResult<Vec<(String, String)>> {
    let name = CString::new(group).map_err(|_| KafkaError::AdminOpCreation(format!("group name {group:?}")))?;
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `client` is a live handle for the whole call (the caller's client); each object
    // made here (queue, options, event) is destroyed once, after its last use below, and the
    // strings read from the result are copied before the event that owns them is destroyed.
    unsafe {
        let queue = rd::rd_kafka_queue_new(client);
        let options = rd::rd_kafka_AdminOptions_new(
            client,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        );
        let mut errstr = [0 as std::ffi::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(options, ms, errstr.as_mut_ptr(), errstr.len());
        let mut groups = [name.as_ptr()];
        rd::rd_kafka_DescribeConsumerGroups(client, groups.as_mut_ptr(), 1, options, queue);
        let event = rd::rd_kafka_queue_poll(queue, ms.saturating_add(1000));
        let answer = read(event);
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_queue_destroy(queue);
        answer
    }
}

/// The members in `event` (a `DescribeConsumerGroups` result, or null: no answer in time).
///
/// # Safety
/// `event` is null or a live event, which outlives this call.
unsafe fn read(event: *mut rd::rd_kafka_event_t) -> KafkaResult<Vec<(String, String)>> {
    if event.is_null() {
        return Err(KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut));
    }
    let code: RDKafkaErrorCode = rd::rd_kafka_event_error(event).into();
    if code != RDKafkaErrorCode::NoError {
        return Err(KafkaError::AdminOp(code));
    }
    let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event);
    if result.is_null() {
        return Err(KafkaError::AdminOp(RDKafkaErrorCode::Fail));
    }
    let mut count = 0;
    let described = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let mut members = Vec::new();
    for i in 0..count {
        let group = *described.add(i);
        let error = rd::rd_kafka_ConsumerGroupDescription_error(group);
        if !error.is_null() {
            match RDKafkaErrorCode::from(rd::rd_kafka_error_code(error)) {
                RDKafkaErrorCode::GroupIdNotFound => continue,
                code => return Err(KafkaError::AdminOp(code)),
            }
        }
        for m in 0..rd::rd_kafka_ConsumerGroupDescription_member_count(group) {
            let member = rd::rd_kafka_ConsumerGroupDescription_member(group, m);
            members.push((
                text(rd::rd_kafka_MemberDescription_client_id(member)),
                text(rd::rd_kafka_MemberDescription_host(member)),
            ));
        }
    }
    Ok(members)
}
