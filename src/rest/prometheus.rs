//! `GET /metrics`: the cluster's gauges and counters in the OpenMetrics text format, encoded by
//! `prometheus-client` (the Prometheus project's Rust crate).
//!
//! A scrape asks the actors, like every other endpoint: the pool and slot gauges, the jobs by
//! state and the counters the actors own come from their status answers; only the transport's
//! counters are read from the endpoint's [`TransportMetrics`]. Each scrape therefore builds a
//! registry of constant metrics from one [`MetricsSnapshot`] — one source of truth per value,
//! nothing kept in step with the actors. Names and types are the contract in docs/rest.md; a
//! counter is registered without its `_total` suffix, which the encoder adds (OpenMetrics).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::job::states::JobStatus;
use crate::messages::job_manager::{JobManagerStatus, JobSummary};
use crate::messages::resource_manager::ResourceManagerStatus;
use crate::transport::metrics::TransportMetrics;

/// The media type of the text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One vertex's exchange figures (its subtasks' summed, the worst backpressure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexIo {
    /// The job.
    pub job_id: String,
    /// The vertex's name.
    pub vertex: String,
    /// What its subtasks did.
    pub io: crate::messages::TaskIoSnapshot,
}

/// Every value one scrape reports, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Per vertex of every running job: `flint_vertex_*{job_id, vertex}`.
    pub vertices: Vec<VertexIo>,
    /// `flint_pool_designated`.
    pub pool_designated: u32,
    /// `flint_pool_demand`.
    pub pool_demand: u32,
    /// `flint_pool_target`.
    pub pool_target: u32,
    /// `flint_pool_started`.
    pub pool_started: u32,
    /// `flint_pool_pending_requests`.
    pub pool_pending_requests: u32,
    /// `flint_pool_pending_registration`.
    pub pool_pending_registration: u32,
    /// `flint_worker_start_failures_total`.
    pub worker_start_failures: u64,
    /// `flint_taskmanagers_registered`.
    pub taskmanagers_registered: u32,
    /// `flint_slots_total`.
    pub slots_total: u64,
    /// `flint_slots_free`.
    pub slots_free: u64,
    /// `flint_jobs{state}`, every status.
    pub jobs: BTreeMap<JobStatus, u32>,
    /// `flint_task_restarts_total`.
    pub task_restarts: u64,
    /// `flint_heartbeat_timeouts_total`.
    pub heartbeat_timeouts: u64,
    /// `flint_blob_served_bytes_total`.
    pub blob_bytes_served: u64,
    /// `flint_transport_messages_total{direction="in"}`.
    pub messages_in: u64,
    /// `flint_transport_messages_total{direction="out"}`.
    pub messages_out: u64,
    /// `flint_transport_bytes_total{direction="in"}`.
    pub bytes_in: u64,
    /// `flint_transport_bytes_total{direction="out"}`.
    pub bytes_out: u64,
    /// `flint_transport_rejected_connections_total`.
    pub rejected_connections: u64,
    /// `flint_jobmanager_mailbox_max_handle_ms`.
    pub jm_max_handle_us: u64,
    /// Its `message` label: which message that was.
    pub jm_longest_handler: String,
    /// `flint_jobmanager_mailbox_delay_ms`.
    pub jm_mailbox_delay_us: u64,
    /// `flint_jobmanager_mailbox_max_delay_ms`.
    pub jm_mailbox_max_delay_us: u64,
    /// `flint_slot_requests_queued`.
    pub slot_requests_queued: u64,
    /// `flint_slot_request_bulks_queued`.
    pub slot_request_bulks_queued: u64,
    /// `flint_taskmanager_spill_bytes{taskmanager}` and `_peak_bytes`, per registered
    /// TaskManager as of its last heartbeat.
    pub spill: Vec<(String, crate::messages::SpillUsage)>,
}

impl MetricsSnapshot {
    /// The snapshot from the actors' answers and the transport's counters.
    pub fn collect(
        rm: &ResourceManagerStatus,
        jm: &JobManagerStatus,
        jobs: &[JobSummary],
        transport: &TransportMetrics,
    ) -> Self {
        Self {
            vertices: Vec::new(),
            pool_designated: rm.designated_pool_size,
            pool_demand: rm.demand,
            pool_target: rm.target_pool_size,
            pool_started: rm.started.len() as u32,
            pool_pending_requests: rm.pending_requests,
            pool_pending_registration: rm.pending_registration,
            worker_start_failures: rm.start_failures,
            taskmanagers_registered: jm.task_managers.len() as u32,
            slots_total: jm.total_slots(),
            slots_free: jm.free_slots(),
            jobs: super::views::jobs_by_status(jobs),
            task_restarts: jm.task_restarts,
            heartbeat_timeouts: jm.heartbeat_timeouts,
            blob_bytes_served: jm.blob_bytes_served,
            messages_in: transport.messages_in.get(),
            messages_out: transport.messages_out.get(),
            bytes_in: transport.bytes_in.get(),
            bytes_out: transport.bytes_out.get(),
            rejected_connections: transport.rejected_connections.get(),
            jm_max_handle_us: jm.mailbox.max_handle_us,
            jm_longest_handler: jm.mailbox.longest_handler.clone(),
            jm_mailbox_delay_us: jm.mailbox.last_delay_us,
            jm_mailbox_max_delay_us: jm.mailbox.max_delay_us,
            slot_requests_queued: jm.slot_requests_queued,
            slot_request_bulks_queued: jm.slot_request_bulks_queued,
            spill: (jm.task_managers.iter())
                .map(|tm| (tm.resource_id.to_string(), tm.spill))
                .collect(),
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        let gauges: [(&str, &str, u64); 11] = [
            (
                "flint_pool_designated",
                "TaskManagers the operator set the pool to.",
                self.pool_designated.into(),
            ),
            (
                "flint_pool_demand",
                "TaskManagers the jobs declared they need.",
                self.pool_demand.into(),
            ),
            (
                "flint_pool_target",
                "TaskManagers the pool is kept at: max(designated, demand) within the maximum.",
                self.pool_target.into(),
            ),
            (
                "flint_pool_started",
                "Workers registered at the JobManager, as the resource manager counts them.",
                self.pool_started.into(),
            ),
            (
                "flint_pool_pending_requests",
                "Workers asked of the driver and not started yet.",
                self.pool_pending_requests.into(),
            ),
            (
                "flint_pool_pending_registration",
                "Workers started by the driver that have not registered yet.",
                self.pool_pending_registration.into(),
            ),
            (
                "flint_taskmanagers_registered",
                "TaskManagers registered at the JobManager.",
                self.taskmanagers_registered.into(),
            ),
            (
                "flint_slots_total",
                "Slots over all registered TaskManagers.",
                self.slots_total,
            ),
            (
                "flint_slots_free",
                "Slots not allocated to any job.",
                self.slots_free,
            ),
            (
                "flint_slot_requests_queued",
                "Tasks waiting for slots, in queued region bulks.",
                self.slot_requests_queued,
            ),
            (
                "flint_slot_request_bulks_queued",
                "Region bulks waiting for slots (the slot queue's length).",
                self.slot_request_bulks_queued,
            ),
        ];
        for (name, help, value) in gauges {
            registry.register(name, help, ConstGauge::new(value));
        }
        let longest = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
        longest
            .get_or_create(&label("message", &self.jm_longest_handler))
            .set(self.jm_max_handle_us as f64 / 1e3);
        registry.register(
            "flint_jobmanager_mailbox_max_handle_ms",
            "The longest single message the JobManager actor handled since start (label: which).",
            longest,
        );
        let milliseconds: [(&str, &str, u64); 2] = [
            (
                "flint_jobmanager_mailbox_delay_ms",
                "How long the last probe waited in the JobManager's mailbox.",
                self.jm_mailbox_delay_us,
            ),
            (
                "flint_jobmanager_mailbox_max_delay_ms",
                "The longest any probe waited in the JobManager's mailbox since start.",
                self.jm_mailbox_max_delay_us,
            ),
        ];
        for (name, help, micros) in milliseconds {
            registry.register(name, help, ConstGauge::new(micros as f64 / 1e3));
        }
        let counters: [(&str, &str, u64); 5] = [
            (
                "flint_worker_start_failures",
                "Workers the driver failed to start.",
                self.worker_start_failures,
            ),
            (
                "flint_task_restarts",
                "Task attempts started again by failover (each task of a restarted region).",
                self.task_restarts,
            ),
            (
                "flint_blob_served_bytes",
                "Artifact bytes the JobManager sent to TaskManagers (each fetches a job's artifacts once).",
                self.blob_bytes_served,
            ),
            (
                "flint_heartbeat_timeouts",
                "TaskManagers removed because their heartbeat timed out.",
                self.heartbeat_timeouts,
            ),
            (
                "flint_transport_rejected_connections",
                "Inbound connections refused (failed handshake, or too many handshakes at once).",
                self.rejected_connections,
            ),
        ];
        for (name, help, value) in counters {
            registry.register(name, help, ConstCounter::new(value));
        }
        let jobs = Family::<Vec<(String, String)>, Gauge>::default();
        for (status, count) in &self.jobs {
            jobs.get_or_create(&label("state", status.as_str()))
                .set(i64::from(*count));
        }
        registry.register("flint_jobs", "Jobs the JobManager keeps, by status.", jobs);
        for (name, help, values) in [
            (
                "flint_transport_messages",
                "Envelopes the JobManager's transport received (in) and sent (out).",
                [self.messages_in, self.messages_out],
            ),
            (
                "flint_transport_bytes",
                "Envelope frame bytes the JobManager's transport received (in) and sent (out).",
                [self.bytes_in, self.bytes_out],
            ),
        ] {
            let family = Family::<Vec<(String, String)>, Counter>::default();
            for (direction, value) in ["in", "out"].into_iter().zip(values) {
                family
                    .get_or_create(&label("direction", direction))
                    .inc_by(value);
            }
            registry.register(name, help, family);
        }
        self.register_vertices(&mut registry);
        let spill: [MetricOf<'_, crate::messages::SpillUsage>; 2] = [
            (
                "flint_taskmanager_spill_bytes",
                "Bytes of result partitions the TaskManager holds spilled on disk.",
                |usage| usage.live,
            ),
            (
                "flint_taskmanager_spill_peak_bytes",
                "The most bytes of spilled result partitions the TaskManager held at once.",
                |usage| usage.peak,
            ),
        ];
        let per_task_manager: Vec<_> = (self.spill.iter())
            .map(|(taskmanager, usage)| (label("taskmanager", taskmanager), usage))
            .collect();
        register_gauges(&mut registry, &spill, &per_task_manager);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }
}

impl MetricsSnapshot {
    /// The running jobs' vertices, labelled by job id and vertex name (bounded by the
    /// vertices, not the subtasks, of running jobs: Flink's per-task metrics, summed).
    fn register_vertices(&self, registry: &mut Registry) {
        let gauges: [MetricOf<'_, crate::messages::TaskIoSnapshot>; 2] = [
            (
                "flint_vertex_back_pressured_time_ms_per_second",
                "Of the last heartbeat interval, the milliseconds per second the vertex's most backpressured subtask waited for room downstream (Flink's backPressuredTimeMsPerSecond).",
                |io| io.back_pressured_time_ms_per_second,
            ),
            (
                "flint_vertex_buffers_in_use",
                "Input buffers the vertex's subtasks received and have not consumed.",
                |io| io.buffers_in_use,
            ),
        ];
        let per_vertex: Vec<_> = (self.vertices.iter())
            .map(|v| (vertex_labels(v), &v.io))
            .collect();
        register_gauges(registry, &gauges, &per_vertex);
        let counters: [MetricOf<'_, crate::messages::TaskIoSnapshot>; 4] = [
            (
                "flint_vertex_records_in",
                "Records the vertex's subtasks read (Flink's numRecordsIn).",
                |io| io.records_in,
            ),
            (
                "flint_vertex_records_out",
                "Records the vertex's subtasks wrote (Flink's numRecordsOut).",
                |io| io.records_out,
            ),
            (
                "flint_vertex_bytes_in",
                "Bytes the vertex's subtasks read (Flink's numBytesIn).",
                |io| io.bytes_in,
            ),
            (
                "flint_vertex_bytes_out",
                "Bytes the vertex's subtasks wrote (Flink's numBytesOut).",
                |io| io.bytes_out,
            ),
        ];
        for (name, help, pick) in counters {
            let family = Family::<Vec<(String, String)>, Counter>::default();
            for v in &self.vertices {
                family.get_or_create(&vertex_labels(v)).inc_by(pick(&v.io));
            }
            registry.register(name, help, family);
        }
    }
}

/// A metric family: its name, its help, and how a sample's value is read from an item.
type MetricOf<'a, T> = (&'a str, &'a str, fn(&T) -> u64);

/// One gauge family per entry of `families`, with a sample per labelled item.
fn register_gauges<T>(
    registry: &mut Registry,
    families: &[MetricOf<'_, T>],
    items: &[(Vec<(String, String)>, &T)],
) {
    for &(name, help, pick) in families {
        let family = Family::<Vec<(String, String)>, Gauge>::default();
        for (labels, item) in items {
            family
                .get_or_create(labels)
                .set(i64::try_from(pick(item)).unwrap_or(i64::MAX));
        }
        registry.register(name, help, family);
    }
}

fn vertex_labels(v: &VertexIo) -> Vec<(String, String)> {
    vec![
        ("job_id".to_owned(), v.job_id.clone()),
        ("vertex".to_owned(), v.vertex.clone()),
    ]
}

fn label(key: &str, value: &str) -> Vec<(String, String)> {
    vec![(key.to_owned(), value.to_owned())]
}

#[cfg(test)]
mod tests;
