//! How task code waits: the production [`TaskBlocker`] and [`block_on`], the helper that waits
//! for a future's output through any blocker.
//!
//! Task code never parks or sleeps its thread itself: every wait goes through the blocker its
//! [`TaskRunner`](crate::env::TaskRunner) hands it, so the simulation
//! ([`LockstepTaskRunner`](crate::sim::lockstep::LockstepTaskRunner)) can run the same code in
//! virtual time. This module must stay free of any async runtime: production task threads have
//! none, and actix mailboxes and tokio oneshot channels need none to make progress.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use crate::env::TaskBlocker;

/// Waits for `future` through `blocker` and returns its output; `None` when the runner is gone
/// (the node crashed), which the task treats as a cancellation.
pub fn block_on<T: Send + 'static>(
    blocker: &dyn TaskBlocker,
    future: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    // The blocker takes an output-less future (it may run elsewhere), so the output comes back
    // through a shared slot.
    let slot = Arc::new(Mutex::new(None));
    let fill = Arc::clone(&slot);
    let completed = blocker.wait(Box::pin(async move {
        let output = future.await;
        *fill.lock().unwrap_or_else(PoisonError::into_inner) = Some(output);
    }));
    if !completed {
        return None;
    }
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// A task's cancellation: a flag its code checks between steps, and a wake-up for the one wait
/// it may be in (for input, for room in a full output), so a cancelled task that waits on a
/// silent channel or a slow consumer stops at once instead of at its next record.
#[derive(Debug, Default)]
pub struct Cancellation {
    flag: std::sync::atomic::AtomicBool,
    waker: futures_util::task::AtomicWaker,
}

impl Cancellation {
    /// Cancels: sets the flag and wakes the task's current wait.
    pub fn cancel(&self) {
        self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
        self.waker.wake();
    }

    /// Whether the task was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Inside a wait's `poll`: registers the waker and says whether the task was cancelled.
    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> bool {
        self.waker.register(cx.waker());
        self.is_cancelled()
    }
}

/// Polls `future` on this thread until it is ready, parking the thread between wake-ups;
/// `before_parking` runs once, before the first park (not at all if the first poll is ready).
pub fn park_until_ready(
    mut future: Pin<&mut (dyn Future<Output = ()> + Send)>,
    before_parking: impl FnOnce(),
) {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    if future.as_mut().poll(&mut context).is_ready() {
        return;
    }
    before_parking();
    // A spurious unpark only costs another poll.
    while future.as_mut().poll(&mut context).is_pending() {
        std::thread::park();
    }
}

/// The production blocker without [compute permits](crate::env::compute_permits): polls the future on the task's own thread, parking it between
/// wake-ups, and sleeps the thread. The runner never goes away, so it always returns true.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadBlocker;

impl TaskBlocker for ThreadBlocker {
    fn wait(&self, mut future: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) -> bool {
        park_until_ready(future.as_mut(), || {});
        true
    }

    #[allow(clippy::disallowed_methods)] // production-only: a real task thread really sleeps
    fn sleep(&self, duration: Duration) -> bool {
        std::thread::sleep(duration);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_returns_the_output_of_a_future_woken_from_another_thread() {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        #[allow(clippy::disallowed_methods)] // a test thread plays the producer
        let producer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            sender.send(7).unwrap();
        });
        assert_eq!(block_on(&ThreadBlocker, receiver), Some(Ok(7)));
        producer.join().unwrap();
    }

    /// A runner that is gone: every wait fails.
    struct Gone;

    impl TaskBlocker for Gone {
        fn wait(&self, _: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) -> bool {
            false
        }
        fn sleep(&self, _: Duration) -> bool {
            false
        }
    }

    #[test]
    fn block_on_through_a_gone_runner_is_none() {
        assert_eq!(block_on(&Gone, async { 7 }), None);
    }
}
