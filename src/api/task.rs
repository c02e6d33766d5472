//! One task of a program: the chain of plan nodes its vertex runs, assembled for this subtask,
//! fed by the task's inputs, writing to its outputs.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::operators::{InputEvent, Operator, OperatorError, TaskIo};

use super::plan::{Instance, NodeContext, Plan};
use super::runtime::{Ctx, Feed, RunSource};

/// What a vertex of a program runs: its chain (plan node ids, in plan order) and the plan
/// edges its inputs and outputs are.
#[derive(Debug, Clone)]
pub(crate) struct ChainSpec {
    pub chain: Vec<usize>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// See the module docs.
pub(crate) struct ProgramTask {
    pub plan: Arc<Plan>,
    pub spec: ChainSpec,
    pub subtask: u32,
    pub parallelism: u32,
}

impl Operator for ProgramTask {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let context = io.context();
        let attempt = io.attempt_number();
        let plan = &self.plan;
        let memory_nodes = self
            .spec
            .chain
            .iter()
            .filter(|&&n| plan.nodes[n].runtime.uses_memory())
            .count()
            .max(1) as u64;
        let max_parallelism = plan.effective_max_parallelism();
        let node_context = |node: usize| NodeContext {
            subtask: self.subtask,
            parallelism: self.parallelism,
            vertex: context.vertex.clone(),
            node: plan.nodes[node].name.clone(),
            spill_dir: context.spill_dir.clone(),
            memory: context.managed_memory / memory_nodes,
            max_parallelism,
            attempt,
        };
        let (inputs, outputs) = io.split();
        // Assemble from the chain's end: every node gets its downstream pushes, and its input
        // ports become the pushes of its producers in the chain (or the task's inputs).
        let in_chain = |node: usize| self.spec.chain.contains(&node);
        let mut ports: BTreeMap<(usize, usize), Box<dyn Any>> = BTreeMap::new();
        let mut sources: Vec<Box<dyn RunSource>> = Vec::new();
        for &node in self.spec.chain.iter().rev() {
            let cx = node_context(node);
            let mut downstream = Vec::new();
            for &edge in &plan.nodes[node].outputs {
                let e = &plan.edges[edge];
                if in_chain(e.target) && self.spec.inputs.iter().all(|&i| i != edge) {
                    let port = ports.remove(&(e.target, e.port)).ok_or_else(|| {
                        OperatorError::Failed(format!(
                            "program task {}: node {} has no input port {}",
                            context.vertex, e.target, e.port
                        ))
                    })?;
                    downstream.push(port);
                } else {
                    let output = self
                        .spec
                        .outputs
                        .iter()
                        .position(|&o| o == edge)
                        .ok_or_else(|| {
                            OperatorError::Failed(format!(
                                "program task {}: edge {edge} is neither chained nor an output",
                                context.vertex
                            ))
                        })?;
                    downstream.push(e.runtime.network_output(
                        output,
                        outputs.subpartitions(output),
                        plan.ship(edge),
                        &cx,
                    ));
                }
            }
            match plan.nodes[node].runtime.instantiate(&cx, downstream)? {
                Instance::Source(source) => sources.push(source),
                Instance::Ports(node_ports) => {
                    for (port, push) in node_ports.into_iter().enumerate() {
                        ports.insert((node, port), push);
                    }
                }
            }
        }
        let mut feeds: Vec<Box<dyn Feed>> = Vec::with_capacity(self.spec.inputs.len());
        for (input, &edge) in self.spec.inputs.iter().enumerate() {
            let e = &plan.edges[edge];
            let port = ports.remove(&(e.target, e.port)).ok_or_else(|| {
                OperatorError::Failed(format!(
                    "program task {}: input {input} has no port",
                    context.vertex
                ))
            })?;
            let describe = format!(
                "vertex `{}` subtask {} input {input}",
                context.vertex, self.subtask
            );
            feeds.push(e.runtime.network_input(port, describe));
        }
        let mut cx = Ctx {
            out: outputs,
            scratch: Vec::new(),
            result: None,
            records: 0,
        };
        let mut ended = vec![false; feeds.len()];
        while let Some(event) = inputs.next_event()? {
            match event {
                InputEvent::Buffer { input, buffer } => {
                    feeds[input].feed(buffer, &mut cx)?;
                    // Nothing more is wanted (a `first_n` has its n): stop reading; the inputs
                    // left unread are released when the task ends.
                    if feeds.iter().all(|feed| feed.is_done()) {
                        break;
                    }
                }
                InputEvent::Ended(input) => {
                    ended[input] = true;
                    feeds[input].end(&mut cx)?;
                }
            }
        }
        for (input, feed) in feeds.iter_mut().enumerate() {
            if !ended[input] {
                feed.end(&mut cx)?;
            }
        }
        // A chained source runs once the network inputs ended: they are the other inputs of
        // an operator that reads the source's records last (see `super::translate`).
        for source in &mut sources {
            source.run(&mut cx)?;
        }
        let result = cx.result.take();
        drop(cx);
        if let Some(result) = result {
            io.set_result(result)?;
        }
        Ok(())
    }
}
