//! `[slurm]`: how the `slurm` driver asks Slurm for workers (one Slurm job per TaskManager).

use std::time::Duration;

/// `[slurm]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// `slurm.partition`: `sbatch --partition`; unset: the cluster's default partition.
    pub partition: Option<String>,
    /// `slurm.account`: `sbatch --account`; unset: the user's default account.
    pub account: Option<String>,
    /// `slurm.time-limit`: `sbatch --time`, in Slurm's own format (`90`, `1:30:00`,
    /// `2-00:00:00`); unset: the partition's default. A worker reaching it is replaced.
    pub time_limit: Option<String>,
    /// `slurm.cpus-per-worker`: `sbatch --cpus-per-task`; unset: `taskmanager.slots`.
    pub cpus_per_worker: Option<u64>,
    /// `slurm.memory-per-worker`: `sbatch --mem`; unset: the partition's default.
    pub memory_per_worker: Option<u64>,
    /// `slurm.sbatch-options`: further `sbatch` arguments, as given (`--qos=high`,
    /// `--output=/shared/logs/%x-%j.out`, `--constraint=ib`).
    pub sbatch_options: Vec<String>,
    /// `slurm.taskmanager-command`: what each worker job runs, with `{jobmanager}`,
    /// `{resource_id}` and `{slots}` filled in; empty: this binary's own `taskmanager`.
    pub taskmanager_command: Vec<String>,
    /// `slurm.poll-interval`: how often one `squeue` call follows every worker job.
    pub poll_interval: Duration,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            partition: None,
            account: None,
            time_limit: None,
            cpus_per_worker: None,
            memory_per_worker: None,
            sbatch_options: Vec::new(),
            taskmanager_command: Vec::new(),
            poll_interval: Duration::from_secs(1),
        }
    }
}
