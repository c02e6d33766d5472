//! The bytes on their way to a child's stdin. The task thread appends each record's frame to
//! one buffer; the writer thread takes the whole buffer whenever it is free and writes it in
//! one call. A record costs a copy of its frame instead of a hand-off between threads, and no
//! frame waits for a batch to fill: whatever arrived while the writer wrote goes next.

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

    /// Waits up to `timeout` for room or the writer's end.
    pub fn wait_for_room(&self, timeout: Duration) {
        let mut state = self.lock();
        if state.bytes.len() >= self.limit && !state.gone {
            state.task_waits = true;
            let (mut state, _) = self
                .for_task
                .wait_timeout(state, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            state.task_waits = false;
        }
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
}
