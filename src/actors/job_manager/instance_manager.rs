//! The JobManager's registry of TaskManagers: who is registered, as which instance, with how
//! many slots (total and free). Pure data; the JobManager keeps the gateways and timers.
//! The scheduler (next layer) allocates slots against this view.

use std::collections::BTreeMap;

use crate::base::ids::{InstanceId, ResourceId, TaskManagerSessionId};
use crate::messages::job_manager::{Fingerprint, HeartbeatReport, TaskManagerInfo};
use crate::messages::{HardwareDescription, TaskManagerLocation};

/// One registered TaskManager: what the status API shows, plus its registration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The registration as reported.
    pub info: TaskManagerInfo,
    /// Registration order, for choosing which idle TaskManager to release.
    sequence: u64,
    /// The run of the TaskManager that registered (a restart brings a new one).
    pub session: TaskManagerSessionId,
}

impl Instance {
    /// Whether no slot is allocated.
    pub fn is_idle(&self) -> bool {
        self.info.slots_free == self.info.slots_total
    }
}

/// Registered TaskManagers by resource id.
#[derive(Debug, Clone, Default)]
pub struct InstanceManager {
    instances: BTreeMap<ResourceId, Instance>,
    next_sequence: u64,
}

impl InstanceManager {
    /// No TaskManagers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a TaskManager (replacing any registration under the same resource id).
    #[allow(clippy::too_many_arguments)] // the registration's fields, each stored as given
    pub fn register(
        &mut self,
        instance_id: InstanceId,
        location: TaskManagerLocation,
        hardware: HardwareDescription,
        slots: u32,
        now_ms: u64,
        session: TaskManagerSessionId,
        fingerprint: Fingerprint,
    ) -> &Instance {
        self.next_sequence += 1;
        let resource_id = location.resource_id.clone();
        let instance = Instance {
            info: TaskManagerInfo {
                resource_id: resource_id.clone(),
                instance_id,
                location,
                hardware,
                slots_total: slots,
                slots_free: slots,
                fingerprint,
                registered_at_ms: now_ms,
                last_heartbeat_ms: now_ms,
                // Filled from the scheduler when a status is built: it owns the placements.
                allocated_slots: Vec::new(),
                spill: Default::default(),
            },
            sequence: self.next_sequence,
            session,
        };
        self.instances.insert(resource_id.clone(), instance);
        &self.instances[&resource_id]
    }

    /// The registration of `resource_id`.
    pub fn get(&self, resource_id: &ResourceId) -> Option<&Instance> {
        self.instances.get(resource_id)
    }

    /// Removes the registration of `resource_id`.
    pub fn unregister(&mut self, resource_id: &ResourceId) -> Option<Instance> {
        self.instances.remove(resource_id)
    }

    /// Records a heartbeat. False if `instance_id` is not the current registration of
    /// `resource_id` (the TaskManager must register again).
    pub fn heartbeat(
        &mut self,
        resource_id: &ResourceId,
        instance_id: InstanceId,
        report: &HeartbeatReport,
        now_ms: u64,
    ) -> bool {
        match self.instances.get_mut(resource_id) {
            Some(Instance { info, .. }) if info.instance_id == instance_id => {
                info.last_heartbeat_ms = now_ms;
                // The TaskManager's own count wins for slots the JobManager does not allocate
                // itself yet; the scheduler will keep both in step.
                info.slots_free = report.slots_free.min(info.slots_total);
                info.spill = report.spill;
                true
            }
            _ => false,
        }
    }

    /// Up to `count` idle TaskManagers (no slot allocated as they report it, and not `busy`
    /// in the scheduler's view), the most recently registered first (older ones are more
    /// likely to hold cached state and warm connections).
    pub fn idle_newest_first(
        &self,
        count: usize,
        busy: impl Fn(&ResourceId) -> bool,
    ) -> Vec<ResourceId> {
        let mut idle: Vec<(&ResourceId, &Instance)> = self
            .instances
            .iter()
            .filter(|(id, instance)| instance.is_idle() && !busy(id))
            .collect();
        idle.sort_by_key(|(_, instance)| std::cmp::Reverse(instance.sequence));
        idle.into_iter()
            .take(count)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every registration, by resource id.
    pub fn iter(&self) -> impl Iterator<Item = &Instance> {
        self.instances.values()
    }

    /// Registered resource ids, in order.
    pub fn resource_ids(&self) -> Vec<ResourceId> {
        self.instances.keys().cloned().collect()
    }

    /// How many TaskManagers are registered.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Slots over all TaskManagers (64 bits: many TaskManagers' slots may not fit in 32).
    pub fn total_slots(&self) -> u64 {
        self.instances
            .values()
            .map(|i| u64::from(i.info.slots_total))
            .sum()
    }

    /// Free slots over all TaskManagers.
    pub fn free_slots(&self) -> u64 {
        self.instances
            .values()
            .map(|i| u64::from(i.info.slots_free))
            .sum()
    }

    /// Every registration as status info.
    pub fn infos(&self) -> Vec<TaskManagerInfo> {
        self.instances.values().map(|i| i.info.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ActorAddress;

    fn location(n: u32) -> TaskManagerLocation {
        TaskManagerLocation {
            resource_id: ResourceId::new(format!("tm-{n}")),
            address: ActorAddress::new("local", format!("taskmanager/tm-{n}")),
            hostname: "localhost".into(),
        }
    }

    const HW: HardwareDescription = HardwareDescription {
        cpu_cores: 1,
        physical_memory_bytes: 0,
    };

    #[test]
    fn counts_slots_and_tracks_heartbeats_per_registration() {
        let mut instances = InstanceManager::new();
        instances.register(
            InstanceId::from_u128(1),
            location(1),
            HW,
            2,
            10,
            TaskManagerSessionId::from_u128(0),
            Fingerprint::default(),
        );
        instances.register(
            InstanceId::from_u128(2),
            location(2),
            HW,
            3,
            10,
            TaskManagerSessionId::from_u128(0),
            Fingerprint::default(),
        );
        assert_eq!((instances.total_slots(), instances.free_slots()), (5, 5));
        let tm1 = ResourceId::new("tm-1");
        let report = HeartbeatReport {
            slots_total: 2,
            slots_free: 1,
            running: vec![],
            io: vec![],
            partitions_of: vec![],
            spill: Default::default(),
        };
        assert!(instances.heartbeat(&tm1, InstanceId::from_u128(1), &report, 20));
        assert_eq!(instances.get(&tm1).unwrap().info.last_heartbeat_ms, 20);
        assert_eq!(instances.free_slots(), 4);
        assert!(
            !instances.heartbeat(&tm1, InstanceId::from_u128(9), &report, 30),
            "a heartbeat of an old registration is refused"
        );
        assert!(!instances.heartbeat(
            &ResourceId::new("tm-7"),
            InstanceId::from_u128(1),
            &report,
            30
        ));
    }

    #[test]
    fn idle_release_picks_the_newest_idle_only() {
        let mut instances = InstanceManager::new();
        for n in 1..=4 {
            instances.register(
                InstanceId::from_u128(n.into()),
                location(n),
                HW,
                1,
                0,
                TaskManagerSessionId::from_u128(0),
                Fingerprint::default(),
            );
        }
        // tm-3 is busy.
        let busy = HeartbeatReport {
            slots_total: 1,
            slots_free: 0,
            running: vec![],
            io: vec![],
            partitions_of: vec![],
            spill: Default::default(),
        };
        assert!(instances.heartbeat(&ResourceId::new("tm-3"), InstanceId::from_u128(3), &busy, 1));
        let names: Vec<String> = instances
            .idle_newest_first(2, |_| false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, ["tm-4", "tm-2"]);
        assert_eq!(instances.idle_newest_first(10, |_| false).len(), 3);
    }
}
