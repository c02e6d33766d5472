//! A TaskManager's copies of job artifacts (Flink's `PermanentBlobCache`).
//!
//! The first task of a job that ships artifacts makes the TaskManager fetch each one from the
//! JobManager ([`FetchBlob`], chunk by chunk, [`FETCH_BLOB_WINDOW`] asks in flight) into a
//! private file, check its SHA-256 and hand its path to the job's tasks. Tasks that start
//! while a fetch is under way wait for the same fetch: an artifact crosses the network once per
//! TaskManager, not once per task. Each artifact counts the jobs using it; a job stops using
//! its artifacts `blob.cache-linger` after its last task here ended (so the waves of one job
//! fetch once; Flink's `blob.service.cleanup.interval` plays this part), and an artifact no job
//! uses is deleted. A failed fetch fails the tasks waiting on it
//! and is forgotten, so the job's restart fetches afresh.
//!
//! Copies are read-only (0400), executable (0500) only for artifacts the job marked so (kept
//! apart, so one digest may be both); their directory (0700) is emptied when the TaskManager
//! starts, since the files there belong to an earlier incarnation that no job holds any more.
//! File names come from digests only.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::Recipient;
use futures_util::StreamExt;

use crate::base::blob_key::BlobKey;
use crate::base::error_chain::ErrorChain;
use crate::base::ids::JobId;
use crate::base::latch::Latch;
use crate::env::blob_store::{BlobError, BlobStore};
use crate::env::blocking_io::{BlockingIo, offload};
use crate::job::artifact::JobArtifact;
use crate::messages::job_manager::{FETCH_BLOB_CHUNK, FETCH_BLOB_WINDOW, FetchBlob};

/// How a fetch ended, as the tasks waiting on it see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchState {
    /// Here, checked, at this path.
    Ready(PathBuf),
    /// It failed, for this reason.
    Failed(String),
}

/// One artifact a task waits for.
#[derive(Debug, Clone)]
pub struct ArtifactHandle {
    /// Its name within the job.
    pub name: String,
    /// Its fetch: set once it ended (`Ready` or `Failed`), abandoned if the cache went away.
    pub state: Latch<FetchState>,
}

/// A fetch the TaskManager must start (see [`fetch`]).
#[derive(Debug, Clone)]
pub struct FetchOrder {
    /// What to fetch.
    pub artifact: JobArtifact,
    /// Where to keep it.
    pub store: BlobStore,
}

/// A cached copy: one file, shared by the jobs that name it.
type CacheKey = (BlobKey, bool);

#[derive(Debug)]
struct Entry {
    state: Latch<FetchState>,
    jobs: BTreeSet<JobId>,
}

#[derive(Debug, Default)]
struct JobUse {
    /// Its tasks running here.
    tasks: usize,
    /// When its last task ended (a linger check is due then + `blob.cache-linger`).
    idle_generation: u64,
    keys: BTreeSet<CacheKey>,
}

/// See the module docs.
#[derive(Debug)]
pub struct BlobCache {
    dir: PathBuf,
    /// Plain and executable copies; `Err` if the directory could not be prepared (every fetch
    /// then fails with the reason).
    stores: Result<(BlobStore, BlobStore), String>,
    entries: BTreeMap<CacheKey, Entry>,
    jobs: BTreeMap<JobId, JobUse>,
    generation: u64,
}

impl BlobCache {
    /// The cache in `dir`, emptied of an earlier incarnation's files.
    pub fn open(dir: &Path) -> Self {
        let stores = Self::prepare(dir).map_err(|error| {
            let message = format!(
                "the artifact cache in {} cannot be used: {}",
                dir.display(),
                ErrorChain(&error)
            );
            log::error!("{message}");
            message
        });
        Self {
            dir: dir.to_owned(),
            stores,
            entries: BTreeMap::new(),
            jobs: BTreeMap::new(),
            generation: 0,
        }
    }

    fn prepare(dir: &Path) -> Result<(BlobStore, BlobStore), BlobError> {
        let open = |name: &str| -> Result<BlobStore, BlobError> {
            let store = BlobStore::open_cache(&dir.join(name))?;
            store.clear()?;
            Ok(store)
        };
        Ok((open("plain")?, open("exec")?))
    }

    /// A task of `job` starts: the handles it waits on, and the fetches to start for artifacts
    /// neither here nor on their way.
    pub fn acquire(
        &mut self,
        job: JobId,
        artifacts: &[JobArtifact],
    ) -> (Vec<ArtifactHandle>, Vec<FetchOrder>) {
        let mut handles = Vec::with_capacity(artifacts.len());
        let mut orders = Vec::new();
        if artifacts.is_empty() {
            return (handles, orders);
        }
        let uses = self.jobs.entry(job).or_default();
        uses.tasks += 1;
        for artifact in artifacts {
            let key = (artifact.digest, artifact.executable);
            uses.keys.insert(key);
            let entry = self.entries.entry(key).or_insert_with(|| {
                let state = Latch::new();
                if let Err(why) = &self.stores {
                    state.set(FetchState::Failed(why.clone()));
                }
                if let Ok((plain, exec)) = &self.stores {
                    orders.push(FetchOrder {
                        artifact: artifact.clone(),
                        store: if artifact.executable { exec } else { plain }.clone(),
                    });
                }
                Entry {
                    state,
                    jobs: BTreeSet::new(),
                }
            });
            entry.jobs.insert(job);
            handles.push(ArtifactHandle {
                name: artifact.name.clone(),
                state: entry.state.clone(),
            });
        }
        (handles, orders)
    }

    /// A fetch ended. A failed one is forgotten (the next task fetches again).
    pub fn fetched(&mut self, digest: BlobKey, executable: bool, outcome: FetchState) {
        let key = (digest, executable);
        let failed = matches!(outcome, FetchState::Failed(_));
        if let Some(entry) = self.entries.get(&key) {
            entry.state.set(outcome);
        }
        if failed {
            self.entries.remove(&key);
        }
    }

    /// A task of `job` that [`acquire`](Self::acquire)d ended: `Some(generation)` if it was
    /// the job's last here, to pass to [`release_idle`](Self::release_idle) after
    /// `blob.cache-linger`.
    pub fn task_ended(&mut self, job: JobId, artifacts: &[JobArtifact]) -> Option<u64> {
        if artifacts.is_empty() {
            return None;
        }
        let uses = self.jobs.get_mut(&job)?;
        uses.tasks = uses.tasks.saturating_sub(1);
        if uses.tasks > 0 {
            return None;
        }
        self.generation += 1;
        uses.idle_generation = self.generation;
        Some(self.generation)
    }

    /// Drops `job`'s references if no task of it started since it went idle at `generation`;
    /// returns the files no job uses any more, for the caller to delete off its thread.
    pub fn release_idle(&mut self, job: JobId, generation: u64) -> Vec<PathBuf> {
        let idle = (self.jobs.get(&job))
            .is_some_and(|uses| uses.tasks == 0 && uses.idle_generation == generation);
        if !idle {
            return Vec::new();
        }
        let uses = self.jobs.remove(&job).unwrap_or_default();
        let mut unused = Vec::new();
        for key in uses.keys {
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            entry.jobs.remove(&job);
            if entry.jobs.is_empty() {
                let entry = self.entries.remove(&key).expect("just found");
                if let Some(FetchState::Ready(path)) = entry.state.get() {
                    unused.push(path);
                }
            }
        }
        unused
    }

    /// Deletes every copy and the cache's directory: the TaskManager is stopping.
    pub fn remove_all(&mut self) {
        for entry in self.entries.values() {
            entry.state.abandon();
        }
        self.entries.clear();
        self.jobs.clear();
        if let Err(error) = std::fs::remove_dir_all(&self.dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            log::warn!(
                "cannot remove the artifact cache {}: {error}",
                self.dir.display()
            );
        }
    }

    /// Whether nothing is cached or being fetched.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Fetches `order` from the JobManager behind `fetch_blob` into its store, the chunk writes on
/// `io`; the result is what [`BlobCache::fetched`] takes. Chunks are asked for
/// [`FETCH_BLOB_WINDOW`] at a time and written in order; the copy is checked against the
/// digest before it is renamed into place, so a lost, short or altered chunk leaves nothing.
pub async fn fetch(
    fetch_blob: Recipient<FetchBlob>,
    order: FetchOrder,
    io: Arc<dyn BlockingIo>,
) -> FetchState {
    let artifact = order.artifact.clone();
    match fetch_into(fetch_blob, order, io).await {
        Ok(path) => FetchState::Ready(path),
        Err(why) => FetchState::Failed(format!(
            "cannot fetch artifact `{}` ({}, {} bytes) from the JobManager: {why}",
            artifact.name,
            artifact.digest.short(),
            artifact.size
        )),
    }
}

async fn fetch_into(
    fetch_blob: Recipient<FetchBlob>,
    order: FetchOrder,
    io: Arc<dyn BlockingIo>,
) -> Result<PathBuf, String> {
    let FetchOrder { artifact, store } = order;
    let digest = artifact.digest;
    let size = artifact.size;
    let open = store.clone();
    let mut upload = offload(&*io, move || open.upload())
        .await
        .ok_or("the cache's I/O failed")?
        .map_err(|error| ErrorChain(&error).to_string())?;
    let chunk = u64::from(FETCH_BLOB_CHUNK);
    let offsets = (0..size.div_ceil(chunk)).map(|index| index * chunk);
    let mut chunks = futures_util::stream::iter(offsets)
        .map(|offset| {
            let ask = fetch_blob.send(FetchBlob {
                digest,
                offset,
                length: FETCH_BLOB_CHUNK,
            });
            async move { (offset, ask.await) }
        })
        .buffered(FETCH_BLOB_WINDOW);
    while let Some((offset, answer)) = chunks.next().await {
        let chunk = answer
            .map_err(|error| format!("the JobManager did not answer: {error}"))?
            .map_err(|error| error.to_string())?;
        let expected = (size - offset).min(u64::from(FETCH_BLOB_CHUNK));
        if chunk.size != size || chunk.bytes.len() as u64 != expected {
            return Err(format!(
                "the JobManager's copy is {} bytes, not the {size} the job names (chunk at \
                 {offset}: {} bytes)",
                chunk.size,
                chunk.bytes.len()
            ));
        }
        upload = offload(&*io, move || {
            upload.write(chunk.bytes.bytes())?;
            Ok::<_, BlobError>(upload)
        })
        .await
        .ok_or("the cache's I/O failed")?
        .map_err(|error| ErrorChain(&error).to_string())?;
    }
    let executable = artifact.executable;
    offload(&*io, move || -> Result<PathBuf, BlobError> {
        let info = upload.finish(Some(digest))?;
        let path = store.path_of(&info.digest);
        let mode = if executable { 0o500 } else { 0o400 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(
            |source| BlobError::Io {
                operation: "set the mode of",
                path: path.clone(),
                source,
            },
        )?;
        Ok(path)
    })
    .await
    .ok_or("the cache's I/O failed")?
    .map_err(|error| ErrorChain(&error).to_string())
}

#[cfg(test)]
mod tests;
