//! Where spill files live, and the guarantee that they do not outlive their owners.
//!
//! The rules, the same as Flint's working directory (`env/working_dir.rs`) applies to its own
//! files:
//!
//! - A [`SpillDir`] is a **fresh** directory inside the task's working directory: created with
//!   `create_dir` (never `create_dir_all`, so anything already at the name is refused, not used),
//!   mode **0700**, under a name with an unpredictable part, retried on collision.
//! - Every spill file is created with `O_CREAT | O_EXCL` (`create_new`) and mode **0600**, so it
//!   never follows or truncates something planted at its name.
//! - Every spill file is owned by exactly one [`SpillFile`] value, which deletes it when dropped:
//!   when its reader is done, when an operator is dropped half-way, when an error is returned
//!   and when a panic unwinds through the operator.
//! - The directory is removed when the last handle to it is dropped. Each `SpillFile` holds one,
//!   so the directory outlives every file in it and the removal finds it empty unless a file's
//!   own deletion failed; it removes whatever is left all the same.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::rng::NodeRng;
use crate::env::working_dir::create_private_file;
use crate::operators::memory::error::SpillError;

/// Every spill directory's name starts with this.
const PREFIX: &str = "spill-";

/// How many names are tried before giving up: a name is taken only if something was planted at
/// it or on a 1-in-2^64 collision.
const NAME_ATTEMPTS: usize = 8;

/// A private directory for one task's spill files, removed when the last handle to it (this or
/// any clone, or any spill file in it) is dropped. Cloning is cheap: the operators of one task
/// share one directory.
#[derive(Clone, Debug)]
pub struct SpillDir {
    inner: Arc<DirInner>,
}

#[derive(Debug)]
struct DirInner {
    path: PathBuf,
    /// The number in the next file's name: names are never reused within a directory.
    next_file: AtomicU64,
}

impl SpillDir {
    /// Creates `working_dir/spill-{pid}-{random}` with mode 0700. `working_dir` must exist; it
    /// is the task's private working directory (Flint's `WorkingDir`), and nothing but the fresh
    /// directory is ever created in it.
    pub fn create_in(working_dir: &Path) -> Result<Self, SpillError> {
        // The name need not be secret, only hard to guess in advance; a name planted anyway is
        // refused by `create_dir` and another tried. Not the node's seeded generator: a
        // replayed run must not predict it (as for `WorkingDir`).
        let mut rng = NodeRng::from_entropy();
        let mut last = None;
        for _ in 0..NAME_ATTEMPTS {
            let name = format!("{PREFIX}{}-{:016x}", std::process::id(), rng.next_u64());
            let path = working_dir.join(name);
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // Owned from here on: a failure below removes it again through Drop.
                    let dir = Self {
                        inner: Arc::new(DirInner {
                            path,
                            next_file: AtomicU64::new(0),
                        }),
                    };
                    // The umask may have taken bits away, never added them; make it exact.
                    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).map_err(
                        |source| SpillError::CreateDir {
                            parent: working_dir.to_owned(),
                            source,
                        },
                    )?;
                    return Ok(dir);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
                Err(source) => {
                    return Err(SpillError::CreateDir {
                        parent: working_dir.to_owned(),
                        source,
                    });
                }
            }
        }
        Err(SpillError::CreateDir {
            parent: working_dir.to_owned(),
            source: last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Creates a new private file named `{number}-{label}` and returns its owner and a handle
    /// open for writing.
    pub(crate) fn create_file(&self, label: &str) -> Result<(SpillFile, File), SpillError> {
        let number = self.inner.next_file.fetch_add(1, Ordering::Relaxed);
        let path = self.inner.path.join(format!("{number:08}-{label}"));
        let file = create_private_file(&path).map_err(|source| SpillError::Io {
            action: "create",
            path: path.clone(),
            source,
        })?;
        let owner = SpillFile {
            path,
            records: 0,
            bytes: 0,
            _dir: self.clone(),
        };
        Ok((owner, file))
    }
}

impl Drop for DirInner {
    fn drop(&mut self) {
        // Nobody can report an error from here (drops run on panic paths too), and nothing is
        // left to retry it: a directory that cannot be removed stays until the working
        // directory is removed by its owner.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The owner of one complete spill file: deletes it when dropped. Knows what was written, so a
/// reader can tell a truncated file from a complete one.
#[derive(Debug)]
pub(crate) struct SpillFile {
    path: PathBuf,
    records: u64,
    bytes: u64,
    /// Keeps the directory until the file is gone.
    _dir: SpillDir,
}

impl SpillFile {
    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// How many records the file holds.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// The file's length in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records what a finished writer put into the file.
    pub(crate) fn set_contents(&mut self, records: u64, bytes: u64) {
        self.records = records;
        self.bytes = bytes;
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        // As for the directory: nothing can report or retry a failure here, and the directory's
        // removal sweeps up whatever is left.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("spill-dir-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_directory_is_private_and_outlives_its_files() {
        let parent = scratch("modes");
        let dir = SpillDir::create_in(&parent).unwrap();
        assert_eq!(mode(dir.path()), 0o700);
        let (file, _handle) = dir.create_file("run").unwrap();
        assert_eq!(mode(file.path()), 0o600);
        let dir_path = dir.path().to_owned();
        let file_path = file.path().to_owned();
        drop(dir);
        assert!(file_path.exists(), "a file keeps its directory");
        drop(file);
        assert!(!file_path.exists());
        assert!(!dir_path.exists());
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_missing_working_dir_is_an_error_naming_it() {
        let scratch = scratch("missing");
        let error = SpillDir::create_in(&scratch.join("nope")).unwrap_err();
        assert!(error.to_string().contains("nope"), "{error}");
        fs::remove_dir_all(&scratch).unwrap();
    }
}
