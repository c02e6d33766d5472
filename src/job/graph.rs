//! The job graph: vertices (operators with a parallelism) joined by edges.
//!
//! A vertex names an operator from the [`OperatorRegistry`](crate::operators::OperatorRegistry)
//! and carries that operator's configuration as string key/values. Vertices in the same slot
//! sharing group may share a slot (one subtask of each vertex per shared slot); vertices in the
//! same co-location group place subtask *i* of each in the same slot.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::messages::ids::JobVertexId;

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
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            multiplier: 1.5,
            jitter: 0.1,
        }
    }
}
