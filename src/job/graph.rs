//! The job graph: vertices (operators with a parallelism) joined by edges.
//!
//! A vertex names an operator from the [`OperatorRegistry`](crate::operators::OperatorRegistry)
//! and carries that operator's configuration as string key/values. Vertices in the same slot
//! sharing group may share a slot (one subtask of each vertex per shared slot); vertices in the
//! same co-location group place subtask *i* of each in the same slot.
//!
//! This module owns the graph's shape and its rules: [`JobGraph::builder`] makes graphs in code,
//! [`JobGraph::validate`] refuses every graph the runtime could not run (and names the vertex or
//! edge at fault), and the traversal helpers ([`JobGraph::topological_order`],
//! [`JobGraph::inputs_of`], ...) give the scheduler deterministic orders. It never looks at a
//! cluster: whether there are enough slots is the scheduler's question.
//!
//! ```
//! use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
//!
//! let mut b = JobGraph::builder("wordcount");
//! let source = b.vertex("source", "text-source", 2).config("path", "in.txt").index();
//! let count = b.vertex("count", "count-by-key", 2).index();
//! b.edge(source, count, DistributionPattern::AllToAll, ExchangeMode::Pipelined);
//! let graph = b.build(|operator| ["text-source", "count-by-key"].contains(&operator)).unwrap();
//! assert_eq!(graph.topological_order(), vec![0, 1]);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::base::hash::fnv1a;
use crate::base::ids::JobVertexId;

/// The slot sharing group of vertices that name none (Flink's "default").
pub const DEFAULT_SLOT_SHARING_GROUP: &str = "default";

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobGraph {
    /// The job's name, for people.
    pub name: String,
    /// The vertices; an edge refers to a vertex by its index here.
    pub vertices: Vec<JobVertex>,
    /// The edges.
    pub edges: Vec<JobEdge>,
    /// What happens when a task fails.
    pub restart_strategy: RestartStrategyConfig,
    /// The key groups keyed exchanges route by (Flink's max parallelism), for programs; `None`
    /// for graphs that route by their records' string keys.
    #[serde(default)]
    pub max_parallelism: Option<u32>,
    /// The files the job ships with it (see [`super::artifact`]).
    #[serde(default)]
    pub artifacts: Vec<super::artifact::JobArtifact>,
}

/// One operator of the job, run as `parallelism` subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVertex {
    /// Stable within the job (derived from the name).
    pub id: JobVertexId,
    /// Unique within the job.
    pub name: String,
    /// The operator's registered name.
    pub operator: String,
    /// The operator's configuration.
    pub config: BTreeMap<String, String>,
    /// How many subtasks.
    pub parallelism: u32,
    /// Vertices of one group may share slots.
    pub slot_sharing_group: String,
    /// Vertices of one group place subtask i in the same slot.
    pub co_location_group: Option<String>,
    /// The operators chained in this vertex, in order, when it runs a chain of a program's
    /// operators (for people: the REST API shows them). Empty for a single operator.
    #[serde(default)]
    pub chain: Vec<String>,
}

/// Data flows from `source` to `target` (indices into [`JobGraph::vertices`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEdge {
    /// The producing vertex.
    pub source: usize,
    /// The consuming vertex.
    pub target: usize,
    /// Which producer subtask feeds which consumer subtask.
    pub pattern: DistributionPattern,
    /// Whether the consumer may run while the producer does.
    pub exchange: ExchangeMode,
}

/// Which producer subtasks feed which consumer subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DistributionPattern {
    /// Subtask i feeds subtask i (both sides have the same parallelism).
    Forward,
    /// Every producer feeds every consumer; a record goes to the consumer its key hashes to.
    AllToAll,
}

/// How a result is exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExchangeMode {
    /// The consumer reads while the producer writes: both run together (same pipelined region).
    Pipelined,
    /// The consumer starts once the producer finished: a region boundary.
    Blocking,
}

/// Restart strategies with Flink's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum RestartStrategyConfig {
    /// A failed task fails the job.
    None,
    /// Restart up to `attempts` times, `delay` apart.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Pause before each restart.
        delay: Duration,
    },
    /// Restart forever with a growing pause (Flink's defaults: 1 s, 1 min, ×1.5, jitter 0.1).
    ExponentialDelay {
        /// The first pause.
        initial: Duration,
        /// The cap.
        max: Duration,
        /// Growth per consecutive failure.
        multiplier: f64,
        /// Random spread, as a fraction of the pause (0.1 = ±10 %).
        jitter: f64,
    },
}

impl Default for RestartStrategyConfig {
    /// Flink's default for jobs with restarts enabled.
    fn default() -> Self {
        Self::ExponentialDelay {
            initial: Self::DEFAULT_INITIAL,
            max: Self::DEFAULT_MAX,
            multiplier: Self::DEFAULT_MULTIPLIER,
            jitter: Self::DEFAULT_JITTER,
        }
    }
}

/// Flink's defaults per key, for job files that leave a key out.
impl RestartStrategyConfig {
    /// Fixed-delay restarts allowed (Flink's `restart-strategy.fixed-delay.attempts`).
    pub const DEFAULT_ATTEMPTS: u32 = 1;
    /// Fixed-delay pause (Flink's `restart-strategy.fixed-delay.delay`).
    pub const DEFAULT_DELAY: Duration = Duration::from_secs(1);
    /// Exponential-delay first pause.
    pub const DEFAULT_INITIAL: Duration = Duration::from_secs(1);
    /// Exponential-delay cap.
    pub const DEFAULT_MAX: Duration = Duration::from_secs(60);
    /// Exponential-delay growth per consecutive failure.
    pub const DEFAULT_MULTIPLIER: f64 = 1.5;
    /// Exponential-delay random spread.
    pub const DEFAULT_JITTER: f64 = 0.1;
}

/// The largest parallelism accepted for a vertex: beyond it a value is surely a typo (Flink's
/// own upper bound for max parallelism is 32 768; this leaves room without allowing nonsense).
pub const MAX_PARALLELISM: u32 = 100_000;

/// The most subtasks one job may have over all its vertices: the JobManager keeps a few hundred
/// bytes per subtask, so this bounds one job's memory (and the time to build its execution
/// graph) well under a second and a gigabyte.
pub const MAX_SUBTASKS: u64 = 1_000_000;

/// A job graph that cannot run. Not retryable: the graph (or the job file) must change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobGraphError {
    /// The job's artifacts cannot be used.
    #[error(transparent)]
    Artifact(#[from] super::artifact::ArtifactError),
    /// The graph has no vertices, so there is nothing to run.
    #[error("job `{job}` has no vertices; a job needs at least one")]
    Empty {
        /// The job's name.
        job: String,
    },
    /// Two vertices share a name: edges, ids and logs could not tell them apart.
    #[error(
        "two vertices are named `{name}` (vertices {first} and {second}); names must be unique"
    )]
    DuplicateVertexName {
        /// The name.
        name: String,
        /// Index of the first vertex with it.
        first: usize,
        /// Index of the second.
        second: usize,
    },
    /// Two vertices have the same id: the runtime keys vertices by id and would merge them.
    #[error("vertices `{first}` and `{second}` have the same id {id}; rename one of them")]
    DuplicateVertexId {
        /// The shared id.
        id: JobVertexId,
        /// The first vertex's name.
        first: String,
        /// The second vertex's name.
        second: String,
    },
    /// A vertex with no subtasks would never produce or consume anything.
    #[error("vertex `{vertex}` has parallelism 0; it needs at least 1 subtask")]
    ZeroParallelism {
        /// The vertex.
        vertex: String,
    },
    /// A parallelism over [`MAX_PARALLELISM`] is surely a mistake.
    #[error("vertex `{vertex}` has parallelism {parallelism}, over the limit of {MAX_PARALLELISM}")]
    ParallelismTooHigh {
        /// The vertex.
        vertex: String,
        /// The parallelism it asks for.
        parallelism: u32,
    },
    /// Over [`MAX_SUBTASKS`] subtasks in all.
    #[error(
        "job `{job}` has {subtasks} subtasks over all its vertices, over the limit of {MAX_SUBTASKS}; \
         lower the parallelism or split the job"
    )]
    TooManySubtasks {
        /// The job's name.
        job: String,
        /// Its subtasks in all.
        subtasks: u64,
    },
    /// A vertex names an operator the registry does not have, so no task could run it.
    #[error("vertex `{vertex}` uses operator `{operator}`, which is not a known operator")]
    UnknownOperator {
        /// The vertex.
        vertex: String,
        /// The operator it names.
        operator: String,
    },
    /// An edge refers to a vertex index the graph does not have.
    #[error(
        "edge {edge} refers to vertex {index}, but the job has only {vertices} vertices (0 to {})",
        .vertices.saturating_sub(1)
    )]
    UnknownVertex {
        /// The edge's index.
        edge: usize,
        /// The index it names.
        index: usize,
        /// How many vertices there are.
        vertices: usize,
    },
    /// An edge from a vertex to itself: a vertex cannot wait for its own output.
    #[error("edge {edge} joins vertex `{vertex}` to itself; a job graph must be acyclic")]
    SelfLoop {
        /// The edge's index.
        edge: usize,
        /// The vertex.
        vertex: String,
    },
    /// Two edges join the same pair: each record would be delivered twice.
    #[error(
        "edges {first} and {second} both join `{from}` -> `{to}`; join two vertices at most once"
    )]
    DuplicateEdge {
        /// The first edge's index.
        first: usize,
        /// The second edge's index.
        second: usize,
        /// The producing vertex.
        from: String,
        /// The consuming vertex.
        to: String,
    },
    /// A forward edge joins subtask i to subtask i, so both sides need the same parallelism.
    #[error(
        "forward edge `{from}` -> `{to}` joins parallelism {from_parallelism} to \
         {to_parallelism}; a forward edge needs the same parallelism on both sides \
         (make them equal or use an all-to-all edge)"
    )]
    ForwardParallelismMismatch {
        /// The producing vertex.
        from: String,
        /// Its parallelism.
        from_parallelism: u32,
        /// The consuming vertex.
        to: String,
        /// Its parallelism.
        to_parallelism: u32,
    },
    /// The edges form a cycle, so no vertex on it could ever start (or finish).
    #[error("the edges form a cycle: {}; a job graph must be acyclic", show_cycle(.vertices))]
    Cycle {
        /// The vertices on the cycle, in edge order, starting from the lowest index.
        vertices: Vec<String>,
    },
    /// Co-located vertices place subtask i in one slot, so they need the same parallelism.
    #[error(
        "co-location group `{group}` holds `{first}` (parallelism {first_parallelism}) and \
         `{second}` (parallelism {second_parallelism}); co-located vertices need the same \
         parallelism"
    )]
    CoLocationParallelism {
        /// The co-location group.
        group: String,
        /// One vertex of it.
        first: String,
        /// That vertex's parallelism.
        first_parallelism: u32,
        /// Another vertex of it.
        second: String,
        /// That vertex's parallelism.
        second_parallelism: u32,
    },
    /// Co-located vertices share slots, which only vertices of one slot sharing group may do.
    #[error(
        "co-location group `{group}` holds `{first}` (slot sharing group `{first_group}`) and \
         `{second}` (slot sharing group `{second_group}`); co-located vertices need the same \
         slot sharing group"
    )]
    CoLocationSlotSharing {
        /// The co-location group.
        group: String,
        /// One vertex of it.
        first: String,
        /// That vertex's slot sharing group.
        first_group: String,
        /// Another vertex of it.
        second: String,
        /// That vertex's slot sharing group.
        second_group: String,
    },
    /// A restart strategy value the restart logic cannot use.
    #[error("invalid restart strategy: {key} = {value}: expected {expected}")]
    InvalidRestartStrategy {
        /// The key, as a job file writes it (`restart-strategy.multiplier`).
        key: &'static str,
        /// The value given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
}

fn show_cycle(vertices: &[String]) -> String {
    let mut path: Vec<String> = vertices.iter().map(|name| format!("`{name}`")).collect();
    if let Some(first) = path.first().cloned() {
        path.push(first);
    }
    path.join(" -> ")
}

/// A vertex handed out by a [`JobGraphBuilder`], for joining it with edges. A newtype so an edge
/// cannot be given a parallelism or an edge index by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VertexIndex(usize);

impl VertexIndex {
    /// The vertex's index in [`JobGraph::vertices`] (what [`JobEdge`] stores).
    pub const fn as_usize(self) -> usize {
        self.0
    }
}

impl JobVertex {
    /// A vertex with no configuration in the default slot sharing group, its id derived from
    /// its name.
    pub fn new(name: impl Into<String>, operator: impl Into<String>, parallelism: u32) -> Self {
        let name = name.into();
        Self {
            id: Self::id_for(&name),
            name,
            operator: operator.into(),
            config: BTreeMap::new(),
            parallelism,
            slot_sharing_group: DEFAULT_SLOT_SHARING_GROUP.to_owned(),
            co_location_group: None,
            chain: Vec::new(),
        }
    }

    /// The id of the vertex named `name`: FNV-1a (64 bit) of the name, never random, so a
    /// resubmitted job keeps its vertex ids. The hash fills the upper half of the id because
    /// ids print their upper 32 bits in logs.
    pub fn id_for(name: &str) -> JobVertexId {
        JobVertexId::from_u128(u128::from(fnv1a(name.as_bytes())) << 64)
    }
}

/// Builds a [`JobGraph`] in code; [`JobGraphBuilder::build`] validates it.
///
/// Vertices are added with [`vertex`](Self::vertex), which returns a [`VertexBuilder`] for the
/// optional settings and, through [`VertexBuilder::index`], the handle edges take.
#[derive(Debug, Clone)]
pub struct JobGraphBuilder {
    name: String,
    vertices: Vec<JobVertex>,
    edges: Vec<JobEdge>,
    restart_strategy: RestartStrategyConfig,
    max_parallelism: Option<u32>,
    artifacts: Vec<super::artifact::JobArtifact>,
}

/// The optional settings of a vertex just added to a [`JobGraphBuilder`].
#[derive(Debug)]
pub struct VertexBuilder<'a> {
    vertex: &'a mut JobVertex,
    index: VertexIndex,
}

impl JobGraph {
    /// Starts a graph named `name`, with the default restart strategy.
    pub fn builder(name: impl Into<String>) -> JobGraphBuilder {
        JobGraphBuilder {
            name: name.into(),
            vertices: Vec::new(),
            edges: Vec::new(),
            restart_strategy: RestartStrategyConfig::default(),
            max_parallelism: None,
            artifacts: Vec::new(),
        }
    }
}

impl JobGraphBuilder {
    /// Adds a vertex running `operator` as `parallelism` subtasks; chain the returned builder's
    /// setters, then take its [`index`](VertexBuilder::index) for edges.
    pub fn vertex(
        &mut self,
        name: impl Into<String>,
        operator: impl Into<String>,
        parallelism: u32,
    ) -> VertexBuilder<'_> {
        let index = VertexIndex(self.vertices.len());
        self.vertices
            .push(JobVertex::new(name, operator, parallelism));
        let vertex = &mut self.vertices[index.0];
        VertexBuilder { vertex, index }
    }

    /// Adds an edge: `from`'s output feeds `to`.
    pub fn edge(
        &mut self,
        from: VertexIndex,
        to: VertexIndex,
        pattern: DistributionPattern,
        exchange: ExchangeMode,
    ) -> &mut Self {
        self.edges.push(JobEdge {
            source: from.0,
            target: to.0,
            pattern,
            exchange,
        });
        self
    }

    /// Sets what happens when a task fails (default: [`RestartStrategyConfig::default`]).
    pub fn restart_strategy(&mut self, strategy: RestartStrategyConfig) -> &mut Self {
        self.restart_strategy = strategy;
        self
    }

    /// Sets the graph's max parallelism (see [`JobGraph::max_parallelism`]).
    pub fn max_parallelism(&mut self, max_parallelism: Option<u32>) -> &mut Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// Ships `artifact` with the job (see [`super::artifact`]).
    pub fn artifact(&mut self, artifact: super::artifact::JobArtifact) -> &mut Self {
        self.artifacts.push(artifact);
        self
    }

    /// Validates the graph (see [`JobGraph::validate`]) and returns it.
    pub fn build(self, knows_operator: impl Fn(&str) -> bool) -> Result<JobGraph, JobGraphError> {
        let graph = JobGraph {
            name: self.name,
            vertices: self.vertices,
            edges: self.edges,
            restart_strategy: self.restart_strategy,
            max_parallelism: self.max_parallelism,
            artifacts: self.artifacts,
        };
        graph.validate(knows_operator)?;
        Ok(graph)
    }
}

impl VertexBuilder<'_> {
    /// Sets one key of the operator's configuration (a later value for a key replaces it).
    pub fn config(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.vertex.config.insert(key.into(), value.into());
        self
    }

    /// Names the operators chained in the vertex (see [`JobVertex::chain`]).
    pub fn chain(self, operators: Vec<String>) -> Self {
        self.vertex.chain = operators;
        self
    }

    /// Puts the vertex in slot sharing group `group` (default [`DEFAULT_SLOT_SHARING_GROUP`]).
    pub fn slot_sharing_group(self, group: impl Into<String>) -> Self {
        self.vertex.slot_sharing_group = group.into();
        self
    }

    /// Puts the vertex in co-location group `group`: its subtask i shares a slot with subtask i
    /// of the group's other vertices.
    pub fn co_location_group(self, group: impl Into<String>) -> Self {
        self.vertex.co_location_group = Some(group.into());
        self
    }

    /// The handle for joining this vertex with edges.
    pub fn index(self) -> VertexIndex {
        self.index
    }
}

impl JobGraph {
    /// Checks everything the runtime relies on and names the vertex or edge at fault: at least
    /// one vertex; unique names and ids; parallelism from 1 to [`MAX_PARALLELISM`]; known
    /// operators; edges between existing, distinct vertices, at most one per pair, forward
    /// edges only between equal parallelisms; no cycle; co-location groups of one parallelism
    /// and one slot sharing group; a usable restart strategy.
    pub fn validate(&self, knows_operator: impl Fn(&str) -> bool) -> Result<(), JobGraphError> {
        if self.vertices.is_empty() {
            return Err(JobGraphError::Empty {
                job: self.name.clone(),
            });
        }
        self.validate_vertices(&knows_operator)?;
        let subtasks: u64 = self.vertices.iter().map(|v| u64::from(v.parallelism)).sum();
        if subtasks > MAX_SUBTASKS {
            return Err(JobGraphError::TooManySubtasks {
                job: self.name.clone(),
                subtasks,
            });
        }
        self.validate_edges()?;
        self.validate_acyclic()?;
        self.validate_co_location()?;
        super::artifact::validate(&self.artifacts)?;
        validate_restart_strategy(&self.restart_strategy)
    }

    fn validate_vertices(
        &self,
        knows_operator: &impl Fn(&str) -> bool,
    ) -> Result<(), JobGraphError> {
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut ids: BTreeMap<JobVertexId, usize> = BTreeMap::new();
        for (index, vertex) in self.vertices.iter().enumerate() {
            if let Some(&first) = names.get(vertex.name.as_str()) {
                return Err(JobGraphError::DuplicateVertexName {
                    name: vertex.name.clone(),
                    first,
                    second: index,
                });
            }
            names.insert(&vertex.name, index);
            if let Some(&first) = ids.get(&vertex.id) {
                return Err(JobGraphError::DuplicateVertexId {
                    id: vertex.id,
                    first: self.vertices[first].name.clone(),
                    second: vertex.name.clone(),
                });
            }
            ids.insert(vertex.id, index);
            validate_vertex(vertex, knows_operator)?;
        }
        Ok(())
    }

    fn validate_edges(&self) -> Result<(), JobGraphError> {
        let mut pairs: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (index, edge) in self.edges.iter().enumerate() {
            for end in [edge.source, edge.target] {
                if end >= self.vertices.len() {
                    return Err(JobGraphError::UnknownVertex {
                        edge: index,
                        index: end,
                        vertices: self.vertices.len(),
                    });
                }
            }
            let (from, to) = (&self.vertices[edge.source], &self.vertices[edge.target]);
            if edge.source == edge.target {
                return Err(JobGraphError::SelfLoop {
                    edge: index,
                    vertex: from.name.clone(),
                });
            }
            if let Some(&first) = pairs.get(&(edge.source, edge.target)) {
                return Err(JobGraphError::DuplicateEdge {
                    first,
                    second: index,
                    from: from.name.clone(),
                    to: to.name.clone(),
                });
            }
            pairs.insert((edge.source, edge.target), index);
            if edge.pattern == DistributionPattern::Forward && from.parallelism != to.parallelism {
                return Err(JobGraphError::ForwardParallelismMismatch {
                    from: from.name.clone(),
                    from_parallelism: from.parallelism,
                    to: to.name.clone(),
                    to_parallelism: to.parallelism,
                });
            }
        }
        Ok(())
    }

    fn validate_acyclic(&self) -> Result<(), JobGraphError> {
        let ordered: BTreeSet<usize> = self.topological_order().into_iter().collect();
        if ordered.len() == self.vertices.len() {
            return Ok(());
        }
        let cycle = self.find_cycle(&ordered);
        Err(JobGraphError::Cycle {
            vertices: cycle
                .into_iter()
                .map(|index| self.vertices[index].name.clone())
                .collect(),
        })
    }

    /// A cycle among the vertices Kahn's algorithm could not order. Each of them has a
    /// predecessor among them (else it would have been ordered), so walking predecessors from
    /// any of them must revisit a vertex; the walk from that vertex on is a cycle.
    fn find_cycle(&self, ordered: &BTreeSet<usize>) -> Vec<usize> {
        let stuck = |index: &usize| !ordered.contains(index);
        let Some(start) = (0..self.vertices.len()).find(stuck) else {
            return Vec::new();
        };
        let mut walk = vec![start];
        let mut current = start;
        loop {
            let predecessor = self
                .inputs_of(current)
                .into_iter()
                .map(|(_, edge)| edge.source)
                .filter(stuck)
                .min();
            let Some(predecessor) = predecessor else {
                return Vec::new(); // unreachable by the argument above; no cycle to name
            };
            if let Some(position) = walk.iter().position(|&seen| seen == predecessor) {
                let mut cycle: Vec<usize> = walk.split_off(position);
                cycle.reverse(); // the walk went against the edges
                let lowest = cycle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, v)| **v)
                    .map_or(0, |(i, _)| i);
                cycle.rotate_left(lowest);
                return cycle;
            }
            walk.push(predecessor);
            current = predecessor;
        }
    }

    fn validate_co_location(&self) -> Result<(), JobGraphError> {
        let mut groups: BTreeMap<&str, &JobVertex> = BTreeMap::new();
        for vertex in &self.vertices {
            let Some(group) = vertex.co_location_group.as_deref() else {
                continue;
            };
            let Some(first) = groups.get(group) else {
                groups.insert(group, vertex);
                continue;
            };
            if first.parallelism != vertex.parallelism {
                return Err(JobGraphError::CoLocationParallelism {
                    group: group.to_owned(),
                    first: first.name.clone(),
                    first_parallelism: first.parallelism,
                    second: vertex.name.clone(),
                    second_parallelism: vertex.parallelism,
                });
            }
            if first.slot_sharing_group != vertex.slot_sharing_group {
                return Err(JobGraphError::CoLocationSlotSharing {
                    group: group.to_owned(),
                    first: first.name.clone(),
                    first_group: first.slot_sharing_group.clone(),
                    second: vertex.name.clone(),
                    second_group: vertex.slot_sharing_group.clone(),
                });
            }
        }
        Ok(())
    }

    /// The vertex indices so that every edge goes from an earlier to a later one; among the
    /// vertices ready at once, the lowest index first, so the order is the same on every run.
    /// On a graph with a cycle (which [`validate`](Self::validate) refuses) the vertices on or
    /// behind the cycle are left out; edges naming unknown vertices are ignored.
    pub fn topological_order(&self) -> Vec<usize> {
        let count = self.vertices.len();
        let mut in_degree = vec![0_usize; count];
        let mut successors = vec![Vec::new(); count];
        for edge in &self.edges {
            if edge.source < count && edge.target < count {
                in_degree[edge.target] += 1;
                successors[edge.source].push(edge.target);
            }
        }
        let mut ready: BTreeSet<usize> = (0..count).filter(|&v| in_degree[v] == 0).collect();
        let mut order = Vec::with_capacity(count);
        while let Some(vertex) = ready.pop_first() {
            order.push(vertex);
            for &next in &successors[vertex] {
                in_degree[next] -= 1;
                if in_degree[next] == 0 {
                    ready.insert(next);
                }
            }
        }
        order
    }

    /// The edges into vertex `vertex`, with their indices, in edge order.
    pub fn inputs_of(&self, vertex: usize) -> Vec<(usize, &JobEdge)> {
        self.edges
            .iter()
            .enumerate()
            .filter(|(_, edge)| edge.target == vertex)
            .collect()
    }

    /// The edges out of vertex `vertex`, with their indices, in edge order.
    pub fn outputs_of(&self, vertex: usize) -> Vec<(usize, &JobEdge)> {
        self.edges
            .iter()
            .enumerate()
            .filter(|(_, edge)| edge.source == vertex)
            .collect()
    }

    /// The vertices without inputs (they read from outside the job), in index order.
    pub fn sources(&self) -> Vec<usize> {
        (0..self.vertices.len())
            .filter(|&v| !self.edges.iter().any(|edge| edge.target == v))
            .collect()
    }

    /// The vertices without outputs (they write outside the job), in index order.
    pub fn sinks(&self) -> Vec<usize> {
        (0..self.vertices.len())
            .filter(|&v| !self.edges.iter().any(|edge| edge.source == v))
            .collect()
    }

    /// The index of the vertex named `name`, if there is one.
    pub fn vertex_index(&self, name: &str) -> Option<usize> {
        self.vertices.iter().position(|vertex| vertex.name == name)
    }
}

fn validate_vertex(
    vertex: &JobVertex,
    knows_operator: &impl Fn(&str) -> bool,
) -> Result<(), JobGraphError> {
    if vertex.parallelism == 0 {
        return Err(JobGraphError::ZeroParallelism {
            vertex: vertex.name.clone(),
        });
    }
    if vertex.parallelism > MAX_PARALLELISM {
        return Err(JobGraphError::ParallelismTooHigh {
            vertex: vertex.name.clone(),
            parallelism: vertex.parallelism,
        });
    }
    if !knows_operator(&vertex.operator) {
        return Err(JobGraphError::UnknownOperator {
            vertex: vertex.name.clone(),
            operator: vertex.operator.clone(),
        });
    }
    Ok(())
}

fn validate_restart_strategy(strategy: &RestartStrategyConfig) -> Result<(), JobGraphError> {
    let RestartStrategyConfig::ExponentialDelay {
        initial,
        max,
        multiplier,
        jitter,
    } = *strategy
    else {
        return Ok(());
    };
    if initial.is_zero() {
        // A zero pause never grows: the job would restart in a tight loop forever.
        return Err(invalid_restart(
            "restart-strategy.initial",
            show(initial),
            "a duration above zero",
        ));
    }
    if max < initial {
        return Err(invalid_restart(
            "restart-strategy.max",
            show(max),
            format!("at least restart-strategy.initial ({})", show(initial)),
        ));
    }
    // Non-finite values would make the pause arithmetic (`Duration::mul_f64`) panic.
    if !(multiplier.is_finite() && multiplier >= 1.0) {
        return Err(invalid_restart(
            "restart-strategy.multiplier",
            multiplier,
            "a finite number of at least 1",
        ));
    }
    if !(0.0..=1.0).contains(&jitter) {
        return Err(invalid_restart(
            "restart-strategy.jitter",
            jitter,
            "a number from 0 to 1",
        ));
    }
    Ok(())
}

fn invalid_restart(
    key: &'static str,
    value: impl ToString,
    expected: impl Into<String>,
) -> JobGraphError {
    JobGraphError::InvalidRestartStrategy {
        key,
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn show(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

#[cfg(test)]
mod tests;
