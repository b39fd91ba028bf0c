//! `tidegate plan --exact`: the records each planned range holds, counted by reading it as a run
//! would (`read_committed`: no transaction markers, no aborted records), without a sink. The
//! offsets stay the default's cheap upper bound; this reads every record of the ranges.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::plan::PartitionPlan;
use super::source::KafkaSource;
use crate::client::TracingContext;
use crate::error::{Error, Result};

/// How long the count may go without a record or an end of partition before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// Set `records` of every bounded, unfinished partition of `plan` to the records between its
/// start and stop that a `read_committed` consumer reads. Unbounded partitions keep `None`.
pub fn count_records(source: &KafkaSource, plan: &mut [PartitionPlan]) -> Result<()> {
    let settings = source.settings();
    let consumer: BaseConsumer<TracingContext> = crate::client::consumer_client_config(
        &settings.bootstrap_servers,
        &[
            ("enable.auto.commit", "false"),
            // what a run reads: committed records only
            ("isolation.level", "read_committed"),
            ("enable.partition.eof", "true"),
            ("client.id", "tidegate-plan-exact"),
            ("group.id", "tidegate-plan"),
        ],
        &settings.properties,
    )
    .create_with_context(TracingContext::new("plan-exact"))
    .map_err(|e| crate::error::kafka("creating the plan's client", e))?;
    // every bounded partition has a count (0 if finished or empty); the others are read
    let mut counts: BTreeMap<usize, u64> = (0..plan.len())
        .filter(|&i| plan[i].stop.is_some())
        .map(|i| (i, 0))
        .collect();
    let open_ids: Vec<usize> = counts
        .keys()
        .copied()
        .filter(|&i| plan[i].finished.is_none() && plan[i].stop.is_some_and(|s| s > plan[i].start))
        .collect();
    let topics: HashSet<String> = open_ids.iter().map(|&i| plan[i].topic.clone()).collect();
    for topic in topics {
        let mut open: HashMap<i32, usize> = HashMap::new();
        let mut tpl = TopicPartitionList::new();
        for &i in open_ids.iter().filter(|&&i| plan[i].topic == topic) {
            let p = &plan[i];
            tpl.add_partition_offset(&topic, p.partition, Offset::Offset(p.start))
                .map_err(|e| crate::error::kafka(format!("counting the records of {topic}:{}", p.partition), e))?;
            open.insert(p.partition, i);
        }
        consumer
            .assign(&tpl)
            .map_err(|e| crate::error::kafka(format!("assigning {topic} to count its records"), e))?;
        let mut last_progress = Instant::now();
        while !open.is_empty() {
            if last_progress.elapsed() > STALL {
                let waiting: Vec<String> = open.keys().map(|p| format!("{topic}:{p}")).collect();
                return Err(Error::runtime(
                    "counting the planned records",
                    format!(
                        "no record nor end of partition for {STALL:?} from {}",
                        waiting.join(", ")
                    ),
                ));
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    last_progress = Instant::now();
                    let Some(&i) = open.get(&m.partition()).filter(|_| m.topic() == topic) else {
                        continue;
                    };
                    let stop = plan[i].stop.unwrap_or(i64::MAX);
                    if m.offset() < stop {
                        *counts.entry(i).or_default() += 1;
                    }
                    if m.offset() + 1 >= stop {
                        open.remove(&m.partition());
                    }
                }
                // the end of the committed records: nothing more before the stop
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    last_progress = Instant::now();
                    open.remove(&partition);
                }
                Some(Err(e)) => {
                    return Err(crate::error::kafka(format!("counting the records of {topic}"), e));
                }
            }
        }
        let _ = consumer.unassign();
    }
    for (i, n) in counts {
        plan[i].records = Some(n);
    }
    Ok(())
}
