//! The global allocator of Flint's binaries: jemalloc with small, bounded thread caches.
//!
//! Flint runs every task on a thread of its own, so a TaskManager process holds thousands of
//! threads, and buffers are allocated on one thread (a producer's, the actor's) and freed on
//! another. glibc's malloc serves that with contended arenas and constant fast-bin
//! consolidation (a third of an all-to-all job's CPU at P = 1,000). jemalloc's arenas serve it
//! well, but its default per-thread caches (up to 200 objects of every size class up to 32 KiB,
//! network buffers included), multiplied by thousands of task threads, cost gigabytes: with
//! them P = 10,000 was slower than glibc and took 4 GB. Without any cache, though, every
//! allocation takes an arena lock, and a program that allocates per record (a `String` per
//! word) ran at half its speed. So the caches hold small objects only (`tcache_max:1024`: never
//! a network buffer) and at most 16 of each size class: a few KiB per thread.
//!
//! Measured (benches/RESULTS.md, "Bounded thread caches"): the typed WordCount 2.0–2.1× faster
//! than without caches, the built-in one ~1.07×; the all-to-all at P = 1,000 and P = 10,000 as
//! fast with the same peak resident memory; TPC-H unchanged.
//!
//! A binary opts in with [`global_allocator!`](crate::global_allocator); so can a program
//! that embeds a [`MiniCluster`](crate::MiniCluster). `_RJEM_MALLOC_CONF` overrides the
//! options at run time (`tcache:false` turns the caches off).

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (a C string: the pointer to its first byte).
pub const MALLOC_CONF: &std::ffi::CStr = c"tcache:true,tcache_max:1024,tcache_nslots_small_max:16";

/// Makes jemalloc, configured by [`MALLOC_CONF`](crate::process::allocator::MALLOC_CONF), the global
/// allocator of the binary it is invoked in (at most once per binary).
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::process::allocator::Jemalloc =
            $crate::process::allocator::Jemalloc;

        /// jemalloc (as built by `tikv-jemalloc-sys`, with prefixed symbols) reads its
        /// compiled-in options from this symbol.
        #[allow(non_upper_case_globals)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static _rjem_malloc_conf: $crate::process::allocator::ConfPointer =
            $crate::process::allocator::ConfPointer(
                $crate::process::allocator::MALLOC_CONF.as_ptr(),
            );
    };
}

/// A `const char *` to export as jemalloc's `malloc_conf`.
#[repr(transparent)]
pub struct ConfPointer(pub *const std::ffi::c_char);

// SAFETY: it points to a string literal, immutable and 'static.
unsafe impl Sync for ConfPointer {}
