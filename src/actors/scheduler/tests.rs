//! The scheduler on a virtual cluster (Ballista's harness shape): `TestCluster::new(tms, slots)`,
//! requests by vertex and subtask, losing workers, and the clock.

use std::time::Duration;

use super::*;

const JOB: JobId = JobId::from_u128(1);

struct TestCluster {
    scheduler: Scheduler,
    start: Instant,
}

fn tm(n: usize) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

fn task(vertex: usize, subtask: u32) -> TaskRef {
    TaskRef {
        job: JOB,
        vertex,
        subtask,
    }
}

fn request(vertex: usize, subtask: u32) -> SlotRequest {
    SlotRequest {
        task: task(vertex, subtask),
        sharing_group: "default".into(),
        co_location_group: None,
        preferred: Vec::new(),
    }
}

impl TestCluster {
    fn new(task_managers: usize, slots: u32) -> Self {
        let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1));
        for n in 0..task_managers {
            scheduler.add_task_manager(tm(n), slots);
        }
        Self {
            scheduler,
            start: Instant::now(),
        }
    }

    fn place(&mut self, request: SlotRequest) -> Placement {
        self.scheduler.request(request, self.start)
    }

    fn assigned(&mut self, request: SlotRequest) -> SlotAssignment {
        match self.place(request.clone()) {
            Placement::Assigned(a) => a,
            Placement::Queued => panic!("{request:?} was queued"),
        }
    }

    fn lose_worker(&mut self, n: usize) -> Vec<TaskRef> {
        self.scheduler.remove_task_manager(&tm(n))
    }

    fn add_worker(&mut self, n: usize, slots: u32) -> Vec<(TaskRef, SlotAssignment)> {
        self.scheduler.add_task_manager(tm(n), slots);
        self.scheduler.new_slot_available()
    }
}

#[test]
fn slot_sharing_puts_one_subtask_of_each_vertex_in_a_shared_slot() {
    let mut cluster = TestCluster::new(2, 2);
    // source (vertex 0) and sink (vertex 1), parallelism 4, one sharing group: 4 slots.
    let sources: Vec<_> = (0..4).map(|i| cluster.assigned(request(0, i))).collect();
    let sinks: Vec<_> = (0..4).map(|i| cluster.assigned(request(1, i))).collect();
    let source_slots: BTreeSet<_> = sources.iter().map(|a| a.allocation_id).collect();
    let sink_slots: BTreeSet<_> = sinks.iter().map(|a| a.allocation_id).collect();
    assert_eq!(
        source_slots.len(),
        4,
        "two subtasks of one vertex never share a slot"
    );
    assert_eq!(source_slots, sink_slots, "sinks join the sources' slots");
    assert_eq!(cluster.scheduler.free_slots(), 0);
    // A fifth source subtask has no slot.
    assert_eq!(cluster.place(request(0, 4)), Placement::Queued);
}

#[test]
fn different_sharing_groups_never_share() {
    let mut cluster = TestCluster::new(1, 4);
    let a = cluster.assigned(request(0, 0));
    let mut other = request(1, 0);
    other.sharing_group = "isolated".into();
    let b = cluster.assigned(other);
    assert_ne!(a.allocation_id, b.allocation_id);
    assert_eq!(cluster.scheduler.free_slots(), 2);
}

#[test]
fn new_slots_spread_over_task_managers() {
    let mut cluster = TestCluster::new(3, 2);
    let placed: Vec<ResourceId> = (0..3)
        .map(|i| cluster.assigned(request(0, i)).resource_id)
        .collect();
    let distinct: BTreeSet<_> = placed.iter().collect();
    assert_eq!(distinct.len(), 3, "{placed:?}");
}

#[test]
fn co_location_locks_subtask_i_of_every_vertex_to_one_slot() {
    let mut cluster = TestCluster::new(4, 4);
    let colocated = |vertex, subtask, group: &str| SlotRequest {
        co_location_group: Some("iteration".into()),
        sharing_group: group.into(),
        ..request(vertex, subtask)
    };
    let heads: Vec<_> = (0..3)
        .map(|i| cluster.assigned(colocated(0, i, "default")))
        .collect();
    // Filler tasks of another vertex in between change nothing.
    for i in 0..3 {
        cluster.assigned(request(2, i));
    }
    for i in 0..3u32 {
        let tail = cluster.assigned(colocated(1, i, "default"));
        assert_eq!(tail.allocation_id, heads[i as usize].allocation_id);
    }
    // After the slot is gone (released), the lock keeps the TaskManager.
    let location = heads[0].resource_id.clone();
    cluster.scheduler.release(&task(0, 0));
    cluster.scheduler.release(&task(1, 0));
    cluster.scheduler.release(&task(2, 0));
    let again = cluster.assigned(colocated(0, 0, "default"));
    assert_eq!(again.resource_id, location);
}

#[test]
fn each_locality_outcome() {
    let mut cluster = TestCluster::new(3, 1);
    let mut local = request(0, 0);
    local.preferred = vec![tm(2)];
    let a = cluster.assigned(local);
    assert_eq!((a.resource_id, a.locality), (tm(2), Locality::Local));

    let mut unconstrained = request(0, 1);
    unconstrained.preferred = Vec::new();
    assert_eq!(
        cluster.assigned(unconstrained).locality,
        Locality::Unconstrained
    );

    // tm-2 is full: a request preferring it lands elsewhere.
    let mut non_local = request(0, 2);
    non_local.preferred = vec![tm(2)];
    let c = cluster.assigned(non_local);
    assert_ne!(c.resource_id, tm(2));
    assert_eq!(c.locality, Locality::NonLocal);
}

#[test]
fn a_shared_slot_on_a_preferred_task_manager_is_local() {
    let mut cluster = TestCluster::new(4, 2);
    let sources: Vec<_> = (0..4).map(|i| cluster.assigned(request(0, i))).collect();
    for (i, source) in sources.iter().enumerate() {
        let mut forward = request(1, i as u32);
        forward.preferred = vec![source.resource_id.clone()];
        let sink = cluster.assigned(forward);
        assert_eq!(sink.locality, Locality::Local);
        assert_eq!(sink.resource_id, source.resource_id);
    }
}

#[test]
fn too_many_preferred_locations_count_as_none() {
    let mut cluster = TestCluster::new(10, 1);
    let mut spread = request(0, 0);
    spread.preferred = (0..9).map(tm).collect();
    assert_eq!(cluster.assigned(spread).locality, Locality::Unconstrained);
}

#[test]
fn queued_requests_are_served_when_a_slot_frees_or_a_task_manager_registers() {
    let mut cluster = TestCluster::new(1, 1);
    cluster.assigned(request(0, 0));
    assert_eq!(cluster.place(request(0, 1)), Placement::Queued);
    assert_eq!(cluster.place(request(0, 2)), Placement::Queued);
    assert_eq!(cluster.scheduler.queued(), 2);
    // A slot frees: the oldest request gets it.
    assert!(cluster.scheduler.release(&task(0, 0)).is_some());
    let served = cluster.scheduler.new_slot_available();
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].0, task(0, 1));
    // A TaskManager registers: the rest is served.
    let served = cluster.add_worker(7, 2);
    assert_eq!(served.len(), 1);
    assert_eq!(
        (served[0].0, served[0].1.resource_id.clone()),
        (task(0, 2), tm(7))
    );
    assert_eq!(cluster.scheduler.queued(), 0);
}

#[test]
fn a_request_still_queued_after_the_timeout_fails_with_no_resource_available() {
    let mut cluster = TestCluster::new(1, 1);
    cluster.assigned(request(0, 0));
    let late = cluster.start + Duration::from_secs(100);
    cluster.scheduler.request(request(0, 1), cluster.start);
    cluster.scheduler.request(request(0, 2), late);
    // Counted from each request, not from cluster start.
    let expired = cluster.scheduler.expire(
        cluster.start + Duration::from_secs(300),
        Duration::from_secs(300),
    );
    assert_eq!(expired.len(), 1);
    let (failed, error) = &expired[0];
    assert_eq!(failed.task, task(0, 1));
    let text = error.to_string();
    assert!(text.contains("NoResourceAvailable"), "{text}");
    assert!(text.contains("subtask 1 of vertex 0"), "{text}");
    assert!(
        text.contains("1 TaskManagers with 1 slots, 0 free"),
        "{text}"
    );
    assert_eq!(cluster.scheduler.queued(), 1);
}

#[test]
fn losing_a_worker_returns_its_tasks_and_frees_nothing_else() {
    let mut cluster = TestCluster::new(2, 2);
    for i in 0..4 {
        cluster.assigned(request(0, i));
        cluster.assigned(request(1, i));
    }
    let victim = cluster.scheduler.assignment(&task(0, 0)).unwrap().1.clone();
    let lost = cluster.scheduler.remove_task_manager(&victim);
    assert_eq!(lost.len(), 4, "two shared slots, two tasks each");
    assert!(
        lost.iter()
            .all(|t| cluster.scheduler.assignment(t).is_none())
    );
    assert_eq!(cluster.scheduler.total_slots(), 2);
    assert_eq!(cluster.scheduler.free_slots(), 0);
    assert!(cluster.lose_worker(99).is_empty(), "unknown worker");
}

#[test]
fn releasing_every_task_frees_every_slot() {
    let mut cluster = TestCluster::new(3, 3);
    for vertex in 0..3 {
        for subtask in 0..9 {
            cluster.assigned(request(vertex, subtask));
        }
    }
    assert_eq!(cluster.scheduler.free_slots(), 0);
    for vertex in 0..3 {
        for subtask in 0..9 {
            cluster.scheduler.release(&task(vertex, subtask));
        }
    }
    assert_eq!(cluster.scheduler.free_slots(), 9);
    assert!(
        cluster.scheduler.release(&task(0, 0)).is_none(),
        "twice is harmless"
    );
}

#[test]
fn queued_demand_counts_shared_slots_not_tasks() {
    let mut cluster = TestCluster::new(1, 1);
    cluster.assigned(request(0, 0));
    for i in 1..5 {
        cluster.place(request(0, i));
        cluster.place(request(1, i));
    }
    // The first sink joins source 0's slot; 4 sources and 3 sinks wait for 4 shared slots.
    assert_eq!(cluster.scheduler.queued(), 7);
    assert_eq!(cluster.scheduler.queued_slot_demand(), 4);
    cluster.add_worker(1, 2);
    assert_eq!(cluster.scheduler.queued_slot_demand(), 2);
}

#[test]
fn forgetting_a_job_drops_its_queue() {
    let mut cluster = TestCluster::new(1, 1);
    cluster.assigned(request(0, 0));
    cluster.place(request(0, 1));
    assert_eq!(cluster.scheduler.forget_job(JOB), [task(0, 1)]);
    assert_eq!(cluster.scheduler.queued(), 0);
}

#[test]
fn ten_thousand_shared_subtasks_place_without_quadratic_cost() {
    // 100 TaskManagers × 100 slots, source → sink all-to-all, P = 10,000.
    let mut cluster = TestCluster::new(100, 100);
    for vertex in 0..2 {
        for subtask in 0..10_000 {
            cluster.assigned(request(vertex, subtask));
        }
    }
    assert_eq!(cluster.scheduler.free_slots(), 0);
}

#[test]
fn a_new_local_slot_beats_an_existing_shared_slot_elsewhere() {
    let mut cluster = TestCluster::new(2, 2);
    // A source subtask sits alone in a shared slot on one TaskManager...
    let source = cluster.assigned(request(0, 0));
    let other = if source.resource_id == tm(0) {
        tm(1)
    } else {
        tm(0)
    };
    // ...and a consumer prefers the other one: Flink takes a new slot there (LOCAL) over
    // joining the existing shared slot (NON_LOCAL).
    let mut consumer = request(1, 0);
    consumer.preferred = vec![other.clone()];
    let placed = cluster.assigned(consumer);
    assert_eq!(
        (placed.resource_id, placed.locality),
        (other, Locality::Local)
    );
    assert_ne!(placed.allocation_id, source.allocation_id);
}

#[test]
fn shared_slots_list_each_task_managers_slots_with_their_tasks_and_match_the_counts() {
    let mut cluster = TestCluster::new(2, 2);
    let sources: Vec<_> = (0..3).map(|i| cluster.assigned(request(0, i))).collect();
    let sink = cluster.assigned(request(1, 0));
    let slots = cluster.scheduler.shared_slots();
    for n in 0..2 {
        let listed = slots.get(&tm(n)).map_or(0, Vec::len) as u32;
        assert_eq!(listed, cluster.scheduler.used_slots(&tm(n)), "tm-{n}");
    }
    let (_, tasks) = slots[&sink.resource_id]
        .iter()
        .find(|(id, _)| *id == sink.allocation_id)
        .expect("the sink's slot is listed on its TaskManager");
    let joined = sources
        .iter()
        .position(|s| s.allocation_id == sink.allocation_id)
        .expect("the sink joined a source's slot") as u32;
    assert_eq!(*tasks, [task(0, joined), task(1, 0)]);
    // A slot whose last task is released is no longer listed.
    let alone = (0..3).find(|i| *i != joined).unwrap();
    assert_eq!(
        cluster.scheduler.release(&task(0, alone)),
        Some(sources[alone as usize].allocation_id)
    );
    let listed: usize = cluster
        .scheduler
        .shared_slots()
        .values()
        .map(Vec::len)
        .sum();
    assert_eq!(listed, 2);
    assert_eq!(cluster.scheduler.free_slots(), 2);
}
