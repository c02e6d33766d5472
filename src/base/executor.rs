//! Where a node's own background work runs, reachable from any thread.
//!
//! A node's endpoint dials peers from whichever actor first needs them, but the dial (and the
//! connection it makes) must live as long as the node, not as long as that actor's arbiter. A
//! [`NodeExecutor`] is a `Send` handle to the node's event loop: in production an actix
//! arbiter; in the simulation a queue drained inside the node's own `LocalSet`, so a crashed node
//! takes every one of its tasks with it and nothing of it survives on a shared loop.

use std::fmt;
use std::future::Future;

use actix::ArbiterHandle;
use tokio::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// A handle that starts futures on one node's event loop.
#[derive(Clone)]
pub struct NodeExecutor(Kind);

#[derive(Clone)]
enum Kind {
    Arbiter(ArbiterHandle),
    Queue(mpsc::UnboundedSender<Job>),
}

impl fmt::Debug for NodeExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Arbiter(_) => "NodeExecutor(arbiter)",
            Kind::Queue(_) => "NodeExecutor(local set)",
        })
    }
}

impl NodeExecutor {
    /// The arbiter the caller runs on (production: the node's main arbiter).
    #[allow(clippy::disallowed_methods)] // production: the node's loop is the arbiter it starts on
    pub fn current_arbiter() -> Self {
        Self(Kind::Arbiter(actix::Arbiter::current()))
    }

    /// An executor for a node that runs in a `LocalSet` of its own: the returned future must be
    /// spawned in that set, where it starts whatever is handed to the executor. When the set is
    /// dropped, later spawns fail.
    pub fn local() -> (Self, impl Future<Output = ()>) {
        let (sender, mut jobs) = mpsc::unbounded_channel::<Job>();
        let runner = async move {
            while let Some(job) = jobs.recv().await {
                job();
            }
        };
        (Self(Kind::Queue(sender)), runner)
    }

    /// Starts the future `make` returns on the node's loop. The future need not be `Send`: it is
    /// made there. Returns false if the loop is gone (the node stopped).
    pub fn spawn<F, Fut>(&self, make: F) -> bool
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let job = move || {
            tokio::task::spawn_local(make());
        };
        match &self.0 {
            Kind::Arbiter(arbiter) => arbiter.spawn_fn(job),
            Kind::Queue(queue) => queue.send(Box::new(job)).is_ok(),
        }
    }
}
