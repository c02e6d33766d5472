//! A process's private working directory, and the private files in it.
//!
//! This module owns where a Flint process keeps files no other local user may read or replace:
//! the configuration a JobManager hands to its TaskManager children, and everything the data
//! exchange spills. The rules it enforces:
//!
//! - A working directory is always **created fresh** by the process that uses it
//!   (`create_dir`, never `create_dir_all`, so a directory, file or symbolic link that already
//!   exists at the name is refused rather than used), with mode **0700**, under a name nobody can
//!   predict: `flint-{role}-{pid}-{random}`. The random part comes from the operating system,
//!   never from the configuration's `seed` (which is not a secret: a run is replayed from it).
//!   The parent (the `taskmanager.working-dir` setting, else the system's temporary directory)
//!   may be shared, as `/tmp` is: nothing is ever created in it but the fresh directory.
//! - A **private file** is created with mode **0600** and `O_CREAT | O_EXCL`: it never follows
//!   or truncates something planted at its name.
//! - A working directory is **removed when its owner stops** ([`WorkingDir`]'s `Drop`), and on
//!   start the working directories of dead processes of the same user are removed
//!   ([`clean_stale`]): a crashed process leaves nothing behind for longer than until the next
//!   start.
//!
//! It never changes the mode of anything it did not create, and never removes anything but
//! directories whose name it made and whose owner is this user.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::base::rng::NodeRng;

/// Every working directory's name starts with this, then the role.
const PREFIX: &str = "flint-";

/// Why a working directory could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WorkingDirError {
    /// The parent cannot be created or read.
    #[error("cannot prepare the parent directory {path}")]
    Parent {
        /// The parent.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The fresh directory cannot be created (something exists at every name tried, or the
    /// parent is not writable). Not retryable without a change.
    #[error("cannot create a private working directory in {parent}")]
    Create {
        /// The parent.
        parent: PathBuf,
        /// Why the last attempt failed.
        #[source]
        source: io::Error,
    },
}

/// A directory this process created for itself (0700), removed with everything in it when
/// dropped (the graceful stop of its owner).
#[derive(Debug)]
pub struct WorkingDir {
    path: PathBuf,
}

impl WorkingDir {
    /// Creates `parent/flint-{role}-{pid}-{random}` with mode 0700, first creating `parent`
    /// (an operator's setting) if it does not exist, then removes the stale working
    /// directories of dead processes of this user in `parent` (see [`clean_stale`]).
    pub fn create(parent: &Path, role: &str) -> Result<Self, WorkingDirError> {
        if !parent.exists() {
            fs::create_dir_all(parent).map_err(|source| WorkingDirError::Parent {
                path: parent.to_owned(),
                source,
            })?;
        }
        let mut rng = NodeRng::from_entropy();
        let mut last = None;
        // A name taken by someone else (planted, or a rare collision) is skipped, not used.
        for _ in 0..8 {
            let name = format!(
                "{PREFIX}{role}-{}-{:016x}",
                std::process::id(),
                rng.next_u64()
            );
            let path = parent.join(name);
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // The umask may have taken bits away, never added them; make it exact.
                    set_mode(&path, 0o700).map_err(|source| WorkingDirError::Create {
                        parent: parent.to_owned(),
                        source,
                    })?;
                    let dir = Self { path };
                    let removed = clean_stale(parent);
                    if removed > 0 {
                        log::info!(
                            "removed {removed} working director{} of stopped processes in {}",
                            if removed == 1 { "y" } else { "ies" },
                            parent.display()
                        );
                    }
                    return Ok(dir);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
                Err(source) => {
                    return Err(WorkingDirError::Create {
                        parent: parent.to_owned(),
                        source,
                    });
                }
            }
        }
        Err(WorkingDirError::Create {
            parent: parent.to_owned(),
            source: last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkingDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => log::warn!(
                "cannot remove the working directory {}: {error}",
                self.path.display()
            ),
        }
    }
}

/// Creates `path` as a new file with mode 0600 and opens it for writing. Fails if anything
/// exists at `path`, a symbolic link included (`O_CREAT | O_EXCL` never follows one): a file
/// planted by someone else is never written through. What the data exchange should use for its
/// spill and partition files.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // The umask may have taken bits away, never added them; make it exact.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(file)
}

/// Writes `bytes` to a new private file at `path` (see [`create_private_file`]).
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = create_private_file(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Removes the working directories in `parent` that belong to this user and to a process that
/// no longer runs; returns how many. A directory counts only if its name is one
/// [`WorkingDir::create`] makes, it is a real directory (not a link) and its owner is this
/// user; a process is running if `/proc/{pid}` exists (a reused pid keeps a directory, which is
/// the safe mistake).
pub fn clean_stale(parent: &Path) -> usize {
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let me = current_uid();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(pid_of) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        let Ok(metadata) = fs::symlink_metadata(&path) else {
            continue;
        };
        if !metadata.is_dir() || metadata.uid() != me {
            continue;
        }
        if fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The pid in a working directory's name `flint-{role}-{pid}-{16 hex digits}`, if it is one.
fn pid_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let random = parts.next()?;
    let pid = parts.next()?;
    let role = parts.next()?;
    let well_formed = random.len() == 16
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && !role.is_empty()
        && role.bytes().all(|b| b.is_ascii_lowercase());
    well_formed.then(|| pid.parse().ok()).flatten()
}

/// This process's user id.
fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail (POSIX).
    unsafe { libc::getuid() }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wd-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_working_dir_is_0700_its_files_0600_and_it_is_removed_on_drop() {
        let parent = scratch("modes");
        let dir = WorkingDir::create(&parent, "jm").unwrap();
        assert_eq!(mode(dir.path()), 0o700);
        let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(pid_of(&name), Some(std::process::id()), "{name}");
        let file = dir.path().join("taskmanager.toml");
        write_private_file(&file, b"x = 1").unwrap();
        assert_eq!(mode(&file), 0o600);
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists());
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_private_file_never_writes_through_a_planted_link() {
        let parent = scratch("link");
        let victim = parent.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let planted = parent.join("spill-0");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let error = write_private_file(&planted, b"overwritten").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        // A dangling link is refused as well (it would create the target).
        let dangling = parent.join("spill-1");
        std::os::unix::fs::symlink(parent.join("nowhere"), &dangling).unwrap();
        assert!(write_private_file(&dangling, b"x").is_err());
        assert!(!parent.join("nowhere").exists());
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn stale_dirs_of_dead_processes_are_removed_and_nothing_else() {
        let parent = scratch("stale");
        // pid 0x7fff_fff0 does not run; our own pid does.
        let dead = parent.join("flint-tm-2147483632-0123456789abcdef");
        let alive = parent.join(format!("flint-tm-{}-0123456789abcdef", std::process::id()));
        let foreign_name = parent.join("flint-it-something-2147483632");
        let link = parent.join("flint-jm-2147483633-0123456789abcdef");
        for dir in [&dead, &alive, &foreign_name] {
            fs::create_dir(dir).unwrap();
        }
        fs::write(dead.join("spill"), b"x").unwrap();
        let target = parent.join("target");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(clean_stale(&parent), 1);
        assert!(!dead.exists());
        assert!(alive.exists() && foreign_name.exists() && target.exists());
        assert!(
            fs::symlink_metadata(&link).is_ok(),
            "a link is never followed"
        );
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn names_that_are_not_working_dirs_have_no_pid() {
        assert_eq!(pid_of("flint-tm-12-0123456789abcdef"), Some(12));
        assert_eq!(pid_of("flint-12-0123456789abcdef"), None);
        assert_eq!(pid_of("flint-tm-12-0123"), None);
        assert_eq!(pid_of("flint-sim-12-3"), None);
        assert_eq!(pid_of("flint-0000000000000007"), None);
        assert_eq!(pid_of("other-tm-12-0123456789abcdef"), None);
    }
}
