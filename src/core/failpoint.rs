//! Named crash points in the checkpoint protocol, so a test can crash the process at an exact
//! step and name it when a guarantee breaks (in the spirit of tikv's `fail-rs`, reduced to one
//! action). With the `failpoints` feature, `TIDEGATE_FAILPOINT=name` aborts the process the
//! first time `name` is reached, `name:n` the n-th time, as `kill -9` would. Without the feature
//! every point compiles to nothing. Hand-rolled: one env-var switch and an abort do not need
//! the `fail` crate's registry and actions.

/// The points, in protocol order (the crash tests iterate over them).
pub const POINTS: &[&str] = &[
    "sink.after_write",
    "checkpoint.before_prepare",
    "checkpoint.after_prepare",
    "state.before_rename",
    "checkpoint.after_state",
    "checkpoint.after_commit",
];

/// Abort here if `TIDEGATE_FAILPOINT` names this point (and this is the n-th time).
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let target = TARGET.get_or_init(|| {
        let spec = std::env::var("TIDEGATE_FAILPOINT").ok()?;
        match spec.split_once(':') {
            Some((point, n)) => Some((point.to_string(), n.parse().unwrap_or(1))),
            None => Some((spec, 1)),
        }
    });
    if let Some((point, n)) = target {
        if point == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            eprintln!("tidegate: failpoint {name} reached: aborting");
            std::process::abort();
        }
    }
}

/// Failpoints are compiled out (build with the `failpoints` feature to use them).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) {}
