//! The job event log (Flink's `JobEventStore`, FLIP-383): what a batch job has finished, kept
//! next to its graph (`STORAGE/CLUSTER/job-ID.events`) so that a new leader reruns only what
//! the failover really lost.
//!
//! The leader appends a [`JobEvent::RegionFinished`] when every task of a pipelined region has
//! finished (which attempt ran each task, on which TaskManager, and what a `collect()` sink sent
//! back), and a [`JobEvent::RegionsReset`] when regions run again (failover). Events are
//! batched by the JobManager (one append per flush interval, not one write per task); each
//! append is one frame (`u32` little-endian length, then the batch in the wire codec), so a
//! leader killed mid-write leaves a torn last frame that [`JobEventLog::read`] drops.
//!
//! The log is a hint, never the truth: a new leader keeps a logged region only if the
//! TaskManagers that re-register still hold its results (or nothing unfinished reads them), so
//! a lost, stale or torn log costs reruns, never a wrong answer.
//!
//! What this module must never do: make a job skip a region that did not finish, or read a
//! file it did not write (same private directory as the graphs).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::codec;
use crate::base::ids::{ExecutionAttemptId, JobId, ResourceId};

/// Why the event log failed. An append that fails is logged and dropped by the JobManager: the
/// job runs on, a failover reruns more.
#[derive(Debug, thiserror::Error)]
pub enum JobEventLogError {
    /// A file could not be opened, written, read or removed.
    #[error("job event log: cannot {operation} {path}")]
    Io {
        /// What was tried.
        operation: &'static str,
        /// Which file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A batch could not be encoded (not expected: plain data).
    #[error("job event log: cannot encode events of job {job_id}")]
    Encode {
        /// The job.
        job_id: JobId,
        /// Why.
        #[source]
        source: codec::CodecError,
    },
}

/// One task of a finished region: enough for a new leader to take its results back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedTask {
    /// Its vertex (index in the job graph).
    pub vertex: u32,
    /// Its subtask.
    pub subtask: u32,
    /// The attempt that finished: its result partitions are named after it.
    pub attempt: ExecutionAttemptId,
    /// That attempt's number.
    pub attempt_number: u32,
    /// Where it ran: the TaskManager holding its result partitions.
    pub resource_id: ResourceId,
    /// What it sent back (a `collect()` sink's records), if anything.
    pub result: Option<Vec<u8>>,
}

/// Something a job did that a new leader may build on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEvent {
    /// Every task of region `region` finished.
    RegionFinished {
        /// The region (ids are computed from the graph, the same for every leader).
        region: u32,
        /// Its tasks, as they finished.
        tasks: Vec<FinishedTask>,
    },
    /// These regions run again (failover): what they finished before no longer counts.
    RegionsReset {
        /// The regions.
        regions: Vec<u32>,
    },
}

/// The finished regions a log leaves: region → its tasks.
pub fn replay(events: &[JobEvent]) -> BTreeMap<u32, Vec<FinishedTask>> {
    let mut finished = BTreeMap::new();
    for event in events {
        match event {
            JobEvent::RegionFinished { region, tasks } => {
                finished.insert(*region, tasks.clone());
            }
            JobEvent::RegionsReset { regions } => {
                for region in regions {
                    finished.remove(region);
                }
            }
        }
    }
    finished
}

/// The event logs of one cluster: a file per job in `dir` (the job graph store's directory).
#[derive(Debug, Clone)]
pub struct JobEventLog {
    dir: PathBuf,
}

impl JobEventLog {
    /// The logs in `dir`, which the job graph store made private already.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
        }
    }

    /// Where job `job_id`'s events go.
    pub fn file_of(&self, job_id: JobId) -> PathBuf {
        self.dir.join(format!("job-{job_id}.events"))
    }

    /// Appends `events` as one frame (created 0600 if missing, never through a link).
    pub fn append(&self, job_id: JobId, events: &[JobEvent]) -> Result<(), JobEventLogError> {
        if events.is_empty() {
            return Ok(());
        }
        let path = self.file_of(job_id);
        let mut frame = vec![0; 4];
        codec::encode_into(&events, &mut frame)
            .map_err(|source| JobEventLogError::Encode { job_id, source })?;
        let len = u32::try_from(frame.len() - 4).map_err(|_| JobEventLogError::Encode {
            job_id,
            source: codec::CodecError::TooLarge { size: frame.len() },
        })?;
        frame[..4].copy_from_slice(&len.to_le_bytes());
        let io = |operation| {
            let path = path.clone();
            move |source| JobEventLogError::Io {
                operation,
                path,
                source,
            }
        };
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io("open"))?;
        // One write: a kill leaves the frame whole or torn at the end, never interleaved.
        file.write_all(&frame).map_err(io("append to"))
    }

    /// Every event of job `job_id` in order; none if it has no log. A torn or undecodable
    /// frame ends the log there (the events after it are lost, which only costs reruns).
    pub fn read(&self, job_id: JobId) -> Result<Vec<JobEvent>, JobEventLogError> {
        let path = self.file_of(job_id);
        let mut bytes = Vec::new();
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(mut file) => {
                file.read_to_end(&mut bytes)
                    .map_err(|source| JobEventLogError::Io {
                        operation: "read",
                        path: path.clone(),
                        source,
                    })?;
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(JobEventLogError::Io {
                    operation: "open",
                    path,
                    source,
                });
            }
        }
        let mut events = Vec::new();
        let mut rest = bytes.as_slice();
        while rest.len() >= 4 {
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let Some(frame) = rest.get(4..4 + len) else {
                log::warn!("{}: torn last frame ignored", path.display());
                break;
            };
            match codec::decode::<Vec<JobEvent>>(frame) {
                Ok(batch) => events.extend(batch),
                Err(error) => {
                    log::warn!(
                        "{}: undecodable frame, the rest ignored: {error}",
                        path.display()
                    );
                    break;
                }
            }
            rest = &rest[4 + len..];
        }
        Ok(events)
    }

    /// Removes job `job_id`'s log; already gone is fine.
    pub fn remove(&self, job_id: JobId) -> Result<(), JobEventLogError> {
        let path = self.file_of(job_id);
        super::remove_if_present(&path).map_err(|source| JobEventLogError::Io {
            operation: "remove",
            path,
            source,
        })
    }
}

#[cfg(test)]
mod tests;
