//! The job result store (Flink's `JobResultStore`, FLIP-194): the result of every job that
//! reached a globally terminal state (FINISHED, FAILED, CANCELED), kept so that no leader ever
//! runs that job again and a client can still ask how it ended.
//!
//! A leader writes a job's result *dirty* the moment the job ends, then removes the job's graph
//! from the job graph store, then marks the result *clean*; a new leader never recovers a job
//! that has a result, finishes the cleanup of the dirty ones, and answers `GET /jobs/{id}` for
//! every job of the store (Flint's [`JobDetails`], each vertex summarized: an entry of a
//! 10,000-subtask job is a few hundred bytes). Results are forgotten as ended jobs are: after
//! `jobstore.expiration-time`, and the first to end beyond `jobstore.max-capacity` — only clean
//! ones (a dirty one still has cleanup to do).
//!
//! With high availability the store is a directory of files (Flink's `FileSystemJobResultStore`,
//! same names: `JOB_ID_DIRTY.json`, renamed `JOB_ID.json` once clean) under
//! `high-availability.storageDir/job-result-store/CLUSTER`, read once when a leadership starts
//! and written through; without it the same store lives in memory. A file is written whole
//! (a temporary file, synced, renamed into place), so a leader killed mid-write leaves the old
//! state or the new one, never half. A result file that cannot be read still marks its job as
//! ended (the job id is in its name): a job is never run again because its result is damaged.
//!
//! What a job's tasks sent back (its `collect()` sinks' records, [`JobResults`]) is kept beside
//! its result, in `JOB_ID.results` (the codec's encoding, written whole before the result file
//! itself), so that a new leader answers `GET /jobs/{id}/results` of a job that ended under the
//! old one as the old one did — Flink keeps a job's accumulators in its `JobResult` for the same
//! reason. They are read back only when asked for, and forgotten with the result. In memory
//! (no high availability) they are not copied: the JobManager's execution graph of the job
//! answers for as long as the job is kept.
//!
//! What this module must never do: forget a dirty result, or hold a job graph (the job graph
//! store does).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::codec::{self, CodecError};
use crate::base::ids::JobId;
use crate::config::JobStoreConfig;
use crate::messages::job_manager::{JobDetails, JobResults, JobSummary};

/// Where a cluster's results live: `STORAGE/job-result-store/CLUSTER` (Flink's default
/// `job-result-store.storage-path`).
pub fn directory(storage_dir: &Path, paths: &super::ZnodePaths) -> PathBuf {
    storage_dir
        .join("job-result-store")
        .join(paths.cluster_id())
}

/// The suffix of a result whose cleanup is not done (Flink's name).
const DIRTY_SUFFIX: &str = "_DIRTY.json";

/// The suffix of a clean result.
const CLEAN_SUFFIX: &str = ".json";

/// The suffix of what a job's tasks sent back.
const RESULTS_SUFFIX: &str = ".results";

/// Why the job result store failed. Retryable once the file system recovers: the JobManager
/// tries again, and a new leader finishes what this one could not.
#[derive(Debug, thiserror::Error)]
pub enum JobResultStoreError {
    /// A file or the directory could not be read, written, renamed or removed.
    #[error("job result store: cannot {operation} {path}")]
    Io {
        /// What was tried.
        operation: &'static str,
        /// On which file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A result could not be encoded (not expected: plain data).
    #[error("job result store: cannot encode the result of job {job_id}")]
    Encode {
        /// The job.
        job_id: JobId,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// What a job's tasks sent back could not be encoded or read back.
    #[error("job result store: cannot {operation} what the tasks of job {job_id} sent back")]
    Records {
        /// `encode` or `decode`.
        operation: &'static str,
        /// The job.
        job_id: JobId,
        /// Why.
        #[source]
        source: CodecError,
    },
}

/// One job's entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// How the job ended; `None` if its file could not be read (the job still counts as ended).
    details: Option<JobDetails>,
    /// Its cleanup (the job graph's removal) is done.
    clean: bool,
    /// When it ended (ms since the epoch): what expiry counts from.
    ended_at_ms: u64,
    /// What its tasks sent back is kept in its file.
    results: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Where the files are; `None`: in memory only.
    dir: Option<PathBuf>,
    entries: BTreeMap<JobId, Entry>,
    /// Clean entries by when they ended, oldest first: the next to forget.
    clean_by_end: BTreeSet<(u64, JobId)>,
}

/// See the module docs. Clones share one store (the leader loop and its JobManager).
#[derive(Debug, Clone, Default)]
pub struct JobResultStore(Arc<Mutex<Inner>>);

impl JobResultStore {
    /// A store in memory (no high availability: nothing outlives the JobManager anyway).
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// The store in `dir` (made if missing), every entry read.
    pub fn open(dir: &Path) -> Result<Self, JobResultStoreError> {
        let io = |operation: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| JobResultStoreError::Io {
                operation,
                path,
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let mut inner = Inner {
            dir: Some(dir.to_owned()),
            ..Inner::default()
        };
        for file in std::fs::read_dir(dir).map_err(io("list", dir))? {
            let path = file.map_err(io("list", dir))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let (id, clean) = if let Some(id) = name.strip_suffix(DIRTY_SUFFIX) {
                (id, false)
            } else if let Some(id) = name.strip_suffix(CLEAN_SUFFIX) {
                (id, true)
            } else {
                continue; // a temporary file of a write that did not finish
            };
            let Ok(job_id) = id.parse::<JobId>() else {
                log::warn!("job result store: ignoring {}", path.display());
                continue;
            };
            let details = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<JobDetails>(&bytes).map_err(|e| e.to_string())
                }) {
                Ok(details) => Some(details),
                Err(error) => {
                    log::warn!(
                        "job result store: cannot read {} ({error}); job {job_id} still counts as ended",
                        path.display()
                    );
                    None
                }
            };
            let ended_at_ms = details.as_ref().map_or(0, ended_at);
            let results = dir.join(format!("{job_id}{RESULTS_SUFFIX}")).is_file();
            // A dirty and a clean file of one job: a rename that was cut short; clean wins.
            let clean = clean || inner.entries.get(&job_id).is_some_and(|e| e.clean);
            inner.insert(
                job_id,
                Entry {
                    details,
                    clean,
                    ended_at_ms,
                    results,
                },
            );
        }
        Ok(Self(Arc::new(Mutex::new(inner))))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps how `details`' job ended, dirty (its cleanup to do). Already kept: nothing changes
    /// (the first result of a job stands).
    pub fn create_dirty_result(&self, details: &JobDetails) -> Result<(), JobResultStoreError> {
        self.create_dirty_result_with(details, None)
    }

    /// [`create_dirty_result`](Self::create_dirty_result), keeping what the job's tasks sent
    /// back too (on files; see the module docs), written before the result: a result on disk
    /// has its records beside it.
    pub fn create_dirty_result_with(
        &self,
        details: &JobDetails,
        results: Option<&JobResults>,
    ) -> Result<(), JobResultStoreError> {
        let job_id = details.summary.job_id;
        let mut inner = self.lock();
        if inner.entries.contains_key(&job_id) {
            return Ok(());
        }
        let results = results.filter(|r| !r.vertices.is_empty());
        if let Some(dir) = &inner.dir {
            let path = dir.join(format!("{job_id}{RESULTS_SUFFIX}"));
            match results {
                Some(results) => {
                    let bytes =
                        codec::encode(results).map_err(|source| JobResultStoreError::Records {
                            operation: "encode",
                            job_id,
                            source,
                        })?;
                    write_whole(&path, &bytes)?;
                }
                // A leader that died between writing an earlier run's records and its result
                // left them behind; this run's result must not be read with them.
                None => {
                    super::remove_if_present(&path).map_err(|source| JobResultStoreError::Io {
                        operation: "remove",
                        path,
                        source,
                    })?
                }
            }
        }
        if let Some(dir) = &inner.dir {
            let bytes = serde_json::to_vec(details)
                .map_err(|source| JobResultStoreError::Encode { job_id, source })?;
            write_whole(&dir.join(format!("{job_id}{DIRTY_SUFFIX}")), &bytes)?;
        }
        let results = inner.dir.is_some() && results.is_some();
        inner.insert(
            job_id,
            Entry {
                details: Some(details.clone()),
                clean: false,
                ended_at_ms: ended_at(details),
                results,
            },
        );
        Ok(())
    }

    /// The job's cleanup is done: its result is clean (and may expire). Unknown or clean
    /// already: nothing changes.
    pub fn mark_result_as_clean(&self, job_id: JobId) -> Result<(), JobResultStoreError> {
        let mut inner = self.lock();
        if inner.entries.get(&job_id).is_none_or(|e| e.clean) {
            return Ok(());
        }
        if let Some(dir) = &inner.dir {
            let dirty = dir.join(format!("{job_id}{DIRTY_SUFFIX}"));
            let clean = dir.join(format!("{job_id}{CLEAN_SUFFIX}"));
            std::fs::rename(&dirty, &clean).map_err(|source| JobResultStoreError::Io {
                operation: "rename",
                path: dirty,
                source,
            })?;
        }
        if let Some(mut entry) = inner.entries.remove(&job_id) {
            entry.clean = true;
            inner.insert(job_id, entry);
        }
        Ok(())
    }

    /// Whether the job has a result (dirty or clean): it ended, and must never run again.
    pub fn has_job_result_entry(&self, job_id: JobId) -> bool {
        self.lock().entries.contains_key(&job_id)
    }

    /// Whether the job's result is dirty (its cleanup is not done).
    pub fn has_dirty_job_result_entry(&self, job_id: JobId) -> bool {
        self.lock().entries.get(&job_id).is_some_and(|e| !e.clean)
    }

    /// The jobs whose cleanup is not done, in order.
    pub fn dirty_job_ids(&self) -> Vec<JobId> {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .filter(|(_, e)| !e.clean)
            .map(|(id, _)| *id)
            .collect()
    }

    /// How the job ended, if its result is kept (and readable).
    pub fn details(&self, job_id: JobId) -> Option<JobDetails> {
        self.lock()
            .entries
            .get(&job_id)
            .and_then(|e| e.details.clone())
    }

    /// What the tasks of a job that ended sent back, if kept (on files: read from its file).
    pub fn results(&self, job_id: JobId) -> Result<Option<JobResults>, JobResultStoreError> {
        let path = {
            let inner = self.lock();
            match (&inner.dir, inner.entries.get(&job_id)) {
                (Some(dir), Some(entry)) if entry.results => {
                    dir.join(format!("{job_id}{RESULTS_SUFFIX}"))
                }
                _ => return Ok(None),
            }
        };
        let bytes = std::fs::read(&path).map_err(|source| JobResultStoreError::Io {
            operation: "read",
            path,
            source,
        })?;
        codec::decode(&bytes)
            .map(Some)
            .map_err(|source| JobResultStoreError::Records {
                operation: "decode",
                job_id,
                source,
            })
    }

    /// The summary line of every readable result, in job id order.
    pub fn summaries(&self) -> Vec<JobSummary> {
        self.lock()
            .entries
            .values()
            .filter_map(|e| Some(e.details.as_ref()?.summary.clone()))
            .collect()
    }

    /// How many results are kept.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no result is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the clean results that ended longer than `jobstore.expiration-time` before
    /// `now_ms`, and beyond `jobstore.max-capacity` the ones that ended first; returns the jobs
    /// forgotten. A file that cannot be removed is kept (and tried again next time).
    /// O(log R) per result forgotten.
    pub fn expire(&self, now_ms: u64, config: JobStoreConfig) -> Vec<JobId> {
        let mut inner = self.lock();
        let expiration = config.expiration_time.as_millis() as u64;
        let capacity = config.max_capacity as usize;
        let mut forgotten = Vec::new();
        while let Some(&(ended_at_ms, job_id)) = inner.clean_by_end.first() {
            let expired = ended_at_ms.saturating_add(expiration) <= now_ms;
            if !expired && inner.entries.len() <= capacity {
                break;
            }
            if let Some(dir) = &inner.dir {
                let records = inner.entries.get(&job_id).is_some_and(|e| e.results);
                let records = records.then(|| dir.join(format!("{job_id}{RESULTS_SUFFIX}")));
                let result = dir.join(format!("{job_id}{CLEAN_SUFFIX}"));
                if !records
                    .into_iter()
                    .chain([result])
                    .all(|path| removed(&path))
                {
                    break;
                }
            }
            inner.clean_by_end.pop_first();
            inner.entries.remove(&job_id);
            forgotten.push(job_id);
        }
        forgotten
    }
}

impl Inner {
    fn insert(&mut self, job_id: JobId, entry: Entry) {
        if let Some(old) = self.entries.get(&job_id) {
            self.clean_by_end.remove(&(old.ended_at_ms, job_id));
        }
        if entry.clean {
            self.clean_by_end.insert((entry.ended_at_ms, job_id));
        }
        self.entries.insert(job_id, entry);
    }
}

/// Removes the file at `path` (gone already counts); logs why it could not.
fn removed(path: &Path) -> bool {
    super::remove_if_present(path)
        .inspect_err(|error| {
            log::warn!(
                "job result store: cannot remove {}: {error}",
                path.display()
            );
        })
        .is_ok()
}

/// When a job ended: the time it entered its (terminal) status.
fn ended_at(details: &JobDetails) -> u64 {
    details
        .status_timestamps
        .iter()
        .rev()
        .find(|(status, _)| *status == details.summary.status)
        .map_or(details.summary.submitted_at_ms, |(_, at)| *at)
}

/// Writes `bytes` to `path` whole: a temporary file beside it, synced, renamed into place.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), JobResultStoreError> {
    use std::io::Write as _;
    let partial = path.with_extension("partial");
    let io = |operation: &'static str| {
        let path = partial.clone();
        move |source| JobResultStoreError::Io {
            operation,
            path,
            source,
        }
    };
    let mut file = std::fs::File::create(&partial).map_err(io("write"))?;
    file.write_all(bytes).map_err(io("write"))?;
    file.sync_all().map_err(io("sync"))?;
    drop(file);
    std::fs::rename(&partial, path).map_err(io("rename"))
}

#[cfg(test)]
mod tests;
