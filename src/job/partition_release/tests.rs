use super::*;
use crate::job::graph::{DistributionPattern::*, ExchangeMode::*};
use crate::job::regions::tests::{graph, regions};

fn ids(ids: &[usize]) -> Vec<RegionId> {
    ids.iter().map(|&i| RegionId(i)).collect()
}

/// A chain of three all-to-all blocking stages of parallelism 2: regions 0-1, 2-3, 4-5.
fn three_stages() -> PipelinedRegions {
    regions(
        &[2, 2, 2],
        &[(0, 1, AllToAll, Blocking), (1, 2, AllToAll, Blocking)],
    )
}

#[test]
fn a_stage_is_released_once_every_consumer_finished_and_a_sink_at_once() {
    let r = three_stages();
    let mut s = PartitionReleaseStrategy::new(&r);
    assert!(
        s.finished(&r, RegionId(0)).is_empty(),
        "its consumers still read it"
    );
    assert!(s.finished(&r, RegionId(1)).is_empty());
    assert!(
        s.finished(&r, RegionId(2)).is_empty(),
        "one consumer of two finished"
    );
    assert_eq!(s.finished(&r, RegionId(3)), ids(&[0, 1]));
    assert!(s.needs_rerun(RegionId(0)));
    assert!(!s.needs_rerun(RegionId(2)));
    // The sinks read nothing of theirs: released as they finish, with their producers.
    assert_eq!(s.finished(&r, RegionId(4)), ids(&[4]));
    assert_eq!(s.finished(&r, RegionId(5)), ids(&[2, 3, 5]));
    assert!(
        s.finished(&r, RegionId(5)).is_empty(),
        "finishing twice releases nothing"
    );
}

#[test]
fn a_pipelined_region_is_released_when_it_finishes() {
    let r = regions(&[2, 2], &[(0, 1, Forward, Pipelined)]);
    let mut s = PartitionReleaseStrategy::new(&r);
    assert_eq!(s.finished(&r, RegionId(0)), ids(&[0]));
    assert_eq!(s.finished(&r, RegionId(1)), ids(&[1]));
}

#[test]
fn a_consumer_that_runs_again_needs_its_released_producers_again() {
    let r = three_stages();
    let mut s = PartitionReleaseStrategy::new(&r);
    for region in 0..4 {
        s.finished(&r, RegionId(region));
    }
    assert!(s.needs_rerun(RegionId(0)) && s.needs_rerun(RegionId(1)));
    // Region 2's output is lost: it runs again, and so must stage 0, whose results are gone.
    s.reset(&r, RegionId(2));
    assert!(s.needs_rerun(RegionId(0)) && s.needs_rerun(RegionId(1)));
    for region in [0, 1] {
        s.reset(&r, RegionId(region));
        assert!(!s.needs_rerun(RegionId(region)), "not finished any more");
        assert!(
            !s.supersede(RegionId(region)),
            "its results were released already"
        );
    }
    s.reset(&r, RegionId(3));
    assert!(
        s.supersede(RegionId(2)),
        "region 2's old results are still held"
    );
    assert!(!s.supersede(RegionId(2)), "released once");
    // Stage 0 again: kept while region 2 and 3 read it, released when both did.
    assert!(s.finished(&r, RegionId(0)).is_empty());
    assert!(s.finished(&r, RegionId(1)).is_empty());
    assert!(s.finished(&r, RegionId(2)).is_empty());
    assert_eq!(s.finished(&r, RegionId(3)), ids(&[0, 1]));
}

#[test]
fn a_consumer_reset_before_it_finished_changes_nothing() {
    let r = three_stages();
    let mut s = PartitionReleaseStrategy::new(&r);
    s.finished(&r, RegionId(0));
    s.finished(&r, RegionId(1));
    s.finished(&r, RegionId(2));
    s.reset(&r, RegionId(3));
    assert_eq!(s.finished(&r, RegionId(3)), ids(&[0, 1]));
}

/// All-to-all of P = 2,000: one group of 2,000 producers and 2,000 consumers; each producer is
/// released once, with the last consumer.
#[test]
fn a_wide_all_to_all_releases_each_producer_once_when_the_last_consumer_finishes() {
    let p = 2_000;
    // Not `regions()`: its checks walk every pair of a group.
    let r = PipelinedRegions::compute(&graph(&[p, p], &[(0, 1, AllToAll, Blocking)])).unwrap();
    let mut s = PartitionReleaseStrategy::new(&r);
    for region in 0..p as usize {
        assert!(s.finished(&r, RegionId(region)).is_empty());
    }
    for region in p as usize..2 * p as usize - 1 {
        assert_eq!(s.finished(&r, RegionId(region)), ids(&[region]));
    }
    let last = s.finished(&r, RegionId(2 * p as usize - 1));
    assert_eq!(last.len(), p as usize + 1);
}
