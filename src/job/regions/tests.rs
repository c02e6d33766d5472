use super::*;
use crate::base::ids::JobVertexId;
use crate::job::graph::{DEFAULT_SLOT_SHARING_GROUP, JobEdge, JobVertex, RestartStrategyConfig};
use DistributionPattern::{AllToAll, Forward};
use ExchangeMode::{Blocking, Pipelined};

pub(in crate::job) fn graph(
    parallelism: &[u32],
    edges: &[(usize, usize, DistributionPattern, ExchangeMode)],
) -> JobGraph {
    JobGraph {
        name: "test".into(),
        vertices: parallelism
            .iter()
            .enumerate()
            .map(|(i, &parallelism)| JobVertex {
                id: JobVertexId::from_u128(i as u128),
                name: format!("v{i}"),
                operator: "noop".into(),
                config: Default::default(),
                parallelism,
                slot_sharing_group: DEFAULT_SLOT_SHARING_GROUP.into(),
                co_location_group: None,
                chain: Vec::new(),
            })
            .collect(),
        edges: edges
            .iter()
            .map(|&(source, target, pattern, exchange)| JobEdge {
                source,
                target,
                pattern,
                exchange,
            })
            .collect(),
        restart_strategy: RestartStrategyConfig::None,
        max_parallelism: None,
        artifacts: Vec::new(),
    }
}

/// Computes regions and checks the invariants every answer must keep.
pub(in crate::job) fn regions(
    parallelism: &[u32],
    edges: &[(usize, usize, DistributionPattern, ExchangeMode)],
) -> PipelinedRegions {
    let graph = graph(parallelism, edges);
    let regions = PipelinedRegions::compute(&graph).unwrap();
    let mut seen = BTreeSet::new();
    for (index, region) in regions.regions.iter().enumerate() {
        assert_eq!(region.id, RegionId(index));
        assert!(!region.members.is_empty());
        assert!(region.members.windows(2).all(|w| w[0] < w[1]));
        for &member in &region.members {
            assert!(seen.insert(member), "{member} in two regions");
            assert_eq!(regions.region_of(member), Some(region.id));
        }
        for input in regions.blocking_inputs(region.id) {
            assert!(input.0 < index, "{input} must come before region-{index}");
            assert!(regions.consumers(input).contains(&region.id));
        }
        for consumer in regions.consumers(region.id) {
            assert!(regions.blocking_inputs(consumer).contains(&region.id));
        }
    }
    let total: u32 = parallelism.iter().sum();
    assert_eq!(seen.len(), total as usize);
    regions
}

fn ev(vertex: usize, subtask: u32) -> ExecutionVertexRef {
    ExecutionVertexRef { vertex, subtask }
}

fn ids(ids: &[usize]) -> BTreeSet<RegionId> {
    ids.iter().map(|&i| RegionId(i)).collect()
}

fn members(regions: &PipelinedRegions) -> Vec<Vec<(usize, u32)>> {
    regions
        .regions
        .iter()
        .map(|r| r.members.iter().map(|m| (m.vertex, m.subtask)).collect())
        .collect()
}

#[test]
fn single_vertex() {
    let one = regions(&[1], &[]);
    assert_eq!(members(&one), [vec![(0, 0)]]);
    assert!(one.blocking_inputs(RegionId(0)).is_empty());
    // Unconnected subtasks are independent regions.
    let three = regions(&[3], &[]);
    assert_eq!(members(&three), [[(0, 0)], [(0, 1)], [(0, 2)]]);
}

#[test]
fn forward_pipelined_pairs_subtask_i_with_subtask_i() {
    let r = regions(&[3, 3], &[(0, 1, Forward, Pipelined)]);
    assert_eq!(
        members(&r),
        [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2), (1, 2)]]
    );
    assert!(
        r.regions
            .iter()
            .all(|region| r.blocking_inputs(region.id).is_empty())
    );
}

#[test]
fn all_to_all_pipelined_is_one_region() {
    let r = regions(&[2, 3], &[(0, 1, AllToAll, Pipelined)]);
    assert_eq!(members(&r), [vec![(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]]);
}

#[test]
fn all_to_all_blocking_separates_producers_from_consumers() {
    let r = regions(&[1, 1], &[(0, 1, AllToAll, Blocking)]);
    assert_eq!(members(&r), [[(0, 0)], [(1, 0)]]);
    assert_eq!(r.blocking_inputs(RegionId(1)), ids(&[0]));
    assert_eq!(r.consumers(RegionId(0)), ids(&[1]));

    // Nothing joins subtasks of one side either: each consumer reads every producer region.
    let r = regions(&[2, 2], &[(0, 1, AllToAll, Blocking)]);
    assert_eq!(members(&r), [[(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)]]);
    assert_eq!(r.blocking_inputs(RegionId(2)), ids(&[0, 1]));
    assert_eq!(r.blocking_inputs(RegionId(3)), ids(&[0, 1]));
    assert_eq!(r.consumers(RegionId(0)), ids(&[2, 3]));
}

#[test]
fn diamond_with_mixed_edges() {
    //   A --all-to-all blocking--> B
    //   |forward pipelined         |forward pipelined
    //   C --all-to-all blocking--> D
    let (a, b, c, d) = (0, 1, 2, 3);
    let r = regions(
        &[2, 2, 2, 2],
        &[
            (a, b, AllToAll, Blocking),
            (a, c, Forward, Pipelined),
            (b, d, Forward, Pipelined),
            (c, d, AllToAll, Blocking),
        ],
    );
    assert_eq!(
        members(&r),
        [
            [(a, 0), (c, 0)],
            [(a, 1), (c, 1)],
            [(b, 0), (d, 0)],
            [(b, 1), (d, 1)]
        ]
    );
    assert_eq!(r.blocking_inputs(RegionId(2)), ids(&[0, 1]));
    assert_eq!(r.blocking_inputs(RegionId(3)), ids(&[0, 1]));
    assert_eq!(r.consumers(RegionId(0)), ids(&[2, 3]));
    assert_eq!(r.regions_to_restart(RegionId(0)), ids(&[0, 2, 3]));
    assert_eq!(r.regions_to_restart(RegionId(3)), ids(&[3]));
}

#[test]
fn word_count_is_one_region() {
    let (source, tokenize, count, sink) = (0, 1, 2, 3);
    let r = regions(
        &[2, 2, 3, 3],
        &[
            (source, tokenize, Forward, Pipelined),
            (tokenize, count, AllToAll, Pipelined),
            (count, sink, Forward, Pipelined),
        ],
    );
    assert_eq!(r.regions.len(), 1);
    assert_eq!(r.regions[0].members.len(), 10);
}

#[test]
fn blocking_in_the_middle_of_a_chain() {
    let r = regions(
        &[2, 2, 3, 3],
        &[
            (0, 1, Forward, Pipelined),
            (1, 2, AllToAll, Blocking),
            (2, 3, Forward, Pipelined),
        ],
    );
    assert_eq!(
        members(&r),
        [
            vec![(0, 0), (1, 0)],
            vec![(0, 1), (1, 1)],
            vec![(2, 0), (3, 0)],
            vec![(2, 1), (3, 1)],
            vec![(2, 2), (3, 2)]
        ]
    );
    for consumer in 2..5 {
        assert_eq!(r.blocking_inputs(RegionId(consumer)), ids(&[0, 1]));
    }
}

#[test]
fn schedulable_progression() {
    let r = regions(
        &[2, 2, 3, 3],
        &[
            (0, 1, Forward, Pipelined),
            (1, 2, AllToAll, Blocking),
            (2, 3, Forward, Pipelined),
        ],
    );
    let (mut finished, mut scheduled) = (BTreeSet::new(), BTreeSet::new());
    assert_eq!(
        r.schedulable(&finished, &scheduled),
        [RegionId(0), RegionId(1)]
    );
    scheduled.extend([RegionId(0), RegionId(1)]);
    assert_eq!(r.schedulable(&finished, &scheduled), []);
    finished.insert(RegionId(0));
    assert_eq!(r.schedulable(&finished, &scheduled), []);
    finished.insert(RegionId(1));
    assert_eq!(
        r.schedulable(&finished, &scheduled),
        [RegionId(2), RegionId(3), RegionId(4)]
    );
    scheduled.extend([RegionId(2), RegionId(3), RegionId(4)]);
    assert_eq!(r.schedulable(&finished, &scheduled), []);
}

#[test]
fn regions_to_restart_is_the_downstream_closure() {
    // a -> b -> c blocking, a -> d blocking, e alone.
    let (a, b, c, d, e) = (0, 1, 2, 3, 4);
    let r = regions(
        &[1, 1, 1, 1, 1],
        &[
            (a, b, Forward, Blocking),
            (b, c, Forward, Blocking),
            (a, d, AllToAll, Blocking),
        ],
    );
    let id = |v| r.region_of(ev(v, 0)).unwrap();
    let set = |vs: &[usize]| vs.iter().map(|&v| id(v)).collect::<BTreeSet<_>>();
    assert_eq!(r.regions_to_restart(id(a)), set(&[a, b, c, d]));
    assert_eq!(r.regions_to_restart(id(b)), set(&[b, c]));
    assert_eq!(r.regions_to_restart(id(c)), set(&[c]));
    assert_eq!(r.regions_to_restart(id(d)), set(&[d]));
    assert_eq!(r.regions_to_restart(id(e)), set(&[e]));
    assert_eq!(r.regions_to_restart(RegionId(99)), BTreeSet::new());
}

#[test]
fn regions_come_after_the_regions_they_consume_whatever_their_members() {
    // Vertex 0 consumes vertex 1: its smaller member must not put it first.
    let r = regions(&[1, 1, 1], &[(1, 0, Forward, Blocking)]);
    assert_eq!(members(&r), [[(1, 0)], [(0, 0)], [(2, 0)]]);
    assert_eq!(r.blocking_inputs(RegionId(1)), ids(&[0]));
}

#[test]
fn blocking_cycle_between_regions_merges_them() {
    // x -> y all-to-all blocking, x -> z -> y forward pipelined: x_i, z_i, y_i share a
    // region, and region 0 would wait for region 1 (x1 -> y0) and 1 for 0 (x0 -> y1).
    let (x, y, z) = (0, 1, 2);
    let r = regions(
        &[2, 2, 2],
        &[
            (x, y, AllToAll, Blocking),
            (x, z, Forward, Pipelined),
            (z, y, Forward, Pipelined),
        ],
    );
    assert_eq!(r.regions.len(), 1);
    assert_eq!(r.regions[0].members.len(), 6);
    assert!(r.blocking_inputs(RegionId(0)).is_empty());
    assert_eq!(
        r.schedulable(&BTreeSet::new(), &BTreeSet::new()),
        [RegionId(0)]
    );
}

#[test]
fn blocking_edge_inside_a_region_gates_nothing() {
    let r = regions(
        &[2, 2],
        &[(0, 1, AllToAll, Pipelined), (0, 1, AllToAll, Blocking)],
    );
    assert_eq!(r.regions.len(), 1);
    assert!(r.blocking_inputs(RegionId(0)).is_empty());
    assert!(r.consumers(RegionId(0)).is_empty());
}

#[test]
fn zero_parallelism_vertices_are_skipped() {
    let r = regions(
        &[0, 2, 0, 2],
        &[(1, 3, AllToAll, Pipelined), (0, 2, AllToAll, Blocking)],
    );
    assert_eq!(members(&r), [vec![(1, 0), (1, 1), (3, 0), (3, 1)]]);
}

#[test]
fn region_of_unknown_subtask_is_none() {
    let r = regions(&[2, 1], &[]);
    assert_eq!(r.region_of(ev(1, 0)), Some(RegionId(2)));
    assert_eq!(r.region_of(ev(0, 2)), None);
    assert_eq!(r.region_of(ev(2, 0)), None);
    assert_eq!(r.region_of(ev(1, u32::MAX)), None);
}

#[test]
fn malformed_edges_are_errors() {
    let err = PipelinedRegions::compute(&graph(&[2, 3], &[(0, 1, Forward, Pipelined)]));
    assert_eq!(
        err,
        Err(RegionError::ForwardParallelismMismatch {
            edge: 0,
            source_parallelism: 2,
            target_parallelism: 3
        })
    );
    let err = PipelinedRegions::compute(&graph(&[1], &[(0, 5, AllToAll, Blocking)]));
    assert_eq!(
        err,
        Err(RegionError::EdgeOutOfRange {
            edge: 0,
            producer: 0,
            consumer: 5,
            vertices: 1
        })
    );
}

#[test]
fn scale_all_to_all_at_parallelism_10000_is_linear() {
    // P² = 10⁸ pairs if joined pair by pair; O(P) unions here.
    let r = regions(&[10_000, 10_000], &[(0, 1, AllToAll, Pipelined)]);
    assert_eq!(r.regions.len(), 1);
    assert_eq!(r.regions[0].members.len(), 20_000);

    let r = regions(&[10_000, 10_000], &[(0, 1, Forward, Blocking)]);
    assert_eq!(r.regions.len(), 20_000);
    assert_eq!(r.blocking_inputs(RegionId(10_000)), ids(&[0]));
}

#[test]
fn progress_readies_consumers_when_their_last_input_group_completes() {
    // source (P=3) -all-to-all blocking-> sink (P=2): 3 producer regions, 2 consumer regions
    // sharing one consumed group.
    let g = graph(
        &[3, 2],
        &[(0, 1, DistributionPattern::AllToAll, ExchangeMode::Blocking)],
    );
    let r = PipelinedRegions::compute(&g).unwrap();
    assert_eq!(r.groups.len(), 1, "one group shared by both consumers");
    let mut progress = RegionProgress::new(&r);
    let producers = progress.take_ready();
    assert_eq!(producers, ids_vec(&[0, 1, 2]));
    assert!(progress.take_ready().is_empty());
    progress.finish(&r, RegionId(0));
    progress.finish(&r, RegionId(1));
    assert!(progress.take_ready().is_empty(), "one producer still runs");
    progress.finish(&r, RegionId(2));
    assert_eq!(progress.take_ready(), ids_vec(&[3, 4]));
    // A producer restarts: its consumers wait for it again.
    progress.finish(&r, RegionId(3));
    progress.reset(&r, RegionId(1));
    progress.reset(&r, RegionId(3));
    progress.reset(&r, RegionId(4));
    assert_eq!(progress.finished_count(), 2);
    for region in [1, 3, 4] {
        progress.release(RegionId(region));
    }
    assert_eq!(progress.take_ready(), ids_vec(&[1]));
    progress.finish(&r, RegionId(1));
    assert_eq!(progress.take_ready(), ids_vec(&[3, 4]));
}

fn ids_vec(list: &[usize]) -> Vec<RegionId> {
    list.iter().map(|&i| RegionId(i)).collect()
}
