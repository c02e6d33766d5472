//! Pipelined regions: the units the JobManager schedules and restarts (Flink's
//! `PipelinedRegionSchedulingStrategy` and `RestartPipelinedRegionFailoverStrategy`).
//!
//! Subtasks joined by pipelined exchanges must run together (a consumer reads while its producer
//! writes), so they form one region; a blocking exchange is a boundary (its consumer starts once
//! the producer finished). A region is scheduled once every region it reads blocking results
//! from has finished, and a failure restarts the failed region and everything downstream of it.
//!
//! This module owns that arithmetic and nothing else: it never looks at slots, TaskManagers or
//! execution states. It must stay close to linear in subtasks plus edges, because a job of
//! parallelism 10,000 has 10,000² producer/consumer pairs on an all-to-all edge: such an edge is
//! joined with O(P) unions, never pair by pair.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};

/// A job graph whose edges cannot be expanded into subtask connections. Never retryable: the
/// same graph fails the same way; it is the submitter's to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// An edge names a vertex index the graph does not have.
    #[error("edge {edge} ({producer} -> {consumer}) names a vertex outside the graph's {vertices}")]
    EdgeOutOfRange {
        /// The edge's index in [`JobGraph::edges`].
        edge: usize,
        /// The producing vertex index it names (not called `source`: thiserror reserves it).
        producer: usize,
        /// The consuming vertex index it names.
        consumer: usize,
        /// How many vertices the graph has.
        vertices: usize,
    },
    /// A forward edge joins vertices of different parallelism (subtask i has no partner i).
    #[error(
        "forward edge {edge} joins parallelism {source_parallelism} to {target_parallelism}; \
         forward needs equal parallelism"
    )]
    ForwardParallelismMismatch {
        /// The edge's index in [`JobGraph::edges`].
        edge: usize,
        /// The producer's parallelism.
        source_parallelism: u32,
        /// The consumer's parallelism.
        target_parallelism: u32,
    },
}

/// One subtask of the job (Flink's `ExecutionVertexID`): the unit regions are made of. Ordered by
/// vertex index, then subtask, which is the order region members and ties are decided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutionVertexRef {
    /// Index into [`JobGraph::vertices`].
    pub vertex: usize,
    /// Which of the vertex's subtasks.
    pub subtask: u32,
}

impl fmt::Display for ExecutionVertexRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.vertex, self.subtask)
    }
}

/// A region's position in [`PipelinedRegions::regions`], which is a topological order: ids are
/// local to one computation, so unlike the cluster's random ids this is a plain index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RegionId(pub usize);

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "region-{}", self.0)
    }
}

/// Subtasks that must be deployed, and are restarted, together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Its index in [`PipelinedRegions::regions`].
    pub id: RegionId,
    /// Its subtasks, sorted.
    pub members: Vec<ExecutionVertexRef>,
    /// The consumed groups it reads blocking results from: all must be complete (every
    /// producer region of each finished) before it is scheduled.
    pub input_groups: Vec<usize>,
    /// The consumed groups its blocking results belong to.
    pub output_groups: Vec<usize>,
}

/// Producer regions whose blocking results a set of consumer regions read (Flink's
/// ConsumedPartitionGroup). All consumers of an all-to-all blocking edge share one group, so the
/// dependencies cost O(P), not O(P²).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumedGroup {
    /// The regions producing the results.
    pub producers: Vec<RegionId>,
    /// The regions reading them.
    pub consumers: Vec<RegionId>,
}

/// A job's subtasks partitioned into pipelined regions, in topological order: a region comes
/// after every region it consumes; among regions free to go in either order, the one with the
/// smallest member comes first, so the numbering is the same on every run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelinedRegions {
    /// The regions; `regions[i].id == RegionId(i)`.
    pub regions: Vec<Region>,
    /// The consumed groups the regions' `input_groups`/`output_groups` index.
    pub groups: Vec<ConsumedGroup>,
    /// `offsets[v]` is the flat index of vertex `v`'s subtask 0; `offsets[len]` the total.
    offsets: Vec<usize>,
    /// The region of each subtask, by flat index.
    region_by_flat: Vec<RegionId>,
}

impl PipelinedRegions {
    /// Partitions `graph`'s subtasks into regions.
    ///
    /// Pipelined edges join subtasks (forward: i with i; all-to-all: every producer with every
    /// consumer, done as one chain of unions). Blocking edges join nothing, except that regions
    /// which would depend on each other in a cycle through blocking edges are merged into one,
    /// as Flink does: neither could otherwise ever start. A blocking edge inside one region
    /// gates nothing.
    pub fn compute(graph: &JobGraph) -> Result<Self, RegionError> {
        let offsets = flat_offsets(graph);
        let total = offsets.last().copied().unwrap_or(0);
        validate_edges(graph)?;

        // 1. Pipelined edges: union-find over every subtask.
        let mut subtasks = UnionFind::new(total);
        for edge in graph.edges.iter() {
            if edge.exchange != ExchangeMode::Pipelined {
                continue;
            }
            let (sources, targets) = (span(&offsets, edge.source), span(&offsets, edge.target));
            match edge.pattern {
                DistributionPattern::Forward => {
                    for (s, t) in sources.zip(targets) {
                        subtasks.union(s, t);
                    }
                }
                DistributionPattern::AllToAll => {
                    // Every producer is connected to every consumer, so all of them end up in
                    // one set: chain them to the first producer instead of joining P² pairs.
                    if sources.is_empty() || targets.is_empty() {
                        continue;
                    }
                    let anchor = sources.start;
                    for other in sources.chain(targets) {
                        subtasks.union(anchor, other);
                    }
                }
            }
        }

        // 2. Number the pipelined groups by their smallest subtask.
        let mut group_of_root = vec![usize::MAX; total];
        let mut group_of = Vec::with_capacity(total);
        let mut groups = 0;
        for flat in 0..total {
            let root = subtasks.find(flat);
            if group_of_root[root] == usize::MAX {
                group_of_root[root] = groups;
                groups += 1;
            }
            group_of.push(group_of_root[root]);
        }

        // 3. Merge groups that depend on each other cyclically through blocking edges.
        let merged = merge_blocking_cycles(graph, &offsets, &group_of, groups);

        // 4. Final (unordered) regions: members in flat order, so each list is sorted and its
        //    first element is the region's smallest member.
        let mut region_of_group = vec![usize::MAX; groups];
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut unordered_of = Vec::with_capacity(total);
        for (flat, &group) in group_of.iter().enumerate() {
            let root = merged.root(group);
            if region_of_group[root] == usize::MAX {
                region_of_group[root] = members.len();
                members.push(Vec::new());
            }
            let region = region_of_group[root];
            members[region].push(flat);
            unordered_of.push(region);
        }
        let groups = consumed_groups(graph, &offsets, &unordered_of);

        // 5. Topological order, ties by smallest member.
        let order = topological_order(&members, &groups);
        let mut id_of = vec![RegionId(0); members.len()];
        for (position, &region) in order.iter().enumerate() {
            id_of[region] = RegionId(position);
        }
        let mut regions: Vec<Region> = order
            .iter()
            .map(|&region| Region {
                id: id_of[region],
                members: members[region]
                    .iter()
                    .map(|&flat| execution_vertex(&offsets, flat))
                    .collect(),
                input_groups: Vec::new(),
                output_groups: Vec::new(),
            })
            .collect();
        let groups: Vec<ConsumedGroup> = groups
            .into_iter()
            .enumerate()
            .map(|(index, (producers, consumers))| {
                let producers: Vec<RegionId> = producers.iter().map(|&r| id_of[r]).collect();
                let consumers: Vec<RegionId> = consumers.iter().map(|&r| id_of[r]).collect();
                for p in &producers {
                    regions[p.0].output_groups.push(index);
                }
                for c in &consumers {
                    regions[c.0].input_groups.push(index);
                }
                ConsumedGroup {
                    producers,
                    consumers,
                }
            })
            .collect();
        let region_by_flat = unordered_of.iter().map(|&r| id_of[r]).collect();
        Ok(Self {
            regions,
            groups,
            offsets,
            region_by_flat,
        })
    }

    /// The regions `id` reads blocking results from (computed from its groups).
    pub fn blocking_inputs(&self, id: RegionId) -> BTreeSet<RegionId> {
        self.region(id)
            .into_iter()
            .flat_map(|r| &r.input_groups)
            .flat_map(|g| self.groups[*g].producers.iter().copied())
            .collect()
    }

    /// The regions reading `id`'s blocking results (computed from its groups).
    pub fn consumers(&self, id: RegionId) -> BTreeSet<RegionId> {
        self.region(id)
            .into_iter()
            .flat_map(|r| &r.output_groups)
            .flat_map(|g| self.groups[*g].consumers.iter().copied())
            .collect()
    }

    /// The region a subtask belongs to; `None` if the graph has no such subtask.
    pub fn region_of(&self, vertex: ExecutionVertexRef) -> Option<RegionId> {
        let start = *self.offsets.get(vertex.vertex)?;
        let end = *self.offsets.get(vertex.vertex + 1)?;
        let flat = start.checked_add(usize::try_from(vertex.subtask).ok()?)?;
        if flat >= end {
            return None;
        }
        self.region_by_flat.get(flat).copied()
    }

    /// The region with `id`, if it exists.
    pub fn region(&self, id: RegionId) -> Option<&Region> {
        self.regions.get(id.0)
    }

    /// Regions that may be scheduled now: neither `scheduled` nor `finished` yet, with every
    /// blocking input finished; in topological order, so the caller can deploy them as listed.
    pub fn schedulable(
        &self,
        finished: &BTreeSet<RegionId>,
        scheduled: &BTreeSet<RegionId>,
    ) -> Vec<RegionId> {
        self.regions
            .iter()
            .filter(|region| !scheduled.contains(&region.id) && !finished.contains(&region.id))
            .filter(|region| {
                region.input_groups.iter().all(|g| {
                    self.groups[*g]
                        .producers
                        .iter()
                        .all(|p| finished.contains(p))
                })
            })
            .map(|region| region.id)
            .collect()
    }

    /// The regions to restart when `failed` fails: it and every region that transitively reads
    /// its blocking results (their inputs are about to be produced again). Empty if `failed` is
    /// unknown.
    ///
    /// This is the downstream half of Flink's failover strategy only. Finished regions whose
    /// blocking results were lost with a dead TaskManager must be produced again too: the caller
    /// knows which results lived where, and passes their regions as further failed regions
    /// (taking the union of the answers).
    pub fn regions_to_restart(&self, failed: RegionId) -> BTreeSet<RegionId> {
        let mut restart = BTreeSet::new();
        if self.region(failed).is_none() {
            return restart;
        }
        let mut pending = vec![failed];
        while let Some(region) = pending.pop() {
            if !restart.insert(region) {
                continue;
            }
            if let Some(region) = self.region(region) {
                for group in &region.output_groups {
                    pending.extend(
                        self.groups[*group]
                            .consumers
                            .iter()
                            .filter(|consumer| !restart.contains(consumer)),
                    );
                }
            }
        }
        restart
    }
}

/// Where each region stands while a job runs, tracked incrementally: a region becomes ready when
/// its last input group completes, so scheduling a job of R regions costs O(R + group sizes)
/// overall instead of a scan of every region after every finished one.
#[derive(Debug, Clone)]
pub struct RegionProgress {
    state: Vec<Progress>,
    /// Input groups not complete, per region.
    pending_inputs: Vec<usize>,
    /// Producer regions not finished, per group.
    group_remaining: Vec<usize>,
    ready: BTreeSet<RegionId>,
    finished: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Waiting,
    Scheduled,
    Finished,
}

impl RegionProgress {
    /// Nothing scheduled; the regions without blocking inputs are ready.
    pub fn new(regions: &PipelinedRegions) -> Self {
        let pending_inputs: Vec<usize> = regions
            .regions
            .iter()
            .map(|r| r.input_groups.len())
            .collect();
        let ready = regions
            .regions
            .iter()
            .filter(|r| r.input_groups.is_empty())
            .map(|r| r.id)
            .collect();
        Self {
            state: vec![Progress::Waiting; regions.regions.len()],
            pending_inputs,
            group_remaining: regions.groups.iter().map(|g| g.producers.len()).collect(),
            ready,
            finished: 0,
        }
    }

    /// The regions ready to schedule, in order; they count as scheduled from now on.
    pub fn take_ready(&mut self) -> Vec<RegionId> {
        self.take_ready_up_to(usize::MAX)
    }

    /// At most `limit` of the regions ready to schedule, first in order; the rest stay ready.
    pub fn take_ready_up_to(&mut self, limit: usize) -> Vec<RegionId> {
        let mut taken = Vec::new();
        while taken.len() < limit {
            let Some(region) = self.ready.pop_first() else {
                break;
            };
            self.state[region.0] = Progress::Scheduled;
            taken.push(region);
        }
        taken
    }

    /// Every task of `region` finished: its consumers may become ready.
    pub fn finish(&mut self, regions: &PipelinedRegions, region: RegionId) {
        if self.state[region.0] == Progress::Finished {
            return;
        }
        self.state[region.0] = Progress::Finished;
        self.finished += 1;
        for &group in &regions.regions[region.0].output_groups {
            self.group_remaining[group] -= 1;
            if self.group_remaining[group] == 0 {
                for consumer in &regions.groups[group].consumers {
                    self.pending_inputs[consumer.0] -= 1;
                    if self.pending_inputs[consumer.0] == 0
                        && self.state[consumer.0] == Progress::Waiting
                    {
                        self.ready.insert(*consumer);
                    }
                }
            }
        }
    }

    /// `region` will run again (failover): it is neither scheduled, finished nor ready until
    /// [`release`](Self::release)d, and its consumers wait for it again.
    pub fn reset(&mut self, regions: &PipelinedRegions, region: RegionId) {
        if self.state[region.0] == Progress::Finished {
            self.finished -= 1;
            for &group in &regions.regions[region.0].output_groups {
                self.group_remaining[group] += 1;
                if self.group_remaining[group] == 1 {
                    for consumer in &regions.groups[group].consumers {
                        self.pending_inputs[consumer.0] += 1;
                        self.ready.remove(consumer);
                    }
                }
            }
        }
        self.state[region.0] = Progress::Waiting;
        self.ready.remove(&region);
    }

    /// A reset region may be scheduled again once its inputs are complete.
    pub fn release(&mut self, region: RegionId) {
        if self.state[region.0] == Progress::Waiting && self.pending_inputs[region.0] == 0 {
            self.ready.insert(region);
        }
    }

    /// Whether `region` finished.
    pub fn is_finished(&self, region: RegionId) -> bool {
        self.state[region.0] == Progress::Finished
    }

    /// How many regions finished.
    pub fn finished_count(&self) -> usize {
        self.finished
    }
}

/// `offsets[v]` = the flat index of vertex `v`'s first subtask; the last entry is the total.
fn flat_offsets(graph: &JobGraph) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(graph.vertices.len() + 1);
    let mut next = 0usize;
    offsets.push(next);
    for vertex in &graph.vertices {
        // u32 always fits usize on the 32/64-bit targets Flint builds for.
        next = next.saturating_add(vertex.parallelism as usize);
        offsets.push(next);
    }
    offsets
}

/// The flat indices of vertex `v`'s subtasks (callers have validated `v`).
fn span(offsets: &[usize], vertex: usize) -> std::ops::Range<usize> {
    offsets[vertex]..offsets[vertex + 1]
}

/// The subtask at a flat index (callers pass indices below the total).
fn execution_vertex(offsets: &[usize], flat: usize) -> ExecutionVertexRef {
    // The last vertex whose first subtask is at or before `flat`: skips vertices of parallelism
    // 0, which share their offset with the next vertex.
    let vertex = offsets.partition_point(|&start| start <= flat) - 1;
    ExecutionVertexRef {
        vertex,
        subtask: (flat - offsets[vertex]) as u32,
    }
}

fn validate_edges(graph: &JobGraph) -> Result<(), RegionError> {
    let vertices = graph.vertices.len();
    for (index, edge) in graph.edges.iter().enumerate() {
        let (Some(source), Some(target)) = (
            graph.vertices.get(edge.source),
            graph.vertices.get(edge.target),
        ) else {
            return Err(RegionError::EdgeOutOfRange {
                edge: index,
                producer: edge.source,
                consumer: edge.target,
                vertices,
            });
        };
        if edge.pattern == DistributionPattern::Forward && source.parallelism != target.parallelism
        {
            return Err(RegionError::ForwardParallelismMismatch {
                edge: index,
                source_parallelism: source.parallelism,
                target_parallelism: target.parallelism,
            });
        }
    }
    Ok(())
}

/// Merges pipelined groups that reach each other through blocking edges. The dependency graph
/// gets one hub node per all-to-all blocking edge (producers → hub → consumers), so it stays
/// linear in subtasks; groups in one strongly connected component are merged.
fn merge_blocking_cycles(
    graph: &JobGraph,
    offsets: &[usize],
    group_of: &[usize],
    groups: usize,
) -> UnionFind {
    let mut nodes = groups;
    let mut arcs: Vec<(usize, usize)> = Vec::new();
    for edge in graph.edges.iter() {
        if edge.exchange != ExchangeMode::Blocking {
            continue;
        }
        let (sources, targets) = (span(offsets, edge.source), span(offsets, edge.target));
        match edge.pattern {
            DistributionPattern::Forward => {
                for (s, t) in sources.zip(targets) {
                    if group_of[s] != group_of[t] {
                        arcs.push((group_of[s], group_of[t]));
                    }
                }
            }
            DistributionPattern::AllToAll => {
                if sources.is_empty() || targets.is_empty() {
                    continue;
                }
                let hub = nodes;
                nodes += 1;
                arcs.extend(sources.map(|s| (group_of[s], hub)));
                arcs.extend(targets.map(|t| (hub, group_of[t])));
            }
        }
    }
    let mut merged = UnionFind::new(groups);
    for component in strongly_connected_components(nodes, &arcs) {
        let mut in_groups = component.into_iter().filter(|&node| node < groups);
        if let Some(first) = in_groups.next() {
            for other in in_groups {
                merged.union(first, other);
            }
        }
    }
    merged
}

/// The consumed groups of the blocking edges between regions: `(producer regions, consumer
/// regions)`. An all-to-all edge makes one group shared by all its consumers (a consumer region
/// that also holds producers of the edge gets its own group without itself); a forward edge one
/// group per producer region.
fn consumed_groups(
    graph: &JobGraph,
    offsets: &[usize],
    region_of: &[usize],
) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut groups = Vec::new();
    for edge in graph.edges.iter() {
        if edge.exchange != ExchangeMode::Blocking {
            continue;
        }
        let (sources, targets) = (span(offsets, edge.source), span(offsets, edge.target));
        match edge.pattern {
            DistributionPattern::Forward => {
                let mut by_producer: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
                for (s, t) in sources.zip(targets) {
                    if region_of[s] != region_of[t] {
                        by_producer
                            .entry(region_of[s])
                            .or_default()
                            .insert(region_of[t]);
                    }
                }
                for (producer, consumers) in by_producer {
                    groups.push((vec![producer], consumers.into_iter().collect()));
                }
            }
            DistributionPattern::AllToAll => {
                let producers: BTreeSet<usize> = sources.map(|s| region_of[s]).collect();
                let consumers: BTreeSet<usize> = targets.map(|t| region_of[t]).collect();
                let (mixed, plain): (Vec<usize>, Vec<usize>) =
                    consumers.into_iter().partition(|c| producers.contains(c));
                if !plain.is_empty() && !producers.is_empty() {
                    groups.push((producers.iter().copied().collect(), plain));
                }
                for consumer in mixed {
                    let others: Vec<usize> = producers
                        .iter()
                        .copied()
                        .filter(|&p| p != consumer)
                        .collect();
                    if !others.is_empty() {
                        groups.push((others, vec![consumer]));
                    }
                }
            }
        }
    }
    groups
}

/// Kahn's algorithm over regions and their consumed groups, always taking the ready region
/// with the smallest member: O(regions + group sizes).
fn topological_order(members: &[Vec<usize>], groups: &[(Vec<usize>, Vec<usize>)]) -> Vec<usize> {
    let count = members.len();
    let mut waiting_on = vec![0usize; count];
    let mut outputs = vec![Vec::new(); count];
    let mut remaining: Vec<usize> = groups.iter().map(|(p, _)| p.len()).collect();
    for (index, (producers, consumers)) in groups.iter().enumerate() {
        for &p in producers {
            outputs[p].push(index);
        }
        for &c in consumers {
            waiting_on[c] += 1;
        }
    }
    // Every region has at least one member: it was created for one.
    let smallest = |region: usize| members[region].first().copied().unwrap_or(usize::MAX);
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = (0..count)
        .filter(|&region| waiting_on[region] == 0)
        .map(|region| Reverse((smallest(region), region)))
        .collect();
    let mut order = Vec::with_capacity(count);
    while let Some(Reverse((_, region))) = ready.pop() {
        order.push(region);
        for &group in &outputs[region] {
            remaining[group] -= 1;
            if remaining[group] == 0 {
                for &consumer in &groups[group].1 {
                    waiting_on[consumer] -= 1;
                    if waiting_on[consumer] == 0 {
                        ready.push(Reverse((smallest(consumer), consumer)));
                    }
                }
            }
        }
    }
    // Cycles were merged away, so every region was emitted; should that ever fail, keep the
    // rest (by smallest member) rather than lose subtasks.
    if order.len() < count {
        let mut emitted = vec![false; count];
        for &region in &order {
            emitted[region] = true;
        }
        let mut rest: Vec<usize> = (0..count).filter(|&r| !emitted[r]).collect();
        rest.sort_by_key(|&r| smallest(r));
        order.extend(rest);
    }
    order
}

/// Tarjan's algorithm without recursion (a long chain of regions must not overflow the stack).
fn strongly_connected_components(nodes: usize, arcs: &[(usize, usize)]) -> Vec<Vec<usize>> {
    // Adjacency in compressed form: the successors of `v` are `targets[starts[v]..starts[v+1]]`.
    let mut starts = vec![0usize; nodes + 1];
    for &(from, _) in arcs {
        starts[from + 1] += 1;
    }
    for node in 0..nodes {
        starts[node + 1] += starts[node];
    }
    let mut fill = starts.clone();
    let mut targets = vec![0usize; arcs.len()];
    for &(from, to) in arcs {
        targets[fill[from]] = to;
        fill[from] += 1;
    }

    const UNVISITED: usize = usize::MAX;
    let mut index = vec![UNVISITED; nodes];
    let mut low = vec![0usize; nodes];
    let mut on_stack = vec![false; nodes];
    let mut stack = Vec::new();
    let mut calls: Vec<(usize, usize)> = Vec::new(); // (node, next successor position)
    let mut next_index = 0;
    let mut components = Vec::new();

    for root in 0..nodes {
        if index[root] != UNVISITED {
            continue;
        }
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        calls.push((root, starts[root]));
        while let Some(&(node, position)) = calls.last() {
            if position < starts[node + 1] {
                if let Some(call) = calls.last_mut() {
                    call.1 += 1;
                }
                let next = targets[position];
                if index[next] == UNVISITED {
                    index[next] = next_index;
                    low[next] = next_index;
                    next_index += 1;
                    stack.push(next);
                    on_stack[next] = true;
                    calls.push((next, starts[next]));
                } else if on_stack[next] {
                    low[node] = low[node].min(index[next]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == index[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components
}

/// Disjoint sets with path halving and union by size: near-constant time per operation.
struct UnionFind {
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl UnionFind {
    fn new(count: usize) -> Self {
        Self {
            parent: (0..count).collect(),
            size: vec![1; count],
        }
    }

    fn find(&mut self, mut item: usize) -> usize {
        while self.parent[item] != item {
            self.parent[item] = self.parent[self.parent[item]];
            item = self.parent[item];
        }
        item
    }

    /// The representative without compressing paths (for a shared borrow after all unions).
    fn root(&self, mut item: usize) -> usize {
        while self.parent[item] != item {
            item = self.parent[item];
        }
        item
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        let (big, small) = if self.size[a] >= self.size[b] {
            (a, b)
        } else {
            (b, a)
        };
        self.parent[small] = big;
        self.size[big] += self.size[small];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ids::JobVertexId;
    use crate::job::graph::{
        DEFAULT_SLOT_SHARING_GROUP, JobEdge, JobVertex, RestartStrategyConfig,
    };
    use DistributionPattern::{AllToAll, Forward};
    use ExchangeMode::{Blocking, Pipelined};

    fn graph(
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
        }
    }

    /// Computes regions and checks the invariants every answer must keep.
    fn regions(
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
}
