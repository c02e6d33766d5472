//! How many bytes an operator may hold, and how the bytes it holds are counted.
//!
//! # The estimate
//!
//! An operator cannot ask the allocator what its records cost, so it estimates, conservatively
//! enough that the process's resident memory follows the budget rather than the data:
//!
//! - **Per record (or per table entry): footprint + overhead.** The footprint is the size of the
//!   record's *fixed-width* bincode encoding (`codec::footprint`): every integer at full width,
//!   every string or sequence as an 8-byte length plus its contents — roughly the heap bytes the
//!   record owns plus its inline bytes once more. The overhead ([`DEFAULT_ENTRY_OVERHEAD`], 64
//!   bytes, settable) stands for what the encoding cannot see: allocator headers and size-class
//!   rounding (glibc: 16 bytes per allocation and a 32-byte minimum chunk, so about two
//!   allocations' worth) and enum/struct padding.
//! - **Per container: its capacity, not its length**, times the element's `size_of`: the inline
//!   part of each record is counted here (and again in the footprint, which is the conservative
//!   direction). Before a container grows it is checked that the old *and* the new buffer fit,
//!   because both are live while the elements are moved; if they do not, the operator spills
//!   first.
//! - **IO buffers** come out of the budget up front (`options.rs`).
//!
//! What it cannot see: spare capacity inside records (a `Vec` built with `with_capacity(1000)`
//! holding 3 elements is charged for 3) and records made of many tiny allocations (a
//! `Vec<String>` of one-letter strings costs ~32 bytes per string, charged 9). Raise the entry
//! overhead for such records. A single record or accumulator larger than the whole budget is
//! still accepted — an operator always holds at least one — and then the budget is exceeded by
//! that record.

use serde::Serialize;

use crate::operators::memory::codec;
use crate::operators::memory::error::SpillError;

/// The default bytes charged per record or entry on top of its footprint (module docs).
pub const DEFAULT_ENTRY_OVERHEAD: usize = 64;

/// The memory one operator instance may use for records, tables and IO buffers: its share of
/// Flink's managed memory (`taskmanager.memory.managed.size`, split evenly across the slots of a
/// TaskManager, then across the memory-consuming operators of a slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    bytes: usize,
}

impl MemoryBudget {
    /// A budget of `bytes`.
    pub const fn new(bytes: usize) -> Self {
        Self { bytes }
    }

    /// A budget of `mib` mebibytes.
    pub const fn mib(mib: usize) -> Self {
        Self {
            bytes: mib.saturating_mul(1024 * 1024),
        }
    }

    /// No limit: the operator never spills and never measures records. For small inputs known
    /// in advance, and as the in-memory baseline of the benchmarks.
    pub const fn unlimited() -> Self {
        Self { bytes: usize::MAX }
    }

    /// One slot's share of a TaskManager's managed memory, as Flink splits it: evenly.
    /// `slots` of 0 is taken as 1.
    pub const fn per_slot(managed_memory: usize, slots: usize) -> Self {
        let slots = if slots == 0 { 1 } else { slots };
        Self {
            bytes: managed_memory / slots,
        }
    }

    /// This budget split evenly among `operators` memory-consuming operators (of one slot).
    /// `operators` of 0 is taken as 1.
    pub const fn split(self, operators: usize) -> Self {
        if self.is_unlimited() {
            return self;
        }
        let operators = if operators == 0 { 1 } else { operators };
        Self {
            bytes: self.bytes / operators,
        }
    }

    /// The budget in bytes (`usize::MAX` when unlimited).
    pub const fn bytes(self) -> usize {
        self.bytes
    }

    /// Whether this is [`MemoryBudget::unlimited`].
    pub const fn is_unlimited(self) -> bool {
        self.bytes == usize::MAX
    }
}

/// Measures records for one operator: footprint plus the entry overhead, or nothing at all when
/// the budget is unlimited (measuring costs a walk over every record, and nothing would use it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meter {
    entry_overhead: usize,
    enabled: bool,
}

impl Meter {
    pub(crate) fn new(budget: MemoryBudget, entry_overhead: usize) -> Self {
        Self {
            entry_overhead,
            enabled: !budget.is_unlimited(),
        }
    }

    /// The charge for a record or entry: its footprint plus the entry overhead.
    pub(crate) fn entry<T: Serialize + ?Sized>(&self, value: &T) -> Result<usize, SpillError> {
        Ok(self.content(value)? + self.entry_overhead_or_zero())
    }

    /// The charge for a value that belongs to an entry already charged its overhead (the key
    /// next to a record, an accumulator next to its key): its footprint alone.
    pub(crate) fn content<T: Serialize + ?Sized>(&self, value: &T) -> Result<usize, SpillError> {
        if !self.enabled {
            return Ok(0);
        }
        codec::footprint(value).map_err(SpillError::Measure)
    }

    fn entry_overhead_or_zero(&self) -> usize {
        if self.enabled { self.entry_overhead } else { 0 }
    }
}

/// The capacity a `Vec` is grown to when full: doubled (at least 16), as `Vec` itself would, but
/// decided here so that the charge for it is known before it happens.
pub(crate) fn next_vec_capacity(capacity: usize) -> usize {
    capacity.saturating_mul(2).max(16)
}

/// Bytes held by a `Vec<E>` of `capacity`, and while it grows to `next_vec_capacity`: both
/// buffers are live while the elements move.
pub(crate) fn vec_bytes<E>(capacity: usize, growing: bool) -> usize {
    let elements = if growing {
        capacity.saturating_add(next_vec_capacity(capacity))
    } else {
        capacity
    };
    elements.saturating_mul(size_of::<E>())
}

/// Bytes held by a `HashMap<K, V>` whose entries are `E = (K, V)` and whose `capacity()` is
/// `capacity` (hashbrown: a power-of-two number of buckets, 7/8 of them usable, one control byte
/// each plus a group's worth), and while it grows to double (both tables live).
pub(crate) fn table_bytes<E>(capacity: usize, growing: bool) -> usize {
    fn buckets(capacity: usize) -> usize {
        if capacity == 0 {
            0
        } else if capacity < 8 {
            (capacity + 1).next_power_of_two()
        } else {
            (capacity.saturating_mul(8) / 7).next_power_of_two()
        }
    }
    fn bytes<E>(buckets: usize) -> usize {
        if buckets == 0 {
            return 0;
        }
        buckets
            .saturating_mul(size_of::<E>() + 1)
            .saturating_add(16)
    }
    let now = buckets(capacity);
    if growing {
        let next = now.saturating_mul(2).max(4);
        bytes::<E>(now).saturating_add(bytes::<E>(next))
    } else {
        bytes::<E>(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flink_style_splits() {
        let slot = MemoryBudget::per_slot(512 * 1024 * 1024, 4);
        assert_eq!(slot, MemoryBudget::mib(128));
        assert_eq!(slot.split(2), MemoryBudget::mib(64));
        assert!(MemoryBudget::unlimited().split(3).is_unlimited());
        assert_eq!(MemoryBudget::per_slot(100, 0).bytes(), 100);
    }

    #[test]
    fn an_unlimited_meter_charges_nothing() {
        let meter = Meter::new(MemoryBudget::unlimited(), 64);
        assert_eq!(meter.entry(&"some string").unwrap(), 0);
        let meter = Meter::new(MemoryBudget::mib(1), 64);
        assert_eq!(meter.entry(&"abc").unwrap(), 8 + 3 + 64);
        assert_eq!(meter.content(&7u32).unwrap(), 4);
    }

    #[test]
    #[allow(clippy::disallowed_types)] // std's own table, to check the estimate against it
    fn table_estimate_covers_hashbrown() {
        let mut map = std::collections::HashMap::<u64, u64>::new();
        for i in 0..1000 {
            map.insert(i, i);
        }
        // 1000 entries need 1024+ usable slots: 2048 buckets of 16 bytes + control bytes.
        let estimate = table_bytes::<(u64, u64)>(map.capacity(), false);
        assert!(estimate >= 2048 * 17, "{estimate}");
    }
}
