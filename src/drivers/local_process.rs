//! The local-process driver: each worker is a child process on this machine, normally
//! `flint taskmanager --jobmanager HOST:PORT --resource-id ID ...`.
//!
//! The command is a template (program + arguments) with the placeholders `{jobmanager}`
//! (the leader's `host:port`), `{resource_id}` and `{slots}`, so tests and operators can run
//! anything (a wrapper script, `ip netns exec ...`). A child's exit is reported at once as
//! `WorkerTerminated` with its exit status — a `kill -9` is noticed in milliseconds, not at a
//! heartbeat timeout. Releasing a worker kills its process and reports nothing (the resource
//! manager forgot it already).
//!
//! A child's environment is explicit: the variables of [`INHERITED_ENV`] (where to find
//! programs, the temporary directory, logging, locale) and the template's own (the cluster
//! secret as `FLINT_SECRET`, as bytes: exactly the parent's), and nothing else of the parent's —
//! no `FLINT_REST_TOKEN`, no other `FLINT_*` setting, no credential an operator happened to
//! export.
//!
//! Production-only: this module starts OS processes (the simulation uses another driver).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::sync::oneshot;

use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::ids::ResourceId;
use crate::messages::resource_manager::WorkerStarted;
use crate::messages::resource_manager::{ResourceManagerGateway, WorkerTerminated};

/// How to start one worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessTemplate {
    /// The program (for `flint taskmanager`: this binary, `std::env::current_exe()`).
    pub program: PathBuf,
    /// Its arguments, with `{jobmanager}`, `{resource_id}` and `{slots}` filled in per worker.
    pub args: Vec<String>,
    /// The environment variables the child gets besides [`INHERITED_ENV`] (the cluster secret
    /// travels as `FLINT_SECRET`, never on the command line where `ps` shows it). Values are
    /// bytes (`OsString`): a secret is passed on exactly, whatever it contains.
    pub env: Vec<(String, OsString)>,
    /// Slots each worker offers (fills `{slots}`).
    pub slots: u32,
    /// For the `command` driver: the hosts `{host}` takes in turn (round-robin). Empty: one
    /// machine, the `local_process` driver.
    pub hosts: Vec<String>,
}

/// The parent's variables a child inherits (when set): enough to find programs, write temporary
/// files, log and speak the locale. Everything else of the parent's environment stays behind.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TZ",
    "RUST_LOG",
    "RUST_LOG_STYLE",
    "RUST_BACKTRACE",
];

impl ProcessTemplate {
    /// `program taskmanager --jobmanager {jobmanager} --resource-id {resource_id} --slots {slots}`.
    pub fn flint_taskmanager(program: PathBuf, slots: u32) -> Self {
        Self {
            program,
            args: [
                "taskmanager",
                "--jobmanager",
                "{jobmanager}",
                "--resource-id",
                "{resource_id}",
                "--slots",
                "{slots}",
            ]
            .map(String::from)
            .to_vec(),
            env: Vec::new(),
            slots,
            hosts: Vec::new(),
        }
    }

    fn arguments(&self, request: &WorkerRequest, host: &str) -> Vec<String> {
        self.args
            .iter()
            .map(|arg| {
                arg.replace("{jobmanager}", &request.job_manager.node)
                    .replace("{resource_id}", request.resource_id.as_str())
                    .replace("{slots}", &self.slots.to_string())
                    .replace("{host}", host)
            })
            .collect()
    }
}

/// Starts workers as child processes (with hosts: the `command` driver).
pub struct LocalProcessDriver {
    template: ProcessTemplate,
    /// The next host of the round-robin.
    next_host: usize,
    resource_manager: Option<ResourceManagerGateway>,
    /// Each running child's kill switch.
    children: BTreeMap<ResourceId, oneshot::Sender<()>>,
}

impl LocalProcessDriver {
    /// A driver starting workers from `template`.
    pub fn new(template: ProcessTemplate) -> Self {
        Self {
            template,
            next_host: 0,
            resource_manager: None,
            children: BTreeMap::new(),
        }
    }

    /// How many children run now.
    pub fn running(&self) -> usize {
        self.children.len()
    }
}

impl WorkerDriver for LocalProcessDriver {
    fn name(&self) -> &'static str {
        if self.template.hosts.is_empty() {
            "local_process"
        } else {
            "command"
        }
    }

    fn initialize(&mut self, resource_manager: ResourceManagerGateway) {
        self.resource_manager = Some(resource_manager);
    }

    fn can_start_workers(&self) -> bool {
        true
    }

    fn adopts_unknown_workers(&self) -> bool {
        false
    }

    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError> {
        let resource_id = request.resource_id.clone();
        let host = match self
            .template
            .hosts
            .get(self.next_host % self.template.hosts.len().max(1))
        {
            Some(host) => {
                self.next_host += 1;
                host.clone()
            }
            None => "localhost".to_owned(),
        };
        let mut command = tokio::process::Command::new(&self.template.program);
        command
            .args(self.template.arguments(&request, &host))
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .filter_map(|name| Some((*name, std::env::var_os(name)?))),
            )
            .envs(self.template.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // A worker dies with the JobManager process that started it, even with `kill -9`: with
        // high availability another leader takes over and starts its own workers, and an
        // orphan would keep registering at a dead address.
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe and touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| DriverError::Spawn {
            resource_id: resource_id.clone(),
            source,
        })?;
        let (kill, killed) = oneshot::channel();
        self.children.insert(resource_id.clone(), kill);
        let rm = self.resource_manager.clone();
        if let Some(rm) = &rm {
            rm.worker_started.do_send(WorkerStarted {
                resource_id: resource_id.clone(),
            });
        }
        log::info!(
            "local-process driver: started {resource_id} as process {}",
            child
                .id()
                .map_or_else(|| "?".to_owned(), |id| id.to_string())
        );
        actix::spawn(async move {
            tokio::select! {
                biased;
                status = child.wait() => {
                    let reason = match status {
                        Ok(status) => status.to_string(),
                        Err(error) => format!("cannot wait for the process: {error}"),
                    };
                    log::warn!("local-process driver: worker {resource_id} ended: {reason}");
                    if let Some(rm) = rm {
                        rm.worker_terminated.do_send(WorkerTerminated { resource_id, reason });
                    }
                }
                _ = killed => {
                    // Released: stop it and reap it; nobody wants to hear about it.
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
        });
        Ok(())
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        if let Some(kill) = self.children.remove(resource_id) {
            let _ = kill.send(());
        }
    }

    fn shutdown(&mut self) {
        for (_, kill) in std::mem::take(&mut self.children) {
            let _ = kill.send(());
        }
    }
}

impl Drop for LocalProcessDriver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
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
        let read =
            |n: u32| std::fs::read_to_string(dir.join(format!("tm-{n}"))).unwrap_or_default();
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
        let mut driver =
            LocalProcessDriver::new(shell("test \"$FLINT_SECRET\" = s3cret && exit 3"));
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
}
