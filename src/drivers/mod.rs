//! How the resource manager gets workers: Flink's ResourceManagerDriver.
//!
//! The resource manager decides *how many* workers; a [`WorkerDriver`] (the trait, beside the
//! resource manager in [`crate::actors::resource_manager::driver`]) decides *how* one is started
//! and stopped. [`worker_driver`] picks the driver `resourcemanager.driver` names: the place to
//! add a new one.
//!
//! | driver | starts a worker by |
//! | --- | --- |
//! | [`in_process::InProcessDriver`] | a TaskManager actor on its own arbiter (thread) |
//! | [`local_process::LocalProcessDriver`] | a child process (`command`: a command per host) |
//! | [`slurm::SlurmDriver`] | a Slurm batch job (`sbatch`), followed with `squeue` |
//! | [`standalone::StandaloneDriver`] | nothing: TaskManagers started elsewhere register themselves |

pub mod in_process;
pub mod local_process;
pub mod slurm;
pub mod standalone;

use std::path::Path;

pub use crate::actors::resource_manager::driver::{DriverError, WorkerDriver, WorkerRequest};
use crate::config::{ClusterConfig, DriverKind};
use crate::transport::handshake::{SECRET_ENV, Secret};
use local_process::{LocalProcessDriver, ProcessTemplate};
use slurm::{SlurmDriver, SlurmSubmission};
use standalone::StandaloneDriver;

/// The worker driver `resourcemanager.driver` names, starting `program` (this binary) as
/// `flint taskmanager --config child_config` for `local_process`. A fresh one per leadership.
pub fn worker_driver(
    config: &ClusterConfig,
    program: &Path,
    child_config: &Path,
    secret: &Secret,
) -> Box<dyn WorkerDriver> {
    match config.resourcemanager.driver {
        DriverKind::Standalone => Box::new(StandaloneDriver),
        kind => {
            // A command of the user's (and its hosts), or this binary's own `taskmanager`.
            let user_command = match kind {
                DriverKind::Command => Some((
                    &config.resourcemanager.command.template,
                    config.resourcemanager.command.hosts.clone(),
                )),
                DriverKind::Slurm if !config.slurm.taskmanager_command.is_empty() => {
                    Some((&config.slurm.taskmanager_command, Vec::new()))
                }
                _ => None,
            };
            let own_taskmanager = user_command.is_none();
            let mut template = match user_command {
                Some((command, hosts)) => {
                    ProcessTemplate::from_command(command, config.taskmanager.slots, hosts)
                }
                None => {
                    let mut template = ProcessTemplate::flint_taskmanager(
                        program.to_path_buf(),
                        config.taskmanager.slots,
                    );
                    // The file is the whole configuration: the children inherit this process's
                    // environment, whose FLINT_* variables must not override its flags.
                    template.args.extend([
                        "--config".to_owned(),
                        child_config.display().to_string(),
                        "--ignore-env".to_owned(),
                    ]);
                    template
                }
            };
            if let Some(secret) = secret.expose() {
                // Byte for byte: the children must prove exactly the parent's secret.
                template.env.push((
                    SECRET_ENV.to_owned(),
                    std::os::unix::ffi::OsStringExt::from_vec(secret.to_vec()),
                ));
            } else if own_taskmanager {
                template.args.push("--insecure".to_owned());
            }
            if kind == DriverKind::Slurm {
                let submission = SlurmSubmission::new(
                    config.cluster.id.as_str(),
                    &config.slurm,
                    config.taskmanager.slots,
                    template,
                );
                return Box::new(SlurmDriver::new(submission));
            }
            Box::new(LocalProcessDriver::new(template))
        }
    }
}
