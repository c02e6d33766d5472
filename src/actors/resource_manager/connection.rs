//! The resource manager's connection to the JobManager leader: registration with retries,
//! heartbeats, and reconciliation of the pool with what the leader has registered.
//!
//! Registration follows Flink's RetryingRegistration: an attempt that gets no answer within its
//! timeout is followed at once by one with twice the timeout (capped); an unreachable leader is
//! retried after a pause of the same length. Once registered, the RM heartbeats the leader every
//! `heartbeat.interval`; a leader silent for `heartbeat.timeout`, or one that no longer knows
//! this RM, is registered at again. Every heartbeat answer lists the registered TaskManagers, so
//! a lost `NotifyResourceStarted` costs one interval, not a registration timeout.

use std::collections::BTreeSet;

use actix::clock::Instant;
use actix::prelude::*;

use super::{FlinkResourceManager, Leader, NAME};
use crate::base::ids::ResourceId;
use crate::env::events::ClusterEvent;
use crate::messages::job_manager::{
    RegisterResourceManager, ResourceManagerHeartbeat, ResourceManagerHeartbeatResponse,
};
use crate::messages::resource_manager::{
    RegisterResourceManagerSuccessful, TriggerRegistrationAtJobManager,
};
use crate::messages::{NewLeaderAvailable, is_current_leader};

impl FlinkResourceManager {
    /// Forgets the connection and registers again (a new attempt generation).
    fn reconnect(&mut self, ctx: &mut Context<Self>) {
        if let Some(leader) = self.leader.as_mut() {
            leader.connected = false;
            // Resolve afresh: the old gateway may point at a JobManager that is gone.
            leader.gateway = None;
        }
        self.release_in_flight = None;
        self.registration_backoff.reset();
        self.registration_attempt += 1;
        ctx.notify(TriggerRegistrationAtJobManager);
    }

    /// Schedules the next registration attempt of generation `attempt` after `delay`.
    fn retry_registration(
        &self,
        attempt: u64,
        delay: std::time::Duration,
        ctx: &mut Context<Self>,
    ) {
        ctx.run_later(delay, move |act, ctx| {
            if attempt == act.registration_attempt {
                act.register_at_job_manager(ctx);
            }
        });
    }

    fn register_at_job_manager(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let resolver = self.env.resolver.clone();
        let Some(leader) = self.leader.as_mut().filter(|l| !l.connected) else {
            return;
        };
        if leader.gateway.is_none() {
            leader.gateway = resolver.job_manager(&leader.address);
        }
        let delay = self.registration_backoff.next_delay();
        let attempt = self.registration_attempt;
        let session = leader.session;
        let Some(gateway) = leader.gateway.as_ref() else {
            log::warn!(
                "resource manager: cannot reach JobManager {}; retrying in {delay:?}",
                leader.address
            );
            self.retry_registration(attempt, delay, ctx);
            return;
        };
        log::debug!(
            "resource manager: registering at JobManager {}",
            leader.address
        );
        gateway
            .register_resource_manager
            .send(RegisterResourceManager {
                leader_session_id: session,
                resource_manager: self.address.clone(),
                designated_pool_size: self.pool.designated(),
                max_pool_size: self.settings.pool.max_pool_size,
            })
            .timeout(delay)
            .into_actor(self)
            .map(move |result, act, ctx| {
                if attempt != act.registration_attempt {
                    log::debug!("resource manager: ignoring an answer to an earlier registration");
                    return;
                }
                match result {
                    Ok(success) => act.registered_at_job_manager(success, ctx),
                    // No answer in time: the next attempt, with twice the timeout, at once.
                    Err(MailboxError::Timeout) => {
                        log::warn!(
                            "resource manager: JobManager did not answer the registration within {delay:?}; retrying"
                        );
                        act.register_at_job_manager(ctx);
                    }
                    // Unreachable: pause, so a dead peer is not hammered, and resolve afresh.
                    Err(MailboxError::Closed) => {
                        log::warn!(
                            "resource manager: JobManager unreachable; retrying registration in {delay:?}"
                        );
                        if let Some(leader) = act.leader.as_mut() {
                            leader.gateway = None;
                        }
                        act.retry_registration(attempt, delay, ctx);
                    }
                }
            })
            .spawn(ctx);
    }

    fn registered_at_job_manager(
        &mut self,
        msg: RegisterResourceManagerSuccessful,
        ctx: &mut Context<Self>,
    ) {
        if !is_current_leader(
            self.leader_session(),
            msg.leader_session_id,
            NAME,
            "RegisterResourceManagerSuccessful",
        ) {
            return;
        }
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        if leader.connected {
            log::debug!("resource manager: registered at the JobManager already");
            return;
        }
        leader.connected = true;
        leader.last_heard = Instant::now();
        self.registration_backoff.reset();
        log::info!(
            "resource manager: registered at JobManager {}; it has {} TaskManagers",
            msg.job_manager,
            msg.registered.len()
        );
        // Reconciliation. Whatever the leader has counts as started, whoever started it (a
        // previous resource manager, say), so the pool is not filled twice...
        for resource_id in &msg.registered {
            self.accept_registered(resource_id, true);
        }
        // ...and a worker counted as started that this leader does not have must register
        // there again within the registration timeout, or it is replaced.
        let unknown: Vec<_> = self
            .pool
            .started()
            .map(|(id, _)| id.clone())
            .filter(|id| !msg.registered.contains(id))
            .collect();
        for resource_id in unknown {
            log::info!(
                "resource manager: {resource_id} is not registered at the new leader; waiting for it to register there"
            );
            self.pool.demote(&resource_id);
            self.arm_registration_deadline(resource_id, ctx);
        }
        self.env
            .events
            .emit(ClusterEvent::ResourceManagerConnected {
                known_workers: msg.registered.len(),
            });
        self.pool.set_demand(msg.required_workers);
        self.check_workers_pool(ctx);
    }

    /// A heartbeat answer listed the workers registered at the leader. Each one the pool counts
    /// (or, adopting, any) counts as started, except one released after the heartbeat left: the
    /// answer predates its removal there. A worker counted as started before the heartbeat left
    /// and missing from the answer is gone there: it must register again within the
    /// registration timeout, or it is replaced.
    fn reconcile(
        &mut self,
        epoch: u64,
        releases: u64,
        registered: &[ResourceId],
        ctx: &mut Context<Self>,
    ) {
        let adopt = self.driver.adopts_unknown_workers();
        for resource_id in registered {
            if self.released_after(resource_id, releases) {
                log::debug!(
                    "resource manager: {resource_id} was released after this heartbeat left; not counting it again"
                );
            } else if self.pool.contains(resource_id) || adopt {
                self.accept_registered(resource_id, adopt);
            }
        }
        let listed: BTreeSet<&ResourceId> = registered.iter().collect();
        let missing: Vec<ResourceId> = self
            .pool
            .started_before(epoch)
            .filter(|id| !listed.contains(id))
            .cloned()
            .collect();
        for resource_id in missing {
            log::info!(
                "resource manager: {resource_id} is no longer registered at the JobManager; waiting for it to register again"
            );
            self.pool.demote(&resource_id);
            self.arm_registration_deadline(resource_id, ctx);
        }
    }

    /// Every heartbeat interval: check the leader's silence, then ask it again.
    pub(super) fn heartbeat_job_manager(&mut self, ctx: &mut Context<Self>) {
        let Some(leader) = self.leader.as_ref().filter(|l| l.connected) else {
            return;
        };
        let timeout = self.settings.heartbeat.timeout;
        let silence = Instant::now().saturating_duration_since(leader.last_heard);
        if silence > timeout {
            log::warn!(
                "resource manager: JobManager {} silent for {silence:?}; registering again",
                leader.address
            );
            self.reconnect(ctx);
            return;
        }
        let Some(gateway) = leader.gateway.as_ref() else {
            return;
        };
        let (attempt, session) = (self.registration_attempt, leader.session);
        let gateway = gateway.clone();
        // What the answer can vouch for: workers counted before this epoch, and releases up to
        // this count (a worker released since may still be listed).
        let (epoch, releases) = (self.pool.next_epoch(), self.releases);
        gateway
            .resource_manager_heartbeat
            .send(ResourceManagerHeartbeat {
                resource_manager: self.address.clone(),
                designated_pool_size: self.pool.designated(),
                max_pool_size: self.settings.pool.max_pool_size,
            })
            .timeout(timeout)
            .into_actor(self)
            .map(move |result, act, ctx| {
                if attempt != act.registration_attempt {
                    return; // an answer for an earlier connection
                }
                match result {
                    Ok(ResourceManagerHeartbeatResponse::Acknowledged {
                        leader_session_id,
                        registered,
                        required_workers,
                    }) if leader_session_id == session => {
                        if let Some(leader) = act.leader.as_mut() {
                            leader.last_heard = Instant::now();
                        }
                        act.reconcile(epoch, releases, &registered, ctx);
                        act.demand_declared(required_workers, ctx);
                    }
                    Ok(ResourceManagerHeartbeatResponse::Acknowledged { .. }) => {
                        log::warn!("resource manager: heartbeat answered by another leader session; registering again");
                        act.reconnect(ctx);
                    }
                    Ok(ResourceManagerHeartbeatResponse::UnknownResourceManager) => {
                        log::info!(
                            "resource manager: the JobManager no longer knows this resource manager; registering again"
                        );
                        act.reconnect(ctx);
                    }
                    // Silence counts against the heartbeat timeout.
                    Err(error) => {
                        log::debug!("resource manager: heartbeat not answered: {error}")
                    }
                }
            })
            .spawn(ctx);
    }
}

impl Handler<NewLeaderAvailable> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: NewLeaderAvailable, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        if self
            .leader
            .as_ref()
            .is_some_and(|l| l.address == msg.address && l.session == msg.leader_session_id)
        {
            log::debug!("resource manager: leader {} is known already", msg.address);
            return;
        }
        log::info!(
            "resource manager: new JobManager leader {} (session {})",
            msg.address,
            msg.leader_session_id
        );
        self.driver
            .leader_changed(&msg.address, msg.leader_session_id);
        // The old leader's jobs' demand goes with it; the new leader declares its own.
        self.pool.set_demand(0);
        self.leader = Some(Leader {
            address: msg.address,
            session: msg.leader_session_id,
            gateway: None,
            connected: false,
            last_heard: Instant::now(),
        });
        self.reconnect(ctx);
    }
}

impl Handler<TriggerRegistrationAtJobManager> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, _: TriggerRegistrationAtJobManager, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- TriggerRegistrationAtJobManager");
        self.register_at_job_manager(ctx);
    }
}

impl Handler<RegisterResourceManagerSuccessful> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: RegisterResourceManagerSuccessful, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        self.registered_at_job_manager(msg, ctx);
    }
}

#[cfg(test)]
mod tests;
