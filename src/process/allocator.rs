//! The global allocator of Flint's binaries: jemalloc without thread caches.
//!
//! Flint runs every task on a thread of its own, so a TaskManager process holds thousands of
//! threads, and buffers are allocated on one thread (a producer's, the actor's) and freed on
//! another. glibc's malloc serves that with contended arenas and constant fast-bin
//! consolidation (a third of an all-to-all job's CPU at P = 1,000). jemalloc's arenas serve it
//! well, but its default per-thread caches, multiplied by 20,000 task threads, cost gigabytes:
//! so the caches are off. Measured on all-to-all (benches/RESULTS.md): P = 1,000 about half the
//! time of glibc; P = 10,000 faster with about the same resident memory; jemalloc with caches
//! was slower than glibc at P = 10,000 and took 4 GB.
//!
//! A binary opts in with [`global_allocator!`](crate::global_allocator); so can a program
//! that embeds a [`MiniCluster`](crate::MiniCluster). `_RJEM_MALLOC_CONF` overrides the
//! options at run time.

pub use tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (a C string: the pointer to its first byte).
pub const MALLOC_CONF: &std::ffi::CStr = c"tcache:false";

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
