//! How a job runs (its name, readers, checkpoint interval, time limit, instance): the options
//! the job and its coordinator share.

use std::time::Duration;

use super::source::Instance;

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobOptions {
    /// The job's name, stored in the state file: only the same job resumes it.
    pub name: String,
    /// Number of reader tasks.
    pub parallelism: usize,
    /// Time between checkpoints; `None` checkpoints only at the end.
    pub checkpoint_interval: Option<Duration>,
    /// Stop gracefully (final checkpoint) after this long.
    pub max_duration: Option<Duration>,
    /// Capacity of the channel to the sink, in record batches.
    pub sink_capacity: usize,
    /// This process's share of the job (`job.instance`), recorded in the state file: a state
    /// written by another share is refused.
    pub instance: Instance,
}

impl JobOptions {
    /// Options with `parallelism` readers, checkpoints only at the end, no time limit.
    pub fn new(name: impl Into<String>, parallelism: usize) -> Self {
        JobOptions {
            name: name.into(),
            parallelism,
            checkpoint_interval: None,
            max_duration: None,
            sink_capacity: 2,
            instance: Instance::default(),
        }
    }
}
