//! The bounded hand-off between fetcher threads and the reader task (Flink's
//! `FutureCompletingBlockingQueue`): `put` waits while the queue is full (the backpressure),
//! `poll` never blocks, and an availability future wakes the reader.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// A future that completes when the reader may have data (or an error) again.
pub type AvailabilityFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The default capacity in batches, as in Flink (`source.reader.element.queue.capacity` = 2).
pub const DEFAULT_CAPACITY: usize = 2;

/// A bounded queue of batches with an interruptible `put` that waits for room and an async
/// availability signal: Flink's `FutureCompletingBlockingQueue` under a shorter name.
pub struct ElementQueue<B> {
    items: Mutex<VecDeque<B>>,
    not_full: Notify,
    capacity: usize,
    available: Arc<Notify>,
    pushed: AtomicU64,
    popped: AtomicU64,
}

impl<B> ElementQueue<B> {
    /// A queue holding at most `capacity` batches (at least one).
    pub fn new(capacity: usize) -> Self {
        ElementQueue {
            items: Mutex::new(VecDeque::with_capacity(capacity.max(1))),
            not_full: Notify::new(),
            capacity: capacity.max(1),
            available: Arc::new(Notify::new()),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<B>> {
        // A panic while holding this lock cannot leave the deque half-updated (push/pop are
        // atomic from our side), so a poisoned lock is still safe to use.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until there is room, then append. Returns the batch back, without enqueuing it, if
    /// `wake` is raised (see [`ElementQueue::wake_up_putting`]) before there is room.
    pub async fn put(&self, batch: B, wake: &AtomicBool) -> Result<(), B> {
        loop {
            // registered before the check, so a poll between the check and the wait wakes it
            let room = self.not_full.notified();
            let mut room = std::pin::pin!(room);
            room.as_mut().enable();
            {
                let mut items = self.lock();
                if wake.swap(false, Ordering::AcqRel) {
                    return Err(batch);
                }
                if items.len() < self.capacity {
                    items.push_back(batch);
                    self.pushed.fetch_add(1, Ordering::Relaxed);
                    drop(items);
                    self.available.notify_one();
                    return Ok(());
                }
            }
            room.await;
        }
    }

    /// Interrupt a fetcher waiting in `put` with this `wake` flag (or its next `put`).
    pub fn wake_up_putting(&self, wake: &AtomicBool) {
        let _items = self.lock();
        wake.store(true, Ordering::Release);
        self.not_full.notify_waiters();
    }

    /// Take the oldest batch, if any; never blocks.
    pub fn poll(&self) -> Option<B> {
        let mut items = self.lock();
        let batch = items.pop_front();
        if batch.is_some() {
            self.popped.fetch_add(1, Ordering::Relaxed);
            drop(items);
            self.not_full.notify_waiters();
        }
        batch
    }

    /// Whether no batch waits.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Batches waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The most batches it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Drop every queued batch for which `drop_it` is true (used when splits are removed).
    pub fn retain(&self, mut keep: impl FnMut(&mut B) -> bool) {
        let mut items = self.lock();
        items.retain_mut(|b| keep(b));
        drop(items);
        self.not_full.notify_waiters();
    }

    /// Wake the reader without a batch (a fetcher failed or went idle).
    pub fn notify_available(&self) {
        self.available.notify_one();
    }

    /// Completes after the next `put` or `notify_available` (or at once if one happened since
    /// the last wait: the signal is stored, so no wake-up is lost).
    pub fn available(&self) -> AvailabilityFuture {
        let notify = Arc::clone(&self.available);
        Box::pin(async move { notify.notified().await })
    }

    /// Batches enqueued since creation.
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::Relaxed)
    }

    /// Batches taken since creation.
    pub fn popped(&self) -> u64 {
        self.popped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::block_on;
    use std::time::Duration;

    #[test]
    fn put_blocks_when_full_until_a_poll() {
        let q = Arc::new(ElementQueue::new(2));
        let wake = AtomicBool::new(false);
        block_on(q.put(1, &wake)).unwrap();
        block_on(q.put(2, &wake)).unwrap();
        let q2 = Arc::clone(&q);
        let t = std::thread::spawn(move || {
            let wake = AtomicBool::new(false);
            block_on(q2.put(3, &wake)).unwrap();
        });
        // the third put cannot complete while the queue holds two batches
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(q.len(), 2);
        assert_eq!(q.poll(), Some(1));
        t.join().unwrap();
        assert_eq!(q.poll(), Some(2));
        assert_eq!(q.poll(), Some(3));
        assert_eq!(q.poll(), None);
        assert_eq!((q.pushed(), q.popped()), (3, 3));
    }

    #[test]
    fn wake_up_interrupts_a_blocked_put_and_returns_the_batch() {
        let q = Arc::new(ElementQueue::new(1));
        let wake = Arc::new(AtomicBool::new(false));
        block_on(q.put(1, &wake)).unwrap();
        let (q2, w2) = (Arc::clone(&q), Arc::clone(&wake));
        let t = std::thread::spawn(move || block_on(q2.put(2, &w2)));
        q.wake_up_putting(&wake);
        assert_eq!(t.join().unwrap(), Err(2));
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn availability_is_not_lost_when_signalled_before_waiting() {
        let q = ElementQueue::new(2);
        q.put(7, &AtomicBool::new(false)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), q.available())
            .await
            .expect("stored signal completes the future");
        assert_eq!(q.poll(), Some(7));
    }
}
