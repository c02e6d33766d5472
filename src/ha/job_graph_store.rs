//! Submitted job graphs, kept so a new leader can recover them (Flink's
//! `ZooKeeperJobGraphStore`): the graph itself as JSON in `STORAGE/CLUSTER/job-ID.json`
//! (`high-availability.storageDir`, a directory every JobManager reaches), and a persistent
//! pointer znode `ROOT/CLUSTER/jobgraphs/ID` holding that file's path. ZooKeeper never holds a
//! graph: znodes are small, graphs are not.
//!
//! A graph is written (file first, then the pointer) before `POST /jobs` answers, and removed
//! (pointer first, then the file) once its job reached a terminal state. A pointer whose file is
//! missing or unreadable is still recovered — as a job that failed with that reason — so one bad
//! file never stops the others from recovering.
//!
//! The pointers sit behind [`JobGraphPointers`], so the simulation keeps them in its simulated
//! coordination service and runs the same file code and the same leader loop.
//!
//! The ZooKeeper store has a session of its own (no ephemeral nodes, so it may live long), never the
//! election's: a session the election gave up must end, or its latch node would outlive it. A
//! store session that ended is replaced on the next operation.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use zookeeper_client::{Acls, Client, CreateMode};

use super::HaError;
use super::zookeeper::{ZooKeeperSettings, ensure_path};
use crate::base::ids::JobId;
use crate::job::graph::JobGraph;

/// One job found in the store by a new leader.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredJob {
    /// The job's id, as its first leader gave it.
    pub job_id: JobId,
    /// Its graph, or why it cannot be read (missing or corrupted file).
    pub graph: Result<JobGraph, String>,
}

/// Where the store keeps its pointers (job id → the path of its graph file): ZooKeeper in a
/// process ([`ZooKeeperPointers`]), the simulated coordination service in the simulation. The
/// files themselves are written the same way by both.
pub trait JobGraphPointers {
    /// Creates or overwrites the pointer of `job_id`.
    fn put(&self, job_id: JobId, file: &str) -> impl Future<Output = Result<(), HaError>>;

    /// Removes the pointer of `job_id`; already gone is fine.
    fn remove(&self, job_id: JobId) -> impl Future<Output = Result<(), HaError>>;

    /// The ids of every job with a pointer, in order.
    fn job_ids(&self) -> impl Future<Output = Result<Vec<JobId>, HaError>>;

    /// The file `job_id`'s pointer names, `None` if it has none (any more).
    fn get(&self, job_id: JobId) -> impl Future<Output = Result<Option<String>, HaError>>;

    /// The worker pool size an operator set last (`PUT /cluster/pool-size`), `None` if none
    /// was: a new leader starts its resource manager from it, not from the configured size.
    fn pool_size(&self) -> impl Future<Output = Result<Option<u32>, HaError>>;

    /// Keeps `size` as the pool size an operator set.
    fn put_pool_size(&self, size: u32) -> impl Future<Output = Result<(), HaError>>;
}

/// The pointers as persistent znodes `ROOT/CLUSTER/jobgraphs/ID`, in a session of the store's
/// own, replaced when it ended.
#[derive(Debug, Clone)]
pub struct ZooKeeperPointers {
    settings: ZooKeeperSettings,
    /// The store's own session, replaced when it ended.
    session: Arc<Mutex<Client>>,
    pointers: String,
    /// `ROOT/CLUSTER/pool-size` (persistent, the size in decimal).
    pool_size: String,
}

impl ZooKeeperPointers {
    /// The store's session, a fresh one if it ended.
    async fn client(&self) -> Result<Client, HaError> {
        let current = self
            .session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if !current.state().is_terminated() {
            return Ok(current);
        }
        let fresh = self.settings.connect().await?;
        *self
            .session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh.clone();
        Ok(fresh)
    }

    fn pointer_of(&self, job_id: JobId) -> String {
        format!("{}/{job_id}", self.pointers)
    }
}

impl JobGraphPointers for ZooKeeperPointers {
    async fn put(&self, job_id: JobId, file: &str) -> Result<(), HaError> {
        let pointer = self.pointer_of(job_id);
        let data = file.as_bytes();
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let client = self.client().await?;
        match client.create(&pointer, data, &options).await {
            Ok(_) => Ok(()),
            Err(zookeeper_client::Error::NodeExists) => client
                .set_data(&pointer, data, None)
                .await
                .map(drop)
                .map_err(HaError::zk("set", &pointer)),
            Err(source) => Err(HaError::zk("create", &pointer)(source)),
        }
    }

    async fn remove(&self, job_id: JobId) -> Result<(), HaError> {
        let pointer = self.pointer_of(job_id);
        match self.client().await?.delete(&pointer, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(source) => Err(HaError::zk("delete", &pointer)(source)),
        }
    }

    /// Pointers that are not job ids are skipped (with a log line): they are not ours.
    async fn job_ids(&self) -> Result<Vec<JobId>, HaError> {
        let mut ids: Vec<JobId> = self
            .client()
            .await?
            .list_children(&self.pointers)
            .await
            .map_err(HaError::zk("list", &self.pointers))?
            .into_iter()
            .filter_map(|name| match name.parse() {
                Ok(id) => Some(id),
                Err(_) => {
                    log::warn!("job graph store: ignoring {}/{name}", self.pointers);
                    None
                }
            })
            .collect();
        ids.sort();
        Ok(ids)
    }

    async fn pool_size(&self) -> Result<Option<u32>, HaError> {
        let path = &self.pool_size;
        match self.client().await?.get_data(path).await {
            Ok((data, _)) => Ok(std::str::from_utf8(&data)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .or_else(|| {
                    log::warn!("job graph store: ignoring {path}: not a pool size");
                    None
                })),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(source) => Err(HaError::zk("read", path)(source)),
        }
    }

    async fn put_pool_size(&self, size: u32) -> Result<(), HaError> {
        let path = &self.pool_size;
        let data = size.to_string();
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let client = self.client().await?;
        match client.create(path, data.as_bytes(), &options).await {
            Ok(_) => Ok(()),
            Err(zookeeper_client::Error::NodeExists) => client
                .set_data(path, data.as_bytes(), None)
                .await
                .map(drop)
                .map_err(HaError::zk("set", path)),
            Err(source) => Err(HaError::zk("create", path)(source)),
        }
    }

    async fn get(&self, job_id: JobId) -> Result<Option<String>, HaError> {
        let pointer = self.pointer_of(job_id);
        match self.client().await?.get_data(&pointer).await {
            Ok((data, _)) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(source) => Err(HaError::zk("read", &pointer)(source)),
        }
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct JobGraphStore<P = ZooKeeperPointers> {
    pointers: P,
    dir: PathBuf,
}

impl JobGraphStore {
    /// The store of the cluster `settings` name, its files under `storage_dir/CLUSTER`; opens
    /// its session and makes both places if missing.
    pub async fn open(settings: &ZooKeeperSettings, storage_dir: &Path) -> Result<Self, HaError> {
        let client = settings.connect().await?;
        let paths = &settings.paths;
        let pointers = paths.job_graphs();
        ensure_path(&client, &pointers).await?;
        let cluster = paths.cluster().rsplit('/').next().unwrap_or("default");
        Self::with_pointers(
            ZooKeeperPointers {
                settings: settings.clone(),
                session: Arc::new(Mutex::new(client)),
                pointers,
                pool_size: paths.pool_size(),
            },
            &storage_dir.join(cluster),
        )
    }
}

impl<P: JobGraphPointers> JobGraphStore<P> {
    /// A store whose graph files go to `dir` (made if missing) and whose pointers to
    /// `pointers`.
    pub fn with_pointers(pointers: P, dir: &Path) -> Result<Self, HaError> {
        std::fs::create_dir_all(dir).map_err(|source| HaError::Storage {
            operation: "create the directory of",
            path: dir.to_owned(),
            source,
        })?;
        Ok(Self {
            pointers,
            dir: dir.to_owned(),
        })
    }

    /// Where the graph of `job_id` is written.
    pub fn file_of(&self, job_id: JobId) -> PathBuf {
        self.dir.join(format!("job-{job_id}.json"))
    }

    /// Writes the graph (to a temporary file, synced, renamed into place) and then its pointer.
    pub async fn put(&self, job_id: JobId, graph: &JobGraph) -> Result<(), HaError> {
        let path = self.file_of(job_id);
        let storage = |operation| {
            let path = path.clone();
            move |source| HaError::Storage {
                operation,
                path,
                source,
            }
        };
        let json = serde_json::to_vec_pretty(graph).map_err(|e| {
            storage("serialize")(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })?;
        let partial = path.with_extension("json.partial");
        {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&partial).map_err(storage("write"))?;
            file.write_all(&json).map_err(storage("write"))?;
            file.sync_all().map_err(storage("sync"))?;
        }
        std::fs::rename(&partial, &path).map_err(storage("rename"))?;
        self.pointers.put(job_id, &path.display().to_string()).await
    }

    /// Removes the pointer, then the file; either already gone is fine.
    pub async fn remove(&self, job_id: JobId) -> Result<(), HaError> {
        self.pointers.remove(job_id).await?;
        let path = self.file_of(job_id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(HaError::Storage {
                operation: "remove",
                path,
                source,
            }),
        }
    }

    /// The ids of every job with a pointer, in order.
    pub async fn job_ids(&self) -> Result<Vec<JobId>, HaError> {
        self.pointers.job_ids().await
    }

    /// Every stored job, each with its graph or why it cannot be read.
    /// The pool size an operator set last, if one did (see [`JobGraphPointers::pool_size`]).
    pub async fn pool_size(&self) -> Result<Option<u32>, HaError> {
        self.pointers.pool_size().await
    }

    /// Keeps the pool size an operator set, for the next leader.
    pub async fn put_pool_size(&self, size: u32) -> Result<(), HaError> {
        self.pointers.put_pool_size(size).await
    }

    pub async fn recover(&self) -> Result<Vec<RecoveredJob>, HaError> {
        self.recover_only(&self.job_ids().await?).await
    }

    /// [`recover`](Self::recover) of the stored jobs among `job_ids` (one gone meanwhile is
    /// skipped).
    pub async fn recover_only(&self, job_ids: &[JobId]) -> Result<Vec<RecoveredJob>, HaError> {
        let mut recovered = Vec::new();
        for &job_id in job_ids {
            let Some(file) = self.pointers.get(job_id).await? else {
                continue;
            };
            let graph = read_graph(Path::new(&file));
            recovered.push(RecoveredJob { job_id, graph });
        }
        Ok(recovered)
    }
}

/// A stored graph, or why it cannot be recovered (the reason the job fails with).
fn read_graph(path: &Path) -> Result<JobGraph, String> {
    let bytes = std::fs::read(path).map_err(|error| {
        format!(
            "its job graph cannot be recovered: cannot read {}: {error}",
            path.display()
        )
    })?;
    serde_json::from_slice(&bytes).map_err(|error| {
        format!(
            "its job graph cannot be recovered: {} is corrupted: {error}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_corrupted_graph_file_is_a_reason_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("flint-jgs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = read_graph(&dir.join("none.json")).unwrap_err();
        assert!(missing.contains("cannot read"), "{missing}");
        let corrupted = dir.join("bad.json");
        std::fs::write(&corrupted, b"{\"name\": ").unwrap();
        let error = read_graph(&corrupted).unwrap_err();
        assert!(error.contains("corrupted"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
