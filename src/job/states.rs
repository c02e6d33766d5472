//! The execution states of subtasks ([`ExecutionState`]) and jobs ([`JobStatus`]), with Flink's
//! transition tables, and the wall-clock time each state was entered ([`StateTimestamps`]).
//!
//! This module owns the tables and nothing else: each enum has exactly one place (`allows`) that
//! says which transitions exist, so the JobManager, the REST API and the tests cannot disagree.
//! It must never panic on a bad transition: a status update arriving in the wrong state (a late
//! message from a TaskManager, a duplicate cancel) is an [`InvalidTransition`] the caller logs
//! and ignores. It never reads a clock either: callers pass `now_ms` from the node's `Clock`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A state change the table does not allow. Never retryable: the same change is refused again
/// until something else moves the state; the caller logs it and drops the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid state transition from {from} to {to}")]
pub struct InvalidTransition<S: fmt::Debug + fmt::Display> {
    /// The state the machine was in (and stays in).
    pub from: S,
    /// The state that was asked for.
    pub to: S,
}

/// States of each machine (both have eight).
pub const STATES: usize = 8;

/// What [`Tracked`] and [`StateTimestamps`] need of a state enum: the transition table, so one
/// generic tracker serves both subtasks and jobs.
pub trait StateMachine: Copy + Ord + fmt::Debug + fmt::Display {
    /// Every state, in declaration order: [`StateTimestamps`] keeps one time per entry.
    const ALL: [Self; STATES];

    /// Whether the table allows `self → to`.
    fn allows(self, to: Self) -> bool;

    /// The state's position in [`ALL`](Self::ALL).
    fn index(self) -> usize;

    /// Moves to `to` if the table allows it; otherwise says why not and stays.
    fn transition(self, to: Self) -> Result<Self, InvalidTransition<Self>> {
        if self.allows(to) {
            Ok(to)
        } else {
            Err(InvalidTransition { from: self, to })
        }
    }
}

/// The state of one subtask's current execution attempt (Flink's `ExecutionState`), as the
/// JobManager tracks it to know what to deploy, cancel or restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ExecutionState {
    /// Exists in the execution graph; no slot yet.
    Created,
    /// A slot has been requested or assigned.
    Scheduled,
    /// Sent to a TaskManager, which has not reported it running yet.
    Deploying,
    /// Running on its TaskManager.
    Running,
    /// Ran to completion; its results are complete.
    Finished,
    /// A cancel was sent to the TaskManager; waiting for it to stop.
    Canceling,
    /// Stopped by a cancel.
    Canceled,
    /// Failed (on the TaskManager, or lost with it).
    Failed,
}

impl ExecutionState {
    /// Every state, in declaration order (tables, tests, REST summaries).
    pub const ALL: [Self; 8] = [
        Self::Created,
        Self::Scheduled,
        Self::Deploying,
        Self::Running,
        Self::Finished,
        Self::Canceling,
        Self::Canceled,
        Self::Failed,
    ];

    /// Whether `self → to` is in the table. Cancel before deployment goes straight to
    /// `Canceled` (there is nothing on a TaskManager to stop); once deploying, a cancel may go
    /// through `Canceling` or, if the TaskManager never started the task, straight to `Canceled`.
    pub fn allows(self, to: Self) -> bool {
        use ExecutionState::*;
        matches!(
            (self, to),
            (Created, Scheduled | Canceled | Failed)
                | (Scheduled, Deploying | Canceled | Failed)
                | (
                    Deploying,
                    Running | Finished | Canceling | Canceled | Failed
                )
                | (Running, Finished | Canceling | Failed)
                | (Canceling, Canceled | Failed)
        )
    }

    /// Moves to `to` if the table allows it; a refused change leaves the caller's state as is.
    pub fn transition(self, to: Self) -> Result<Self, InvalidTransition<Self>> {
        StateMachine::transition(self, to)
    }

    /// Whether the attempt is over (no transition leaves it): a restart needs a new attempt.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Finished | Self::Canceled | Self::Failed)
    }

    /// Flink's name, as logs and the REST API show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Scheduled => "SCHEDULED",
            Self::Deploying => "DEPLOYING",
            Self::Running => "RUNNING",
            Self::Finished => "FINISHED",
            Self::Canceling => "CANCELING",
            Self::Canceled => "CANCELED",
            Self::Failed => "FAILED",
        }
    }
}

impl StateMachine for ExecutionState {
    const ALL: [Self; STATES] = ExecutionState::ALL;

    fn allows(self, to: Self) -> bool {
        ExecutionState::allows(self, to)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a whole job (Flink's `JobStatus`), as the JobManager drives it and the REST API
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobStatus {
    /// Submitted; nothing scheduled yet.
    Created,
    /// Some tasks are scheduled or running.
    Running,
    /// A task failed; the rest are being cancelled before deciding to restart or fail.
    Failing,
    /// Failed for good (the restart strategy gave up).
    Failed,
    /// Cancelled by the user; tasks are being cancelled.
    Cancelling,
    /// Cancelled by the user, all tasks stopped.
    Canceled,
    /// Every task finished.
    Finished,
    /// Waiting out the restart delay before running again.
    Restarting,
}

impl JobStatus {
    /// Every status, in declaration order (tables, tests, REST summaries).
    pub const ALL: [Self; 8] = [
        Self::Created,
        Self::Running,
        Self::Failing,
        Self::Failed,
        Self::Cancelling,
        Self::Canceled,
        Self::Finished,
        Self::Restarting,
    ];

    /// Whether `self → to` is in the table (Flink's, as the brief for Flint fixes it).
    pub fn allows(self, to: Self) -> bool {
        use JobStatus::*;
        matches!(
            (self, to),
            (Created, Running | Failing | Cancelling)
                | (Running, Failing | Cancelling | Finished | Restarting)
                | (Failing, Failed | Restarting | Cancelling)
                | (Restarting, Running | Cancelling | Failed | Canceled)
                | (Cancelling, Canceled | Failed)
        )
    }

    /// Moves to `to` if the table allows it; a refused change leaves the caller's status as is.
    pub fn transition(self, to: Self) -> Result<Self, InvalidTransition<Self>> {
        StateMachine::transition(self, to)
    }

    /// Whether the job is over for the whole cluster (Flink's `isGloballyTerminalState`): its
    /// resources can be released and it can move to the history.
    pub fn is_globally_terminal(self) -> bool {
        matches!(self, Self::Failed | Self::Canceled | Self::Finished)
    }

    /// Flink's name, as logs and the REST API show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Running => "RUNNING",
            Self::Failing => "FAILING",
            Self::Failed => "FAILED",
            Self::Cancelling => "CANCELLING",
            Self::Canceled => "CANCELED",
            Self::Finished => "FINISHED",
            Self::Restarting => "RESTARTING",
        }
    }
}

impl StateMachine for JobStatus {
    const ALL: [Self; STATES] = JobStatus::ALL;

    fn allows(self, to: Self) -> bool {
        JobStatus::allows(self, to)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When each state was last entered, in wall-clock milliseconds, for the REST API's timelines
/// (Flink's `stateTimestamps`). Re-entering a state (a job running again after a restart)
/// overwrites its time, as Flink does: the REST API shows the current attempt.
/// One time per state (a fixed array, not a map: every subtask has one, and a map costs an
/// allocation and a search per state change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateTimestamps<S> {
    /// By [`StateMachine::index`]; [`NEVER`] for a state not entered.
    entered: [u64; STATES],
    states: std::marker::PhantomData<S>,
}

/// The time of a state never entered.
const NEVER: u64 = u64::MAX;

impl<S> Default for StateTimestamps<S> {
    fn default() -> Self {
        Self {
            entered: [NEVER; STATES],
            states: std::marker::PhantomData,
        }
    }
}

impl<S: StateMachine> StateTimestamps<S> {
    /// No state entered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `state` was entered at `now_ms`.
    pub fn enter(&mut self, state: S, now_ms: u64) {
        // A clock never reads u64::MAX ms; saturate below the sentinel all the same.
        self.entered[state.index()] = now_ms.min(NEVER - 1);
    }

    /// When `state` was last entered, if ever.
    pub fn entered(&self, state: S) -> Option<u64> {
        Some(self.entered[state.index()]).filter(|ms| *ms != NEVER)
    }

    /// Every entered state with its time, in state order (REST).
    pub fn iter(&self) -> impl Iterator<Item = (S, u64)> + '_ {
        S::ALL
            .into_iter()
            .filter_map(|state| Some((state, self.entered(state)?)))
    }
}

/// A state together with when each state was entered, so no caller can change one without the
/// other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked<S> {
    state: S,
    timestamps: StateTimestamps<S>,
}

impl<S: StateMachine> Tracked<S> {
    /// A machine that entered `initial` at `now_ms`.
    pub fn new(initial: S, now_ms: u64) -> Self {
        let mut timestamps = StateTimestamps::new();
        timestamps.enter(initial, now_ms);
        Self {
            state: initial,
            timestamps,
        }
    }

    /// The current state.
    pub fn state(&self) -> S {
        self.state
    }

    /// When each state was last entered.
    pub fn timestamps(&self) -> &StateTimestamps<S> {
        &self.timestamps
    }

    /// Moves to `to` at `now_ms` if the table allows it; on `Err` neither state nor timestamps
    /// change.
    pub fn transition(&mut self, to: S, now_ms: u64) -> Result<(), InvalidTransition<S>> {
        self.state = self.state.transition(to)?;
        self.timestamps.enter(to, now_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
