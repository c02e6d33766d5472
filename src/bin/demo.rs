//! `cargo run --release --bin demo`: the embedded cluster keeps its pool through a crash and two
//! resizes. `RUST_LOG=debug` shows every message the actors handle.

use std::process::ExitCode;

// jemalloc with small thread caches: see flint::process::allocator.
flint::global_allocator!();

#[actix::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut out = std::io::stdout().lock();
    match flint::demo::run(flint::demo::demo_config(), &mut out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "demo failed: {}",
                flint::base::error_chain::ErrorChain(&error)
            );
            ExitCode::FAILURE
        }
    }
}
