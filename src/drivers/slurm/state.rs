//! Slurm's job states, and what each one means for a worker: the driver's whole state mapping
//! in one table ([`STATES`]), so that one test can read it whole.
//!
//! A worker job is *waiting* while Slurm queues it (the pool keeps it as a pending request), *up*
//! while it runs (the pool waits for the TaskManager to register) and *ended* once Slurm is done
//! with it. An ended job that never ran is a start failure (the resource manager backs off before
//! it asks again); one that ran is a lost worker (replaced at once).

/// Where a worker job stands, as far as the resource manager cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Queued, or not yet running its program: the request is still pending.
    Waiting,
    /// Its program runs (or is paused by Slurm and will go on).
    Up,
    /// Slurm is done with it; its processes are gone or being killed.
    Ended,
}

/// Every state `squeue --states=all -o %T` prints, and its phase. Jobs are submitted with
/// `--no-requeue`, so a preempted or failed worker job never comes back by itself.
pub const STATES: &[(&str, Phase)] = &[
    ("PENDING", Phase::Waiting),
    ("REQUEUED", Phase::Waiting),
    ("REQUEUE_HOLD", Phase::Waiting),
    ("REQUEUE_FED", Phase::Waiting),
    ("CONFIGURING", Phase::Waiting),
    ("RESV_DEL_HOLD", Phase::Waiting),
    ("RUNNING", Phase::Up),
    ("RESIZING", Phase::Up),
    ("SUSPENDED", Phase::Up),
    ("SIGNALING", Phase::Up),
    ("STAGE_OUT", Phase::Up),
    ("STOPPED", Phase::Up),
    ("COMPLETING", Phase::Ended),
    ("COMPLETED", Phase::Ended),
    ("FAILED", Phase::Ended),
    ("TIMEOUT", Phase::Ended),
    ("PREEMPTED", Phase::Ended),
    ("NODE_FAIL", Phase::Ended),
    ("CANCELLED", Phase::Ended),
    ("BOOT_FAIL", Phase::Ended),
    ("DEADLINE", Phase::Ended),
    ("OUT_OF_MEMORY", Phase::Ended),
    ("SPECIAL_EXIT", Phase::Ended),
    ("REVOKED", Phase::Ended),
];

/// The phase of a state name; `None` for a state this table does not know (a newer Slurm's),
/// which the driver treats as waiting and logs.
pub fn phase(state: &str) -> Option<Phase> {
    // squeue may print `CANCELLED by 0`; the state is the first word.
    let name = state.split_whitespace().next().unwrap_or("");
    STATES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, phase)| *phase)
}

/// What the resource manager hears of a job seen in `phase`, given whether it heard the job
/// was up before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Nothing new.
    None,
    /// `WorkerStarted`: the worker runs and should register soon.
    Started,
    /// `WorkerFailed`: it ended without ever running (a start failure, backed off).
    StartFailed,
    /// `WorkerTerminated`: a running worker was lost (replaced).
    Terminated,
}

/// The transition the driver reports for a job seen in `phase`.
pub fn event(phase: Phase, reported_up: bool) -> Event {
    match (phase, reported_up) {
        (Phase::Waiting, _) | (Phase::Up, true) => Event::None,
        (Phase::Up, false) => Event::Started,
        (Phase::Ended, false) => Event::StartFailed,
        (Phase::Ended, true) => Event::Terminated,
    }
}
