use super::*;

fn id(n: u32) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

#[test]
fn missing_counts_every_state() {
    let mut pool = WorkerPool::new(5, 10);
    assert_eq!(pool.missing(), 5);
    pool.requested(id(1));
    pool.requested(id(2));
    pool.requested(id(3));
    assert!(pool.driver_started(&id(2)));
    assert_eq!(
        pool.registered(&id(3), false),
        RegistrationOutcome::Promoted(WorkerState::PendingRequest)
    );
    assert_eq!(
        (
            pool.pending_requests(),
            pool.pending_registration(),
            pool.started_count()
        ),
        (1, 1, 1)
    );
    assert_eq!(pool.missing(), 2);
}

#[test]
fn registration_before_start_report_is_promoted_and_the_late_report_ignored() {
    let mut pool = WorkerPool::new(1, 10);
    pool.requested(id(1));
    assert_eq!(
        pool.registered(&id(1), false),
        RegistrationOutcome::Promoted(WorkerState::PendingRequest)
    );
    assert!(!pool.driver_started(&id(1)));
    assert_eq!(pool.state(&id(1)), Some(WorkerState::Started));
    assert_eq!(pool.missing(), 0);
}

#[test]
fn duplicates_and_unknown_workers_never_change_counts_unless_adopted() {
    let mut pool = WorkerPool::new(2, 10);
    pool.requested(id(1));
    pool.driver_started(&id(1));
    pool.registered(&id(1), false);
    assert_eq!(
        pool.registered(&id(1), false),
        RegistrationOutcome::AlreadyStarted
    );
    assert_eq!(pool.registered(&id(9), false), RegistrationOutcome::Ignored);
    assert_eq!(pool.total(), 1);
    assert_eq!(pool.registered(&id(9), true), RegistrationOutcome::Adopted);
    assert_eq!(pool.total(), 2);
    assert!(
        !pool
            .started()
            .find(|(r, _)| **r == id(9))
            .unwrap()
            .1
            .started_by_driver
    );
}

#[test]
fn demote_moves_a_started_worker_back_to_pending_registration() {
    let mut pool = WorkerPool::new(1, 10);
    pool.requested(id(1));
    pool.registered(&id(1), false);
    assert!(pool.demote(&id(1)));
    assert_eq!(pool.state(&id(1)), Some(WorkerState::PendingRegistration));
    assert!(!pool.demote(&id(1)));
    assert_eq!(pool.missing(), 0, "still counted: it may re-register");
}

#[test]
fn remove_reports_the_state_left() {
    let mut pool = WorkerPool::new(3, 10);
    pool.requested(id(1));
    pool.requested(id(2));
    pool.driver_started(&id(2));
    pool.requested(id(3));
    pool.registered(&id(3), false);
    assert_eq!(pool.remove(&id(1)), Some(WorkerState::PendingRequest));
    assert_eq!(pool.remove(&id(2)), Some(WorkerState::PendingRegistration));
    assert_eq!(pool.remove(&id(3)), Some(WorkerState::Started));
    assert_eq!(pool.remove(&id(3)), None);
    assert_eq!(pool.total(), 0);
}

#[test]
fn shrinking_offers_pending_workers_least_advanced_and_newest_first() {
    let mut pool = WorkerPool::new(4, 10);
    for n in 1..=4 {
        pool.requested(id(n));
    }
    pool.driver_started(&id(1));
    pool.registered(&id(1), false);
    pool.driver_started(&id(2));
    pool.registered(&id(2), false);
    pool.driver_started(&id(3));
    // started: 1, 2; pending registration: 3; pending request: 4
    pool.set_designated(3);
    assert_eq!(pool.releasing_newest_first(), vec![id(4)]);
    assert_eq!(pool.surplus(), 1);
    assert_eq!((pool.total(), pool.missing()), (3, 0), "4 no longer counts");
    pool.set_designated(0);
    assert_eq!(pool.releasing_newest_first(), vec![id(4), id(3)]);
    assert_eq!(
        pool.surplus(),
        4,
        "two releasing, two started over the target"
    );
    pool.set_designated(3);
    assert_eq!(pool.releasing_newest_first(), vec![id(4)], "3 counts again");
    assert_eq!(pool.state(&id(3)), Some(WorkerState::PendingRegistration));
}

/// Issue 12: a surplus pending worker may register at the JobManager before the shrink
/// reaches it; it then counts as started (the JobManager may have given it tasks).
#[test]
fn a_releasing_worker_that_registers_counts_as_started_again() {
    let mut pool = WorkerPool::new(2, 10);
    pool.requested(id(1));
    pool.requested(id(2));
    pool.set_designated(1);
    assert_eq!(pool.state(&id(2)), Some(WorkerState::Releasing));
    assert_eq!(
        pool.registered(&id(2), false),
        RegistrationOutcome::Promoted(WorkerState::PendingRequest)
    );
    assert_eq!(pool.state(&id(2)), Some(WorkerState::Started));
    assert_eq!(
        pool.state(&id(1)),
        Some(WorkerState::Releasing),
        "the other one is the surplus now"
    );
}

/// Issue 12: "newest first" compared resource ids as strings, so `tm-10` counted as older
/// than `tm-9` and the wrong worker was let go.
#[test]
fn newest_first_follows_the_request_order_not_the_id_spelling() {
    let mut pool = WorkerPool::new(11, 20);
    for n in 1..=11 {
        pool.requested(id(n));
    }
    pool.set_designated(8);
    assert_eq!(pool.releasing_newest_first(), [id(11), id(10), id(9)]);
}

/// Issue 12 (declarative resources): the pool is kept at max(designated, demand), capped by
/// the maximum; the operator's size survives the demand rising and falling.
#[test]
fn the_target_is_the_larger_of_designated_and_demand_within_the_maximum() {
    let mut pool = WorkerPool::new(2, 6);
    assert_eq!(pool.target(), 2);
    pool.set_demand(5);
    assert_eq!(pool.target(), 5);
    pool.set_designated(4); // the operator resizes while jobs grew the pool
    assert_eq!(pool.target(), 5);
    pool.set_demand(9);
    assert_eq!(pool.target(), 6, "capped by the maximum");
    pool.set_demand(0);
    assert_eq!(pool.target(), 4, "the operator's resize stands");
    assert_eq!(pool.designated(), 4);
}

#[test]
fn only_workers_counted_before_an_epoch_are_listed_as_started_before_it() {
    let mut pool = WorkerPool::new(3, 10);
    pool.requested(id(1));
    pool.registered(&id(1), false);
    let epoch = pool.next_epoch();
    pool.requested(id(2));
    pool.registered(&id(2), false);
    assert_eq!(pool.started_before(epoch).collect::<Vec<_>>(), [&id(1)]);
}
