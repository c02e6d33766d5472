//! [`AnswerBudget`]: what one answer to a [`PollPartitionData`](super::PollPartitionData) may
//! still carry, so that it always fits the transport's largest message.
//!
//! Counting only the data was not enough: at P = 10,000 an answer of channels without data
//! (backlog announcements, failures of cancelled producers, each a few dozen bytes) grew to
//! 44 MB, over the 16 MiB limit, and could not be sent at all; its consumer's poll went
//! unanswered until the data connection was given up (issue 32).

use crate::base::error_chain::clipped;

/// Generous size of one channel's entry besides its buffers' bytes and a failure's reason: its
/// key, variant, numbers as varints of at most 10 bytes, the buffer count, and a short reason.
pub(super) const ENTRY_BYTES: usize = 48;

/// Generous size of one buffer's framing in an entry (its length).
pub(super) const BUFFER_BYTES: usize = 10;

/// The longest reason a failed channel carries (at a character boundary, then marked): the full
/// reason goes with the partition's end notice, once per connection.
pub(super) const MAX_REASON_BYTES: usize = 1024;

/// What a channel whose read failed after planning says when the answer has no room left for
/// its reason (within [`ENTRY_BYTES`]).
const NO_ROOM_REASON: &str = "its producer failed";

/// The data and entry bytes one answer may still take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AnswerBudget {
    /// Buffer bytes ([`FETCH_BYTES`](super::FETCH_BYTES) at first; one buffer may pass it).
    pub(super) data: usize,
    /// Entry bytes ([`CHANNEL_BYTES`](super::CHANNEL_BYTES) at first): framing and reasons.
    pub(super) entries: usize,
}

impl AnswerBudget {
    pub(super) fn new(data: usize, entries: usize) -> Self {
        Self { data, entries }
    }

    /// Whether another channel may go (each takes at least an entry).
    pub(super) fn has_room(&self) -> bool {
        self.data > 0 && self.entries >= ENTRY_BYTES
    }

    /// A channel's read of `buffers` buffers, `bytes` in all.
    pub(super) fn take_read(&mut self, buffers: usize, bytes: usize) {
        self.data = self.data.saturating_sub(bytes);
        self.take_entry(BUFFER_BYTES.saturating_mul(buffers));
    }

    /// A channel's entry with `extra` bytes besides its framing.
    pub(super) fn take_entry(&mut self, extra: usize) {
        self.entries = self
            .entries
            .saturating_sub(ENTRY_BYTES.saturating_add(extra));
    }

    /// `reason` as a failed channel planned with this budget carries it (at most
    /// [`MAX_REASON_BYTES`]), its entry taken.
    pub(super) fn failed(&mut self, reason: String) -> String {
        let reason = clipped(reason, MAX_REASON_BYTES);
        self.take_entry(reason.len());
        reason
    }

    /// `reason` for a channel whose read failed after its entry was counted as a read: within
    /// what is left, else a short reason that fits the entry counted.
    pub(super) fn failed_after_planning(&mut self, reason: String) -> String {
        let reason = clipped(reason, MAX_REASON_BYTES);
        if reason.len() <= self.entries {
            self.entries -= reason.len();
            reason
        } else {
            NO_ROOM_REASON.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_channel_carries_at_most_a_kilobyte_of_reason() {
        let mut budget = AnswerBudget::new(100, CHANNEL_BYTES_FOR_TEST);
        let reason = budget.failed("x".repeat(5_000));
        assert!(reason.len() <= MAX_REASON_BYTES && reason.ends_with(" [...]"));
        assert_eq!(
            budget.entries,
            CHANNEL_BYTES_FOR_TEST - ENTRY_BYTES - reason.len()
        );
    }

    const CHANNEL_BYTES_FOR_TEST: usize = 1 << 20;

    #[test]
    fn a_failure_after_planning_stays_within_what_is_left() {
        let mut budget = AnswerBudget::new(100, ENTRY_BYTES + 10);
        budget.take_read(1, 5);
        assert_eq!(budget.entries, 0);
        assert_eq!(
            budget.failed_after_planning("x".repeat(500)),
            NO_ROOM_REASON
        );
        assert!(NO_ROOM_REASON.len() + 16 <= ENTRY_BYTES);
        assert!(!budget.has_room());
    }
}
