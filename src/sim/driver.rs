//! The simulation's worker driver: the resource manager asks it for workers exactly as it asks
//! the process drivers, and the simulation boots (or fails to boot) TaskManager nodes.

use tokio::sync::mpsc;

use crate::actors::resource_manager::driver::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::ids::ResourceId;
use crate::messages::resource_manager::ResourceManagerGateway;

/// What the driver asks of the simulation.
#[derive(Debug)]
pub enum DriverCommand {
    /// The resource manager's gateway, for the outcome of starts; with `recover`, the
    /// workers running already are reported to it as recovered.
    Initialize {
        /// The gateway.
        gateway: ResourceManagerGateway,
        /// Whether to report the running workers.
        recover: bool,
    },
    /// Start a worker.
    Start(WorkerRequest),
    /// Stop a worker (or cancel its start).
    Release(ResourceId),
}

/// A [`WorkerDriver`] whose workers are simulated nodes.
#[derive(Debug)]
pub struct SimDriver {
    commands: mpsc::UnboundedSender<DriverCommand>,
    adopts: bool,
    recovers: bool,
}

impl SimDriver {
    /// A driver and the commands it sends.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<DriverCommand>) {
        let (commands, receiver) = mpsc::unbounded_channel();
        (
            Self {
                commands,
                adopts: false,
                recovers: false,
            },
            receiver,
        )
    }

    /// A driver of one leadership under high availability: the workers outlive the leader that
    /// started them (they are other machines), so the next leader's resource manager counts the
    /// ones that register at its JobManager as started instead of starting a second pool.
    pub fn adopting() -> (Self, mpsc::UnboundedReceiver<DriverCommand>) {
        let (mut driver, receiver) = Self::new();
        driver.adopts = true;
        (driver, receiver)
    }

    /// A driver of one leadership under high availability that finds the workers running
    /// already and reports them as recovered (as the Slurm driver's first poll does): they must
    /// register within the registration timeout or are released; nobody else is adopted.
    pub fn recovering() -> (Self, mpsc::UnboundedReceiver<DriverCommand>) {
        let (mut driver, receiver) = Self::new();
        driver.recovers = true;
        (driver, receiver)
    }
}

impl WorkerDriver for SimDriver {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn initialize(&mut self, resource_manager: ResourceManagerGateway) {
        let _ = self.commands.send(DriverCommand::Initialize {
            gateway: resource_manager,
            recover: self.recovers,
        });
    }

    fn can_start_workers(&self) -> bool {
        true
    }

    fn adopts_unknown_workers(&self) -> bool {
        self.adopts
    }

    fn recovers_workers(&self) -> bool {
        self.recovers
    }

    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError> {
        let _ = self.commands.send(DriverCommand::Start(request));
        Ok(())
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        let _ = self
            .commands
            .send(DriverCommand::Release(resource_id.clone()));
    }

    fn shutdown(&mut self) {}
}
