//! The simulation's worker driver: the resource manager asks it for workers exactly as it asks
//! the process drivers, and the simulation boots (or fails to boot) TaskManager nodes.

use tokio::sync::mpsc;

use crate::actors::resource_manager::driver::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::ids::ResourceId;
use crate::messages::resource_manager::ResourceManagerGateway;

/// What the driver asks of the simulation.
#[derive(Debug)]
pub enum DriverCommand {
    /// The resource manager's gateway, for the outcome of starts.
    Initialize(ResourceManagerGateway),
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
}

impl SimDriver {
    /// A driver and the commands it sends.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<DriverCommand>) {
        let (commands, receiver) = mpsc::unbounded_channel();
        (
            Self {
                commands,
                adopts: false,
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
}

impl WorkerDriver for SimDriver {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn initialize(&mut self, resource_manager: ResourceManagerGateway) {
        let _ = self
            .commands
            .send(DriverCommand::Initialize(resource_manager));
    }

    fn can_start_workers(&self) -> bool {
        true
    }

    fn adopts_unknown_workers(&self) -> bool {
        self.adopts
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
