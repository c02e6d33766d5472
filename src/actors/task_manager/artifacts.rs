//! The TaskManager's side of job artifacts: each task of a job that ships some takes handles
//! on the job's cached copies (starting the fetches of those not here yet), and gives them
//! back when it ends; see [`BlobCache`](super::blob_cache::BlobCache) for the rules.

use actix::prelude::*;

use super::TaskManager;
use super::blob_cache::{ArtifactHandle, FetchState, fetch};
use crate::base::ids::JobId;
use crate::job::artifact::JobArtifact;

impl TaskManager {
    /// The handles a task of `job` waits on before it runs; starts the fetches they need.
    pub(super) fn acquire_artifacts(
        &mut self,
        job: JobId,
        artifacts: &[JobArtifact],
        ctx: &mut Context<Self>,
    ) -> Vec<ArtifactHandle> {
        let (handles, orders) = self.blob_cache.acquire(job, artifacts);
        for order in orders {
            let (digest, executable) = (order.artifact.digest, order.artifact.executable);
            let Some(gateway) = self.job_manager.as_ref().map(|jm| jm.fetch_blob.clone()) else {
                let why = format!(
                    "cannot fetch artifact `{}`: this TaskManager has no JobManager",
                    order.artifact.name
                );
                self.blob_cache
                    .fetched(digest, executable, FetchState::Failed(why));
                continue;
            };
            log::info!(
                "task manager {}: fetching artifact `{}` ({}, {} bytes) for job {job}",
                self.settings.resource_id,
                order.artifact.name,
                order.artifact.digest.short(),
                order.artifact.size
            );
            let io = self.env.task_runner.io();
            ctx.spawn(
                fetch(gateway, order, io)
                    .into_actor(self)
                    .map(move |outcome, act, _| {
                        if let FetchState::Failed(why) = &outcome {
                            log::warn!("task manager {}: {why}", act.settings.resource_id);
                        }
                        act.blob_cache.fetched(digest, executable, outcome);
                    }),
            );
        }
        handles
    }

    /// A task of `job` ended: once the job's last task here has been gone for
    /// `blob.cache-linger`, its artifacts no other job uses are deleted.
    pub(super) fn release_artifacts(
        &mut self,
        job: JobId,
        artifacts: &[JobArtifact],
        ctx: &mut Context<Self>,
    ) {
        let Some(generation) = self.blob_cache.task_ended(job, artifacts) else {
            return;
        };
        ctx.run_later(self.settings.spec.blob_cache_linger, move |act, _| {
            let unused = act.blob_cache.release_idle(job, generation);
            if unused.is_empty() {
                return;
            }
            log::info!(
                "task manager {}: deleting {} artifact(s) no job uses any more",
                act.settings.resource_id,
                unused.len()
            );
            act.env.task_runner.io().execute(Box::new(move || {
                for path in unused {
                    if let Err(error) = std::fs::remove_file(&path) {
                        log::warn!("cannot delete artifact {}: {error}", path.display());
                    }
                }
            }));
        });
    }
}
