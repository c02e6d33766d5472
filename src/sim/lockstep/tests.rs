use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::LocalSet;
use tokio::time::Instant;

use super::*;
use crate::env::task_blocking::block_on;

/// A node's runtime in the simulation: one thread, a paused clock, a `LocalSet`.
fn simulation() -> (tokio::runtime::Runtime, LocalSet) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    (runtime, LocalSet::new())
}

#[test]
fn a_sleeping_task_takes_exactly_its_virtual_time_and_little_wall_time() {
    let (runtime, local) = simulation();
    #[allow(clippy::disallowed_methods)] // wall time, to show the sleep is not real
    let wall = std::time::Instant::now();
    local.block_on(&runtime, async {
        for (compute, total) in [(0, 5), (2, 7)] {
            let runner = LockstepTaskRunner::new(Duration::from_secs(compute));
            let start = Instant::now();
            let (sender, slept) = mpsc::channel();
            let task: TaskBody = Box::new(move |blocker| {
                sender.send(blocker.sleep(Duration::from_secs(5))).unwrap();
            });
            runner.spawn("sleeper".into(), task).await.unwrap();
            assert_eq!(start.elapsed(), Duration::from_secs(total));
            assert_eq!(slept.try_recv(), Ok(true));
        }
    });
    assert!(wall.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_waiting_task_gets_what_a_local_task_sends() {
    let (runtime, local) = simulation();
    local.block_on(&runtime, async {
        let start = Instant::now();
        let (sender, receiver) = tokio::sync::oneshot::channel();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            sender.send(42).unwrap();
        });
        let (report, received) = mpsc::channel();
        let task: TaskBody = Box::new(move |blocker| {
            report.send(block_on(blocker, receiver)).unwrap();
        });
        LockstepTaskRunner::default()
            .spawn("waiter".into(), task)
            .await
            .unwrap();
        assert_eq!(received.try_recv(), Ok(Some(Ok(42))));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    });
}

#[test]
fn dropping_the_local_set_fails_every_blocker_call_and_joins_the_thread_first() {
    let (runtime, local) = simulation();
    let waiter_stopped = Arc::new(AtomicBool::new(false));
    let sleeper_stopped = Arc::new(AtomicBool::new(false));
    local.block_on(&runtime, async {
        let runner = LockstepTaskRunner::default();
        let stopped = Arc::clone(&waiter_stopped);
        let waiter: TaskBody = Box::new(move |blocker| {
            let waited = blocker.wait(Box::pin(std::future::pending()));
            let slept = blocker.sleep(Duration::from_secs(1));
            // A slow finish that the drop must wait for.
            #[allow(clippy::disallowed_methods)]
            // real time, to widen a race if there were one
            std::thread::sleep(Duration::from_millis(50));
            stopped.store(!waited && !slept, Ordering::SeqCst);
        });
        runner.run("waiter".into(), waiter);
        let stopped = Arc::clone(&sleeper_stopped);
        let sleeper: TaskBody = Box::new(move |blocker| {
            let slept = blocker.sleep(Duration::from_secs(3600));
            stopped.store(!slept, Ordering::SeqCst);
        });
        runner.run("sleeper".into(), sleeper);
        // Both tasks are now blocked in their blocker.
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    assert!(!waiter_stopped.load(Ordering::SeqCst));
    assert!(!sleeper_stopped.load(Ordering::SeqCst));
    drop(local);
    assert!(waiter_stopped.load(Ordering::SeqCst));
    assert!(sleeper_stopped.load(Ordering::SeqCst));
}

#[test]
fn a_panicking_task_does_not_block_the_simulation() {
    let (runtime, local) = simulation();
    local.block_on(&runtime, async {
        let task: TaskBody = Box::new(|blocker| {
            blocker.sleep(Duration::from_millis(1));
            panic!("operator bug outside run_task's catch_unwind");
        });
        LockstepTaskRunner::default()
            .spawn("panics".into(), task)
            .await
            .unwrap();
    });
}

/// Three tasks that sleep different steps and one that waits for a feeder on the simulation
/// thread, all appending to one log.
fn scenario() -> Vec<String> {
    let (runtime, local) = simulation();
    let log = Arc::new(Mutex::new(Vec::new()));
    let push = |log: &Arc<Mutex<Vec<String>>>, entry: String| log.lock().unwrap().push(entry);
    local.block_on(&runtime, async {
        let start = Instant::now();
        let runner = LockstepTaskRunner::new(Duration::from_millis(3));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let feeder_log = Arc::clone(&log);
        tokio::task::spawn_local(async move {
            for i in 0..3 {
                tokio::time::sleep(Duration::from_millis(7)).await;
                push(&feeder_log, format!("{:?} feeder {i}", start.elapsed()));
            }
            sender.send(()).unwrap();
        });
        let mut handles = Vec::new();
        for t in 0..3u64 {
            let log = Arc::clone(&log);
            let task: TaskBody = Box::new(move |blocker| {
                for step in 0..4 {
                    assert!(blocker.sleep(Duration::from_millis(2 * t + 1)));
                    push(&log, format!("task {t} step {step}"));
                }
            });
            handles.push(runner.spawn(format!("task-{t}"), task));
        }
        let waiter_log = Arc::clone(&log);
        let waiter: TaskBody = Box::new(move |blocker| {
            push(&waiter_log, "waiter starts".into());
            let fed = block_on(blocker, receiver);
            push(&waiter_log, format!("waiter got {fed:?}"));
        });
        handles.push(runner.spawn("waiter".into(), waiter));
        for handle in handles {
            handle.await.unwrap();
        }
        push(&log, format!("{:?} all done", start.elapsed()));
    });
    Arc::try_unwrap(log).unwrap().into_inner().unwrap()
}

#[test]
fn the_same_inputs_give_the_same_ordered_steps() {
    let first = scenario();
    assert_eq!(first.len(), 3 + 3 * 4 + 2 + 1);
    assert_eq!(first.last().map(String::as_str), Some("23ms all done"));
    for _ in 0..5 {
        assert_eq!(scenario(), first);
    }
}
