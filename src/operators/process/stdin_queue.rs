//! The bytes on their way to a child's stdin. The task thread appends each record's frame to
//! one buffer; the writer thread takes the whole buffer whenever it is free and writes it in
//! one call. A record costs a copy of its frame instead of a hand-off between threads, and no
//! frame waits for a batch to fill: whatever arrived while the writer wrote goes next.
//!
//! A task whose queue is full must keep taking the child's output meanwhile (a child blocked
//! writing its stdout stops reading its stdin), so it waits for either: the reader thread
//! tells the queue when it hands output over ([`StdinQueue::output_arrived`]), and the wait
//! ends on room, the writer's end or new output, whichever comes first.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What [`StdinQueue::push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Queued for the child.
    Queued,
    /// The queue holds its limit: drain the child's output, wait for room, push again.
    Full,
    /// The writer is gone (the child closed its stdin or exited): nothing more goes in.
    Gone,
}

#[derive(Default)]
struct State {
    bytes: Vec<u8>,
    /// The task sends nothing more: the writer empties the queue and closes stdin.
    closed: bool,
    /// The writer stopped (a write failed).
    gone: bool,
    /// Who waits on its condition variable (a notification costs a system call).
    writer_waits: bool,
    task_waits: bool,
    /// Counts the reader's hand-overs of the child's output ([`StdinQueue::output_arrived`]).
    output: u64,
}

/// See the module docs. Shared by the task thread (push, close) and the writer (take).
pub struct StdinQueue {
    state: Mutex<State>,
    /// Wakes the writer: bytes arrived, or the queue closed.
    for_writer: Condvar,
    /// Wakes the task: room freed, or the writer is gone.
    for_task: Condvar,
    /// Bytes queued at most (one frame may pass it).
    limit: usize,
}

impl StdinQueue {
    /// A queue holding up to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            state: Mutex::default(),
            for_writer: Condvar::new(),
            for_task: Condvar::new(),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `frame` if there is room.
    pub fn push(&self, frame: &[u8]) -> Push {
        let mut state = self.lock();
        if state.gone {
            return Push::Gone;
        }
        if state.bytes.len() >= self.limit {
            return Push::Full;
        }
        state.bytes.extend_from_slice(frame);
        if state.writer_waits {
            self.for_writer.notify_one();
        }
        Push::Queued
    }

    /// How many times the child's output was handed over so far: taken before the task drains
    /// that output, and given to [`wait_for_room`](Self::wait_for_room), so output that comes
    /// between the two ends the wait at once instead of being missed.
    pub fn output_seen(&self) -> u64 {
        self.lock().output
    }

    /// The reader handed output over (or the output ended): a task waiting for room wakes to
    /// take it.
    pub fn output_arrived(&self) {
        let mut state = self.lock();
        state.output += 1;
        if state.task_waits {
            self.for_task.notify_one();
        }
    }

    /// Waits until there is room, the writer is gone or output came after `seen`
    /// ([`output_seen`](Self::output_seen)), at most `timeout` (the task looks whether it was
    /// cancelled that often).
    pub fn wait_for_room(&self, seen: u64, timeout: Duration) {
        let state = self.lock();
        let mut state = self
            .for_task
            .wait_timeout_while(state, timeout, |state| {
                let waits = state.bytes.len() >= self.limit && !state.gone && state.output == seen;
                state.task_waits = waits;
                waits
            })
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        state.task_waits = false;
    }

    /// No more frames: the writer writes what is queued, then closes the child's stdin.
    pub fn close(&self) {
        self.lock().closed = true;
        self.for_writer.notify_all();
    }

    /// The writer's next bytes, swapped into `spare` (which must be empty); `false` once the
    /// queue is closed and empty.
    pub fn take(&self, spare: &mut Vec<u8>) -> bool {
        let mut state = self.lock();
        while state.bytes.is_empty() && !state.closed {
            state.writer_waits = true;
            state = self
                .for_writer
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.writer_waits = false;
        }
        if state.bytes.is_empty() {
            return false;
        }
        std::mem::swap(&mut state.bytes, spare);
        if state.task_waits {
            self.for_task.notify_one();
        }
        true
    }

    /// The writer stopped: pushes say [`Push::Gone`] from now on.
    pub fn writer_gone(&self) {
        let mut state = self.lock();
        state.gone = true;
        state.bytes = Vec::new();
        self.for_task.notify_one();
    }
}

/// The task thread's handle: closes the queue however the task ends, so the writer never
/// waits for frames that will not come.
pub struct StdinSender(pub std::sync::Arc<StdinQueue>);

impl Drop for StdinSender {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_pass_in_order_up_to_the_limit_and_the_writer_sees_the_end() {
        let queue = StdinQueue::new(8);
        assert_eq!(queue.push(b"abc"), Push::Queued);
        assert_eq!(queue.push(b"defgh"), Push::Queued);
        assert_eq!(queue.push(b"i"), Push::Full);
        let mut spare = Vec::new();
        assert!(queue.take(&mut spare));
        assert_eq!(spare, b"abcdefgh");
        assert_eq!(queue.push(b"i"), Push::Queued);
        queue.close();
        spare.clear();
        assert!(queue.take(&mut spare));
        assert_eq!(spare, b"i");
        spare.clear();
        assert!(!queue.take(&mut spare), "closed and empty");
        queue.writer_gone();
        assert_eq!(queue.push(b"j"), Push::Gone);
    }

    /// Waits for room on another thread (for up to 60 s), calls `wake` once that thread waits,
    /// and answers whether the wait returned within 30 s: a wake-up that never comes fails the
    /// test instead of passing late.
    #[allow(clippy::disallowed_methods)] // a real thread and clock are the point of the test
    fn returns_soon(queue: &std::sync::Arc<StdinQueue>, seen: u64, wake: impl FnOnce()) -> bool {
        let (done, returned) = std::sync::mpsc::channel();
        let waiter = std::sync::Arc::clone(queue);
        let thread = std::thread::spawn(move || {
            waiter.wait_for_room(seen, Duration::from_secs(60));
            let _ = done.send(());
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !queue.lock().task_waits {
            assert!(
                std::time::Instant::now() < deadline,
                "the waiter never waited"
            );
            std::thread::yield_now();
        }
        wake();
        let soon = returned.recv_timeout(Duration::from_secs(30)).is_ok();
        thread.join().expect("the waiter");
        soon
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a real clock: the wait must not last its minute
    fn a_task_waiting_for_room_wakes_at_once_for_room_output_or_the_writers_end() {
        let full = || {
            let queue = std::sync::Arc::new(StdinQueue::new(4));
            assert_eq!(queue.push(b"abcd"), Push::Queued);
            queue
        };
        type Wake = fn(&StdinQueue);
        let wakes: [(&str, Wake); 3] = [
            ("output came", StdinQueue::output_arrived),
            ("room", |queue| assert!(queue.take(&mut Vec::new()))),
            ("the writer's end", StdinQueue::writer_gone),
        ];
        for (what, wake) in wakes {
            let queue = full();
            let seen = queue.output_seen();
            assert!(returns_soon(&queue, seen, || wake(&queue)), "{what}");
        }
        // Output that came after the task looked, before it waits: no wait at all.
        let queue = full();
        let seen = queue.output_seen();
        queue.output_arrived();
        let began = std::time::Instant::now();
        queue.wait_for_room(seen, Duration::from_secs(60));
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "output it has not taken yet"
        );
    }
}
