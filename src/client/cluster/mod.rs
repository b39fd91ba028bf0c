//! The seam between tidegate and a Kafka cluster: the client calls the checkpoint store, the
//! Kafka sink, the group membership, the event-time link and the source's discovery make, as
//! traits. [`native`] implements them over librdkafka; the deterministic simulation
//! (`crate::simulation`, tests only) implements them over a simulated cluster on its virtual
//! clock. Code reaches a cluster through [`of`], never by building a librdkafka client itself,
//! so the same code runs against either. The split readers' fetch path is the exception: it stays
//! on librdkafka's raw batch API (`crate::kafka::batch_queue`), and the simulation gives the
//! source a split reader of its own (`crate::kafka::split_reader::simulate`).

pub mod native;
pub mod seam;

use std::sync::Arc;

pub use seam::*;

thread_local! {
    /// The simulated clusters of a simulation running on this thread, by bootstrap servers.
    static SIMULATED: std::cell::RefCell<Vec<(String, Arc<dyn Cluster>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The cluster at `bootstrap_servers`: librdkafka's, or under a simulation on this thread the
/// simulated one that answers there.
pub fn of(bootstrap_servers: &str) -> Arc<dyn Cluster> {
    let simulated = SIMULATED.with(|s| {
        s.borrow()
            .iter()
            .find(|(servers, _)| servers == bootstrap_servers)
            .map(|(_, c)| Arc::clone(c))
    });
    simulated.unwrap_or_else(|| Arc::new(native::Native))
}

/// Whether a simulated cluster answers at `bootstrap_servers` on this thread (its clients are no
/// librdkafka clients).
pub fn is_simulated(bootstrap_servers: &str) -> bool {
    SIMULATED.with(|s| s.borrow().iter().any(|(servers, _)| servers == bootstrap_servers))
}

/// Answer `bootstrap_servers` with `cluster` on this thread until the guard is dropped (the
/// deterministic simulation's clusters).
#[cfg(test)]
pub fn simulate(bootstrap_servers: &str, cluster: Arc<dyn Cluster>) -> SimulatedGuard {
    SIMULATED.with(|s| s.borrow_mut().push((bootstrap_servers.to_string(), cluster)));
    SimulatedGuard {
        servers: bootstrap_servers.to_string(),
    }
}

/// Ends a [`simulate`] when dropped.
#[cfg(test)]
pub struct SimulatedGuard {
    servers: String,
}

#[cfg(test)]
impl Drop for SimulatedGuard {
    fn drop(&mut self) {
        SIMULATED.with(|s| s.borrow_mut().retain(|(servers, _)| *servers != self.servers));
    }
}
