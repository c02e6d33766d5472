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
        self.ready.remove(&region);
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

/// Slots this job needs at once at most: per slot sharing group, the largest parallelism.
pub fn peak_slots(graph: &JobGraph) -> u64 {
    let mut groups: BTreeMap<&str, u32> = BTreeMap::new();
    for vertex in &graph.vertices {
        let entry = groups
            .entry(vertex.slot_sharing_group.as_str())
            .or_default();
        *entry = (*entry).max(vertex.parallelism);
    }
    groups.values().map(|p| u64::from(*p)).sum()
}

/// Slots the largest pipelined region of `graph` needs at once: what a pool must offer for the
/// job to run at all (its regions run in waves as slots free).
pub fn largest_region_slots(graph: &JobGraph) -> Result<u64, RegionError> {
    let regions = PipelinedRegions::compute(graph)?;
    Ok(regions
        .regions
        .iter()
        .map(|region| slots_needed(graph, region.members.iter().map(|m| m.vertex)))
        .max()
        .unwrap_or(0))
}

/// Slots a set of subtasks needs at once: per slot sharing group, the vertex with the most
/// subtasks among them (a shared slot holds one subtask of each vertex of its group).
pub fn slots_needed(graph: &JobGraph, vertices: impl IntoIterator<Item = usize>) -> u64 {
    let mut vertices = vertices.into_iter().peekable();
    let Some(first) = vertices.next() else {
        return 0;
    };
    if vertices.peek().is_none() {
        return 1; // one subtask, one slot: the common case of many independent regions
    }
    let mut per_vertex: BTreeMap<usize, u64> = BTreeMap::new();
    for vertex in std::iter::once(first).chain(vertices) {
        *per_vertex.entry(vertex).or_default() += 1;
    }
    let mut per_group: BTreeMap<&str, u64> = BTreeMap::new();
    for (vertex, count) in per_vertex {
        let largest = per_group
            .entry(graph.vertices[vertex].slot_sharing_group.as_str())
            .or_default();
        *largest = (*largest).max(count);
    }
    per_group.values().sum()
}

#[cfg(test)]
pub(super) mod tests;
