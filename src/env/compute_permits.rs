//! Compute permits: how many of a process's task threads compute at once.
//!
//! A TaskManager runs each deployed task on a thread of its own ([`super::task_threads`]): at
//! P = 10,000 on 4 × 2,500 slots that is 2,500 threads in a process on 2 cores. Parked, they
//! cost nothing; but when data flows, hundreds become runnable at once and the kernel slices
//! the cores among them in microseconds, caches thrash, and the TaskManager's actor thread
//! (heartbeats, deployments, partition requests) waits its turn behind all of them. That run
//! finished in one of two tries, its failures on the control plane.
//!
//! So a task thread computes only while it holds one of a few permits per process (Go bounds
//! its running goroutines by `GOMAXPROCS` the same way): it takes one before its task starts,
//! gives it back whenever it waits through its [`TaskBlocker`] (for input, for room in an
//! output, in a sleep, in [`TaskBlocker::block_in_place`]) and takes one again when the wait
//! ends: a free one at once, else it waits in line (see [`ComputePermits::release`]). Two rules keep the bound from turning into a hang or a
//! starvation:
//! - **Time slices.** A task that never waits (a source whose outputs always have room) gives
//!   its permit to the next in line at its next record once it held it for a slice ([`SLICE`])
//!   while others waited: task code calls [`TaskBlocker::yield_point`] at every record and
//!   buffer it reads or writes.
//! - **A stall admits one more.** A task may block outside its blocker (a user function in a
//!   blocking call, a long sort between two records): if no permit changed hands for
//!   [`STALL`] while tasks wait, the first in line computes beyond the bound (as Go's `sysmon`
//!   hands on the processor of a thread stuck in a system call), one more per further stall;
//!   the bound returns as those permits come back. A bound can slow a job down, never hang it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::env::TaskBlocker;
use crate::env::task_blocking::park_until_ready;

/// How long a task computes while others wait before it gives way at its next record.
pub const SLICE: Duration = Duration::from_millis(10);

/// How long the line may stand still (no permit taken or given back) before its first task
/// computes beyond the bound.
pub const STALL: Duration = Duration::from_millis(50);

/// The permits of one process. Cheap to clone: clones share the permits.
#[derive(Clone)]
pub struct ComputePermits {
    shared: Arc<Shared>,
}

struct Shared {
    limit: usize,
    slice: Duration,
    stall: Duration,
    /// Threads in line, read without the lock at every record ([`PermitBlocker::yield_point`]).
    waiting: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Permits held, beyond `limit` after stalls.
    in_use: usize,
    /// Threads waiting for a permit, first come first served.
    line: VecDeque<Arc<Waiter>>,
    /// Bumped whenever a permit is taken or given back: the line's head sees a stall when it
    /// did not move for `stall`.
    moves: u64,
    /// Permits ever given beyond the bound.
    overflows: u64,
    /// The first in line was woken and has not looked yet: waking it again would only cost
    /// a system call per release.
    first_woken: bool,
}

impl State {
    /// Wakes the first in line to look at the permits, unless it is awake already.
    fn wake_first(&mut self) {
        if !self.first_woken
            && let Some(first) = self.line.front()
        {
            first.thread.unpark();
            self.first_woken = true;
        }
    }
}

/// A thread in line: the permit is handed to it directly (the count does not drop and rise).
struct Waiter {
    thread: Thread,
    granted: AtomicBool,
}

/// What the permits are doing, for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitStats {
    /// The bound.
    pub limit: usize,
    /// Permits held now.
    pub in_use: usize,
    /// Threads waiting for one.
    pub waiting: usize,
    /// Permits ever given beyond the bound after a stall.
    pub overflows: u64,
}

impl std::fmt::Debug for ComputePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputePermits")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for ComputePermits {
    /// [`default_limit`] permits.
    fn default() -> Self {
        Self::new(default_limit())
    }
}

/// Two permits per CPU: a computing task also stalls on page faults and file writes, which a
/// second thread per core fills. Counted once per process: `available_parallelism` reads the
/// cgroup's files, and every `NodeEnv` (thousands per simulation sweep) builds a runner.
pub fn default_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT
        .get_or_init(|| 2 * std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

impl ComputePermits {
    /// `limit` permits (at least one), with the production [`SLICE`] and [`STALL`].
    pub fn new(limit: usize) -> Self {
        Self::with_timing(limit, SLICE, STALL)
    }

    /// `limit` permits with a time slice and stall of one's own (tests).
    pub fn with_timing(limit: usize, slice: Duration, stall: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                limit: limit.max(1),
                slice,
                stall,
                waiting: AtomicUsize::new(0),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The permits now.
    pub fn stats(&self) -> PermitStats {
        let state = self.lock();
        PermitStats {
            limit: self.shared.limit,
            in_use: state.in_use,
            waiting: state.line.len(),
            overflows: state.overflows,
        }
    }

    /// Takes a permit: a free one at once, even ahead of the line (see [`Self::release`]);
    /// otherwise waits in line for one (beyond the bound after a stall).
    pub fn acquire(&self) {
        let shared = &*self.shared;
        let mut state = self.lock();
        if state.in_use < shared.limit {
            state.in_use += 1;
            state.moves += 1;
            return;
        }
        let me = Arc::new(Waiter {
            thread: std::thread::current(),
            granted: AtomicBool::new(false),
        });
        state.line.push_back(Arc::clone(&me));
        shared.waiting.fetch_add(1, Ordering::Relaxed);
        // Only the first in line watches for a stall (the moves it saw, since when): a timed
        // wait in each of thousands of waiting threads would wake them by the thousand.
        let mut watch: Option<(u64, Instant)> = None;
        loop {
            let first = state
                .line
                .front()
                .is_some_and(|head| Arc::ptr_eq(head, &me));
            if first {
                state.first_woken = false;
                if state.in_use < shared.limit {
                    self.leave_line_computing(&mut state);
                    return;
                }
                match watch {
                    None => watch = Some((state.moves, now())),
                    Some((seen, since)) if since.elapsed() >= shared.stall => {
                        if state.moves == seen {
                            self.leave_line_computing(&mut state);
                            state.overflows += 1;
                            return;
                        }
                        watch = Some((state.moves, now()));
                    }
                    Some(_) => {}
                }
            }
            drop(state);
            match watch {
                Some((_, since)) => {
                    std::thread::park_timeout(shared.stall.saturating_sub(since.elapsed()));
                }
                None => std::thread::park(),
            }
            // Set under the lock of the task handing its permit over, before the unpark.
            if me.granted.load(Ordering::Acquire) {
                return;
            }
            state = self.lock();
            if me.granted.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// The first in line takes a permit; the next in line is woken to watch the line (and to
    /// take a permit if another is free).
    fn leave_line_computing(&self, state: &mut State) {
        state.line.pop_front();
        self.shared.waiting.fetch_sub(1, Ordering::Relaxed);
        state.in_use += 1;
        state.moves += 1;
        state.wake_first();
    }

    /// Gives a permit back and wakes the first in line to take it. A task whose wait just
    /// ended may take it first: handing each permit strictly down the line made every release
    /// wait for a sleeping thread to be scheduled, a convoy that made P = 10,000 slower than
    /// no bound at all. Fairness comes from the time slice, which hands its permit straight to
    /// the first in line (`hand_over`).
    pub fn release(&self) {
        let shared = &*self.shared;
        let mut state = self.lock();
        state.in_use -= 1;
        state.moves += 1;
        if state.in_use < shared.limit {
            state.wake_first();
        }
    }

    /// Hands the caller's permit straight to the first in line; false (the caller keeps it) if
    /// no one waits.
    fn hand_over(&self) -> bool {
        let mut state = self.lock();
        let Some(first) = state.line.pop_front() else {
            return false;
        };
        self.shared.waiting.fetch_sub(1, Ordering::Relaxed);
        state.moves += 1;
        first.granted.store(true, Ordering::Release);
        first.thread.unpark();
        state.first_woken = false;
        state.wake_first(); // the new first in line watches the line
        true
    }

    /// Whether any thread waits for a permit (a relaxed read: at worst a slice runs a record
    /// long).
    fn anyone_waiting(&self) -> bool {
        self.shared.waiting.load(Ordering::Relaxed) > 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Only counters and the line change under the lock; a panic there is impossible, but a
        // poisoned lock must not stop every task of the process.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[allow(clippy::disallowed_methods)] // production-only: permits slice the wall time of real threads
fn now() -> Instant {
    Instant::now()
}

/// The coarse monotonic clock: the kernel's time at its last tick (1–4 ms old), read from the
/// vDSO without the TSC. A 10 ms slice needs no better, and a task thread asks at every record:
/// the precise clock was 2.7 % of the CPU of an all-to-all of P = 1,000.
fn coarse_now() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// The blocker of a production task thread under [`ComputePermits`]: it holds a permit while
/// the task computes and gives it back while the task waits; dropping it (the task ended, or
/// panicked) gives back the permit it holds.
pub struct PermitBlocker<'a> {
    permits: &'a ComputePermits,
    /// When the permit held now was taken ([`coarse_now`]); `None` while the task waits
    /// without one.
    held_since: Cell<Option<Duration>>,
}

impl<'a> PermitBlocker<'a> {
    /// Waits for a permit and holds it.
    pub fn acquire(permits: &'a ComputePermits) -> Self {
        let blocker = Self {
            permits,
            held_since: Cell::new(None),
        };
        blocker.take();
        blocker
    }

    fn take(&self) {
        self.permits.acquire();
        self.held_since.set(Some(coarse_now()));
    }

    fn give_back(&self) {
        if self.held_since.take().is_some() {
            self.permits.release();
        }
    }

    /// Runs `f` without the permit, taking it back after.
    fn without_permit<T>(&self, f: impl FnOnce() -> T) -> T {
        self.give_back();
        let output = f();
        self.take();
        output
    }
}

impl Drop for PermitBlocker<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl TaskBlocker for PermitBlocker<'_> {
    fn wait(&self, mut future: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) -> bool {
        // A wait that is over at once keeps the permit: no trip through the line.
        let mut parked = false;
        park_until_ready(future.as_mut(), || {
            parked = true;
            self.give_back();
        });
        if parked {
            self.take();
        }
        true
    }

    #[allow(clippy::disallowed_methods)] // production-only: a real task thread really sleeps
    fn sleep(&self, duration: Duration) -> bool {
        self.without_permit(|| std::thread::sleep(duration));
        true
    }

    fn yield_point(&self) {
        if !self.permits.anyone_waiting() {
            return;
        }
        if let Some(since) = self.held_since.get()
            && coarse_now().saturating_sub(since) >= self.permits.shared.slice
        {
            if self.permits.hand_over() {
                // To the back of the line: the first in line computes now.
                self.held_since.set(None);
                self.take();
            } else {
                self.held_since.set(Some(coarse_now()));
            }
        }
    }

    fn block_in_place(&self, f: &mut dyn FnMut()) {
        self.without_permit(f);
    }
}

#[cfg(test)]
mod tests;
