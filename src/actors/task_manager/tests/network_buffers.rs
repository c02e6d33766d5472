//! Issue 32 item 1: a task reserves a floor of network buffers from the TaskManager's pool
//! (capped per gate and per output, so wide tasks fit), and one whose floor does not fit is
//! refused naming the setting.

use super::*;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::ResultPartitionDeploymentDescriptor;
use crate::messages::task_manager::GetTaskManagerStatus;

/// `sleeping_task` with a pipelined all-to-all output of `subpartitions`.
fn wide_producer(
    attempt: u128,
    subpartitions: u32,
) -> crate::messages::deployment::TaskDeploymentDescriptor {
    let mut descriptor = sleeping_task(attempt, attempt);
    descriptor
        .outputs
        .push(ResultPartitionDeploymentDescriptor {
            partition: ResultPartitionId {
                producer: descriptor.attempt,
                edge: 0,
            },
            pattern: crate::job::graph::DistributionPattern::AllToAll,
            subpartitions,
            retained: false,
        });
    descriptor
}

/// On the defaults, a producer of 10,000 consumers reserves 2 buffers, not 10,001 (which did
/// not fit the former 64 MiB): Flint's floors are capped, as FLIP-266 caps Flink's.
#[actix::test]
async fn a_producer_of_10_000_consumers_fits_the_defaults_with_a_floor_of_two_buffers() {
    let f = start(Some(SESSION), |_| {}).await;
    submit(&f.tm, SESSION, wide_producer(11, 10_000))
        .await
        .expect("accepted");
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.network.reserved, 2, "{:?}", status.network);
    assert_eq!(status.network.lent, 0);
    assert_eq!(
        status.network.total,
        NetworkSettings::default().memory / NetworkSettings::default().buffer_size as u64
    );
}

#[actix::test]
async fn a_task_whose_floor_does_not_fit_is_refused_naming_the_setting_and_taking_nothing() {
    let mut spec = spec(3, "host-a");
    // 8 buffers: 6 for floors, 2 to lend. Floors of 4 per output: one producer fits, a second
    // does not.
    spec.network.memory = 8 * spec.network.buffer_size as u64;
    spec.network.required_per_output = 4;
    let f = start_with(Some(SESSION), |_| {}, spec).await;
    submit(&f.tm, SESSION, wide_producer(11, 3_000))
        .await
        .expect("the first fits");
    let error = submit(&f.tm, SESSION, wide_producer(12, 3_000))
        .await
        .expect_err("refused");
    assert!(
        matches!(
            error,
            TaskSubmissionError::NetworkMemory {
                needed: 131_072,
                available: 65_536,
                floors: 196_608,
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("raise `taskmanager.network.memory`"),
        "{error}"
    );
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.slots_free, status.slots_total - 1, "no slot taken");
    assert_eq!(status.job_partitions.len(), 1, "no second partition");
    assert_eq!(status.network.reserved, 4);
}
