//! The standalone driver: TaskManagers are started by someone else (by hand, a script, a
//! scheduler) and register themselves. Every TaskManager that registers counts as started; the
//! designated pool size is what the operator intends, and a shortfall is logged, never filled.

use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::messages::ids::ResourceId;
use crate::messages::resource_manager::ResourceManagerGateway;

/// Starts nothing; counts what registers.
#[derive(Debug, Default)]
pub struct StandaloneDriver;

impl WorkerDriver for StandaloneDriver {
    fn name(&self) -> &'static str {
        "standalone"
    }

    fn initialize(&mut self, _resource_manager: ResourceManagerGateway) {}

    fn can_start_workers(&self) -> bool {
        false
    }

    fn adopts_unknown_workers(&self) -> bool {
        true
    }

    fn request_worker(&mut self, _request: WorkerRequest) -> Result<(), DriverError> {
        Err(DriverError::CannotStartWorkers {
            driver: self.name(),
        })
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        log::info!(
            "standalone: {resource_id} left the pool; stopping it is up to whoever started it"
        );
    }

    fn shutdown(&mut self) {}
}
