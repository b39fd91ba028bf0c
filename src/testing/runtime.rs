//! Where the testing API runs its work: a multi-threaded runtime of its own (jobs need one, and
//! a `#[tokio::test]` is not), on a thread of its own when the caller is already inside a runtime.

use std::future::Future;

use crate::error::{Error, Result};

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting an async runtime", e))
}

/// Run `work` on this thread, or, within an async runtime (where blocking on another runtime
/// panics), on a thread of its own while this one waits.
pub(super) fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// The future `make` builds, run to its end on a multi-threaded runtime of its own, which then
/// waits at most [`crate::assembly::runtime::LEFTOVER_WAIT`] for work left behind (a client waiting on a
/// broker).
fn run_on_own_runtime<T, F: Future<Output = Result<T>>>(make: impl FnOnce() -> F) -> Result<T> {
    let runtime = runtime()?;
    let result = runtime.block_on(make());
    crate::assembly::runtime::shut_down(runtime);
    result
}

/// [`run_on_own_runtime`] from blocking code, in or out of an async runtime.
pub(super) fn block_on_own<T: Send, F: Future<Output = Result<T>>>(make: impl FnOnce() -> F + Send) -> Result<T> {
    off_runtime(move || run_on_own_runtime(make))
}

/// [`run_on_own_runtime`] on a thread of its own, awaited.
pub(super) async fn own_runtime<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tidegate-testing".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || run_on_own_runtime(make)));
            let _ = tx.send(result);
        })
        .map_err(|e| Error::io("starting a thread for the job", e))?;
    match rx.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(Error::runtime("running the job", "its thread ended without a result")),
    }
}
