//! A program's logical plan: the operators it declared (nodes) and how records flow between
//! them (edges), before chaining turns it into a `JobGraph`.
//!
//! Nodes and edges are numbered in the order the program declares them. The same program code,
//! run with the same arguments, declares them in the same order: that is how a TaskManager
//! rebuilding the plan finds the operators a vertex names (see [`super::program`]).

use std::any::Any;
use std::sync::Arc;

use crate::job::graph::ExchangeMode;
use crate::operators::OperatorError;

use super::data::Data;
use super::keys::KeyHash;
use super::runtime::{BoxPush, Feed, NetOut, Outputs, Route, RunSource, TypedFeed, erase, unerase};

/// A program's plan. See the module docs.
#[derive(Clone)]
pub(crate) struct Plan {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// Subtasks of an operator that sets none.
    pub default_parallelism: u32,
    /// The number of key groups; `None`: Flink's default from the largest parallelism.
    pub max_parallelism: Option<u32>,
    /// Whether forward edges of equal parallelism run in one task.
    pub chaining: bool,
    /// What happens when a task fails.
    pub restart_strategy: crate::job::graph::RestartStrategyConfig,
}

impl Plan {
    pub fn new(default_parallelism: u32) -> Self {
        Self {
            nodes: Vec::new(),
            edges: Vec::new(),
            default_parallelism,
            max_parallelism: None,
            chaining: true,
            restart_strategy: crate::job::graph::RestartStrategyConfig::FixedDelay {
                attempts: crate::job::graph::RestartStrategyConfig::DEFAULT_ATTEMPTS,
                delay: crate::job::graph::RestartStrategyConfig::DEFAULT_DELAY,
            },
        }
    }

    /// The subtasks node `node` runs as.
    pub fn parallelism(&self, node: usize) -> u32 {
        let node = &self.nodes[node];
        let followed = || {
            node.inputs
                .first()
                .filter(|_| node.follows_input)
                .map(|&edge| self.parallelism(self.edges[edge].source))
        };
        node.fixed_parallelism
            .or(node.parallelism)
            .or_else(followed)
            .unwrap_or(self.default_parallelism)
            .max(1)
    }

    /// A digest of what the plan declares (operators, their subtasks and settings, edges), so a
    /// TaskManager can tell that the plan it rebuilt is the client's: the first 16 hex digits
    /// of a SHA-256.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut text = format!(
            "{} {:?} {}\n",
            self.default_parallelism, self.max_parallelism, self.chaining
        );
        for (id, node) in self.nodes.iter().enumerate() {
            text.push_str(&format!(
                "n {} {:?} {} {:?} {} {} {}\n",
                node.name,
                node.sharing,
                self.parallelism(id),
                node.inputs,
                node.blocking,
                node.unchained,
                node.first_input_last
            ));
        }
        for edge in &self.edges {
            text.push_str(&format!(
                "e {} {} {} {:?}\n",
                edge.source, edge.target, edge.port, edge.ship
            ));
        }
        Sha256::digest(text.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The max parallelism (key groups) of the plan.
    pub fn effective_max_parallelism(&self) -> u32 {
        self.max_parallelism.unwrap_or_else(|| {
            let largest = (0..self.nodes.len())
                .map(|node| self.parallelism(node))
                .max()
                .unwrap_or(1);
            super::keys::default_max_parallelism(largest)
        })
    }

    /// How edge `edge` ships records, now that both sides' parallelism is known: a forward
    /// edge between different parallelisms rebalances (as Flink's DataSet API does).
    pub fn ship(&self, edge: usize) -> Ship {
        let e = &self.edges[edge];
        if e.ship == Ship::Forward && self.parallelism(e.source) != self.parallelism(e.target) {
            Ship::Rebalance
        } else {
            e.ship
        }
    }

    /// Adds a node; returns its id.
    pub fn add_node(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Connects `source`'s output to `target`'s next input port.
    pub fn connect(
        &mut self,
        source: usize,
        target: usize,
        ship: Ship,
        runtime: Arc<dyn EdgeRuntime>,
    ) {
        let id = self.edges.len();
        let port = self.nodes[target].inputs.len();
        self.edges.push(Edge {
            source,
            target,
            port,
            ship,
            runtime,
        });
        self.nodes[source].outputs.push(id);
        self.nodes[target].inputs.push(id);
    }
}

/// How records cross an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ship {
    /// Subtask i to subtask i.
    Forward,
    /// By key group.
    Hash,
    /// Round robin.
    Rebalance,
    /// Every record to every consumer.
    Broadcast,
    /// The user's partitioner.
    Custom,
    /// Everything to consumer 0.
    Gather,
}

/// One declared operator.
#[derive(Clone)]
pub(crate) struct Node {
    /// Its name (for vertices, the REST API and errors).
    pub name: String,
    /// Subtasks set by the program.
    pub parallelism: Option<u32>,
    /// Subtasks the operator needs whatever the program says (a final top-k: 1).
    pub fixed_parallelism: Option<u32>,
    /// Runs with its first input's producer's subtasks unless the program sets its own (a
    /// `collect` keeps its input's partitions and their order).
    pub follows_input: bool,
    /// Its slot sharing group (`None`: the default).
    pub sharing: Option<String>,
    /// Edges in, by input port.
    pub inputs: Vec<usize>,
    /// Edges out.
    pub outputs: Vec<usize>,
    /// Whether the exchanges out of it are blocking (its consumers start once it finished).
    pub blocking: bool,
    /// Whether it may never share a task with its producer (a pass-through that breaks a chain).
    pub unchained: bool,
    /// Whether it reads its first input only after every other input has ended (a join's probe
    /// side, the main input of a broadcast side input): then its first input may be chained
    /// even though it has others, and a task running it reads its network inputs before its
    /// chained source (see `super::translate`).
    pub first_input_last: bool,
    /// How it runs.
    pub runtime: Arc<dyn NodeRuntime>,
}

impl Node {
    pub fn new(name: impl Into<String>, runtime: Arc<dyn NodeRuntime>) -> Self {
        Self {
            name: name.into(),
            parallelism: None,
            fixed_parallelism: None,
            follows_input: false,
            sharing: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            blocking: false,
            unchained: false,
            first_input_last: false,
            runtime,
        }
    }

    /// The exchange mode of the edges out of it.
    pub fn exchange(&self) -> ExchangeMode {
        if self.blocking {
            ExchangeMode::Blocking
        } else {
            ExchangeMode::Pipelined
        }
    }
}

/// One connection from a node's output to another node's input port.
#[derive(Clone)]
pub(crate) struct Edge {
    pub source: usize,
    pub target: usize,
    pub port: usize,
    pub ship: Ship,
    pub runtime: Arc<dyn EdgeRuntime>,
}

/// What one subtask of a node knows when it is instantiated.
#[derive(Debug, Clone)]
pub(crate) struct NodeContext {
    /// This subtask, from 0.
    pub subtask: u32,
    /// The node's subtasks.
    pub parallelism: u32,
    /// The vertex (task) it runs in.
    pub vertex: String,
    /// The node's name.
    pub node: String,
    /// Where it may spill.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Its share of the task's managed memory, bytes.
    pub memory: u64,
    /// The plan's key groups.
    pub max_parallelism: u32,
    /// The task's attempt (0, then 1, 2, ... after restarts).
    pub attempt: u32,
}

/// A node's instance in one subtask.
pub(crate) enum Instance {
    /// A source: runs, pushing into its downstream.
    Source(Box<dyn RunSource>),
    /// An operator: one `BoxPush<In>` (erased) per input port.
    Ports(Vec<Box<dyn Any>>),
}

/// How a node runs: it makes one instance per subtask. Implementations are typed; the plan
/// holds them erased.
pub(crate) trait NodeRuntime: Send + Sync {
    /// The instance for one subtask, pushing into `outputs` (one per output edge, in order).
    fn instantiate(&self, cx: &NodeContext, outputs: Outputs) -> Result<Instance, OperatorError>;

    /// Whether it holds records (sorts, groups, joins): the task's managed memory is shared
    /// among such nodes.
    fn uses_memory(&self) -> bool {
        false
    }
}

/// A node whose instance is made by a closure (most operators).
pub(crate) struct FnNode<F>(pub F);

impl<F> NodeRuntime for FnNode<F>
where
    F: Fn(&NodeContext, Outputs) -> Result<Instance, OperatorError> + Send + Sync,
{
    fn instantiate(&self, cx: &NodeContext, outputs: Outputs) -> Result<Instance, OperatorError> {
        (self.0)(cx, outputs)
    }
}

/// A node that holds records, made by a closure.
pub(crate) struct MemoryNode<F>(pub F);

impl<F> NodeRuntime for MemoryNode<F>
where
    F: Fn(&NodeContext, Outputs) -> Result<Instance, OperatorError> + Send + Sync,
{
    fn instantiate(&self, cx: &NodeContext, outputs: Outputs) -> Result<Instance, OperatorError> {
        (self.0)(cx, outputs)
    }

    fn uses_memory(&self) -> bool {
        true
    }
}

/// An edge's typed ends: how its producer writes records to the network and how its consumer
/// reads them back. Chained edges use neither: the consumer's port is the producer's push.
pub(crate) trait EdgeRuntime: Send + Sync {
    /// The producer's push writing to the task's output `output` of `subpartitions`.
    fn network_output(
        &self,
        output: usize,
        subpartitions: usize,
        ship: Ship,
        cx: &NodeContext,
    ) -> Box<dyn Any>;

    /// The consumer's feed decoding the task's input into `port` (an erased `BoxPush`).
    fn network_input(&self, port: Box<dyn Any>, describe: String) -> Box<dyn Feed>;

    /// A pass-through node of the edge's record type (to split an edge in two).
    fn identity(&self) -> Arc<dyn NodeRuntime>;

    /// A forward edge of the same record type.
    fn plain(&self) -> Arc<dyn EdgeRuntime>;
}

/// The ends of an edge carrying `T`.
pub(crate) struct TypedEdge<T> {
    /// The key of a hash edge, or a custom partitioner.
    pub route: Route<T>,
}

impl<T: Data> TypedEdge<T> {
    /// An edge that routes as `ship` says (a hash edge needs [`TypedEdge::hashed`], a custom
    /// one [`TypedEdge::custom`]).
    pub fn plain() -> Arc<dyn EdgeRuntime> {
        Arc::new(Self {
            route: Route::Forward,
        })
    }

    /// An edge routing by `key`.
    pub fn hashed(key: KeyHash<T>) -> Arc<dyn EdgeRuntime> {
        Arc::new(Self {
            route: Route::Hash(key),
        })
    }

    /// An edge routing by the user's function.
    pub fn custom(f: Arc<dyn Fn(&T, usize) -> usize + Send + Sync>) -> Arc<dyn EdgeRuntime> {
        Arc::new(Self {
            route: Route::Custom(f),
        })
    }
}

impl<T: Data> EdgeRuntime for TypedEdge<T> {
    fn network_output(
        &self,
        output: usize,
        subpartitions: usize,
        ship: Ship,
        cx: &NodeContext,
    ) -> Box<dyn Any> {
        let route = match ship {
            Ship::Forward => Route::Forward,
            Ship::Rebalance => Route::Rebalance,
            Ship::Broadcast => Route::Broadcast,
            Ship::Gather => Route::Gather,
            Ship::Hash | Ship::Custom => self.route.clone(),
        };
        let push: BoxPush<T> = Box::new(NetOut {
            output,
            subpartitions,
            route,
            max_parallelism: cx.max_parallelism,
            next: cx.subtask as usize,
            key_scratch: Vec::new(),
        });
        erase(push)
    }

    fn network_input(&self, port: Box<dyn Any>, describe: String) -> Box<dyn Feed> {
        Box::new(TypedFeed::<T> {
            port: unerase(port),
            describe,
        })
    }

    fn identity(&self) -> Arc<dyn NodeRuntime> {
        super::ops::identity::<T>()
    }

    fn plain(&self) -> Arc<dyn EdgeRuntime> {
        Self::plain()
    }
}
