//! Tests of the permits on real task threads. Every wait is bounded by [`DEADLINE`], which only
//! a broken rule reaches: the run then fails instead of hanging.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use super::*;
use crate::env::task_blocking::block_on;
use crate::env::{TaskRunner, ThreadTaskRunner};

const DEADLINE: Duration = Duration::from_secs(10);

/// Longer than any test: the rule it stands for never fires.
const NEVER: Duration = Duration::from_secs(3600);

fn runner(limit: usize, slice: Duration, stall: Duration) -> ThreadTaskRunner {
    ThreadTaskRunner::with_permits(ComputePermits::with_timing(limit, slice, stall))
}

fn run(runner: &ThreadTaskRunner, task: impl FnOnce(&dyn TaskBlocker) + Send + 'static) {
    runner.run("test".to_owned(), Box::new(task));
}

/// Computes (spins without waiting) for `duration`.
fn compute(duration: Duration) {
    let start = now();
    while start.elapsed() < duration {
        std::hint::spin_loop();
    }
}

#[test]
fn at_most_the_limit_of_tasks_compute_at_once() {
    let runner = runner(2, NEVER, NEVER);
    let computing = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (done, ended) = mpsc::channel();
    for _ in 0..8 {
        let (computing, most, done) = (computing.clone(), most.clone(), done.clone());
        run(&runner, move |blocker| {
            for _ in 0..10 {
                let now = computing.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                compute(Duration::from_millis(2));
                computing.fetch_sub(1, Ordering::SeqCst);
                blocker.sleep(Duration::from_micros(100));
            }
            done.send(()).unwrap();
        });
    }
    for _ in 0..8 {
        ended.recv_timeout(DEADLINE).expect("every task ends");
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} tasks computed at once under 2 permits",
        most.load(Ordering::SeqCst)
    );
    assert_eq!(runner.permits().stats().overflows, 0);
}

#[test]
fn a_task_that_never_waits_gives_way_after_its_slice() {
    let runner = runner(1, Duration::from_millis(1), NEVER);
    let other_ran = Arc::new(AtomicBool::new(false));
    let (started, holds) = mpsc::channel();
    let (gave_way, result) = mpsc::channel();
    let ran = other_ran.clone();
    run(&runner, move |blocker| {
        started.send(()).unwrap();
        let start = now();
        while !ran.load(Ordering::SeqCst) && start.elapsed() < DEADLINE {
            blocker.yield_point(); // a record read or written
        }
        gave_way.send(ran.load(Ordering::SeqCst)).unwrap();
    });
    holds.recv_timeout(DEADLINE).unwrap();
    run(&runner, move |_| other_ran.store(true, Ordering::SeqCst));
    assert!(
        result.recv_timeout(DEADLINE * 2).unwrap(),
        "the second task never computed while the first held the only permit"
    );
}

#[test]
fn a_waiting_task_gives_its_permit_back() {
    let runner = runner(1, NEVER, NEVER);
    let (sender, receiver) = tokio::sync::oneshot::channel::<u32>();
    let (started, waits) = mpsc::channel();
    let (got, result) = mpsc::channel();
    run(&runner, move |blocker| {
        started.send(()).unwrap();
        got.send(block_on(blocker, receiver)).unwrap();
    });
    waits.recv_timeout(DEADLINE).unwrap();
    run(&runner, move |_| sender.send(7).unwrap());
    assert_eq!(result.recv_timeout(DEADLINE).unwrap(), Some(Ok(7)));
    assert_eq!(runner.permits().stats().overflows, 0);
}

#[test]
fn block_in_place_gives_the_permit_back() {
    let runner = runner(1, NEVER, NEVER);
    let (sender, receiver) = mpsc::channel::<u32>();
    let (started, waits) = mpsc::channel();
    let (got, result) = mpsc::channel();
    run(&runner, move |blocker| {
        started.send(()).unwrap();
        let mut value = None;
        blocker.block_in_place(&mut || value = receiver.recv_timeout(DEADLINE).ok());
        got.send(value).unwrap();
    });
    waits.recv_timeout(DEADLINE).unwrap();
    run(&runner, move |_| sender.send(7).unwrap());
    assert_eq!(result.recv_timeout(DEADLINE * 2).unwrap(), Some(7));
}

#[test]
fn a_task_blocked_outside_its_blocker_holds_the_line_up_for_a_stall_at_most() {
    let runner = runner(1, NEVER, Duration::from_millis(20));
    let (sender, receiver) = mpsc::channel::<u32>();
    let (started, waits) = mpsc::channel();
    let (got, result) = mpsc::channel();
    run(&runner, move |_| {
        started.send(()).unwrap();
        // Blocks holding the only permit, on a task that needs one to run.
        got.send(receiver.recv_timeout(DEADLINE).ok()).unwrap();
    });
    waits.recv_timeout(DEADLINE).unwrap();
    run(&runner, move |_| sender.send(7).unwrap());
    assert_eq!(
        result.recv_timeout(DEADLINE * 2).unwrap(),
        Some(7),
        "the second task waited for the permit behind the blocked one"
    );
    assert_eq!(runner.permits().stats().overflows, 1);
}

#[test]
fn a_panicking_task_gives_its_permit_back() {
    let runner = runner(1, NEVER, NEVER);
    run(&runner, |_| panic!("a task body panicked"));
    let (done, ended) = mpsc::channel();
    run(&runner, move |_| done.send(()).unwrap());
    ended.recv_timeout(DEADLINE).expect("the next task runs");
    let start = now();
    while runner.permits().stats().in_use > 0 && start.elapsed() < DEADLINE {
        std::thread::yield_now();
    }
    assert_eq!(runner.permits().stats().in_use, 0);
}
