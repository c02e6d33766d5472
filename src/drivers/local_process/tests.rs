use std::time::Duration;

use super::*;
use crate::messages::ActorAddress;
use crate::messages::resource_manager::ResourceManagerMessage;
use crate::testing::*;

fn shell(script: &str) -> ProcessTemplate {
    ProcessTemplate {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: vec![("FLINT_SECRET".into(), OsString::from("s3cret"))],
        slots: 2,
        hosts: Vec::new(),
    }
}

fn request(id: &str) -> WorkerRequest {
    WorkerRequest {
        resource_id: ResourceId::new(id),
        job_manager: ActorAddress::new("127.0.0.1:6123", "jobmanager"),
        leader_session_id: None,
    }
}

/// Polls the probe until `pick` finds something, with a deadline.
async fn wait_for<T>(
    rm: &ResourceManagerProbeHandle,
    pick: impl Fn(&ResourceManagerMessage) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = rm.received.filter(&pick).into_iter().next() {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing arrived in time"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[test]
fn placeholders_are_filled_per_worker() {
    let template = ProcessTemplate::flint_taskmanager(PathBuf::from("/usr/bin/flint"), 4);
    assert_eq!(
        template.arguments(&request("tm-7"), "ignored"),
        [
            "taskmanager",
            "--jobmanager",
            "127.0.0.1:6123",
            "--resource-id",
            "tm-7",
            "--slots",
            "4"
        ]
    );
}

#[actix::test]
async fn the_command_driver_fills_hosts_round_robin() {
    let dir = std::env::temp_dir().join(format!("flint-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut template = shell(&format!(
        "echo {{host}} > {}/{{resource_id}}",
        dir.display()
    ));
    template.hosts = vec!["node-a".into(), "node-b".into()];
    let mut driver = LocalProcessDriver::new(template);
    assert_eq!(driver.name(), "command");
    for n in 1..=3 {
        driver.request_worker(request(&format!("tm-{n}"))).unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let read = |n: u32| std::fs::read_to_string(dir.join(format!("tm-{n}"))).unwrap_or_default();
    while (1..=3).any(|n| !read(n).ends_with('\n')) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workers never ran"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let hosts: Vec<String> = (1..=3).map(|n| read(n).trim().to_owned()).collect();
    assert_eq!(hosts, ["node-a", "node-b", "node-a"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_worker_that_exits_is_reported_terminated_with_its_status() {
    let env = env("node", 1);
    let rm = ResourceManagerProbeHandle::start(&env);
    let mut driver = LocalProcessDriver::new(shell("test \"$FLINT_SECRET\" = s3cret && exit 3"));
    driver.initialize(rm.gateway.clone());
    driver.request_worker(request("tm-1")).unwrap();
    wait_for(&rm, |m| {
        matches!(m, ResourceManagerMessage::WorkerStarted(_)).then_some(())
    })
    .await;
    let reason = wait_for(&rm, |m| match m {
        ResourceManagerMessage::WorkerTerminated(t) => Some(t.reason.clone()),
        _ => None,
    })
    .await;
    assert!(
        reason.contains("3"),
        "the secret reached the child by environment: {reason}"
    );
}

#[actix::test]
async fn a_child_gets_the_secret_byte_for_byte_and_none_of_the_parents_flint_variables() {
    use std::os::unix::ffi::OsStringExt;
    // Not UTF-8, with a newline: a lossy conversion would change it.
    let secret = vec![0xff, b'a', b'\n', 0xc3, 0x28, b'z'];
    let dir = std::env::temp_dir().join(format!("flint-lp-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("env");
    let mut template = shell(&format!(
        "printf %s \"$FLINT_SECRET\" > {0}.secret; env > {0}",
        out.display()
    ));
    template.env = vec![("FLINT_SECRET".into(), OsString::from_vec(secret.clone()))];
    let env = env("node", 1);
    let rm = ResourceManagerProbeHandle::start(&env);
    let mut driver = LocalProcessDriver::new(template);
    driver.initialize(rm.gateway.clone());
    driver.request_worker(request("tm-1")).unwrap();
    wait_for(&rm, |m| {
        matches!(m, ResourceManagerMessage::WorkerTerminated(_)).then_some(())
    })
    .await;
    let seen = std::fs::read(dir.join("env.secret")).unwrap();
    assert_eq!(seen, secret);
    // Bytes: the secret itself is not UTF-8.
    let environment = String::from_utf8_lossy(&std::fs::read(&out).unwrap()).into_owned();
    let names: Vec<&str> = environment
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    for name in &names {
        assert!(
            INHERITED_ENV.contains(name)
                || *name == "FLINT_SECRET"
                || *name == "PWD"
                || *name == "SHLVL"
                || *name == "_",
            "the child inherited {name}: {names:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A driver whose worker `tm-1` is `sleep 60` (reporting to a probe resource manager), and
/// that process's pid once it runs; `dir` is the test's scratch directory.
async fn sleeping_child(
    name: &str,
) -> (
    ResourceManagerProbeHandle,
    LocalProcessDriver,
    u32,
    std::path::PathBuf,
) {
    let env = env("node", 1);
    let rm = ResourceManagerProbeHandle::start(&env);
    let dir = std::env::temp_dir().join(format!("flint-lp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let mut driver = LocalProcessDriver::new(shell(&format!(
        "echo $$ > {} && exec sleep 60",
        pid_file.display()
    )));
    driver.initialize(rm.gateway.clone());
    driver.request_worker(request("tm-1")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            break pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child never started"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    (rm, driver, pid, dir)
}

#[actix::test]
async fn a_killed_worker_is_noticed_at_once() {
    let (rm, _driver, pid, dir) = sleeping_child("kill").await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let reason = wait_for(&rm, |m| match m {
        ResourceManagerMessage::WorkerTerminated(t) => Some(t.reason.clone()),
        _ => None,
    })
    .await;
    assert!(reason.contains("9"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_released_worker_is_killed_silently() {
    let (rm, mut driver, pid, dir) = sleeping_child("release").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    driver.release_worker(&ResourceId::new("tm-1"));
    assert_eq!(driver.running(), 0);
    // Wait until the process is gone (reaped), then nothing may have been reported.
    let alive = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    while alive(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the released child still runs"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let terminated = rm
        .received
        .filter(|m| matches!(m, ResourceManagerMessage::WorkerTerminated(_)).then_some(()));
    assert!(terminated.is_empty(), "a release is not a termination");
    driver.release_worker(&ResourceId::new("ghost"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_program_that_cannot_start_is_a_spawn_error() {
    let mut driver = LocalProcessDriver::new(ProcessTemplate {
        program: PathBuf::from("/nonexistent/flint"),
        args: vec![],
        env: vec![],
        slots: 1,
        hosts: Vec::new(),
    });
    let error = driver.request_worker(request("tm-1")).unwrap_err();
    assert!(matches!(error, DriverError::Spawn { .. }));
    assert!(error.to_string().contains("tm-1"));
}
