//! Directories and files that must be this user's alone: where the generated cluster secret and
//! REST token live, and the high-availability storage directory.
//!
//! The rule is the one `ssh` applies to `~/.ssh`: before a file is trusted (read as a secret,
//! or written as a job graph another process will run), its directory must be a real directory
//! (not a link) owned by this user that no one else can write, and a secret file must be a
//! regular file owned by this user that no one else can read. Anything else is refused with
//! the path named, never "fixed" behind the operator's back: a directory someone else could
//! write may already hold their files.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::base::rng::NodeRng;

/// Why a private directory or file cannot be trusted or made. Not retryable without the
/// operator changing the path or its owner or mode.
#[derive(Debug, thiserror::Error)]
pub enum PrivateError {
    /// Creating, reading or writing failed.
    #[error("cannot {operation} {path}")]
    Io {
        /// What was tried.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The path is a symbolic link, or not the kind of entry expected.
    #[error("{path} is not a {expected} (a symbolic link or something else is there)")]
    NotA {
        /// The path.
        path: PathBuf,
        /// `directory` or `regular file`.
        expected: &'static str,
    },
    /// Someone else owns it.
    #[error("{path} belongs to uid {owner}, not to this user (uid {me}): refusing to trust it")]
    ForeignOwner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Others may write it (a directory) or read it (a secret).
    #[error(
        "{path} has mode {mode:03o}: others may {what} it; `chmod {fix:03o} {path}` if it is \
         yours and nobody else's files are in it"
    )]
    TooOpen {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// `write` or `read`.
        what: &'static str,
        /// The mode to set.
        fix: u32,
    },
}

/// This process's effective uid: the owner every private entry must have.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn io_error(operation: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PrivateError {
    let path = path.to_owned();
    move |source| PrivateError::Io {
        operation,
        path,
        source,
    }
}

/// Checks that `path` is a directory (not a link) owned by this user that nobody else may
/// write (`secret`: nor read or enter).
pub fn check_dir(path: &Path, secret: bool) -> Result<(), PrivateError> {
    let metadata = fs::symlink_metadata(path).map_err(io_error("inspect", path))?;
    if !metadata.is_dir() {
        return Err(PrivateError::NotA {
            path: path.to_owned(),
            expected: "directory",
        });
    }
    check_owner_and_mode(path, &metadata, secret, 0o700)
}

fn check_owner_and_mode(
    path: &Path,
    metadata: &fs::Metadata,
    secret: bool,
    fix: u32,
) -> Result<(), PrivateError> {
    let me = effective_uid();
    if metadata.uid() != me {
        return Err(PrivateError::ForeignOwner {
            path: path.to_owned(),
            owner: metadata.uid(),
            me,
        });
    }
    let mode = metadata.mode() & 0o7777;
    let (forbidden, what) = if secret {
        (0o077, "read")
    } else {
        (0o022, "write")
    };
    if mode & forbidden != 0 {
        return Err(PrivateError::TooOpen {
            path: path.to_owned(),
            mode,
            what,
            fix,
        });
    }
    Ok(())
}

/// Creates `path` (and its missing parents) with mode 0700 if it does not exist, then checks
/// it as [`check_dir`] does.
pub fn ensure_dir(path: &Path, secret: bool) -> Result<(), PrivateError> {
    match DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(io_error("create", path)(source)),
    }
    check_dir(path, secret)
}

/// The bytes of the secret file `path`, if it exists: it must be a regular file owned by this
/// user that nobody else may read. Opened without following a link.
pub fn read_secret(path: &Path) -> Result<Option<Vec<u8>>, PrivateError> {
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            return Err(PrivateError::NotA {
                path: path.to_owned(),
                expected: "regular file",
            });
        }
        Err(source) => return Err(io_error("open", path)(source)),
    };
    let metadata = file.metadata().map_err(io_error("inspect", path))?;
    if !metadata.is_file() {
        return Err(PrivateError::NotA {
            path: path.to_owned(),
            expected: "regular file",
        });
    }
    check_owner_and_mode(path, &metadata, true, 0o600)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(io_error("read", path))?;
    Ok(Some(bytes))
}

/// Creates `path` as a new file of mode 0600 holding `bytes`, atomically: written to a fresh
/// temporary name in the same directory, then linked to `path`, which fails if anything
/// exists there. Returns `false` (and leaves what is there) if `path` existed already, so two
/// processes generating at once agree on the first one's file.
pub fn create_secret(path: &Path, bytes: &[u8]) -> Result<bool, PrivateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(
        ".{name}.{:016x}.partial",
        NodeRng::from_entropy().next_u64()
    ));
    let written = write_new(&temporary, bytes).map_err(io_error("write", &temporary));
    let linked = written.and_then(|()| match fs::hard_link(&temporary, path) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(io_error("create", path)(source)),
    });
    let _ = fs::remove_file(&temporary);
    linked
}

/// Creates `path` as a new, empty file of mode 0600 for writing, never through a symbolic link:
/// an entry already there (a leftover of a crashed attempt, or a link someone planted to make
/// the writer truncate another file) is unlinked — the link itself, never its target — and the
/// file created anew; if something appears there again in between, that is an error.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    match open() {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(PermissionsExt::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flint-private-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_private_directory_is_made_0700_and_one_others_can_write_is_refused() {
        let dir = scratch("dir");
        ensure_dir(&dir.join("a/b"), true).unwrap();
        assert_eq!(fs::metadata(dir.join("a/b")).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(dir.join("a/b"), PermissionsExt::from_mode(0o777)).unwrap();
        let error = ensure_dir(&dir.join("a/b"), false).unwrap_err();
        assert!(
            matches!(error, PrivateError::TooOpen { what: "write", .. }),
            "{error}"
        );
        assert!(error.to_string().contains("a/b has mode 777"), "{error}");
        // Readable by others is fine for a directory of job graphs, not for secrets.
        fs::set_permissions(dir.join("a/b"), PermissionsExt::from_mode(0o755)).unwrap();
        ensure_dir(&dir.join("a/b"), false).unwrap();
        assert!(matches!(
            check_dir(&dir.join("a/b"), true),
            Err(PrivateError::TooOpen { what: "read", .. })
        ));
        // A link is not a directory, wherever it points.
        std::os::unix::fs::symlink(dir.join("a/b"), dir.join("link")).unwrap();
        assert!(matches!(
            check_dir(&dir.join("link"), false),
            Err(PrivateError::NotA { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_is_created_once_0600_and_read_back_only_if_private() {
        let dir = scratch("secret");
        ensure_dir(&dir, true).unwrap();
        let path = dir.join("cluster-secret");
        assert_eq!(read_secret(&path).unwrap(), None);
        assert!(create_secret(&path, b"first").unwrap());
        assert!(!create_secret(&path, b"second").unwrap(), "kept the first");
        assert_eq!(read_secret(&path).unwrap().as_deref(), Some(&b"first"[..]));
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::set_permissions(&path, PermissionsExt::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_secret(&path),
            Err(PrivateError::TooOpen { what: "read", .. })
        ));
        // A link planted at the name is refused, not followed.
        let planted = dir.join("planted");
        std::os::unix::fs::symlink(&path, &planted).unwrap();
        assert!(matches!(
            read_secret(&planted),
            Err(PrivateError::NotA { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
