//! The process's futex hash, sized for its task threads.
//!
//! Every parked thread (a task waiting for input or for room, an idle pool thread) waits on a
//! futex, and Linux (6.16 on) keeps a process's futex waiters in a private hash table sized for
//! its CPUs, not its threads: 16 buckets on 2 cores. A wake-up walks its bucket's list of
//! waiters, so with thousands of parked task threads each walk passed hundreds of them: at
//! P = 10,000 on 4 × 2,500 slots, `futex_wake` alone took 35–42 % of the task threads' time
//! (one instruction of it, the list walk; benches/RESULTS.md), and the TaskManagers answered too
//! late. The pool grows the table with its threads instead ([`fit`]), about two buckets per
//! thread (`prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS)`). A kernel without the call (before
//! 6.16, or another OS) keeps its own table: nothing to do there.

use std::sync::{Mutex, PoisonError};

/// Below this many threads the kernel's own table is fine.
const MIN_THREADS: usize = 64;

/// The most buckets asked for (64 bytes each in the kernel: 4 MiB).
const MAX_SLOTS: usize = 1 << 16;

/// Buckets asked for so far; `usize::MAX` once the kernel refused. Held while asking, so the
/// kernel's table is always the largest asked for (pools of one process may ask at once).
static SLOTS: Mutex<usize> = Mutex::new(0);

/// From <linux/prctl.h> (Linux 6.16); the libc crate does not have them yet.
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH: libc::c_int = 78;
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
#[cfg(target_os = "linux")]
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;

/// Makes the process's futex hash at least as large as `threads` (rounded up to a power of two
/// and doubled, so it is asked for again only when the threads doubled), within
/// `MAX_SLOTS`. Called once per thread the pool starts, which costs far more than the lock.
pub fn fit(threads: usize) {
    if threads < MIN_THREADS {
        return;
    }
    let mut current = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
    if threads <= *current || *current >= MAX_SLOTS {
        return;
    }
    let slots = (threads.next_power_of_two() * 2).min(MAX_SLOTS);
    *current = match set_slots(slots) {
        Ok(()) => slots,
        Err(error) => {
            log::debug!("the futex hash stays the kernel's: {error}");
            usize::MAX
        }
    };
}

#[cfg(target_os = "linux")]
fn set_slots(slots: usize) -> std::io::Result<()> {
    let slots = libc::c_ulong::try_from(slots).map_err(std::io::Error::other)?;
    // SAFETY: this prctl takes integers only and touches no memory of ours.
    let done = unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_SET_SLOTS,
            slots,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_slots(_: usize) -> std::io::Result<()> {
    Err(std::io::Error::other("futex hash sizing is Linux-only"))
}

/// The buckets of the process's private futex hash (0: it uses the global one), or `None`
/// where the kernel cannot tell.
#[cfg(target_os = "linux")]
pub fn slots() -> Option<usize> {
    // SAFETY: as above.
    let slots = unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_GET_SLOTS,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    usize::try_from(slots).ok()
}

/// See the Linux version.
#[cfg(not(target_os = "linux"))]
pub fn slots() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_futex_hash_grows_with_the_threads() {
        let Some(before) = slots() else {
            eprintln!("SKIPPED: this kernel cannot size a process's futex hash (Linux >= 6.16)");
            return;
        };
        // More threads than any other test of this process starts, so only this call can
        // have made the table this large.
        let threads = 5_000;
        fit(threads);
        let after = slots().expect("the kernel told the size before");
        assert!(
            after >= 2 * threads.next_power_of_two(),
            "{threads} threads: the futex hash has {after} buckets (had {before})"
        );
        // Fewer threads never shrink it.
        fit(100);
        assert_eq!(slots(), Some(after));
    }
}
