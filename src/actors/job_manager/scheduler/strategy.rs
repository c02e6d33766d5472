//! The scheduler's two policies, each a small trait chosen by a configuration key: the place to
//! change how Flint schedules without touching the slot bookkeeping around them.
//!
//! | policy | key | decides | default |
//! | --- | --- | --- | --- |
//! | [`SlotSelectionStrategy`] (Flink's `SlotSelectionStrategy`) | `jobmanager.scheduler.slot-selection` | the TaskManager a new slot is taken from when locality does not decide: [`SpreadOut`] or [`Pack`] | `spread_out` |
//! | [`RegionSchedulingStrategy`] (the cluster-wide half of Flink's `SchedulingStrategy`) | `jobmanager.scheduler.region-order` | which queued region bulk is placed next: [`Backfill`] or [`Fifo`] | `backfill` |
//!
//! A strategy sees a narrow view (free slots ordered by count; queued bulks in order) and
//! answers in O(1) or O(log T): no JobManager handler may grow with the size of the cluster or
//! of the queue, so a strategy must not either. A new policy is a new impl here and a new value
//! of its key ([`crate::config::SlotSelectionKind`], [`crate::config::RegionOrderKind`]).

use std::collections::BTreeSet;
use std::fmt;

use super::BulkId;
use crate::config::{RegionOrderKind, SlotSelectionKind};

/// TaskManagers with a free slot, ordered by how many they have free: what a
/// [`SlotSelectionStrategy`] picks from. Keys are the scheduler's TaskManager keys.
#[derive(Debug, Clone, Copy)]
pub struct FreeSlots<'a> {
    /// The scheduler's index: `(free << 32) | (u32::MAX - key)`, so the most free sort last
    /// and, among equals, the earliest registered (the smallest key) last.
    pub(super) by_free: &'a BTreeSet<u64>,
}

impl FreeSlots<'_> {
    fn key(entry: u64) -> usize {
        (u32::MAX - entry as u32) as usize
    }

    /// The TaskManager with the most free slots (ties: the earliest registered).
    pub fn most_free(&self) -> Option<usize> {
        self.by_free.last().map(|&entry| Self::key(entry))
    }

    /// The TaskManager with the fewest free slots, at least one (ties: the earliest registered).
    pub fn fewest_free(&self) -> Option<usize> {
        let fewest = self.by_free.first()? >> 32;
        self.by_free
            .range(..(fewest + 1) << 32)
            .next_back()
            .map(|&entry| Self::key(entry))
    }
}

/// Where a new shared slot is taken when no preferred TaskManager has one: Flink's slot
/// selection, after locality.
pub trait SlotSelectionStrategy: fmt::Debug + Send {
    /// Its value of `jobmanager.scheduler.slot-selection`.
    fn name(&self) -> &'static str;

    /// The TaskManager to take a new slot from, or `None` to place nothing.
    fn select(&self, free: FreeSlots<'_>) -> Option<usize>;
}

/// The TaskManager with the most free slots: work spreads evenly, so one crash takes few tasks
/// (Flink's `cluster.evenly-spread-out-slots`). Flint's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpreadOut;

impl SlotSelectionStrategy for SpreadOut {
    fn name(&self) -> &'static str {
        SlotSelectionKind::SpreadOut.name()
    }

    fn select(&self, free: FreeSlots<'_>) -> Option<usize> {
        free.most_free()
    }
}

/// The TaskManager with the fewest free slots: TaskManagers fill one after the other, so the
/// ones left idle can be released sooner when the pool shrinks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pack;

impl SlotSelectionStrategy for Pack {
    fn name(&self) -> &'static str {
        SlotSelectionKind::Pack.name()
    }

    fn select(&self, free: FreeSlots<'_>) -> Option<usize> {
        free.fewest_free()
    }
}

/// The strategy `kind` names.
pub fn slot_selection(kind: SlotSelectionKind) -> Box<dyn SlotSelectionStrategy> {
    match kind {
        SlotSelectionKind::SpreadOut => Box::new(SpreadOut),
        SlotSelectionKind::Pack => Box::new(Pack),
    }
}

/// A queued bulk as a [`RegionSchedulingStrategy`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct QueuedBulkView {
    /// The job and region.
    pub id: BulkId,
    /// Its place in the queue (job submission, then region): 0 is the head.
    pub position: usize,
    /// The tasks it places.
    pub tasks: usize,
    /// Whether the free slots could take it now.
    pub fits: bool,
}

/// What the scheduler does with the queued bulk it looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// Place it now (it fits).
    Place,
    /// Leave it queued and look at the next one.
    Skip,
    /// Place nothing more until something changes (a slot frees, a TaskManager or bulk comes).
    Stop,
}

/// Which queued region bulk is placed next. The scheduler shows it the queue from the head,
/// one bulk at a time, while slots are free, and does what it answers.
pub trait RegionSchedulingStrategy: fmt::Debug + Send {
    /// Its value of `jobmanager.scheduler.region-order`.
    fn name(&self) -> &'static str;

    /// What to do with `bulk`. [`Serve::Place`] for a bulk that does not fit is taken as
    /// [`Serve::Stop`].
    fn decide(&mut self, bulk: QueuedBulkView) -> Serve;
}

/// Strictly first in, first out: jobs in submission order, each job's regions in order; the
/// head blocks everything behind it until it fits, so a large region is never starved, but slots
/// may idle meanwhile.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fifo;

impl RegionSchedulingStrategy for Fifo {
    fn name(&self) -> &'static str {
        RegionOrderKind::Fifo.name()
    }

    fn decide(&mut self, bulk: QueuedBulkView) -> Serve {
        if bulk.position == 0 && bulk.fits {
            Serve::Place
        } else {
            Serve::Stop
        }
    }
}

/// First in, first out, but a head that does not fit lets the bulks behind it that do fit go
/// first, so slots do not sit idle while a large region waits (Flink's slot pool gives a free
/// slot to whatever request fits). Bounded both ways: at most [`Backfill::LOOKAHEAD`] bulks
/// behind the head are looked at, and once [`Backfill::MAX_OVERTAKES`] bulks have overtaken the
/// same head, nothing more does until it is placed: the slots that free up are kept for it, so
/// it cannot starve. Flint's default.
#[derive(Debug, Clone, Default)]
pub struct Backfill {
    /// The head the count is for, and how many bulks overtook it.
    head: Option<(BulkId, u32)>,
}

impl Backfill {
    /// Queued bulks behind the head looked at per placement.
    pub const LOOKAHEAD: usize = 64;
    /// Bulks that may overtake one waiting head.
    pub const MAX_OVERTAKES: u32 = 64;

    fn overtakes(&self) -> u32 {
        self.head.map_or(0, |(_, n)| n)
    }
}

impl RegionSchedulingStrategy for Backfill {
    fn name(&self) -> &'static str {
        RegionOrderKind::Backfill.name()
    }

    fn decide(&mut self, bulk: QueuedBulkView) -> Serve {
        if bulk.position == 0 {
            if self.head.is_none_or(|(id, _)| id != bulk.id) {
                self.head = Some((bulk.id, 0));
            }
            return if bulk.fits {
                self.head = None;
                Serve::Place
            } else if self.overtakes() >= Self::MAX_OVERTAKES {
                Serve::Stop
            } else {
                Serve::Skip
            };
        }
        if bulk.position > Self::LOOKAHEAD {
            return Serve::Stop;
        }
        if bulk.fits {
            if let Some((_, overtakes)) = &mut self.head {
                *overtakes += 1;
            }
            Serve::Place
        } else {
            Serve::Skip
        }
    }
}

/// The strategy `kind` names.
pub fn region_scheduling(kind: RegionOrderKind) -> Box<dyn RegionSchedulingStrategy> {
    match kind {
        RegionOrderKind::Fifo => Box::new(Fifo),
        RegionOrderKind::Backfill => Box::new(Backfill::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(free: u32, key: usize) -> u64 {
        (u64::from(free) << 32) | u64::from(u32::MAX - key as u32)
    }

    #[test]
    fn spread_out_takes_the_most_free_and_pack_the_fewest_ties_to_the_earliest() {
        let by_free: BTreeSet<u64> = [entry(3, 0), entry(1, 1), entry(3, 2), entry(1, 3)]
            .into_iter()
            .collect();
        let free = FreeSlots { by_free: &by_free };
        assert_eq!(SpreadOut.select(free), Some(0));
        assert_eq!(Pack.select(free), Some(1));
        let empty = BTreeSet::new();
        assert_eq!(Pack.select(FreeSlots { by_free: &empty }), None);
        assert_eq!(SpreadOut.select(FreeSlots { by_free: &empty }), None);
    }

    #[test]
    fn fifo_places_only_a_head_that_fits() {
        let view = |position, fits| QueuedBulkView {
            id: BulkId {
                job: crate::base::ids::JobId::from_u128(1),
                region: position,
            },
            position,
            tasks: 1,
            fits,
        };
        assert_eq!(Fifo.decide(view(0, true)), Serve::Place);
        assert_eq!(Fifo.decide(view(0, false)), Serve::Stop);
        assert_eq!(Fifo.decide(view(1, true)), Serve::Stop);
    }

    #[test]
    fn backfill_lets_bulks_that_fit_overtake_a_head_that_does_not_but_only_so_often() {
        let view = |position, fits| QueuedBulkView {
            id: BulkId {
                job: crate::base::ids::JobId::from_u128(1),
                region: position,
            },
            position,
            tasks: 1,
            fits,
        };
        let mut backfill = Backfill::default();
        assert_eq!(
            backfill.decide(view(1, true)),
            Serve::Place,
            "no head seen yet"
        );
        for _ in 0..Backfill::MAX_OVERTAKES {
            assert_eq!(backfill.decide(view(0, false)), Serve::Skip);
            assert_eq!(backfill.decide(view(1, false)), Serve::Skip);
            assert_eq!(backfill.decide(view(2, true)), Serve::Place);
        }
        assert_eq!(
            backfill.decide(view(0, false)),
            Serve::Stop,
            "the head keeps the slots that free up from now on"
        );
        assert_eq!(backfill.decide(view(0, true)), Serve::Place);
        assert_eq!(backfill.decide(view(0, false)), Serve::Skip, "a new head");
        assert_eq!(
            backfill.decide(view(Backfill::LOOKAHEAD + 1, true)),
            Serve::Stop
        );
    }
}
