//! `GET /metrics`: the cluster's gauges and counters in the Prometheus text exposition format
//! 0.0.4, written by hand (a few dozen lines, no registry to keep in step with the actors).
//!
//! A scrape asks the actors, like every other endpoint: the pool and slot gauges, the jobs by
//! state and the counters the actors own come from their status answers; only the transport's
//! counters are read from the endpoint's [`TransportMetrics`]. Names and types are the contract
//! in docs/rest.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::job::states::JobStatus;
use crate::messages::job_manager::{JobManagerStatus, JobSummary};
use crate::messages::resource_manager::ResourceManagerStatus;
use crate::metrics::TransportMetrics;

/// The media type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every value one scrape reports, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// `flint_pool_designated`.
    pub pool_designated: u32,
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
            pool_designated: rm.designated_pool_size,
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
            messages_in: transport.messages_in.get(),
            messages_out: transport.messages_out.get(),
            bytes_in: transport.bytes_in.get(),
            bytes_out: transport.bytes_out.get(),
            rejected_connections: transport.rejected_connections.get(),
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = Exposition::default();
        out.gauge(
            "flint_pool_designated",
            "TaskManagers the resource manager keeps the pool at.",
            self.pool_designated,
        );
        out.gauge(
            "flint_pool_started",
            "Workers registered at the JobManager, as the resource manager counts them.",
            self.pool_started,
        );
        out.gauge(
            "flint_pool_pending_requests",
            "Workers asked of the driver and not started yet.",
            self.pool_pending_requests,
        );
        out.gauge(
            "flint_pool_pending_registration",
            "Workers started by the driver that have not registered yet.",
            self.pool_pending_registration,
        );
        out.counter(
            "flint_worker_start_failures_total",
            "Workers the driver failed to start.",
            self.worker_start_failures,
        );
        out.gauge(
            "flint_taskmanagers_registered",
            "TaskManagers registered at the JobManager.",
            self.taskmanagers_registered,
        );
        out.gauge(
            "flint_slots_total",
            "Slots over all registered TaskManagers.",
            self.slots_total,
        );
        out.gauge(
            "flint_slots_free",
            "Slots not allocated to any job.",
            self.slots_free,
        );
        out.family(
            "flint_jobs",
            "gauge",
            "Jobs the JobManager keeps, by status.",
            self.jobs
                .iter()
                .map(|(status, n)| (Some(("state", status.as_str())), u64::from(*n))),
        );
        out.counter(
            "flint_task_restarts_total",
            "Task attempts started again by failover (each task of a restarted region).",
            self.task_restarts,
        );
        out.counter(
            "flint_heartbeat_timeouts_total",
            "TaskManagers removed because their heartbeat timed out.",
            self.heartbeat_timeouts,
        );
        out.family(
            "flint_transport_messages_total",
            "counter",
            "Envelopes the JobManager's transport received (in) and sent (out).",
            [
                (Some(("direction", "in")), self.messages_in),
                (Some(("direction", "out")), self.messages_out),
            ],
        );
        out.family(
            "flint_transport_bytes_total",
            "counter",
            "Envelope frame bytes the JobManager's transport received (in) and sent (out).",
            [
                (Some(("direction", "in")), self.bytes_in),
                (Some(("direction", "out")), self.bytes_out),
            ],
        );
        out.counter(
            "flint_transport_rejected_connections_total",
            "Inbound connections refused (failed handshake, or too many handshakes at once).",
            self.rejected_connections,
        );
        out.0
    }
}

/// The text being written.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn gauge(&mut self, name: &str, help: &str, value: impl Into<u64>) {
        self.family(name, "gauge", help, [(None, value.into())]);
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help, [(None, value)]);
    }

    /// One metric family: its HELP and TYPE lines, then one line per sample.
    fn family<'a>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Option<(&'a str, &'a str)>, u64)>,
    ) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.0, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        for (label, value) in samples {
            match label {
                Some((key, label_value)) => {
                    let _ = writeln!(
                        self.0,
                        "{name}{{{key}=\"{}\"}} {value}",
                        escape_label(label_value)
                    );
                }
                None => {
                    let _ = writeln!(self.0, "{name} {value}");
                }
            }
        }
    }
}

/// HELP text escapes backslashes and line feeds.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Label values also escape double quotes.
fn escape_label(text: &str) -> String {
    escape_help(text).replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> MetricsSnapshot {
        let mut jobs: BTreeMap<JobStatus, u32> = JobStatus::ALL.iter().map(|&s| (s, 0)).collect();
        jobs.insert(JobStatus::Running, 2);
        jobs.insert(JobStatus::Finished, 1);
        MetricsSnapshot {
            pool_designated: 3,
            pool_started: 2,
            pool_pending_requests: 1,
            pool_pending_registration: 0,
            worker_start_failures: 4,
            taskmanagers_registered: 2,
            slots_total: 4,
            slots_free: 1,
            jobs,
            task_restarts: 5,
            heartbeat_timeouts: 6,
            messages_in: 7,
            messages_out: 8,
            bytes_in: 900,
            bytes_out: 1000,
            rejected_connections: 11,
        }
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let text = snapshot().render();
        let lines: Vec<&str> = text.lines().collect();
        let mut families = 0;
        for (i, line) in lines.iter().enumerate() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families += 1;
                let name = rest.split(' ').next().unwrap();
                assert!(lines[i - 1].starts_with(&format!("# HELP {name} ")));
                assert!(lines[i + 1].starts_with(name), "{}", lines[i + 1]);
            }
        }
        assert_eq!(families, 14);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn values_and_labels_are_where_the_contract_says() {
        let text = snapshot().render();
        for expected in [
            "flint_pool_designated 3",
            "flint_pool_started 2",
            "flint_pool_pending_requests 1",
            "flint_pool_pending_registration 0",
            "# TYPE flint_worker_start_failures_total counter",
            "flint_worker_start_failures_total 4",
            "flint_taskmanagers_registered 2",
            "flint_slots_total 4",
            "flint_slots_free 1",
            "flint_jobs{state=\"RUNNING\"} 2",
            "flint_jobs{state=\"FINISHED\"} 1",
            "flint_jobs{state=\"RESTARTING\"} 0",
            "flint_task_restarts_total 5",
            "flint_heartbeat_timeouts_total 6",
            "flint_transport_messages_total{direction=\"in\"} 7",
            "flint_transport_messages_total{direction=\"out\"} 8",
            "flint_transport_bytes_total{direction=\"in\"} 900",
            "flint_transport_bytes_total{direction=\"out\"} 1000",
            "flint_transport_rejected_connections_total 11",
        ] {
            assert!(
                text.lines().any(|line| line == expected),
                "{expected} missing in\n{text}"
            );
        }
        assert_eq!(text.matches("flint_jobs{").count(), JobStatus::ALL.len());
    }

    #[test]
    fn a_snapshot_reads_each_value_from_its_source() {
        use crate::codec::tests::{job_manager_status, job_summary, resource};
        let rm = ResourceManagerStatus {
            designated_pool_size: 3,
            started: vec![resource(1), resource(2)],
            pending_requests: 1,
            pending_registration: 4,
            start_failures: 5,
            consecutive_start_failures: 0,
            connected_to_job_manager: true,
            driver: "in_process".into(),
        };
        let transport = TransportMetrics::new();
        transport.messages_in.add(6);
        transport.messages_out.add(7);
        transport.bytes_in.add(8);
        transport.bytes_out.add(9);
        transport.rejected_connections.add(10);
        let jm = job_manager_status();
        let snapshot = MetricsSnapshot::collect(&rm, &jm, &[job_summary()], &transport);
        assert_eq!(
            (
                snapshot.pool_designated,
                snapshot.pool_started,
                snapshot.pool_pending_requests,
                snapshot.pool_pending_registration,
                snapshot.worker_start_failures
            ),
            (3, 2, 1, 4, 5)
        );
        assert_eq!(
            (
                snapshot.taskmanagers_registered,
                snapshot.slots_total,
                snapshot.slots_free
            ),
            (1, 2, 1)
        );
        assert_eq!(snapshot.heartbeat_timeouts, jm.heartbeat_timeouts);
        assert_eq!(snapshot.task_restarts, jm.task_restarts);
        assert_eq!(snapshot.jobs[&JobStatus::Running], 1);
        assert_eq!(snapshot.jobs.len(), JobStatus::ALL.len());
        assert_eq!(
            (
                snapshot.messages_in,
                snapshot.messages_out,
                snapshot.bytes_in,
                snapshot.bytes_out,
                snapshot.rejected_connections
            ),
            (6, 7, 8, 9, 10)
        );
    }

    #[test]
    fn help_and_label_values_are_escaped() {
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
        assert_eq!(escape_label("say \"hi\""), "say \\\"hi\\\"");
    }
}
