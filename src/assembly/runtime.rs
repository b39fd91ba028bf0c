//! The async runtime a job runs on: started once per process, and dropped at the end without
//! waiting unbounded for work the job left behind.

use std::time::{Duration, Instant};

use tracing::info;

use crate::error::{Error, Result};

/// How long work still running once the job has ended may take before the process exits
/// anyway. By then the final checkpoint is durable and the sink closed; what is left (a
/// partition discovery, a progress commit to the consumer group) waits on a broker and is not
/// part of the job's result, so a broker that does not answer must not hold the exit for its
/// request timeout.
pub const LEFTOVER_WAIT: Duration = Duration::from_secs(2);

/// The multi-threaded runtime a process's jobs run on.
pub fn start() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate")
        .build()
        .map_err(|e| Error::io("starting the async runtime", e))
}

/// Drop the runtime once the job has ended, waiting at most [`LEFTOVER_WAIT`] for blocking
/// work still running (a runtime's drop would wait for it without a bound).
pub fn shut_down(runtime: tokio::runtime::Runtime) {
    let started = Instant::now();
    runtime.shutdown_timeout(LEFTOVER_WAIT);
    if started.elapsed() >= LEFTOVER_WAIT {
        info!(
            waited_ms = started.elapsed().as_millis() as u64,
            "work left after the job (waiting on a broker) abandoned at exit; the final checkpoint is unaffected"
        );
    }
}
