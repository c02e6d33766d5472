//! A TaskManager's slots: each free or allocated to one allocation (a task or a slot sharing
//! group). The scheduler's `SubmitTasks` fills them in the next layer.

use crate::base::ids::AllocationId;

/// Why a slot could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// Every slot is taken.
    #[error("all {total} slots are allocated")]
    NoFreeSlot {
        /// Slots of this TaskManager.
        total: u32,
    },
    /// The allocation holds a slot here already.
    #[error("allocation {0} holds a slot already")]
    AlreadyAllocated(AllocationId),
}

/// N slots, each free or held by one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotTable {
    slots: Vec<Option<AllocationId>>,
}

impl SlotTable {
    /// `count` free slots.
    pub fn new(count: u32) -> Self {
        Self {
            slots: vec![None; count as usize],
        }
    }

    /// Slots in all.
    pub fn total(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Slots not allocated.
    pub fn free(&self) -> u32 {
        self.slots.iter().filter(|slot| slot.is_none()).count() as u32
    }

    /// Every slot in index order: its allocation, or `None` if free.
    pub fn slots(&self) -> &[Option<AllocationId>] {
        &self.slots
    }

    /// Gives the first free slot to `allocation`; returns its index.
    pub fn allocate(&mut self, allocation: AllocationId) -> Result<usize, SlotError> {
        if self.slots.contains(&Some(allocation)) {
            return Err(SlotError::AlreadyAllocated(allocation));
        }
        let index = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(SlotError::NoFreeSlot {
                total: self.total(),
            })?;
        self.slots[index] = Some(allocation);
        Ok(index)
    }

    /// Frees the slot of `allocation`; false if it held none.
    pub fn release(&mut self, allocation: AllocationId) -> bool {
        match self
            .slots
            .iter_mut()
            .find(|slot| **slot == Some(allocation))
        {
            Some(slot) => {
                *slot = None;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_each_slot_once_and_frees_it() {
        let mut table = SlotTable::new(2);
        let (a, b, c) = (
            AllocationId::from_u128(1),
            AllocationId::from_u128(2),
            AllocationId::from_u128(3),
        );
        assert_eq!(table.allocate(a), Ok(0));
        assert_eq!(table.allocate(a), Err(SlotError::AlreadyAllocated(a)));
        assert_eq!(table.allocate(b), Ok(1));
        assert_eq!(table.allocate(c), Err(SlotError::NoFreeSlot { total: 2 }));
        assert_eq!((table.total(), table.free()), (2, 0));
        assert!(table.release(a));
        assert!(!table.release(a));
        assert_eq!(table.allocate(c), Ok(0));
        assert_eq!(table.free(), 0);
        assert_eq!(table.slots(), [Some(c), Some(b)]);
    }
}
