//! The standalone driver: TaskManagers are started by someone else (by hand, a script, a
//! scheduler) and register themselves. Every TaskManager that registers counts as started; the
//! designated pool size is what the operator intends, and a shortfall is logged, never filled.

use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::ids::ResourceId;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ActorAddress;

    #[test]
    fn starts_nothing_and_adopts_whatever_registers() {
        let mut driver = StandaloneDriver;
        assert!(!driver.can_start_workers());
        assert!(driver.adopts_unknown_workers());
        let request = WorkerRequest {
            resource_id: ResourceId::new("tm-1"),
            job_manager: ActorAddress::new("local", "jobmanager"),
            leader_session_id: None,
        };
        let error = driver.request_worker(request).unwrap_err();
        assert!(error.to_string().contains("start TaskManagers yourself"));
    }
}
