//! Submitted job graphs, kept so a new leader can recover them (Flink's
//! `ZooKeeperJobGraphStore`): the graph itself as JSON in `STORAGE/CLUSTER/job-ID.json`
//! (`high-availability.storageDir`, a directory every JobManager reaches), and a persistent
//! pointer znode `ROOT/CLUSTER/jobgraphs/ID` holding that file's path. ZooKeeper never holds a
//! graph: znodes are small, graphs are not.
//!
//! A graph is written (file first, then the pointer) before the JobManager starts its job and
//! `POST /jobs` answers, and removed (pointer first, then the file) once the job's result is in
//! the [job result store](super::job_result_store), which then marks it clean. A pointer whose file is
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

use zookeeper_client::{Client, CreateMode};

use super::HaError;
use super::job_event_log::JobEventLog;
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

    /// The file `job_id`'s pointer names, `None` if it has none (any more) or one this cluster
    /// did not write (a forged pointer, logged).
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
        let data = &self.settings.sign(&pointer, file.as_bytes());
        let options = CreateMode::Persistent.with_acls(self.settings.acls());
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
            Ok((data, _)) => Ok(match self.settings.verify(path, &data) {
                Ok(size) => std::str::from_utf8(size)
                    .ok()
                    .and_then(|text| text.trim().parse().ok())
                    .or_else(|| {
                        log::warn!("job graph store: ignoring {path}: not a pool size");
                        None
                    }),
                Err(error) => {
                    log::warn!(
                        "job graph store: ignoring the pool size: {}",
                        crate::base::error_chain::ErrorChain(&error)
                    );
                    None
                }
            }),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(source) => Err(HaError::zk("read", path)(source)),
        }
    }

    async fn put_pool_size(&self, size: u32) -> Result<(), HaError> {
        let path = &self.pool_size;
        let data = self.settings.sign(path, size.to_string().as_bytes());
        let options = CreateMode::Persistent.with_acls(self.settings.acls());
        let client = self.client().await?;
        match client.create(path, &data, &options).await {
            Ok(_) => Ok(()),
            Err(zookeeper_client::Error::NodeExists) => client
                .set_data(path, &data, None)
                .await
                .map(drop)
                .map_err(HaError::zk("set", path)),
            Err(source) => Err(HaError::zk("create", path)(source)),
        }
    }

    async fn get(&self, job_id: JobId) -> Result<Option<String>, HaError> {
        let pointer = self.pointer_of(job_id);
        match self.client().await?.get_data(&pointer).await {
            // A forged pointer is no pointer: its job is neither run nor shown.
            Ok((data, _)) => match self.settings.verify(&pointer, &data) {
                Ok(file) => Ok(Some(String::from_utf8_lossy(file).into_owned())),
                Err(error) => {
                    log::warn!(
                        "job graph store: ignoring a job graph pointer: {}",
                        crate::base::error_chain::ErrorChain(&error)
                    );
                    Ok(None)
                }
            },
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(source) => Err(HaError::zk("read", &pointer)(source)),
        }
    }
}

/// How a JobManager persists the graphs of the jobs it accepts and removes those of the jobs
/// that ended (Flink's `JobGraphWriter`): the [`JobGraphStore`] with high availability,
/// [`NoJobGraphs`] without. Object safe, its futures local: the JobManager holds one and runs
/// its futures on its own arbiter.
pub trait JobGraphWriter {
    /// Persists `graph` as job `job_id`'s; resolves once it is stored. The graph is encoded
    /// before this returns.
    fn put_job_graph(&self, job_id: JobId, graph: &JobGraph)
    -> LocalBoxFuture<Result<(), HaError>>;

    /// Removes job `job_id`'s graph (and whatever the store keeps beside it); already gone is
    /// fine.
    fn remove_job_graph(&self, job_id: JobId) -> LocalBoxFuture<Result<(), HaError>>;

    /// Where job events go beside the graphs (batch job recovery); `None` without high
    /// availability (nothing outlives the JobManager).
    fn event_log(&self) -> Option<JobEventLog> {
        None
    }
}

/// A future of a [`JobGraphWriter`].
pub type LocalBoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T>>>;

/// No high availability: nothing outlives the JobManager, so nothing is written (Flink's
/// `StandaloneJobGraphStore`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJobGraphs;

impl JobGraphWriter for NoJobGraphs {
    fn put_job_graph(&self, _: JobId, _: &JobGraph) -> LocalBoxFuture<Result<(), HaError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn remove_job_graph(&self, _: JobId) -> LocalBoxFuture<Result<(), HaError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

impl<P: JobGraphPointers + Clone + 'static> JobGraphWriter for JobGraphStore<P> {
    fn put_job_graph(
        &self,
        job_id: JobId,
        graph: &JobGraph,
    ) -> LocalBoxFuture<Result<(), HaError>> {
        let store = self.clone();
        let encoded = store.encode(job_id, graph);
        Box::pin(async move { store.put_encoded(job_id, encoded?).await })
    }

    fn remove_job_graph(&self, job_id: JobId) -> LocalBoxFuture<Result<(), HaError>> {
        let store = self.clone();
        Box::pin(async move { store.remove(job_id).await })
    }

    fn event_log(&self) -> Option<JobEventLog> {
        Some(JobEventLog::new(&self.dir))
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
        ensure_path(&client, &pointers, settings.acls()).await?;
        let cluster = paths.cluster_id();
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
    ///
    /// A new leader runs whatever graphs it finds there, so `dir` and its parent (the
    /// configured `storageDir`) must be this user's and writable by no one else (refused with
    /// the path named otherwise, as ssh refuses a loose `~/.ssh`); what is missing is made 0700.
    pub fn with_pointers(pointers: P, dir: &Path) -> Result<Self, HaError> {
        if let Some(storage_dir) = dir.parent() {
            crate::env::private::ensure_dir(storage_dir, false)?;
        }
        crate::env::private::ensure_dir(dir, false)?;
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
        let json = self.encode(job_id, graph)?;
        self.put_encoded(job_id, json).await
    }

    /// The graph as its file holds it.
    fn encode(&self, job_id: JobId, graph: &JobGraph) -> Result<Vec<u8>, HaError> {
        serde_json::to_vec_pretty(graph).map_err(|e| HaError::Storage {
            operation: "serialize",
            path: self.file_of(job_id),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    async fn put_encoded(&self, job_id: JobId, json: Vec<u8>) -> Result<(), HaError> {
        let path = self.file_of(job_id);
        let storage = |operation| {
            let path = path.clone();
            move |source| HaError::Storage {
                operation,
                path,
                source,
            }
        };
        let partial = path.with_extension("json.partial");
        {
            use std::io::Write as _;
            // 0600, never through a link: a graph is as sensitive as the job's configuration.
            let mut file =
                crate::env::private::create_private_file(&partial).map_err(storage("write"))?;
            file.write_all(&json).map_err(storage("write"))?;
            file.sync_all().map_err(storage("sync"))?;
        }
        std::fs::rename(&partial, &path).map_err(storage("rename"))?;
        self.pointers.put(job_id, &path.display().to_string()).await
    }

    /// Removes the pointer, then the job's event log and graph file; any already gone is fine.
    pub async fn remove(&self, job_id: JobId) -> Result<(), HaError> {
        self.pointers.remove(job_id).await?;
        if let Err(error) = JobEventLog::new(&self.dir).remove(job_id) {
            // Harmless: a log without a graph is never read.
            log::warn!("{}", crate::base::error_chain::ErrorChain(&error));
        }
        let path = self.file_of(job_id);
        super::remove_if_present(&path).map_err(|source| HaError::Storage {
            operation: "remove",
            path,
            source,
        })
    }

    /// The ids of every job with a pointer, in order.
    pub async fn job_ids(&self) -> Result<Vec<JobId>, HaError> {
        self.pointers.job_ids().await
    }

    /// The pool size an operator set last, if one did (see [`JobGraphPointers::pool_size`]).
    pub async fn pool_size(&self) -> Result<Option<u32>, HaError> {
        self.pointers.pool_size().await
    }

    /// Keeps the pool size an operator set, for the next leader.
    pub async fn put_pool_size(&self, size: u32) -> Result<(), HaError> {
        self.pointers.put_pool_size(size).await
    }

    /// Every stored job, each with its graph or why it cannot be read.
    pub async fn recover(&self) -> Result<Vec<RecoveredJob>, HaError> {
        self.recover_only(&self.job_ids().await?).await
    }

    /// The directory of the graph files (each job's event log lives beside its graph).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// [`recover`](Self::recover) of the stored jobs among `job_ids` (one gone meanwhile is
    /// skipped).
    pub async fn recover_only(&self, job_ids: &[JobId]) -> Result<Vec<RecoveredJob>, HaError> {
        let mut recovered = Vec::new();
        for &job_id in job_ids {
            let Some(file) = self.pointers.get(job_id).await? else {
                continue;
            };
            // Only this store's own file of the job: a pointer naming anything else (another
            // file the leader could read) is refused, not followed.
            let own = self.file_of(job_id);
            let graph = if Path::new(&file) == own {
                read_graph(&own)
            } else {
                Err(format!(
                    "its job graph pointer names {file}, not {}: refused (a pointer outside \
                     high-availability.storageDir is never followed)",
                    own.display()
                ))
            };
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
    use std::collections::BTreeMap;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    /// Pointers in memory, as a ZooKeeper writer could set them.
    #[derive(Debug, Default)]
    struct Pointers(Mutex<BTreeMap<JobId, String>>);

    impl JobGraphPointers for Pointers {
        async fn put(&self, job_id: JobId, file: &str) -> Result<(), HaError> {
            self.0.lock().unwrap().insert(job_id, file.to_owned());
            Ok(())
        }
        async fn remove(&self, job_id: JobId) -> Result<(), HaError> {
            self.0.lock().unwrap().remove(&job_id);
            Ok(())
        }
        async fn job_ids(&self) -> Result<Vec<JobId>, HaError> {
            Ok(self.0.lock().unwrap().keys().copied().collect())
        }
        async fn get(&self, job_id: JobId) -> Result<Option<String>, HaError> {
            Ok(self.0.lock().unwrap().get(&job_id).cloned())
        }
        async fn pool_size(&self) -> Result<Option<u32>, HaError> {
            Ok(None)
        }
        async fn put_pool_size(&self, _: u32) -> Result<(), HaError> {
            Ok(())
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flint-jgs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn graphs_are_private_and_a_pointer_outside_the_store_is_refused() {
        let root = scratch("pointers");
        let store = JobGraphStore::with_pointers(Pointers::default(), &root.join("cluster"))
            .expect("made privately");
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        let mut graph = JobGraph::builder("private");
        graph.vertex("work", "noop", 1);
        let graph = graph.build(|_| true).unwrap();
        let (good, forged) = (JobId::from_u128(1), JobId::from_u128(2));
        store.put(good, &graph).await.unwrap();
        assert_eq!(
            std::fs::metadata(store.file_of(good)).unwrap().mode() & 0o777,
            0o600
        );
        // A ZooKeeper writer points a job at another JSON file the leader can read.
        let elsewhere = root.join("elsewhere.json");
        std::fs::write(&elsewhere, serde_json::to_vec(&graph).unwrap()).unwrap();
        store
            .pointers
            .put(forged, &elsewhere.display().to_string())
            .await
            .unwrap();
        let recovered = store.recover().await.unwrap();
        assert_eq!(recovered.len(), 2);
        assert_eq!(recovered[0].graph.as_ref(), Ok(&graph));
        let refused = recovered[1].graph.as_ref().unwrap_err();
        assert!(refused.contains("never followed"), "{refused}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_storage_directory_others_can_write_is_refused_naming_it() {
        let root = scratch("loose");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, PermissionsExt::from_mode(0o777)).unwrap();
        let error = JobGraphStore::with_pointers(Pointers::default(), &root.join("cluster"))
            .expect_err("refused");
        let said = crate::base::error_chain::ErrorChain(&error).to_string();
        assert!(said.contains(&root.display().to_string()), "{said}");
        assert!(said.contains("mode 777"), "{said}");
        std::fs::remove_dir_all(&root).unwrap();
    }

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
