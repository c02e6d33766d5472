//! [`ProducerListCache`]: the all-to-all producer lists a TaskManager was sent (Flink's
//! `ShuffleDescriptorsCache`), so the JobManager sends each list once per TaskManager and the
//! other tasks that read it only name it (see `messages::deployment`).
//!
//! Dropping a list is always safe: a task naming a list that is not here is refused with
//! `UnknownProducers`, and the JobManager sends it again with the list. So the cache keeps the
//! lists of the jobs that have work here, at most [`MAX_LISTS`] of them, and drops a job's lists
//! with its partitions.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::base::ids::{JobId, ProducerListId};
use crate::messages::deployment::{Producers, TaskDeploymentDescriptor};
use crate::messages::task_manager::TaskSubmissionError;

/// The most lists kept; the oldest goes first. A job's lists live until its consumers are all
/// deployed, which happens in one burst per region, so a few dozen suffice; the bound keeps
/// restarts of long jobs from piling lists up.
pub const MAX_LISTS: usize = 256;

type Locations = Arc<Vec<crate::messages::deployment::ProducerLocation>>;

/// See the module docs.
#[derive(Debug, Default)]
pub struct ProducerListCache {
    lists: BTreeMap<ProducerListId, (JobId, Locations)>,
    /// Ids in the order they arrived (an id dropped with its job stays until it comes up).
    order: VecDeque<ProducerListId>,
}

impl ProducerListCache {
    /// Caches the lists `descriptor` carries and fills in the ones it names. Fails, changing
    /// nothing of the descriptor's named lists, for one that is not here.
    pub fn resolve(
        &mut self,
        descriptor: &mut TaskDeploymentDescriptor,
    ) -> Result<(), TaskSubmissionError> {
        for gate in &descriptor.inputs {
            if let Producers::Listed {
                id: Some(id),
                locations,
            } = &gate.producers
            {
                self.insert(*id, descriptor.job_id, locations.clone());
            }
        }
        if let Some(missing) = descriptor
            .inputs
            .iter()
            .find_map(|gate| match gate.producers {
                Producers::Known(id) if !self.lists.contains_key(&id) => Some(id),
                _ => None,
            })
        {
            return Err(TaskSubmissionError::UnknownProducers(missing));
        }
        for gate in &mut descriptor.inputs {
            if let Producers::Known(id) = gate.producers
                && let Some((_, locations)) = self.lists.get(&id)
            {
                gate.producers = Producers::Listed {
                    id: Some(id),
                    locations: locations.clone(),
                };
            }
        }
        Ok(())
    }

    fn insert(&mut self, id: ProducerListId, job_id: JobId, locations: Locations) {
        if self.lists.insert(id, (job_id, locations)).is_some() {
            return;
        }
        self.order.push_back(id);
        while self.lists.len() > MAX_LISTS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.lists.remove(&oldest);
        }
        // Ids of lists dropped with their jobs: forgotten once they make up half the queue.
        if self.order.len() > 2 * MAX_LISTS {
            self.order.retain(|id| self.lists.contains_key(id));
        }
    }

    /// Drops `job_id`'s lists (the job released its partitions here: it ended or moved on).
    pub fn release_job(&mut self, job_id: JobId) {
        self.lists.retain(|_, (job, _)| *job != job_id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lists.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ids::{AllocationId, ExecutionAttemptId};
    use crate::messages::common::{ActorAddress, ResultPartitionId};
    use crate::messages::deployment::{InputGateDeploymentDescriptor, ProducerLocation};

    fn locations(n: u128) -> Locations {
        Arc::new(
            (0..n)
                .map(|i| ProducerLocation {
                    partition: ResultPartitionId {
                        producer: ExecutionAttemptId::from_u128(i),
                        edge: 0,
                    },
                    task_manager: ActorAddress::new("local", "taskmanager/tm"),
                })
                .collect(),
        )
    }

    fn task(job: u128, producers: Vec<Producers>) -> TaskDeploymentDescriptor {
        TaskDeploymentDescriptor {
            job_id: JobId::from_u128(job),
            attempt: ExecutionAttemptId::from_u128(99),
            attempt_number: 0,
            vertex_name: "sink".into(),
            subtask: 0,
            parallelism: 1,
            operator: "noop".into(),
            config: Arc::default(),
            allocation_id: AllocationId::from_u128(1),
            inputs: producers
                .into_iter()
                .enumerate()
                .map(|(edge, producers)| InputGateDeploymentDescriptor {
                    edge: edge as u32,
                    subpartition: 0,
                    producers,
                })
                .collect(),
            outputs: Vec::new(),
            artifacts: Arc::from([]),
        }
    }

    fn listed(id: u128, n: u128) -> Producers {
        Producers::Listed {
            id: Some(ProducerListId::from_u128(id)),
            locations: locations(n),
        }
    }

    #[test]
    fn a_named_list_is_filled_in_from_the_one_sent_before() {
        let mut cache = ProducerListCache::default();
        let mut first = task(1, vec![listed(7, 3)]);
        cache.resolve(&mut first).unwrap();
        let mut second = task(1, vec![Producers::Known(ProducerListId::from_u128(7))]);
        cache.resolve(&mut second).unwrap();
        assert_eq!(second.inputs[0].producers, first.inputs[0].producers);
        assert_eq!(second.inputs[0].producers.locations().len(), 3);
    }

    #[test]
    fn an_unknown_list_refuses_the_task_and_caches_the_lists_it_carried() {
        let mut cache = ProducerListCache::default();
        let unknown = ProducerListId::from_u128(8);
        let mut both = task(1, vec![listed(7, 2), Producers::Known(unknown)]);
        assert_eq!(
            cache.resolve(&mut both),
            Err(TaskSubmissionError::UnknownProducers(unknown))
        );
        assert_eq!(
            cache.len(),
            1,
            "the listed one is kept: the JobManager counts it sent"
        );
        let mut again = task(1, vec![Producers::Known(ProducerListId::from_u128(7))]);
        cache.resolve(&mut again).unwrap();
    }

    #[test]
    fn a_released_job_and_the_oldest_lists_beyond_the_bound_are_dropped() {
        let mut cache = ProducerListCache::default();
        cache.resolve(&mut task(1, vec![listed(1, 1)])).unwrap();
        cache.resolve(&mut task(2, vec![listed(2, 1)])).unwrap();
        cache.release_job(JobId::from_u128(1));
        assert_eq!(cache.len(), 1);
        for id in 10..10 + 3 * MAX_LISTS as u128 {
            cache.resolve(&mut task(3, vec![listed(id, 1)])).unwrap();
            assert!(cache.len() <= MAX_LISTS);
            assert!(cache.order.len() <= 2 * MAX_LISTS + 1);
        }
        let newest = 10 + 3 * MAX_LISTS as u128 - 1;
        let mut named = task(3, vec![Producers::Known(ProducerListId::from_u128(newest))]);
        cache.resolve(&mut named).unwrap();
        let mut oldest = task(3, vec![Producers::Known(ProducerListId::from_u128(10))]);
        assert!(cache.resolve(&mut oldest).is_err());
    }
}
