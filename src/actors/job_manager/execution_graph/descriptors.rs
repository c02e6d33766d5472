//! Deployment descriptors (Flink's `TaskDeploymentDescriptorFactory`): what a TaskManager is sent
//! to run one task — its inputs' producers (all-to-all lists built once and shared) and its
//! outputs' partitions.

use super::*;

impl ExecutionGraph {
    /// The shared producer list `id`, if it is still current (a restart replaces it).
    pub fn producer_list(&self, id: ProducerListId) -> Option<Arc<Vec<ProducerLocation>>> {
        self.gates
            .values()
            .find(|shared| shared.id == id)
            .map(|shared| shared.locations.clone())
    }

    /// Where subtask `subtask` of vertex `source` writes its partition of edge `edge`, if its
    /// TaskManager is known.
    pub(super) fn producer_location(
        &self,
        source: usize,
        subtask: u32,
        edge: u32,
        cx: &JobContext<'_>,
    ) -> Option<ProducerLocation> {
        let producer = &self.tasks[source][subtask as usize];
        let resource_id = &producer.placement.as_ref()?.resource_id;
        Some(ProducerLocation {
            partition: ResultPartitionId {
                producer: producer.attempt,
                edge,
            },
            task_manager: (cx.address_of)(resource_id)?,
        })
    }

    pub(super) fn descriptor(
        &self,
        task: &TaskRef,
        allocation_id: AllocationId,
        resource_id: &ResourceId,
        cx: &JobContext<'_>,
        shared_gates: &mut BTreeMap<u32, SharedProducers>,
    ) -> Option<TaskDeploymentDescriptor> {
        let vertex = &self.graph.vertices[task.vertex];
        let parts = &self.vertex_parts[task.vertex];
        let ev = self.task(task);
        let mut inputs = Vec::new();
        for (index, edge) in self.graph.edges.iter().enumerate() {
            if edge.target != task.vertex {
                continue;
            }
            let edge_index = index as u32;
            let (producers, subpartition) = match edge.pattern {
                DistributionPattern::Forward => {
                    let own = self.producer_location(edge.source, task.subtask, edge_index, cx)?;
                    (Producers::own(vec![own]), 0)
                }
                DistributionPattern::AllToAll => {
                    // Built by `try_deploy`; missing while a producer's TaskManager is gone.
                    let shared = shared_gates.get_mut(&edge_index)?;
                    let producers = if shared.sent_to.contains(resource_id) {
                        Producers::Known(shared.id)
                    } else {
                        shared.sent_to.insert(resource_id.clone());
                        Producers::Listed {
                            id: Some(shared.id),
                            locations: shared.locations.clone(),
                        }
                    };
                    (producers, task.subtask)
                }
            };
            inputs.push(InputGateDeploymentDescriptor {
                edge: edge_index,
                subpartition,
                producers,
            });
        }
        let outputs = self
            .graph
            .edges
            .iter()
            .enumerate()
            .filter(|(_, e)| e.source == task.vertex)
            .map(|(index, edge)| ResultPartitionDeploymentDescriptor {
                partition: ResultPartitionId {
                    producer: ev.attempt,
                    edge: index as u32,
                },
                pattern: edge.pattern,
                subpartitions: match edge.pattern {
                    DistributionPattern::Forward => 1,
                    DistributionPattern::AllToAll => self.graph.vertices[edge.target].parallelism,
                },
                retained: edge.exchange == ExchangeMode::Blocking,
            })
            .collect();
        Some(TaskDeploymentDescriptor {
            job_id: self.job_id,
            attempt: ev.attempt,
            attempt_number: ev.attempt_number,
            vertex_name: parts.name.clone(),
            subtask: task.subtask,
            parallelism: vertex.parallelism,
            operator: parts.operator.clone(),
            config: parts.config.clone(),
            allocation_id,
            inputs,
            outputs,
            artifacts: self.artifacts.clone(),
        })
    }
}
