//! One simulated node's event loop: a `LocalSet` of its own inside the simulation's single
//! thread, which the simulation can pause (a hung process) or drop (a crash: every actor and
//! task of the node is dropped at once, without stop hooks).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::task::LocalSet;

use crate::base::executor::NodeExecutor;

/// A node's loop, polled by a task on the simulation's root loop.
#[derive(Clone)]
pub struct NodeHost(Rc<RefCell<HostState>>);

struct HostState {
    set: Option<LocalSet>,
    paused: bool,
    waker: Option<Waker>,
}

/// The root task that polls a node's `LocalSet`.
struct Hosted(Rc<RefCell<HostState>>);

impl Future for Hosted {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.0.borrow_mut();
        state.waker = Some(cx.waker().clone());
        if state.paused {
            return Poll::Pending;
        }
        let Some(set) = state.set.as_mut() else {
            return Poll::Ready(());
        };
        // A node whose every task ended stays as it is; only a crash removes it.
        let _ = Pin::new(set).poll(cx);
        Poll::Pending
    }
}

impl NodeHost {
    /// Starts a node's loop on the caller's (root) `LocalSet`, with an executor that spawns into
    /// it. Must be called inside the simulation's root `LocalSet`.
    pub fn start() -> (Self, NodeExecutor) {
        let set = LocalSet::new();
        let (executor, runner) = NodeExecutor::local();
        set.spawn_local(runner);
        let state = Rc::new(RefCell::new(HostState {
            set: Some(set),
            paused: false,
            waker: None,
        }));
        tokio::task::spawn_local(Hosted(Rc::clone(&state)));
        (Self(state), executor)
    }

    /// Runs `future` on the node.
    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) {
        let state = self.0.borrow();
        if let Some(set) = &state.set {
            set.spawn_local(future);
        }
        drop(state);
        self.wake();
    }

    /// Stops polling the node until [`resume`](Self::resume): its timers come due, its inbox
    /// fills, nothing runs.
    pub fn pause(&self) {
        self.0.borrow_mut().paused = true;
    }

    /// Polls the node again.
    pub fn resume(&self) {
        self.0.borrow_mut().paused = false;
        self.wake();
    }

    /// Whether the node is paused.
    pub fn is_paused(&self) -> bool {
        self.0.borrow().paused
    }

    /// Drops every actor and task of the node now.
    pub fn crash(&self) {
        let set = self.0.borrow_mut().set.take();
        drop(set);
        self.wake();
    }

    /// Whether the node still runs (it may be paused).
    pub fn is_up(&self) -> bool {
        self.0.borrow().set.is_some()
    }

    fn wake(&self) {
        let waker = self.0.borrow().waker.clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
