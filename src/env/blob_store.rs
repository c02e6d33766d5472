//! Where the JobManager keeps job artifacts (Flink's `BlobServer` store): one private file per
//! [`BlobKey`], in the JobManager's working directory, or under `high-availability.storageDir`
//! so that every leader serves the same artifacts.
//!
//! An upload streams into a private temporary file while its SHA-256 and size are computed; past
//! the size limit it stops at once. Only a complete upload (synced, and checked against the
//! digest the client expects, if it named one) is renamed to its key: a cut-off upload, a
//! failing disk or a dying leader leaves no artifact, only a temporary file that the next
//! [`BlobStore::open`] removes once it is old. Two uploads of the same bytes end in the same
//! file (the rename is atomic, the content the same).
//!
//! Files are 0600 in a 0700 directory, never executable here; names come only from keys (hex)
//! and this process's own temporary names.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::base::blob_key::BlobKey;
use crate::base::rng::NodeRng;

/// Temporary upload files end with this.
const PART: &str = ".part";

/// A temporary file older than this at [`BlobStore::open`] belongs to an upload that died.
const STALE_UPLOAD: Duration = Duration::from_secs(24 * 3600);

/// Why an artifact could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The disk refused.
    #[error("artifact store: cannot {operation} {path}")]
    Io {
        /// What was tried.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The upload is larger than `blob.max-size`.
    #[error("the artifact is larger than blob.max-size ({limit} bytes); nothing was stored")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The bytes do not hash to the digest the sender named.
    #[error(
        "the artifact's SHA-256 is {actual}, not the {expected} it was sent as (changed or cut \
         off on the way); nothing was stored"
    )]
    DigestMismatch {
        /// What the sender named.
        expected: BlobKey,
        /// What arrived.
        actual: BlobKey,
    },
    /// No artifact with this key is stored.
    #[error(
        "no artifact {key} is stored (upload it first: flint run --artifact, or POST /artifacts)"
    )]
    NotFound {
        /// The key.
        key: BlobKey,
    },
}

/// One stored artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobInfo {
    /// Its key (the SHA-256 of its bytes).
    pub digest: BlobKey,
    /// Its size in bytes.
    pub size: u64,
    /// When it was stored (ms since the epoch).
    pub stored_at_ms: u64,
}

impl BlobInfo {
    /// What the store's file of `digest` says, `None` unless it is a regular file.
    fn of(digest: BlobKey, metadata: &fs::Metadata) -> Option<Self> {
        metadata.is_file().then(|| Self {
            digest,
            size: metadata.len(),
            stored_at_ms: metadata.modified().map_or(0, millis),
        })
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
    max_size: u64,
    /// Whether a stored artifact is synced to disk before it counts as stored: the
    /// JobManager's store must survive a crash; a TaskManager's cache is emptied at start-up
    /// anyway, and four 100 MB syncs at once cost more than the fetch itself.
    durable: bool,
}

impl BlobStore {
    /// Opens (creating it, 0700, if missing) the store in `dir`, accepting artifacts of at most
    /// `max_size` bytes; removes temporary files of uploads that died long ago.
    pub fn open(dir: &Path, max_size: u64) -> Result<Self, BlobError> {
        if !dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| io_error("create", dir, source))?;
        }
        let store = Self {
            dir: dir.to_owned(),
            max_size,
            durable: true,
        };
        store.remove_stale_uploads();
        Ok(store)
    }

    /// [`open`](Self::open) for a cache of copies (a TaskManager's): no size limit, and
    /// nothing synced to disk, since a restarted cache starts empty.
    pub fn open_cache(dir: &Path) -> Result<Self, BlobError> {
        Ok(Self {
            durable: false,
            ..Self::open(dir, u64::MAX)?
        })
    }

    /// The largest artifact accepted.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// Where the artifact `key` is (whether or not it is stored).
    pub fn path_of(&self, key: &BlobKey) -> PathBuf {
        self.dir.join(key.to_string())
    }

    /// The stored artifact `key`, as [`list`](Self::list) shows it.
    pub fn info(&self, key: &BlobKey) -> Result<BlobInfo, BlobError> {
        let path = self.path_of(key);
        match fs::metadata(&path) {
            Ok(metadata) => BlobInfo::of(*key, &metadata).ok_or(BlobError::NotFound { key: *key }),
            Err(source) if source.kind() == io::ErrorKind::NotFound => {
                Err(BlobError::NotFound { key: *key })
            }
            Err(source) => Err(io_error("read", &path, source)),
        }
    }

    /// Whether `key` is stored.
    pub fn contains(&self, key: &BlobKey) -> bool {
        self.path_of(key).is_file()
    }

    /// The stored artifact `key`, opened for reading, and its size.
    pub fn open_blob(&self, key: &BlobKey) -> Result<(File, u64), BlobError> {
        let path = self.path_of(key);
        let file = File::open(&path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => BlobError::NotFound { key: *key },
            _ => io_error("open", &path, source),
        })?;
        let size = (file.metadata())
            .map_err(|source| io_error("read the size of", &path, source))?
            .len();
        Ok((file, size))
    }

    /// Reads up to `length` bytes of `key` from `offset` (fewer only at its end), with the
    /// artifact's whole size: how a TaskManager's fetch is served, one chunk per ask.
    pub fn read_chunk(
        &self,
        key: &BlobKey,
        offset: u64,
        length: usize,
    ) -> Result<(Vec<u8>, u64), BlobError> {
        use std::os::unix::fs::FileExt;
        let (file, size) = self.open_blob(key)?;
        let wanted =
            usize::try_from(size.saturating_sub(offset)).map_or(length, |left| left.min(length));
        let mut bytes = vec![0; wanted];
        file.read_exact_at(&mut bytes, offset)
            .map_err(|source| io_error("read", &self.path_of(key), source))?;
        Ok((bytes, size))
    }

    /// Removes every artifact and temporary file: a TaskManager's cache at start-up, whose
    /// files belong to an earlier incarnation that no job holds any more.
    pub fn clear(&self) -> Result<(), BlobError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|source| io_error("list", &self.dir, source))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if let Err(source) = fs::remove_file(&path)
                && source.kind() != io::ErrorKind::NotFound
            {
                return Err(io_error("remove", &path, source));
            }
        }
        Ok(())
    }

    /// Starts an upload; see [`BlobUpload`].
    pub fn upload(&self) -> Result<BlobUpload, BlobError> {
        let mut rng = NodeRng::from_entropy();
        let path = self.dir.join(format!(
            "upload-{}-{:016x}{PART}",
            std::process::id(),
            rng.next_u64()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| io_error("create", &path, source))?;
        Ok(BlobUpload {
            store: self.clone(),
            file: Some(file),
            path,
            hasher: Sha256::new(),
            size: 0,
        })
    }

    /// Stores everything `reader` gives (a file a test or a client already has).
    pub fn put(
        &self,
        mut reader: impl Read,
        expected: Option<BlobKey>,
    ) -> Result<BlobInfo, BlobError> {
        let mut upload = self.upload()?;
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_error("read the upload for", &upload.path, source)),
            };
            upload.write(&buffer[..read])?;
        }
        upload.finish(expected)
    }

    /// Every stored artifact, by key.
    pub fn list(&self) -> Result<Vec<BlobInfo>, BlobError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|source| io_error("list", &self.dir, source))?;
        let mut blobs: Vec<BlobInfo> = (entries.flatten())
            .filter_map(|entry| {
                let digest: BlobKey = entry.file_name().to_str()?.parse().ok()?;
                BlobInfo::of(digest, &entry.metadata().ok()?)
            })
            .collect();
        blobs.sort_by_key(|blob| blob.digest);
        Ok(blobs)
    }

    /// Removes `key` (already gone is fine).
    pub fn remove(&self, key: &BlobKey) -> Result<(), BlobError> {
        let path = self.path_of(key);
        match fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                Err(io_error("remove", &path, error))
            }
            _ => Ok(()),
        }
    }

    fn remove_stale_uploads(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let stale = (entry.file_name().to_str()).is_some_and(|n| n.ends_with(PART))
                && (entry.metadata().and_then(|m| m.modified()).ok())
                    .and_then(|modified| modified.elapsed().ok())
                    .is_some_and(|age| age > STALE_UPLOAD);
            if stale {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// An upload in progress: [`write`](Self::write) its bytes as they arrive, then
/// [`finish`](Self::finish). Dropped unfinished (the sender went away, a limit was hit), it
/// removes its temporary file and stores nothing.
#[derive(Debug)]
pub struct BlobUpload {
    store: BlobStore,
    file: Option<File>,
    path: PathBuf,
    hasher: Sha256,
    size: u64,
}

impl BlobUpload {
    /// Appends `bytes`; refuses them (and so the upload) past the store's size limit.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), BlobError> {
        self.size += bytes.len() as u64;
        if self.size > self.store.max_size {
            return Err(BlobError::TooLarge {
                limit: self.store.max_size,
            });
        }
        self.hasher.update(bytes);
        let file = self.file.as_mut().expect("written before finish");
        file.write_all(bytes)
            .map_err(|source| io_error("write", &self.path, source))
    }

    /// Ends the upload: the bytes are synced to disk (in a durable store) and stored under
    /// their key, checked against `expected` if the sender named one.
    pub fn finish(mut self, expected: Option<BlobKey>) -> Result<BlobInfo, BlobError> {
        let file = self.file.take().expect("finished once");
        if self.store.durable {
            file.sync_all()
                .map_err(|source| io_error("sync", &self.path, source))?;
        }
        drop(file);
        let digest = BlobKey::from_hasher(std::mem::take(&mut self.hasher));
        if let Some(expected) = expected.filter(|expected| *expected != digest) {
            return Err(BlobError::DigestMismatch {
                expected,
                actual: digest,
            });
        }
        let target = self.store.path_of(&digest);
        fs::rename(&self.path, &target).map_err(|source| io_error("store", &target, source))?;
        // The rename itself survives a crash only once the directory is synced.
        if self.store.durable
            && let Ok(dir) = File::open(&self.store.dir)
        {
            let _ = dir.sync_all();
        }
        self.path = PathBuf::new();
        let stored = fs::metadata(&target).and_then(|m| m.modified());
        Ok(BlobInfo {
            digest,
            size: self.size,
            stored_at_ms: stored.map_or(0, millis),
        })
    }
}

impl Drop for BlobUpload {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn io_error(operation: &'static str, path: &Path, source: io::Error) -> BlobError {
    BlobError::Io {
        operation,
        path: path.to_owned(),
        source,
    }
}

fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flint-blob-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = (fs::read_dir(dir).unwrap().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn chunks_read_back_the_artifact_and_clear_empties_the_store() {
        let dir = scratch("chunks");
        let store = BlobStore::open(&dir, 1 << 20).unwrap();
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let info = store.put(&bytes[..], None).unwrap();
        let mut read = Vec::new();
        while (read.len() as u64) < info.size {
            let (chunk, size) = store
                .read_chunk(&info.digest, read.len() as u64, 4096)
                .unwrap();
            assert_eq!(size, 10_000);
            assert!(!chunk.is_empty() && chunk.len() <= 4096);
            read.extend_from_slice(&chunk);
        }
        assert_eq!(read, bytes);
        let (past, _) = store.read_chunk(&info.digest, 20_000, 4096).unwrap();
        assert!(past.is_empty());
        let missing = BlobKey::of(b"never stored");
        assert!(matches!(
            store.read_chunk(&missing, 0, 1),
            Err(BlobError::NotFound { .. })
        ));
        store.clear().unwrap();
        assert!(files_in(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_artifact_is_stored_once_under_its_sha256_private_and_not_executable() {
        let dir = scratch("stored");
        let store = BlobStore::open(&dir, 1 << 20).unwrap();
        let info = store.put(&b"print('hi')\n"[..], None).unwrap();
        assert_eq!(info.digest, BlobKey::of(b"print('hi')\n"));
        assert_eq!(info.size, 12);
        let again = store.put(&b"print('hi')\n"[..], Some(info.digest)).unwrap();
        assert_eq!(again.digest, info.digest);
        assert_eq!(files_in(&dir), [info.digest.to_string()]);
        let mode = fs::metadata(store.path_of(&info.digest))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let (mut file, size) = store.open_blob(&info.digest).unwrap();
        let mut read = String::new();
        file.read_to_string(&mut read).unwrap();
        assert_eq!((read.as_str(), size), ("print('hi')\n", 12));
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].digest, listed[0].size), (info.digest, 12));
        store.remove(&info.digest).unwrap();
        store.remove(&info.digest).unwrap();
        assert!(!store.contains(&info.digest));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn too_large_mismatched_or_cut_off_uploads_store_nothing() {
        let dir = scratch("refused");
        let store = BlobStore::open(&dir, 10).unwrap();
        assert!(matches!(
            store.put(&[7u8; 11][..], None),
            Err(BlobError::TooLarge { limit: 10 })
        ));
        let wrong = BlobKey::of(b"something else");
        match store.put(&b"0123456789"[..], Some(wrong)) {
            Err(BlobError::DigestMismatch { expected, actual }) => {
                assert_eq!((expected, actual), (wrong, BlobKey::of(b"0123456789")));
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        let mut cut_off = store.upload().unwrap();
        cut_off.write(b"01234").unwrap();
        drop(cut_off);
        assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
        assert!(store.list().unwrap().is_empty());
        assert!(matches!(
            store.open_blob(&wrong),
            Err(BlobError::NotFound { .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // ages a file on the real disk
    fn reopening_removes_only_stale_uploads() {
        let dir = scratch("stale");
        let store = BlobStore::open(&dir, 100).unwrap();
        let kept = store.put(&b"kept"[..], None).unwrap();
        let fresh = dir.join(format!("upload-1-fresh{PART}"));
        let stale = dir.join(format!("upload-1-stale{PART}"));
        fs::write(&fresh, b"in flight").unwrap();
        fs::write(&stale, b"dead").unwrap();
        let old = SystemTime::now() - STALE_UPLOAD - Duration::from_secs(60);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        BlobStore::open(&dir, 100).unwrap();
        assert!(
            fresh.exists(),
            "an upload in flight (another leader's) was removed"
        );
        assert!(!stale.exists());
        assert!(store.contains(&kept.digest));
        fs::remove_dir_all(dir).unwrap();
    }
}
