//! The demo binary runs its whole tour and exits 0 (the README's first command).

use std::process::Command;

#[test]
fn the_demo_runs_its_tour_and_exits_cleanly() {
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the demo binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "pool at 4",
        "unregistered TaskManager",
        "unreachable",
        "pool back at 4",
        "pool at 6",
        "64 subtasks FINISHED",
        "never more than the 12 slots",
        "idle while the pool shrinks",
        "pool at 3",
        "top 10 words",
        "equal to a plain sequential count: yes",
        "result identical to the first run: yes",
        "Summary",
        "every worker thread joined",
    ] {
        assert!(
            stdout.contains(expected),
            "missing `{expected}` in:\n{stdout}"
        );
    }
}

#[test]
fn debug_logging_shows_the_messages() {
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env("RUST_LOG", "flint=debug")
        .output()
        .expect("the demo binary runs");
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for message in [
        "RegisterTaskManager",
        "NotifyResourceStarted",
        "Heartbeat",
        "ReleaseIdleTaskManagers",
    ] {
        assert!(stderr.contains(message), "no {message} in the debug log");
    }
}
