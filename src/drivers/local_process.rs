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

    /// A command of the user's (not empty): `command[0]` with the rest as arguments, run on
    /// `hosts` in turn.
    pub fn from_command(command: &[String], slots: u32, hosts: Vec<String>) -> Self {
        Self {
            program: PathBuf::from(&command[0]),
            args: command[1..].to_vec(),
            env: Vec::new(),
            slots,
            hosts,
        }
    }

    /// The arguments for `request` on `host`, placeholders filled in.
    pub(crate) fn arguments(&self, request: &WorkerRequest, host: &str) -> Vec<String> {
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
mod tests;
