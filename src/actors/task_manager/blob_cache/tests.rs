use std::os::unix::fs::PermissionsExt;

use actix::prelude::*;

use super::*;
use crate::env::blocking_io::InlineIo;
use crate::messages::buffer::Buffer;
use crate::messages::job_manager::{BlobChunk, BlobFetchError};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-blob-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Serves `FetchBlob` from a store, counting asks, optionally flipping a byte of every chunk.
struct Server {
    store: BlobStore,
    asks: Arc<std::sync::atomic::AtomicUsize>,
    corrupt: bool,
}

impl Actor for Server {
    type Context = Context<Self>;
}

impl Handler<FetchBlob> for Server {
    type Result = Result<BlobChunk, BlobFetchError>;

    fn handle(&mut self, msg: FetchBlob, _: &mut Context<Self>) -> Self::Result {
        self.asks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let length = msg.length.min(FETCH_BLOB_CHUNK) as usize;
        match self.store.read_chunk(&msg.digest, msg.offset, length) {
            Ok((mut bytes, size)) => {
                if self.corrupt && !bytes.is_empty() {
                    bytes[0] ^= 1;
                }
                Ok(BlobChunk {
                    size,
                    bytes: Buffer::new(0, bytes.into()),
                })
            }
            Err(_) => Err(BlobFetchError::NotFound(msg.digest)),
        }
    }
}

fn server(
    dir: &Path,
    corrupt: bool,
) -> (
    Recipient<FetchBlob>,
    BlobStore,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let store = BlobStore::open(&dir.join("jobmanager"), u64::MAX).unwrap();
    let asks = Arc::default();
    let address = Server {
        store: store.clone(),
        asks: Arc::clone(&asks),
        corrupt,
    }
    .start();
    (address.recipient(), store, asks)
}

fn artifact(name: &str, bytes: &[u8], executable: bool) -> JobArtifact {
    JobArtifact {
        name: name.into(),
        digest: BlobKey::of(bytes),
        size: bytes.len() as u64,
        executable,
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(dir).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[actix_rt::test]
async fn a_fetch_copies_the_artifact_in_chunks_checked_and_read_only() {
    let dir = scratch("fetch");
    let (fetch_blob, jobmanager, asks) = server(&dir, false);
    // Three and a half chunks, so the window, the order of writes and the short tail count.
    let bytes: Vec<u8> = (0..(FETCH_BLOB_CHUNK as usize * 7 / 2))
        .map(|i| (i % 253) as u8)
        .collect();
    jobmanager.put(&bytes[..], None).unwrap();
    let mut cache = BlobCache::open(&dir.join("cache"));
    let job = JobId::from_u128(1);
    for executable in [false, true] {
        let wanted = artifact("model.bin", &bytes, executable);
        let (handles, orders) = cache.acquire(job, std::slice::from_ref(&wanted));
        assert_eq!((handles.len(), orders.len()), (1, 1));
        let outcome = fetch(fetch_blob.clone(), orders[0].clone(), Arc::new(InlineIo)).await;
        let FetchState::Ready(path) = outcome.clone() else {
            panic!("fetch failed: {outcome:?}");
        };
        cache.fetched(wanted.digest, executable, outcome);
        assert_eq!(
            handles[0].state.get(),
            Some(FetchState::Ready(path.clone()))
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, if executable { 0o500 } else { 0o400 });
    }
    assert_eq!(
        asks.load(std::sync::atomic::Ordering::SeqCst),
        8,
        "four chunks per fetch"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_rt::test]
async fn a_copy_that_does_not_match_its_digest_is_refused_and_leaves_nothing() {
    let dir = scratch("corrupt");
    let (fetch_blob, jobmanager, _) = server(&dir, true);
    let bytes = b"#!/bin/sh\necho hi\n".repeat(1000);
    jobmanager.put(&bytes[..], None).unwrap();
    let mut cache = BlobCache::open(&dir.join("cache"));
    let wanted = artifact("run.sh", &bytes, true);
    let (handles, orders) = cache.acquire(JobId::from_u128(1), std::slice::from_ref(&wanted));
    let outcome = fetch(fetch_blob.clone(), orders[0].clone(), Arc::new(InlineIo)).await;
    let FetchState::Failed(why) = &outcome else {
        panic!("a corrupted copy was accepted: {outcome:?}");
    };
    assert!(why.contains("`run.sh`") && why.contains("SHA-256"), "{why}");
    cache.fetched(wanted.digest, true, outcome.clone());
    assert_eq!(handles[0].state.get(), Some(outcome.clone()));
    assert!(files(&dir.join("cache/exec")).is_empty(), "nothing stored");
    assert!(cache.is_empty(), "a failed fetch is forgotten");
    // The next task of the job fetches again.
    let (_, orders) = cache.acquire(JobId::from_u128(1), std::slice::from_ref(&wanted));
    assert_eq!(orders.len(), 1);

    // An artifact the JobManager does not hold fails naming it.
    let missing = artifact("gone.txt", b"never uploaded", false);
    let (_, orders) = cache.acquire(JobId::from_u128(2), std::slice::from_ref(&missing));
    let FetchState::Failed(why) = fetch(fetch_blob, orders[0].clone(), Arc::new(InlineIo)).await
    else {
        panic!("a missing artifact was fetched");
    };
    assert!(
        why.contains("`gone.txt`") && why.contains("not stored"),
        "{why}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tasks_share_one_fetch_and_the_copy_goes_when_no_job_uses_it() {
    let dir = scratch("refcount");
    std::fs::create_dir_all(dir.join("cache/plain")).unwrap();
    std::fs::write(
        dir.join("cache/plain/leftover"),
        b"an earlier incarnation's",
    )
    .unwrap();
    let mut cache = BlobCache::open(&dir.join("cache"));
    assert!(
        files(&dir.join("cache/plain")).is_empty(),
        "leftovers removed at start"
    );
    let shared = artifact("words.txt", b"the words", false);
    let (a, b) = (JobId::from_u128(1), JobId::from_u128(2));
    let jobs = [shared.clone()];
    let (_, first) = cache.acquire(a, &jobs);
    let (_, second) = cache.acquire(a, &jobs);
    let (_, other_job) = cache.acquire(b, &jobs);
    assert_eq!(
        (first.len(), second.len(), other_job.len()),
        (1, 0, 0),
        "one fetch"
    );
    let path = dir.join("cache/plain/copy");
    cache.fetched(shared.digest, false, FetchState::Ready(path.clone()));
    // Job a's first task ends: not its last.
    assert_eq!(cache.task_ended(a, &jobs), None);
    let idle_a = cache.task_ended(a, &jobs).expect("a's last task");
    // A task of a starts again before the linger is over: nothing is released.
    let (_, again) = cache.acquire(a, &jobs);
    assert!(again.is_empty());
    assert!(cache.release_idle(a, idle_a).is_empty());
    let idle_a = cache.task_ended(a, &jobs).expect("a's last task");
    assert!(cache.release_idle(a, idle_a).is_empty(), "b still uses it");
    let idle_b = cache.task_ended(b, &jobs).expect("b's last task");
    assert_eq!(cache.release_idle(b, idle_b), vec![path]);
    assert!(cache.is_empty());
    // Jobs without artifacts never count.
    assert!(cache.acquire(a, &[]).0.is_empty());
    assert_eq!(cache.task_ended(a, &[]), None);
    cache.remove_all();
    assert!(!dir.join("cache").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
