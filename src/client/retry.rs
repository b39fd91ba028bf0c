//! Retrying a Kafka call that may fail for a while (a topic not yet known, a broker moving, a
//! group's coordinator loading), up to a deadline.

use std::time::Duration;

use crate::core::sim;
use crate::error::{Error, Result};

/// Call `attempt` with the time left until it succeeds or `timeout` has passed, then fail with
/// its last error and `what`. For broker answers that may be passing (a topic being created, a
/// partition without a leader, a coordinator loading) and must never be read as answers. A
/// refusal no retry cures ([`is_refusal`]) fails at once. Under a simulation, where time does not
/// pass inside a call, a few attempts.
pub(crate) fn retried<T>(what: &str, timeout: Duration, mut attempt: impl FnMut(Duration) -> Result<T>) -> Result<T> {
    const PAUSE: Duration = Duration::from_millis(200);
    let deadline = sim::now() + timeout;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let left = deadline.saturating_duration_since(sim::now()).max(PAUSE);
        let e = match attempt(left) {
            Ok(v) => return Ok(v),
            Err(e) if is_refusal(&e) => return Err(e),
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

/// Whether `e` is a Kafka refusal that waiting does not change: authorization or authentication
/// refused, an invalid group id. Retried, it would only surface at the deadline, a request
/// timeout later, as "still failing".
fn is_refusal(e: &Error) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode::*};
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        if let Some(code) = cause
            .downcast_ref::<KafkaError>()
            .and_then(KafkaError::rdkafka_error_code)
        {
            return matches!(
                code,
                GroupAuthorizationFailed
                    | TopicAuthorizationFailed
                    | ClusterAuthorizationFailed
                    | TransactionalIdAuthorizationFailed
                    | SaslAuthenticationFailed
                    | Authentication
                    | InvalidGroupId
            );
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::*;

    /// `retried` over calls that always fail with `code`: how many calls it made, and its error.
    fn retried_failing(code: RDKafkaErrorCode, timeout: Duration) -> (u32, Error) {
        let mut calls = 0;
        let e = retried("reading", timeout, |_| {
            calls += 1;
            Err::<(), _>(crate::error::kafka(
                "reading committed offsets",
                KafkaError::MetadataFetch(code),
            ))
        })
        .expect_err("every call fails");
        (calls, e)
    }

    #[test]
    fn a_refusal_fails_at_once_and_a_moving_coordinator_is_retried_until_the_deadline() {
        let (calls, e) = retried_failing(RDKafkaErrorCode::GroupAuthorizationFailed, Duration::from_secs(30));
        assert_eq!(calls, 1, "a refusal is the answer: {e}");
        assert!(e.to_string().contains("reading committed offsets"), "{e}");

        let (calls, e) = retried_failing(RDKafkaErrorCode::NotCoordinator, Duration::from_millis(500));
        assert!(calls >= 2, "retried: {calls} calls");
        assert!(e.to_string().contains("still failing after"), "{e}");
    }
}
