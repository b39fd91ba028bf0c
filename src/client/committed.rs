//! Reading a group's committed offsets from an OffsetFetch answer: a partition the broker
//! answered with an error is an error, never "nothing committed".

use rdkafka::{Offset, TopicPartitionList};

use super::TopicPartition;
use crate::error::Result;

/// Each partition of `answer` with its committed offset, `None` where the group has none. A
/// partition answered with an error (its topic's authorization refused, an offset commit still
/// pending in an open transaction, a coordinator loading) fails the whole answer, naming it:
/// read as "none", a committed start would fall back to its reset and read again, or skip, what
/// the group had already consumed. `what` says what was being read.
pub(crate) fn committed_offsets(answer: &TopicPartitionList, what: &str) -> Result<Vec<(TopicPartition, Option<i64>)>> {
    answer
        .elements()
        .iter()
        .map(|elem| {
            let tp = (elem.topic().to_string(), elem.partition());
            elem.error()
                .map_err(|e| crate::error::kafka(format!("{what}: the answer for {}:{}", tp.0, tp.1), e))?;
            let offset = match elem.offset() {
                Offset::Offset(n) if n >= 0 => Some(n),
                _ => None,
            };
            Ok((tp, offset))
        })
        .collect()
}

/// An answer of `(partition, offset, error)` for topic `t`. rdkafka has no setter for a
/// partition's error (only librdkafka's answers carry one): set on the C list directly.
#[cfg(test)]
pub(crate) fn answer(parts: &[(i32, Offset, rdkafka::types::RDKafkaRespErr)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (p, offset, _) in parts {
        tpl.add_partition_offset("t", *p, *offset).expect("offset");
    }
    // SAFETY: `tpl` owns its C list of `parts.len()` elements, added above in this order;
    // only each element's `err` field is written.
    unsafe {
        let list = &mut *tpl.ptr();
        for (i, (_, _, err)) in parts.iter().enumerate() {
            (*list.elems.add(i)).err = *err;
        }
    }
    tpl
}

#[cfg(test)]
mod tests {
    use rdkafka::types::RDKafkaRespErr;

    use super::*;

    #[test]
    fn a_partition_s_error_is_an_error_naming_it_and_no_offset_is_none() {
        let ok = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR;
        let read = committed_offsets(
            &answer(&[(0, Offset::Offset(7), ok), (1, Offset::Invalid, ok)]),
            "reading",
        )
        .expect("no partition error");
        assert_eq!(read, vec![(("t".into(), 0), Some(7)), (("t".into(), 1), None)]);

        let unstable = RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNSTABLE_OFFSET_COMMIT;
        let e = committed_offsets(
            &answer(&[(0, Offset::Offset(7), ok), (1, Offset::Invalid, unstable)]),
            "reading",
        )
        .expect_err("partition 1's answer is an error, not \"nothing committed\"");
        let text = e.chain_text();
        assert!(text.contains("t:1"), "{text}");
    }
}
