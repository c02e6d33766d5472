//! The scheduler on a virtual cluster (Ballista's harness shape): `TestCluster::new(tms, slots)`,
//! requests by vertex and subtask, losing workers, and the clock.

use std::time::Duration;

use super::*;

const JOB: JobId = JobId::from_u128(1);

struct TestCluster {
    scheduler: Scheduler,
    start: Instant,
    /// The region number of the next one-task bulk.
    next_region: usize,
}

/// What became of one task's request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placement {
    Assigned(SlotAssignment),
    Queued,
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
        preferred_tasks: Vec::new(),
    }
}

impl TestCluster {
    fn new(task_managers: usize, slots: u32) -> Self {
        Self::ordered(
            task_managers,
            slots,
            crate::config::RegionOrderKind::default(),
        )
    }

    /// The same with the queue served in `order`.
    fn ordered(task_managers: usize, slots: u32, order: crate::config::RegionOrderKind) -> Self {
        let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1)).with_strategies(
            crate::config::SchedulerConfig {
                region_order: order,
                ..Default::default()
            },
        );
        for n in 0..task_managers {
            scheduler.add_task_manager(tm(n), slots);
        }
        Self {
            scheduler,
            start: Instant::now(),
            next_region: 0,
        }
    }

    /// Queues `requests` as one bulk (a region of its own).
    fn bulk(&mut self, requests: Vec<SlotRequest>) -> BulkId {
        let id = BulkId {
            job: requests[0].task.job,
            region: self.next_region,
        };
        self.next_region += 1;
        self.scheduler.request_bulk(id, requests, self.start);
        id
    }

    /// Every task placed by serving the queue.
    fn serve(&mut self) -> Vec<(TaskRef, SlotAssignment)> {
        let (placed, more) = self.scheduler.serve(usize::MAX);
        assert!(!more, "an unlimited budget serves all that fits");
        placed.into_iter().flat_map(|(_, tasks)| tasks).collect()
    }

    /// One task as a bulk of its own, then the queue served.
    fn place(&mut self, request: SlotRequest) -> Placement {
        let task = request.task;
        self.bulk(vec![request]);
        let served = self.serve();
        match served.into_iter().find(|(t, _)| *t == task) {
            Some((_, assignment)) => Placement::Assigned(assignment),
            None => Placement::Queued,
        }
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
        self.serve()
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

/// Consumers of an all-to-all whose producers ran on every TaskManager have equal claims on
/// each: they spread by free slots, as their producers did, instead of all taking the first
/// producer's TaskManager (a blocking job's consumers then read half their input locally and
/// the other half over two connections, not all of it over one). A TaskManager holding more
/// of a task's inputs still comes first.
#[test]
fn equally_preferred_task_managers_are_filled_by_free_slots_and_more_inputs_win() {
    let mut cluster = TestCluster::new(2, 2);
    let consumers: Vec<ResourceId> = (0..2)
        .map(|i| {
            let mut consumer = request(1, i);
            consumer.preferred = vec![tm(0), tm(1)];
            let placed = cluster.assigned(consumer);
            assert_eq!(placed.locality, Locality::Local);
            placed.resource_id
        })
        .collect();
    assert_eq!(consumers, [tm(0), tm(1)], "one on each");

    // tm-1 holds two of the three producers: it wins though tm-0 listed first has as many
    // free slots.
    let mut cluster = TestCluster::new(2, 2);
    let mut weighted = request(1, 0);
    weighted.preferred = vec![tm(0), tm(1), tm(1)];
    assert_eq!(cluster.assigned(weighted).resource_id, tm(1));
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
    let served = cluster.serve();
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
fn a_bulk_the_cluster_cannot_serve_fails_after_the_timeout_counted_from_when_it_could_not() {
    let mut cluster = TestCluster::new(1, 1);
    let timeout = Duration::from_secs(300);
    // Waiting for a busy slot: never expires.
    cluster.assigned(request(0, 0));
    cluster.bulk(vec![request(0, 1)]);
    // Two slots at once on a one-slot cluster: cannot be served even with every slot free.
    let mut wide = vec![request(1, 0)];
    wide.push(SlotRequest {
        sharing_group: "other".into(),
        ..request(2, 0)
    });
    let wide_bulk = cluster.bulk(wide);
    assert_eq!(
        cluster
            .scheduler
            .expire(cluster.start + timeout / 2, timeout, 4),
        []
    );
    // A second TaskManager registers for a while: the wide bulk could be served then (once
    // the slots free), so its clock starts again when that TaskManager is lost.
    cluster.scheduler.add_task_manager(tm(1), 1);
    let lost_at = cluster.start + timeout;
    assert_eq!(cluster.scheduler.expire(lost_at, timeout, 4), []);
    cluster.scheduler.remove_task_manager(&tm(1));
    assert_eq!(cluster.scheduler.expire(lost_at, timeout, 4), []);
    assert_eq!(
        cluster.scheduler.expire(lost_at + timeout / 2, timeout, 4),
        []
    );
    let expired = cluster.scheduler.expire(lost_at + timeout, timeout, 4);
    assert_eq!(expired.len(), 1);
    let (bulk, tasks, error) = &expired[0];
    assert_eq!(
        (*bulk, tasks.clone()),
        (wide_bulk, vec![task(1, 0), task(2, 0)])
    );
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "NoResourceAvailable: region 2 of job {JOB} needs 2 slots at once for its 2 subtasks"
        )),
        "{text}"
    );
    assert!(
        text.ends_with(
            "the cluster has 1 TaskManagers with 1 slots, and the pool at its maximum offers 4 \
             (resourcemanager.max-pool-size)"
        ),
        "{text}"
    );
    assert_eq!(cluster.scheduler.queued(), 1, "the narrow bulk still waits");
    assert_eq!(
        cluster.scheduler.expire(lost_at + timeout * 9, timeout, 4),
        []
    );
}

#[test]
fn a_bulk_gets_every_slot_or_none_and_the_queue_is_first_in_first_out() {
    // Two regions of 3 slots each on 4 slots: one runs, the other holds nothing (no deadlock).
    let mut cluster = TestCluster::ordered(2, 2, crate::config::RegionOrderKind::Fifo);
    let first = cluster.bulk((0..3).map(|i| request(0, i)).collect());
    let second = cluster.bulk(
        (0..3)
            .map(|i| request(1, i))
            .map(|r| SlotRequest {
                sharing_group: "other".into(),
                ..r
            })
            .collect(),
    );
    let (placed, _) = cluster.scheduler.serve(usize::MAX);
    assert_eq!(placed.len(), 1);
    assert_eq!((placed[0].0, placed[0].1.len()), (first, 3));
    assert_eq!(
        cluster.scheduler.free_slots(),
        1,
        "the second bulk holds nothing"
    );
    // A one-slot bulk behind it waits too: first in, first out.
    cluster.bulk(vec![SlotRequest {
        sharing_group: "third".into(),
        ..request(2, 0)
    }]);
    assert_eq!(cluster.serve(), []);
    cluster.scheduler.release(&task(0, 0));
    assert_eq!(cluster.serve(), [], "two free slots are not three");
    cluster.scheduler.release(&task(0, 1));
    let served = cluster.serve();
    assert_eq!(
        served.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        [task(1, 0), task(1, 1), task(1, 2)]
    );
    cluster.scheduler.release(&task(0, 2));
    assert_eq!(cluster.serve().len(), 1, "then the one-slot bulk");
    assert!(!cluster.scheduler.cancel_bulk(&second), "served already");
}

#[test]
fn a_consumer_in_the_same_bulk_prefers_its_producers_slot() {
    let mut cluster = TestCluster::new(4, 1);
    // source → sink forward in separate groups: the sink prefers where its source lands.
    let source = request(0, 0);
    let sink = SlotRequest {
        sharing_group: "sinks".into(),
        preferred_tasks: vec![task(0, 0)],
        ..request(1, 0)
    };
    cluster.bulk(vec![source, sink]);
    let served = cluster.serve();
    assert_eq!(served.len(), 2);
    assert_eq!(
        served[1].1.locality,
        Locality::NonLocal,
        "one slot per TaskManager"
    );
    let mut cluster = TestCluster::new(2, 2);
    let sink = SlotRequest {
        sharing_group: "sinks".into(),
        preferred_tasks: vec![task(0, 0)],
        ..request(1, 0)
    };
    cluster.bulk(vec![request(0, 0), sink]);
    let served = cluster.serve();
    assert_eq!(served[1].1.locality, Locality::Local);
    assert_eq!(served[0].1.resource_id, served[1].1.resource_id);
}

#[test]
fn a_bulk_that_fits_only_without_locality_is_placed_without_it() {
    // tm-0 has one free slot, tm-1 one slot holding a shared slot of group "default" without
    // vertex 1. The bulk: vertex 1 preferring tm-0 (a new slot there), and vertex 2 in another
    // group (needs a new slot). Locality would spend tm-0's slot on vertex 1 and leave vertex 2
    // without one; placed without preferences, vertex 1 joins the shared slot on tm-1.
    let mut cluster = TestCluster::new(0, 0);
    cluster.scheduler.add_task_manager(tm(1), 1);
    cluster.assigned(request(0, 0));
    cluster.scheduler.add_task_manager(tm(0), 1);
    let consumer = SlotRequest {
        preferred: vec![tm(0)],
        ..request(1, 0)
    };
    let isolated = SlotRequest {
        sharing_group: "isolated".into(),
        ..request(2, 0)
    };
    cluster.bulk(vec![consumer, isolated]);
    let served = cluster.serve();
    assert_eq!(served.len(), 2, "{served:?}");
    assert_eq!(served[0].1.resource_id, tm(1));
    assert_eq!(served[1].1.resource_id, tm(0));
    assert_eq!(cluster.scheduler.free_slots(), 0);
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
    // Four regions of a source and a sink sharing one slot each wait for 4 slots.
    for i in 1..5 {
        cluster.bulk(vec![request(0, i), request(1, i)]);
    }
    assert_eq!(cluster.serve(), []);
    assert_eq!(cluster.scheduler.queued(), 8);
    assert_eq!(cluster.scheduler.queued_bulks(), 4);
    assert_eq!(cluster.scheduler.slots_wanted(), 1 + 4, "held and queued");
    assert_eq!(cluster.add_worker(1, 2).len(), 4, "two regions placed");
    assert_eq!(cluster.scheduler.slots_wanted(), 3 + 2);
}

/// Issue 34: one job cannot make the pool grow past the per-job cap, whatever it queues; what
/// it holds (the operator sized the pool for it) it keeps; other jobs count beside it. The
/// running total equals the sum over jobs at every step, through placing, losing a worker,
/// releasing and forgetting.
#[test]
fn each_jobs_demand_counts_at_most_the_per_job_cap_beyond_what_it_holds() {
    let other = JobId::from_u128(2);
    let of = |job: JobId, vertex: usize, subtask: u32| SlotRequest {
        task: TaskRef {
            job,
            vertex,
            subtask,
        },
        ..request(vertex, subtask)
    };
    let mut cluster = TestCluster::new(1, 2);
    cluster.scheduler = Scheduler::new(NodeRng::seed_from_u64(1))
        .with_job_cap(3)
        .with_strategies(crate::config::SchedulerConfig {
            region_order: crate::config::RegionOrderKind::Fifo,
            ..Default::default()
        });
    cluster.scheduler.add_task_manager(tm(0), 2);
    let check = |scheduler: &Scheduler| {
        let (sum, used) = scheduler.demand.recomputed();
        assert_eq!(scheduler.slots_wanted(), sum, "the running total drifted");
        assert_eq!(used, scheduler.total_slots() - scheduler.free_slots());
    };
    // A job of parallelism 100 (one pipelined region: 100 slots at once) asks for 3.
    cluster.bulk((0..100).map(|i| of(JOB, 0, i)).collect());
    assert_eq!(cluster.serve(), []);
    assert_eq!(cluster.scheduler.slots_wanted(), 3);
    check(&cluster.scheduler);
    // Another job's demand counts beside it, capped alike.
    cluster.bulk(vec![of(other, 0, 0)]);
    assert_eq!(cluster.serve(), [], "behind the head of the queue");
    assert_eq!(cluster.scheduler.slots_wanted(), 3 + 1);
    check(&cluster.scheduler);
    cluster.scheduler.forget_job(JOB);
    let placed = cluster.serve();
    assert_eq!(placed.len(), 1, "the other job's, once the head went");
    assert_eq!(cluster.scheduler.slots_wanted(), 1);
    // A job holding more than the cap (the pool was sized for it) keeps it, and its queued
    // regions ask for nothing beyond.
    for n in 1..3 {
        cluster.add_worker(n, 2);
    }
    for i in 0..5 {
        cluster.bulk(vec![of(JOB, 1, i)]);
    }
    assert_eq!(cluster.serve().len(), 5);
    assert_eq!(cluster.scheduler.slots_wanted(), 5 + 1);
    cluster.bulk(vec![of(JOB, 1, 5), of(JOB, 1, 6)]);
    cluster.bulk(vec![of(JOB, 1, 7)]);
    assert_eq!(cluster.serve().len(), 0, "no free slot");
    assert_eq!(
        cluster.scheduler.slots_wanted(),
        5 + 1,
        "nothing beyond what it holds"
    );
    check(&cluster.scheduler);
    // Losing a worker drops what it held; releasing and forgetting drop the rest.
    cluster.lose_worker(1);
    check(&cluster.scheduler);
    cluster.scheduler.forget_job(JOB);
    check(&cluster.scheduler);
    for (task, _) in placed {
        cluster.scheduler.release(&task);
    }
    check(&cluster.scheduler);
    assert!(
        cluster.scheduler.slots_wanted() <= 5,
        "{}",
        cluster.scheduler.slots_wanted()
    );
}

#[test]
fn forgetting_a_job_drops_its_queue() {
    let mut cluster = TestCluster::new(1, 1);
    cluster.assigned(request(0, 0));
    cluster.place(request(0, 1));
    assert_eq!(cluster.scheduler.forget_job(JOB), [task(0, 1)]);
    assert_eq!(cluster.scheduler.queued(), 0);
    assert_eq!(cluster.scheduler.slots_wanted(), 1, "only the slot held");
}

/// A job's sharing groups outlive `forget_job` only while their slots are held (tasks still
/// stopping), then go: a JobManager running job after job keeps no table entry per ended job,
/// and a later job with the same id and group name gets a group of its own.
#[test]
fn a_forgotten_jobs_groups_go_with_their_last_slot() {
    let mut cluster = TestCluster::new(1, 2);
    cluster.assigned(request(0, 0));
    cluster.assigned(request(0, 1));
    assert_eq!(cluster.scheduler.groups.len(), 1);
    cluster.scheduler.forget_job(JOB);
    assert_eq!(cluster.scheduler.groups.len(), 1, "two slots still held");
    cluster.scheduler.release(&task(0, 0));
    assert_eq!(cluster.scheduler.groups.len(), 1, "one slot still held");
    cluster.scheduler.release(&task(0, 1));
    assert_eq!(cluster.scheduler.groups.len(), 0);
    assert_eq!(cluster.scheduler.free_slots(), 2);
    // Asked again, the job starts afresh.
    cluster.assigned(request(0, 0));
    assert_eq!(cluster.scheduler.groups.len(), 1);
}

/// Q = 10,000 one-task regions queued behind 8 busy slots, then every slot freed and served
/// one at a time: each freed slot looks at the head of the queue only, O(1) entries (each
/// lookup O(log Q) in the tree), and a placement at one TaskManager entry. A queue served by a
/// walk (the scheduler before bulks) visits Q entries per freed slot and fails this.
#[test]
fn serving_a_freed_slot_visits_the_head_of_the_queue_only() {
    const Q: u32 = 10_000;
    let mut cluster = TestCluster::new(2, 4);
    for i in 0..Q {
        cluster.bulk(vec![request(0, i)]);
    }
    assert_eq!(cluster.serve().len(), 8);
    let before = cluster.scheduler.counters();
    let mut running: Vec<TaskRef> = (0..8).map(|i| task(0, i)).collect();
    let mut served = 8;
    while let Some(done) = running.pop() {
        cluster.scheduler.release(&done);
        for (placed, _) in cluster.serve() {
            running.push(placed);
            served += 1;
        }
    }
    assert_eq!(served, Q);
    let after = cluster.scheduler.counters();
    let per_slot = |total: u64| total as f64 / f64::from(Q);
    let queue = per_slot(after.queue_visits - before.queue_visits);
    let task_managers = per_slot(after.task_manager_visits - before.task_manager_visits);
    assert!(queue <= 2.0, "{queue} queue entries visited per freed slot");
    assert!(
        task_managers <= 1.0,
        "{task_managers} TaskManagers visited per placement"
    );
}

/// Losing one of 100 TaskManagers, with 10,000 tasks placed, touches only its own slots.
#[test]
fn losing_a_task_manager_touches_only_its_own_slots() {
    let mut cluster = TestCluster::new(100, 100);
    for i in 0..10_000 {
        cluster.bulk(vec![request(0, i)]);
    }
    assert_eq!(cluster.serve().len(), 10_000);
    let before = cluster.scheduler.counters();
    assert_eq!(cluster.lose_worker(7).len(), 100);
    let visits = cluster.scheduler.counters().slot_visits - before.slot_visits;
    assert!(
        visits <= 100,
        "{visits} slots visited for a TaskManager of 100"
    );
    assert_eq!(cluster.scheduler.total_slots(), 9_900);
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

/// Flink's scheduler benchmark shape, P = 10,000 source → sink pairs sharing slots on 100
/// TaskManagers × 100 slots: each placement opens a slot at one TaskManager entry (the index by
/// free slots) and the sink joins its source's slot through the per-vertex index, so the work
/// counted grows linearly with P. A placement that scanned every TaskManager (as before the
/// index) would count 100 per slot and fail this.
#[test]
fn ten_thousand_shared_subtasks_place_with_linear_counted_work() {
    let mut cluster = TestCluster::new(100, 100);
    for i in 0..10_000 {
        let sink = SlotRequest {
            preferred_tasks: vec![task(0, i)],
            ..request(1, i)
        };
        cluster.bulk(vec![request(0, i), sink]);
    }
    let placed = cluster.serve();
    assert_eq!(placed.len(), 20_000);
    assert_eq!(cluster.scheduler.free_slots(), 0);
    for pair in placed.chunks(2) {
        assert_eq!(pair[0].1.allocation_id, pair[1].1.allocation_id, "shared");
    }
    let counted = cluster.scheduler.counters();
    assert!(
        counted.task_manager_visits <= 3 * 10_000,
        "{} TaskManager entries visited for 10,000 slots",
        counted.task_manager_visits
    );
    assert!(
        counted.slot_visits <= 10_000,
        "{} shared slots visited",
        counted.slot_visits
    );
}

#[test]
fn the_configured_slot_selection_spreads_tasks_out_or_packs_them() {
    let placements = |kind: crate::config::SlotSelectionKind| {
        let mut cluster = TestCluster::new(3, 2);
        cluster.scheduler = Scheduler::new(NodeRng::seed_from_u64(1)).with_strategies(
            crate::config::SchedulerConfig {
                slot_selection: kind,
                ..Default::default()
            },
        );
        for n in 0..3 {
            cluster.scheduler.add_task_manager(tm(n), 2);
        }
        (0..4)
            .map(|i| cluster.assigned(request(0, i)).resource_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        placements(crate::config::SlotSelectionKind::SpreadOut),
        [tm(0), tm(1), tm(2), tm(0)],
        "the most free first, ties to the earliest registered"
    );
    assert_eq!(
        placements(crate::config::SlotSelectionKind::Pack),
        [tm(0), tm(0), tm(1), tm(1)],
        "fill one TaskManager, then the next"
    );
}

#[test]
fn with_backfill_a_bulk_that_fits_overtakes_a_head_that_does_not_and_fifo_waits() {
    let serve_behind_a_large_head = |order: crate::config::RegionOrderKind| {
        let mut cluster = TestCluster::ordered(0, 0, order);
        cluster.scheduler.add_task_manager(tm(0), 2);
        // The head needs three slots of two; a one-slot bulk of another job waits behind it.
        cluster.bulk((0..3).map(|i| request(0, i)).collect());
        let mut small = request(0, 0);
        small.task.job = JobId::from_u128(2);
        cluster.bulk(vec![small]);
        let placed = cluster.serve();
        let added = cluster.add_worker(1, 2);
        (placed, added)
    };
    let (placed, added) = serve_behind_a_large_head(crate::config::RegionOrderKind::Fifo);
    assert!(
        placed.is_empty(),
        "fifo: the small bulk waits behind the head"
    );
    assert_eq!(
        added.len(),
        4,
        "both placed once slots are added: {added:?}"
    );
    let (placed, added) = serve_behind_a_large_head(crate::config::RegionOrderKind::Backfill);
    assert_eq!(
        placed.len(),
        1,
        "backfill: the small bulk takes an idle slot"
    );
    assert_eq!(placed[0].0.job, JobId::from_u128(2));
    assert_eq!(added.len(), 3, "the head still runs once slots free");
}

/// Backfill's walk behind a head that does not fit is bounded: Q = 10,000 eight-slot regions
/// queued while one of 8 slots is busy fit nowhere, and serving looks at the head and at most
/// [`Backfill::LOOKAHEAD`](super::strategy::Backfill::LOOKAHEAD) bulks behind it, not Q. (With
/// no slot free it looks at the head only: `serving_a_freed_slot_visits_the_head_of_the_queue_only`.)
#[test]
fn backfill_looks_a_bounded_way_behind_a_head_that_does_not_fit() {
    const Q: usize = 10_000;
    let mut cluster = TestCluster::new(2, 4);
    cluster.assigned(request(0, 0));
    for vertex in 1..=Q {
        cluster.bulk(
            (0..8)
                .map(|subtask| SlotRequest {
                    sharing_group: format!("group-{vertex}").into(),
                    ..request(vertex, subtask)
                })
                .collect(),
        );
    }
    let before = cluster.scheduler.counters().queue_visits;
    assert_eq!(cluster.serve(), []);
    let visits = cluster.scheduler.counters().queue_visits - before;
    // The head, the lookahead and the bulk that ends the walk; a literal, so a broken
    // lookahead cannot raise the bound with it.
    assert!(visits <= 66, "{visits} queue entries visited");
    // Once the busy slot frees, the head is placed.
    cluster.scheduler.release(&task(0, 0));
    assert_eq!(cluster.serve().len(), 8);
}

/// The operator set `names`.
fn operators(names: &[&str]) -> OperatorSet {
    std::sync::Arc::new(names.iter().map(|n| (*n).to_owned()).collect())
}

#[test]
fn a_job_gets_slots_only_on_task_managers_that_run_its_operators() {
    // tm-0 and tm-2 run the program, tm-1 (another build) only the built-ins; all have free
    // slots, and spread-out would pick tm-1 first (the most free).
    let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1));
    let program = operators(&["map", "program:p@aaaa"]);
    scheduler.add_task_manager_running(tm(0), 2, Some(program.clone()));
    scheduler.add_task_manager_running(tm(1), 8, Some(operators(&["map"])));
    scheduler.add_task_manager_running(tm(2), 2, Some(program));
    scheduler.require(JOB, operators(&["program:p@aaaa"]));
    let mut cluster = TestCluster {
        scheduler,
        start: Instant::now(),
        next_region: 0,
    };
    // Four tasks fit on tm-0 and tm-2; a fifth waits although tm-1 has 8 free slots.
    for subtask in 0..5 {
        let _ = cluster.place(request(0, subtask));
    }
    let placed: Vec<ResourceId> = (0..5)
        .filter_map(|s| cluster.scheduler.assignment(&task(0, s)))
        .map(|(_, tm)| tm.clone())
        .collect();
    assert_eq!(placed.len(), 4, "{placed:?}");
    assert!(placed.iter().all(|t| *t != tm(1)), "{placed:?}");
    assert_eq!(cluster.scheduler.queued(), 1);
    // A job of built-ins only runs anywhere, tm-1 first (the most free).
    let other = JobId::from_u128(2);
    cluster.scheduler.require(other, operators(&["map"]));
    let mut builtin = request(0, 0);
    builtin.task.job = other;
    // The waiting bulk of JOB heads the queue (FIFO): free a slot of JOB's first.
    assert!(cluster.scheduler.release(&task(0, 0)).is_some());
    let placed = cluster.serve();
    assert!(
        placed.iter().all(|(_, a)| a.resource_id != tm(1)),
        "{placed:?}"
    );
    assert!(matches!(cluster.place(builtin), Placement::Assigned(a) if a.resource_id == tm(1)));
}

#[test]
fn preferred_task_managers_that_lack_the_operators_are_passed_over() {
    let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1));
    scheduler.add_task_manager_running(tm(0), 4, Some(operators(&["map"])));
    scheduler.add_task_manager_running(tm(1), 4, Some(operators(&["map", "program:p@b"])));
    scheduler.require(JOB, operators(&["program:p@b"]));
    let mut cluster = TestCluster {
        scheduler,
        start: Instant::now(),
        next_region: 0,
    };
    let mut wants_tm0 = request(0, 0);
    wants_tm0.preferred = vec![tm(0)];
    assert!(matches!(cluster.place(wants_tm0), Placement::Assigned(a) if a.resource_id == tm(1)));
}

#[test]
fn a_bulk_more_than_the_capable_task_managers_can_hold_expires_with_their_slots_named() {
    // 12 slots registered, 4 of them on TaskManagers that run the program: a region of five
    // program subtasks can never be placed, although the cluster has slots enough.
    let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1));
    let program = operators(&["map", "program:p@aaaa"]);
    scheduler.add_task_manager_running(tm(0), 2, Some(program.clone()));
    scheduler.add_task_manager_running(tm(1), 8, Some(operators(&["map"])));
    scheduler.add_task_manager_running(tm(2), 2, Some(program.clone()));
    scheduler.require(JOB, operators(&["program:p@aaaa"]));
    let mut cluster = TestCluster {
        scheduler,
        start: Instant::now(),
        next_region: 0,
    };
    let wide = cluster.bulk((0..5).map(|s| request(0, s)).collect());
    assert_eq!(cluster.serve(), []);
    let timeout = Duration::from_secs(300);
    let start = cluster.start;
    assert_eq!(cluster.scheduler.expire(start, timeout, 12), []);
    // A third program TaskManager for a while: the bulk fits then, so its clock starts again.
    cluster
        .scheduler
        .add_task_manager_running(tm(3), 2, Some(program));
    assert_eq!(cluster.scheduler.expire(start + timeout, timeout, 12), []);
    cluster.scheduler.remove_task_manager(&tm(3));
    let lost_at = start + timeout * 2;
    assert_eq!(cluster.scheduler.expire(lost_at, timeout, 12), []);
    assert_eq!(
        cluster.scheduler.expire(lost_at + timeout / 2, timeout, 12),
        []
    );
    let expired = cluster.scheduler.expire(lost_at + timeout, timeout, 12);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0].0, wide);
    let text = expired[0].2.to_string();
    assert!(
        text.contains("with 12 slots of which 4 are on TaskManagers that run the job's operators"),
        "{text}"
    );
    assert_eq!(cluster.scheduler.queued(), 0);
}
