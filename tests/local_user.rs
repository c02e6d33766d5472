//! Issue 34's local-user attacks, performed as another uid (`nobody`, through `setpriv`) against
//! a `flint jobmanager` of this user started with no configured secret or token, as a user on
//! one machine starts it:
//!
//! - the copy: `flint run` of a job that reads a root-only 0600 file into `/tmp` — refused
//!   (no token), and no job is submitted;
//! - reading the cluster: `flint list` — refused;
//! - taking the credentials: reading the generated token and secret files — denied;
//! - joining the cluster: `flint taskmanager` without a secret stops at once naming where the
//!   secret would be; with `--insecure` the JobManager refuses its handshake (counted in
//!   `/metrics`) and it never registers.
//!
//! The `authorized_keys` overwrite through a planted link is refused at the sink itself
//! (`file_sink_never_writes_through_a_link_planted_at_its_temporary_name` in the operators'
//! tests). Runs only as root (to become `nobody`); otherwise it says loudly why it skips.

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::rest::{JobManagerChild, agent, local_bearer, poll, request};
use common::scratch;

/// The uid and gid the attacker runs as.
const NOBODY: &str = "65534";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program args` as `nobody`, with an environment of nobody's own (no variable of this
/// user's, a home without Flint's state).
fn as_nobody(program: &str, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .arg(program)
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("setpriv runs")
}

fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `method path` at `url` as the JobManager's own user (with its generated token).
fn as_owner(method: &str, url: &str, path: &str) -> common::rest::Answer {
    request(
        &agent(),
        method,
        &format!("{url}{path}"),
        None,
        local_bearer().as_deref(),
    )
}

/// The JobManager's `/metrics` value of `name`, asked with this user's token.
fn metric(url: &str, name: &str) -> f64 {
    as_owner("GET", url, "/metrics")
        .expect(200)
        .body
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn another_local_user_can_neither_use_the_rest_api_nor_join_nor_read_the_credentials() {
    if !is_root() {
        eprintln!(
            "\n*** SKIPPED local_user: becoming another uid needs root (this test runs the \
             local-user attacks of issue 34 as `nobody`) ***\n"
        );
        return;
    }
    let flint = env!("CARGO_BIN_EXE_flint");
    let dir = scratch("local-user");
    let args = ["--bind", "127.0.0.1:0", "--rest", "127.0.0.1:0"];
    let extra = "[resourcemanager]\ndriver = \"standalone\"\npool-size = 0\n";
    let mut jm = JobManagerChild::start(&args, &dir, extra);
    let url = jm.url();
    let address = jm.address();

    // The copy: a root-only file into a directory the attacker can read.
    let private = dir.join("private.txt");
    std::fs::write(&private, "root's secret line\n").unwrap();
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let stolen = dir.join("stolen");
    let job = dir.join("copy.toml");
    std::fs::write(
        &job,
        format!(
            "name = \"copy\"\n[[vertex]]\nname = \"read\"\noperator = \"text-source\"\n\
             parallelism = 1\n[vertex.config]\npath = \"{}\"\n[[vertex]]\nname = \"write\"\n\
             operator = \"file-sink\"\nparallelism = 1\n[vertex.config]\npath = \"{}\"\n\
             [[edge]]\nfrom = \"read\"\nto = \"write\"\npattern = \"forward\"\n",
            private.display(),
            stolen.display()
        ),
    )
    .unwrap();
    let job_arg = job.display().to_string();
    let run = as_nobody(flint, &["run", "--detach", "--jobmanager", &url, &job_arg]);
    assert_eq!(run.status.code(), Some(5), "{}", said(&run));
    let list = as_nobody(flint, &["list", "--jobmanager", &url]);
    assert_eq!(list.status.code(), Some(5), "{}", said(&list));
    let jobs = as_owner("GET", &url, "/jobs").expect(200).json();
    assert_eq!(jobs["jobs"], serde_json::json!([]), "{jobs}");
    assert!(!stolen.exists());

    // The credentials: 0600 files in a 0700 directory of this user.
    let local = flint::process::credentials::LocalCredentials::of_process().unwrap();
    for file in [local.token_path(), local.secret_path()] {
        let read = as_nobody("cat", &[&file.display().to_string()]);
        assert!(!read.status.success(), "nobody read {}", file.display());
        assert!(read.stdout.is_empty());
    }

    // Joining: without a secret it stops at once, saying where one would be.
    let join = as_nobody(flint, &["taskmanager", "--jobmanager", &address]);
    assert_eq!(join.status.code(), Some(2), "{}", said(&join));
    assert!(said(&join).contains("no cluster secret"), "{}", said(&join));
    // With --insecure (the empty secret) it is refused at the handshake, and never registers.
    let refused_before = metric(&url, "flint_transport_rejected_connections_total");
    let log = std::fs::File::create(dir.join("intruder.log")).unwrap();
    let mut intruder = Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .arg(flint)
        .args(["taskmanager", "--jobmanager", &address, "--insecure"])
        .args(["--resource-id", "intruder", "--bind", "127.0.0.1:0"])
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("TMPDIR", "/tmp")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("setpriv runs");
    poll("the JobManager refuses the intruder's handshake", || {
        (metric(&url, "flint_transport_rejected_connections_total") > refused_before).then_some(())
    });
    let overview = as_owner("GET", &url, "/overview").expect(200).json();
    assert_eq!(overview["taskmanagers"], 0, "{overview}");
    let _ = intruder.kill();
    let _ = intruder.wait();

    as_owner("DELETE", &url, "/cluster").expect(202);
    assert!(jm.wait_for_exit().success(), "{}", jm.log());
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
