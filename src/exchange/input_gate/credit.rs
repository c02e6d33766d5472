//! A gate's credit (Flink's credit-based flow control) within its share of the TaskManager's
//! network buffers ([`NetworkBufferPool`](crate::exchange::buffer_pool::NetworkBufferPool)).
//!
//! A gate reserved its floor when its task was deployed (at most
//! `required-buffers-per-gate`). Two modes, chosen when it starts (FLIP-266's idea):
//! - **Exclusive** (a gate of few channels, as every gate was before): when its floor plus
//!   what the pool lends it at once covers `buffers-per-channel` for every channel and
//!   `floating-buffers-per-gate`, each channel that gets data has its exclusive credit from the
//!   start and the floating ones go to channels with a backlog. Such a gate first asks for
//!   `gate-window` (4 MiB) in all, the floating buffers being what that holds beyond the
//!   exclusive ones, granted while at most half of the lent quarter is out with it: across
//!   processes a channel reads about one window per round trip of its data connection, and
//!   ten buffers (320 KiB) per channel kept a batch job's consumer reading a few channels of
//!   gigabytes waiting on round trips.
//! - **Floating** (a wide gate, or a TaskManager short of lent buffers): no channel has credit
//!   of its own. A producer with data for a channel without credit announces its backlog; the
//!   gate lends that channel credit from its floor, and borrows from the pool for more while
//!   any is free (up to one channel's window), giving borrowed buffers back as soon as they
//!   are consumed. So a gate of 10,000 channels holds no more than its floor and what it
//!   borrows, whatever the number of channels with data. One buffer of a floor of two or more
//!   is the gate's *eager allowance* instead, split between its set subscriptions: their
//!   producers send a channel's buffers without credit while they fit what is left of it, and
//!   the gate gives the bytes back as it consumes them (a running total, told once a quarter
//!   is back or when it waits). A channel's first small buffer — most channels of a wide
//!   all-to-all get one or two — then needs no announce → credit → data round trip; a buffer
//!   that does not fit is announced as before, so nothing ever waits for the allowance.

use super::{Channel, InputGate, LocalState};
use crate::exchange::NetworkSettings;
use crate::exchange::buffer_pool::Floor;
use crate::messages::task_manager::PartitionRequest;

use super::super::client::channel_key;

/// A gate that would borrow more than this share of the pool's lent buffers for exclusive
/// credit takes the floating mode instead (so one wide gate cannot take them all).
const EXCLUSIVE_SHARE: u64 = 16;

/// The gate's buffers: its floor and what it borrowed.
pub(super) struct GateBudget {
    floor: Floor,
    /// Borrowed from the pool (given back when consumed in the floating mode, at the end in
    /// the exclusive one).
    lent: u64,
    /// Credit of every channel of its own: `buffers-per-channel`, or 0 (floating mode).
    pub(super) exclusive: u32,
    /// The most floating buffers one channel is lent.
    pub(super) floating_cap: u32,
    /// The most it borrows in the floating mode.
    lend_limit: u64,
    /// Bytes of its floor its set subscriptions' producers may send without credit (the
    /// floating mode, with a floor of two buffers or more: one of them).
    pub(super) eager: u64,
}

impl GateBudget {
    /// The budget of a gate of `channels` channels with `floor`, and its floating buffers.
    pub(super) fn new(floor: Floor, settings: &NetworkSettings, channels: usize) -> (Self, u32) {
        let pool = floor.pool();
        let lendable = pool.lendable();
        // Exclusive credit with the wide window if at most half of the lent quarter is out
        // with it (the rest stays for producers and other gates), else with
        // `floating-buffers-per-gate` if what that lacks is at most a sixteenth of it.
        // What the gate borrows for exclusive credit with `floating` buffers, if it may.
        let exclusive = |floating: u32, ceiling: u64| -> Option<u64> {
            let need = settings
                .exclusive_buffers(channels)
                .saturating_add(u64::from(floating));
            let short = need.saturating_sub(floor.buffers());
            if short == 0 {
                Some(0)
            } else if short > lendable / EXCLUSIVE_SHARE {
                None
            } else {
                pool.borrow_within(short, ceiling).then_some(short)
            }
        };
        let (wide, narrow) = (
            settings.wide_floating(channels),
            settings.floating_buffers_per_gate,
        );
        let chosen = if channels == 0 {
            Some((narrow, 0))
        } else if wide > narrow
            && let Some(lent) = exclusive(wide, lendable / 2)
        {
            Some((wide, lent))
        } else {
            exclusive(narrow, lendable).map(|lent| (narrow, lent))
        };
        let window = settings.buffers_per_channel + settings.floating_buffers_per_gate;
        if let Some((floating, lent)) = chosen {
            let budget = Self {
                floor,
                lent,
                exclusive: settings.buffers_per_channel,
                floating_cap: floating,
                lend_limit: 0,
                eager: 0,
            };
            (budget, floating)
        } else {
            let mut floating = u32::try_from(floor.buffers()).unwrap_or(u32::MAX);
            // One buffer of the floor goes to the eager allowance: a channel's first small
            // buffer then needs no round trip for credit (most channels of a wide all-to-all
            // get one or two).
            let eager = if floating >= 2 {
                floating -= 1;
                settings.buffer_size as u64
            } else {
                0
            };
            let budget = Self {
                floor,
                lent: 0,
                exclusive: 0,
                floating_cap: window,
                lend_limit: u64::from(window),
                eager,
            };
            (budget, floating)
        }
    }

    /// Borrows up to `wanted` more floating buffers (floating mode only).
    fn borrow(&mut self, wanted: u32) -> u32 {
        let room = self.lend_limit.saturating_sub(self.lent);
        let lent = self.floor.pool().borrow(u64::from(wanted).min(room));
        self.lent += lent;
        lent as u32
    }

    /// Gives back up to `free` borrowed buffers (floating mode only); returns how many.
    fn give_back(&mut self, free: u32) -> u32 {
        if self.exclusive > 0 {
            return 0;
        }
        let back = self.lent.min(u64::from(free));
        self.floor.pool().give_back(back);
        self.lent -= back;
        back as u32
    }
}

impl Drop for GateBudget {
    fn drop(&mut self) {
        self.floor.pool().give_back(self.lent);
    }
}

impl InputGate {
    /// A buffer of `channel` was consumed: its credit grows back (or a floating buffer it no
    /// longer needs goes back to the gate).
    pub(super) fn consumed(&mut self, index: usize) {
        let channel = self.ch_mut(index);
        channel.queued = channel.queued.saturating_sub(1);
        self.settle(index);
    }

    /// Lends floating buffers to a channel with a backlog, or takes back those it has no use
    /// for (Flink's `RemoteInputChannel`: required buffers = backlog + exclusive), then grants
    /// whatever credit its window has room for. Freed floating buffers go to the channels
    /// waiting for them, oldest first; borrowed ones nobody waits for go back to the pool.
    pub(super) fn settle(&mut self, index: usize) {
        self.settle_one(index);
        while self.floating_free > 0 {
            let Some(waiter) = self.floating_waiters.pop_front() else {
                break;
            };
            self.ch_mut(waiter).wants_floating = false;
            self.settle_one(waiter);
        }
        if self.floating_waiters.is_empty() && self.floating_free > 0 {
            self.floating_free -= self.budget.give_back(self.floating_free);
        }
    }

    /// One look-up of the channel for all of it: called for every buffer received and
    /// consumed, it looked the channel up nine times (3.8 % of the CPU at P = 10,000).
    fn settle_one(&mut self, index: usize) {
        let exclusive = self.budget.exclusive;
        let channel = self
            .channels
            .get_mut(index as u32)
            .expect("a channel with state");
        let in_use = channel.in_use();
        let wanted = if channel.finished {
            0
        } else {
            u32::try_from(channel.backlog)
                .unwrap_or(u32::MAX)
                .min(self.budget.floating_cap)
        };
        if channel.floating < wanted && self.floating_free < wanted - channel.floating {
            // Short of floating buffers: borrow what the pool lends (floating mode).
            let more = wanted - channel.floating - self.floating_free;
            self.floating_free += self.budget.borrow(more);
        }
        if channel.floating > wanted {
            // Only what the window has free: credit granted cannot be taken back.
            let unused = (exclusive + channel.floating).saturating_sub(in_use);
            let back = (channel.floating - wanted).min(unused);
            channel.floating -= back;
            self.floating_free += back;
        } else if channel.floating < wanted {
            let lent = (wanted - channel.floating).min(self.floating_free);
            channel.floating += lent;
            self.floating_free -= lent;
            if channel.floating < wanted && !channel.wants_floating {
                channel.wants_floating = true;
                self.floating_waiters.push_back(index);
            }
        }
        let credit = channel.credit(exclusive);
        if credit == 0 {
            return;
        }
        if let Some(read) = channel.local.as_mut() {
            // A local channel that ran out of credit is read again once it has some.
            if read.state == LocalState::NoCredit {
                read.state = LocalState::Ready;
                self.to_fetch.push_back(index);
            }
            return;
        }
        if channel.finished {
            return;
        }
        // Tells the producer of the buffers it may send now.
        channel.granted += u64::from(credit);
        let (position, granted) = (channel.connection, channel.granted);
        self.request(
            position,
            PartitionRequest::Credit {
                channel: channel_key(self.gate_id, index as u32),
                granted,
            },
        );
    }

    /// Buffers `channel` may receive now: its window (exclusive buffers plus the floating ones
    /// lent to it) less those it holds or was promised.
    pub(super) fn credit(&self, index: usize) -> u32 {
        self.ch(index).credit(self.budget.exclusive)
    }
}

impl Channel {
    /// Buffers it holds or may still receive: queued ones plus credit the producer has not
    /// used yet.
    fn in_use(&self) -> u32 {
        let outstanding = if self.finished || self.local.is_some() {
            0
        } else {
            u32::try_from(self.granted.saturating_sub(self.received)).unwrap_or(u32::MAX)
        };
        self.queued.saturating_add(outstanding)
    }

    /// Buffers it may receive now: its window (`exclusive` buffers plus the floating ones lent
    /// to it) less those it holds or was promised.
    fn credit(&self, exclusive: u32) -> u32 {
        (exclusive + self.floating).saturating_sub(self.in_use())
    }
}
