//! Retrying a Kafka call that may fail for a while (a topic not yet known, a broker moving, a
//! group's coordinator loading), up to a deadline.

use std::time::Duration;

use crate::core::sim;
use crate::error::{Error, Result};

/// Call `attempt` with the time left until it succeeds or `timeout` has passed, then fail with
/// its last error and `what`. For broker answers that may be passing (a topic being created, a
/// partition without a leader, a coordinator loading) and must never be read as answers. Under a
/// simulation, where time does not pass inside a call, a few attempts.
pub(crate) fn retried<T>(what: &str, timeout: Duration, mut attempt: impl FnMut(Duration) -> Result<T>) -> Result<T> {
    const PAUSE: Duration = Duration::from_millis(200);
    let deadline = sim::now() + timeout;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(sim::now()).max(PAUSE);
        let e = match attempt(left) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(sim::now());
        if left.is_zero() || (sim::active() && attempts >= 3) {
            return Err(Error::client(
                format!("{what}: still failing after {attempts} attempts in {timeout:?}"),
                e,
            ));
        }
        tracing::debug!(error = %e, attempts, "{what}: retrying");
        if !sim::active() {
            std::thread::sleep(PAUSE.min(left));
        }
    }
}
