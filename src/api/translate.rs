//! From a program's plan to the `JobGraph` the scheduler runs: operators chained into tasks
//! (Flink's `StreamingJobGraphGenerator` chaining rules), each task a vertex naming the
//! program's operator identity and, in its configuration, the plan nodes and edges it runs.
//!
//! An edge is chained (its records passed by value inside one task) when chaining is on, it is
//! forward, both sides have the same parallelism and slot sharing group, its consumer may be
//! chained, and the exchange out of the producer is pipelined; and either the consumer has no
//! other input, or the edge is the first input of a consumer that reads it last (a broadcast
//! join's probe side: Flink's multiple-input chaining of a source into a join) and the chain it
//! joins feeds none of the consumer's other inputs. Every other edge becomes a `JobEdge`:
//! forward if it is forward, all-to-all otherwise.
//!
//! A task whose chain starts at a source and also has network inputs (those other inputs)
//! reads its network inputs to their end first, then runs the source: the probe side then
//! never waits for the build side in memory.

use std::collections::BTreeMap;

use crate::job::graph::{DEFAULT_SLOT_SHARING_GROUP, DistributionPattern, JobGraph};

use super::plan::{Edge, Node, Plan, Ship};

/// Vertex configuration keys a program's task reads back.
pub(crate) mod keys {
    /// The program's arguments (a JSON array of strings).
    pub const ARGS: &str = "program.args";
    /// Which of the program's `execute` calls the job is (from 0).
    pub const JOB: &str = "program.job";
    /// The plan nodes the task runs, in order (comma-separated ids).
    pub const CHAIN: &str = "program.chain";
    /// The plan edges of its inputs, in the descriptor's order.
    pub const INPUTS: &str = "program.inputs";
    /// The plan edges of its outputs, in the descriptor's order.
    pub const OUTPUTS: &str = "program.outputs";
    /// The earlier jobs' results the program read (see `super::env::Reads`).
    pub const READS: &str = "program.reads";
    /// The client's default parallelism before the program set any.
    pub const DEFAULT_PARALLELISM: &str = "program.default-parallelism";
    /// A digest of the job's plan, checked against the plan a TaskManager rebuilds.
    pub const PLAN: &str = "program.plan";
}

/// A translated plan.
pub(crate) struct Translated {
    pub graph: JobGraph,
    /// The vertex of each collect sink node.
    pub collect_vertices: BTreeMap<usize, String>,
}

/// The plan with every second network edge between the same two tasks split by an unchained
/// pass-through (a job graph joins two vertices at most once; a self-join would join them
/// twice). Deterministic: the client and every TaskManager normalize the same plan alike.
pub(crate) fn normalize(mut plan: Plan) -> Plan {
    loop {
        let heads = chain_heads(&plan);
        let mut seen = std::collections::BTreeSet::new();
        let duplicate = (0..plan.edges.len()).find(|&e| {
            let (source, target) = (heads[plan.edges[e].source], heads[plan.edges[e].target]);
            source != target && !seen.insert((source, target))
        });
        let Some(edge) = duplicate else {
            return plan;
        };
        let e = plan.edges[edge].clone();
        let mut pass = Node::new(
            format!("{} (pass)", plan.nodes[e.source].name),
            e.runtime.identity(),
        );
        pass.parallelism = Some(plan.parallelism(e.source));
        pass.sharing = plan.nodes[e.source].sharing.clone();
        pass.unchained = true;
        let pass = plan.add_node(pass);
        let forward = plan.edges.len();
        plan.edges.push(Edge {
            source: e.source,
            target: pass,
            port: 0,
            ship: Ship::Forward,
            runtime: e.runtime.plain(),
        });
        for output in &mut plan.nodes[e.source].outputs {
            if *output == edge {
                *output = forward;
            }
        }
        plan.nodes[pass].inputs.push(forward);
        plan.nodes[pass].outputs.push(edge);
        plan.edges[edge].source = pass;
    }
}

/// The chain head of every node (a node's own id when it starts a chain).
pub(crate) fn chain_heads(plan: &Plan) -> Vec<usize> {
    fn head(plan: &Plan, node: usize, heads: &mut Vec<Option<usize>>) -> usize {
        if let Some(head) = heads[node] {
            return head;
        }
        let found = match plan.nodes[node].inputs.as_slice() {
            [edge] if chainable(plan, *edge) => head(plan, plan.edges[*edge].source, heads),
            [first, others @ ..]
                if plan.nodes[node].first_input_last && chainable(plan, *first) =>
            {
                // Chained only if the chain it joins feeds none of its other inputs: the task
                // reads those to their end before its chained source runs (no task cycle).
                let joined = head(plan, plan.edges[*first].source, heads);
                if others
                    .iter()
                    .any(|&edge| feeds(plan, joined, plan.edges[edge].source))
                {
                    node
                } else {
                    joined
                }
            }
            _ => node,
        };
        heads[node] = Some(found);
        found
    }
    let mut heads = vec![None; plan.nodes.len()];
    (0..plan.nodes.len())
        .map(|node| head(plan, node, &mut heads))
        .collect()
}

/// Whether records of node `from` reach node `to` (or `from` is `to`).
fn feeds(plan: &Plan, from: usize, to: usize) -> bool {
    let mut seen = vec![false; plan.nodes.len()];
    let mut stack = vec![to];
    while let Some(node) = stack.pop() {
        if node == from {
            return true;
        }
        if !std::mem::replace(&mut seen[node], true) {
            stack.extend(
                plan.nodes[node]
                    .inputs
                    .iter()
                    .map(|&e| plan.edges[e].source),
            );
        }
    }
    false
}

fn chainable(plan: &Plan, edge: usize) -> bool {
    let e = &plan.edges[edge];
    let (source, target) = (&plan.nodes[e.source], &plan.nodes[e.target]);
    plan.chaining
        && plan.ship(edge) == Ship::Forward
        && !target.unchained
        && !source.blocking
        && source.sharing == target.sharing
        && plan.parallelism(e.source) == plan.parallelism(e.target)
}

fn ids(ids: &[usize]) -> String {
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The job graph of `plan`, job number `job` of the program `identity` run with `args`.
pub(crate) fn job_graph(
    plan: &Plan,
    name: &str,
    identity: &str,
    args: &[String],
    job: usize,
    (initial_parallelism, reads): &(u32, String),
) -> Result<Translated, String> {
    if plan.nodes.is_empty() {
        return Err(format!("job `{name}` declares no operator"));
    }
    let max = plan.effective_max_parallelism();
    for (node, edge) in plan
        .edges
        .iter()
        .enumerate()
        .filter(|(e, _)| plan.ship(*e) == Ship::Hash)
        .map(|(_, e)| (e.target, e))
    {
        let parallelism = plan.parallelism(node);
        if parallelism > max {
            return Err(format!(
                "operator `{}` has {parallelism} subtasks but the job has {max} key groups \
                 (its max parallelism): raise it with set_max_parallelism",
                plan.nodes[edge.target].name
            ));
        }
    }
    let heads = chain_heads(plan);
    let mut vertex_of: BTreeMap<usize, usize> = BTreeMap::new();
    for head in &heads {
        let next = vertex_of.len();
        vertex_of.entry(*head).or_insert(next);
    }
    let mut chains: Vec<Vec<usize>> = vec![Vec::new(); vertex_of.len()];
    for (node, head) in heads.iter().enumerate() {
        chains[vertex_of[head]].push(node);
    }
    let args = serde_json::to_string(args).map_err(|e| e.to_string())?;
    let digest = plan.digest();
    let mut builder = JobGraph::builder(name);
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut vertex_names = Vec::new();
    let mut indices = Vec::new();
    let mut collect_vertices = BTreeMap::new();
    // Network edges, in plan order: a vertex's inputs and outputs in the graph's edge order.
    let network: Vec<usize> = (0..plan.edges.len())
        .filter(|&e| heads[plan.edges[e].target] != heads[plan.edges[e].source])
        .collect();
    for chain in &chains {
        let head = chain[0];
        let base = plan.nodes[head].name.clone();
        let count = names.entry(base.clone()).or_insert(0);
        *count += 1;
        let vertex_name = if *count == 1 {
            base
        } else {
            format!("{base} #{count}")
        };
        let inputs: Vec<usize> = network
            .iter()
            .copied()
            .filter(|&e| heads[plan.edges[e].target] == head)
            .collect();
        let outputs: Vec<usize> = network
            .iter()
            .copied()
            .filter(|&e| heads[plan.edges[e].source] == head)
            .collect();
        for &node in chain {
            if plan.nodes[node].name == "collect" {
                collect_vertices.insert(node, vertex_name.clone());
            }
        }
        let sharing = plan.nodes[head]
            .sharing
            .clone()
            .unwrap_or_else(|| DEFAULT_SLOT_SHARING_GROUP.to_owned());
        let mut vertex = builder
            .vertex(&vertex_name, identity, plan.parallelism(head))
            .slot_sharing_group(&sharing)
            .chain(chain.iter().map(|&n| plan.nodes[n].name.clone()).collect())
            .config(keys::ARGS, &args)
            .config(keys::JOB, job.to_string())
            .config(keys::CHAIN, ids(chain))
            .config(keys::INPUTS, ids(&inputs))
            .config(keys::OUTPUTS, ids(&outputs))
            .config(keys::PLAN, &digest)
            .config(keys::DEFAULT_PARALLELISM, initial_parallelism.to_string());
        if !reads.is_empty() {
            vertex = vertex.config(keys::READS, reads);
        }
        let index = vertex.index();
        indices.push(index);
        vertex_names.push(vertex_name);
    }
    for &edge in &network {
        let e = &plan.edges[edge];
        let pattern = if plan.ship(edge) == Ship::Forward {
            DistributionPattern::Forward
        } else {
            DistributionPattern::AllToAll
        };
        builder.edge(
            indices[vertex_of[&heads[e.source]]],
            indices[vertex_of[&heads[e.target]]],
            pattern,
            plan.nodes[e.source].exchange(),
        );
    }
    builder.max_parallelism(Some(max));
    builder.restart_strategy(plan.restart_strategy);
    let graph = builder
        .build(|_| true)
        .map_err(|error| format!("the program's job graph is not valid: {error}"))?;
    Ok(Translated {
        graph,
        collect_vertices,
    })
}
