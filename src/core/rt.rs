//! Where the runtime's parts run. The split fetchers and the sink do blocking I/O, so each gets
//! an OS thread of its own, driving its async loop with [`block_on`]; under a simulation
//! ([`crate::sim`]) the same loops run as tasks of the simulation's single-threaded runtime, and
//! calls that would go to another thread run in place, so one seed gives one schedule.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::sim;
use crate::error::{Error, Result};

/// A fetcher or the sink: a thread, or a task under a simulation.
pub(crate) enum Worker {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

/// Run `work` on a thread named `name`, or under a simulation as a task.
pub(crate) fn spawn_worker<F>(name: String, work: F) -> Result<Worker>
where
    F: Future<Output = ()> + Send + 'static,
{
    if sim::active() {
        return Ok(Worker::Task(sim::spawn(work)));
    }
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || block_on(work))
        .map(Worker::Thread)
        .map_err(|e| Error::io(format!("cannot start the {name} thread"), e))
}

impl Worker {
    pub(crate) fn is_finished(&self) -> bool {
        match self {
            Worker::Thread(t) => t.is_finished(),
            Worker::Task(t) => t.is_finished(),
        }
    }

    /// Wait for a thread to end. A task is left to end on its own: the simulation's one thread
    /// cannot block on it.
    pub(crate) fn join(self) {
        if let Worker::Thread(t) = self {
            let _ = t.join();
        }
    }

    /// Wait for it to end without blocking the async runtime; false if it panicked.
    pub(crate) async fn wait(self) -> bool {
        match self {
            Worker::Thread(t) => matches!(tokio::task::spawn_blocking(move || t.join()).await, Ok(Ok(()))),
            Worker::Task(t) => t.await.is_ok(),
        }
    }
}

/// Run blocking `f` off the async runtime's threads (`spawn_blocking`); in place under a
/// simulation, where nothing blocks (the simulated clients answer at once).
pub async fn unblock<R, F>(f: F) -> Result<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    if sim::active() {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::runtime("a blocking call", e))
}

/// Run blocking `f` on this runtime thread, letting the runtime move its other tasks away
/// (`block_in_place`, multi-threaded runtimes only); in place under a simulation or on a
/// current-thread runtime.
pub(crate) fn block_here<R>(f: impl FnOnce() -> R) -> R {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi && !sim::active() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// Drive `future` to completion on this thread, parking it while the future waits.
/// Hand-rolled (fifteen lines): a tokio runtime per fetcher thread would put a runtime context
/// under the split readers' blocking client calls, and `futures-executor` is a crate for this.
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// A future's panic as a value (a fetcher that panics fails the job instead of vanishing).
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
