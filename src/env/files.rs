//! `job.allowed-paths`: the directories a TaskManager process lets file sources and sinks use.
//!
//! A job's operators run as the TaskManager's user, so whoever may submit a job may read and
//! write what that user can. An operator who wants less confines a TaskManager process to a few
//! directories; every file source and sink asks [`check`] before it opens anything. A path is
//! made absolute (relative to the working directory), refused if it has a `..` component, and
//! resolved with its links followed (as far as it exists: a sink's output directory may not yet),
//! so a link inside an allowed directory that points outside is refused too. What remains is a
//! race: a link swapped in between the check and the open; sinks create their files with
//! `O_NOFOLLOW` ([`super::private::create_private_file`]), which closes it for the last component.
//!
//! The policy is the process's (set once by `flint taskmanager` from its configuration): an
//! embedded cluster runs jobs inside the user's own program, where confining them would protect
//! nothing, and is not confined.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// The resolved allowed directories of this process, if it is confined.
static ROOTS: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Why a path may not be used, or the policy cannot be set. Not retryable: the job or the
/// configuration must change.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The path lies outside every allowed directory (after resolving links).
    #[error(
        "`{path}` is outside job.allowed-paths ({roots}){resolved}: this TaskManager lets file \
         sources and sinks use only those directories"
    )]
    Outside {
        /// The path as the job gave it.
        path: PathBuf,
        /// Where it leads, when that differs (a link).
        resolved: String,
        /// The allowed directories.
        roots: String,
    },
    /// The path climbs with `..`.
    #[error("`{path}` has a `..` component, which job.allowed-paths refuses")]
    ParentComponent {
        /// The path.
        path: PathBuf,
    },
    /// A configured directory does not exist or cannot be resolved.
    #[error("job.allowed-paths names `{path}`, which cannot be resolved")]
    Root {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The process was confined already, to other directories.
    #[error("this process's file sources and sinks were confined already")]
    AlreadyConfined,
}

/// Confines this process's file sources and sinks to `roots` (each resolved now; an empty list
/// confines nothing). Once per process.
pub fn confine(roots: &[String]) -> Result<(), FilesError> {
    if roots.is_empty() {
        return Ok(());
    }
    let resolved = roots
        .iter()
        .map(|root| {
            std::fs::canonicalize(root).map_err(|source| FilesError::Root {
                path: PathBuf::from(root),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    ROOTS.set(resolved).map_err(|_| FilesError::AlreadyConfined)
}

/// Whether a file source or sink of this process may use `path` (see the module docs).
pub fn check(path: &Path) -> Result<(), FilesError> {
    match ROOTS.get() {
        None => Ok(()),
        Some(roots) => check_within(path, roots),
    }
}

/// [`check`] against `roots` (resolved directories).
fn check_within(path: &Path, roots: &[PathBuf]) -> Result<(), FilesError> {
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(FilesError::ParentComponent {
            path: path.to_owned(),
        });
    }
    let absolute = std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_owned());
    let resolved = resolve_existing_prefix(&absolute);
    if roots.iter().any(|root| resolved.starts_with(root)) {
        return Ok(());
    }
    Err(FilesError::Outside {
        path: path.to_owned(),
        resolved: if resolved == absolute {
            String::new()
        } else {
            format!(", which leads to `{}`", resolved.display())
        },
        roots: roots
            .iter()
            .map(|root| format!("`{}`", root.display()))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// `path` with its longest existing prefix resolved (links followed) and the rest appended.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return missing.iter().rev().fold(real, |at, name| at.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_pass_and_escapes_by_dots_or_links_are_refused() {
        let dir = std::env::temp_dir().join(format!("flint-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let allowed = dir.join("allowed");
        std::fs::create_dir_all(allowed.join("in")).unwrap();
        std::fs::create_dir_all(dir.join("secret")).unwrap();
        std::os::unix::fs::symlink(dir.join("secret"), allowed.join("door")).unwrap();
        let roots = [std::fs::canonicalize(&allowed).unwrap()];

        // Inside, existing or not yet (a sink's new output directory).
        for ok in [allowed.join("in"), allowed.join("in/new/part-00000")] {
            assert!(check_within(&ok, &roots).is_ok(), "{}", ok.display());
        }
        // Outside; through `..`; through a link inside that leads outside.
        let outside = check_within(&dir.join("secret/file"), &roots).unwrap_err();
        assert!(
            outside.to_string().contains("job.allowed-paths"),
            "{outside}"
        );
        assert!(matches!(
            check_within(&allowed.join("in/../../secret"), &roots),
            Err(FilesError::ParentComponent { .. })
        ));
        let linked = check_within(&allowed.join("door/file"), &roots).unwrap_err();
        assert!(linked.to_string().contains("leads to"), "{linked}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
