//! What a job's event time does: pacing, a source-wide stop, rate limits, and whether other
//! processes read some of the source's splits.

use std::time::Duration;

/// What a job's event time does.
#[derive(Debug, Clone, PartialEq)]
pub struct EventTimeOptions {
    /// Emit each record when `(its timestamp - the first timestamp) / speed` has passed since
    /// the replay started (`None`: as fast as possible).
    pub speed: Option<f64>,
    /// The earliest end-of-stream record of any split ends every split at its timestamp.
    pub source_wide_stop: bool,
    /// How long before it reaches the log a record may be stamped (producer clock skew plus the
    /// time from produce to the log): a split confirmed caught up at instant t evaluates nothing
    /// stamped before t less this.
    pub idle_grace: Duration,
    /// How far a record may be stamped before one ahead of it in its split (Flink's
    /// `forBoundedOutOfOrderness`): zero when every split is in timestamp order.
    pub max_out_of_orderness: Duration,
    /// Records pass the job's rate limits ([`crate::throttle::Throttle`]) one by one, held back
    /// like paced ones (`source.max_rate`, `source.max_bytes_rate`).
    pub rate_limited: bool,
    /// Other processes read some of the source's splits (group coordination): their watermarks,
    /// fronts and stop come from [`super::EventTimeClock::set_peers`], and until the first call
    /// nothing is released.
    pub peers: bool,
}

impl Default for EventTimeOptions {
    /// Inactive: no pacing, no source-wide stop; a 2 s grace, partitions in timestamp order.
    fn default() -> Self {
        EventTimeOptions {
            speed: None,
            source_wide_stop: false,
            idle_grace: Duration::from_secs(2),
            max_out_of_orderness: Duration::ZERO,
            rate_limited: false,
            peers: false,
        }
    }
}

impl EventTimeOptions {
    /// Whether anything needs the clock.
    pub fn is_active(&self) -> bool {
        self.speed.is_some() || self.source_wide_stop || self.rate_limited
    }
}
