//! Ctrl-C while a client command waits: the wait ends at once and the command says what it left
//! behind (a running job, and how to cancel it), instead of the process dying mid-line.
//!
//! The signal handler only sends on a channel; the waiting command waits on that channel with a
//! timeout, which is both its pause between polls and its way to notice the interrupt at once.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// Ctrl-C installation failed (another handler is installed). Not retryable.
#[derive(Debug, thiserror::Error)]
#[error("cannot catch Ctrl-C")]
pub struct InterruptError(#[source] ctrlc::Error);

/// Where interrupts arrive.
#[derive(Debug)]
pub struct Interrupt {
    rx: Receiver<()>,
    // Held so the channel never disconnects: `wait` then always waits its full timeout.
    tx: Sender<()>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Self::new()
    }
}

impl Interrupt {
    /// An interrupt that fires only through [`Interrupt::trigger`].
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Self { rx, tx }
    }

    /// An interrupt fired by Ctrl-C, SIGTERM or SIGHUP for the rest of the process's life
    /// (those signals no longer end the process by themselves). Call once per process.
    pub fn from_signals() -> Result<Self, InterruptError> {
        let interrupt = Self::new();
        let tx = interrupt.tx.clone();
        ctrlc::set_handler(move || {
            // The receiver lives as long as the Interrupt; after it is gone nobody waits.
            let _ = tx.send(());
        })
        .map_err(InterruptError)?;
        Ok(interrupt)
    }

    /// Fires the interrupt (what the signal handler does).
    pub fn trigger(&self) {
        let _ = self.tx.send(());
    }

    /// Waits up to `timeout`; `true` if interrupted meanwhile (or before).
    pub fn wait(&self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            // Cannot happen: `self.tx` keeps the channel open.
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_ends_the_wait_and_is_consumed() {
        let interrupt = Interrupt::new();
        assert!(!interrupt.wait(Duration::from_millis(1)));
        interrupt.trigger();
        // Far longer than the test may take: only the trigger can end this wait in time.
        assert!(interrupt.wait(Duration::from_secs(3600)));
        assert!(!interrupt.wait(Duration::ZERO));
    }
}
