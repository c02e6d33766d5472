//! [`Latch`]: a value set once and awaited by any number of tasks, which wake in a fixed order.
//!
//! tokio's `watch` channel would do the job, but it spreads its waiters over eight `Notify`s
//! picked with the runtime's random generator, so the order in which waiters wake (and with it
//! the order of what they send next) changes from run to run. That broke the simulation's
//! replay (DESIGN §8): a TaskManager reconnecting after a partition wrote its queued messages in
//! a different order each run. A latch wakes its waiters through one `Notify`, in one order.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// A value set at most once, shared by its clones. Every clone can set it, read it or wait for
/// it; the first [`set`](Latch::set) (or [`abandon`](Latch::abandon)) wins.
#[derive(Debug)]
pub struct Latch<T> {
    shared: Arc<Shared<T>>,
}

#[derive(Debug)]
struct Shared<T> {
    state: Mutex<State<T>>,
    changed: Notify,
}

#[derive(Debug)]
enum State<T> {
    Unset,
    Set(T),
    /// Whoever was to set it is gone (a task dropped unfinished): waiters get `None`.
    Abandoned,
}

impl<T> Clone for Latch<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Clone> Default for Latch<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Latch<T> {
    /// An unset latch.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::Unset),
                changed: Notify::new(),
            }),
        }
    }

    /// Sets the value and wakes every waiter, unless the latch was set or abandoned already.
    /// Returns whether this call set it.
    pub fn set(&self, value: T) -> bool {
        self.settle(State::Set(value))
    }

    /// Marks the latch as never to be set: waiters get `None`. No effect once set.
    pub fn abandon(&self) -> bool {
        self.settle(State::Abandoned)
    }

    /// The value, if set.
    pub fn get(&self) -> Option<T> {
        match &*self.state() {
            State::Set(value) => Some(value.clone()),
            State::Unset | State::Abandoned => None,
        }
    }

    /// Whether the latch was set or abandoned.
    pub fn is_settled(&self) -> bool {
        !matches!(*self.state(), State::Unset)
    }

    /// Waits until the latch is set (its value) or abandoned (`None`); at once if it is.
    pub async fn wait(&self) -> Option<T> {
        loop {
            let changed = self.shared.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the state is read, so a `set` in between still wakes us.
            changed.as_mut().enable();
            match &*self.state() {
                State::Set(value) => return Some(value.clone()),
                State::Abandoned => return None,
                State::Unset => {}
            }
            changed.await;
        }
    }

    fn settle(&self, next: State<T>) -> bool {
        {
            let mut state = self.state();
            if !matches!(*state, State::Unset) {
                return false;
            }
            *state = next;
        }
        self.shared.changed.notify_waiters();
        true
    }

    /// The state. Every update is one assignment, so a poisoned lock is used as is.
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    #[tokio::test]
    async fn waiters_wake_with_the_first_value_in_the_order_they_waited() {
        let latch = Latch::new();
        let woken = Rc::new(RefCell::new(Vec::new()));
        let local = tokio::task::LocalSet::new();
        for waiter in 0..20 {
            let latch = latch.clone();
            let woken = Rc::clone(&woken);
            local.spawn_local(async move {
                let value = latch.wait().await;
                woken.borrow_mut().push((waiter, value));
            });
        }
        let setter = latch.clone();
        local
            .run_until(async move {
                tokio::task::yield_now().await;
                assert!(setter.set("up"));
                assert!(!setter.set("again"), "the first value wins");
                assert!(!setter.abandon());
            })
            .await;
        local.await;
        let expected: Vec<_> = (0..20).map(|w| (w, Some("up"))).collect();
        assert_eq!(*woken.borrow(), expected);
        assert_eq!(latch.get(), Some("up"));
        assert_eq!(latch.wait().await, Some("up"), "set: answers at once");
    }

    #[tokio::test]
    async fn an_abandoned_latch_answers_none() {
        let latch: Latch<u32> = Latch::new();
        assert!(!latch.is_settled());
        assert!(latch.abandon());
        assert!(latch.is_settled());
        assert_eq!(latch.wait().await, None);
        assert!(!latch.set(1), "abandoned stays abandoned");
        assert_eq!(latch.get(), None);
    }
}
