//! `flint`: the command line ([`flint::cli`]), with the built-in operators only.

// jemalloc with small thread caches: see flint::process::allocator.
flint::global_allocator!();

fn main() -> std::process::ExitCode {
    flint::cli::main(flint::api::Programs::new())
}
