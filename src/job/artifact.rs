//! The artifacts a job ships with it (Flink's user JARs and blob keys, Ray's `working_dir`):
//! files uploaded to the JobManager's blob store beforehand and named here by their SHA-256.
//! A job is refused at submission if one of them is not stored; a TaskManager fetches each
//! once, checks its digest and gives it to the job's tasks under [`JobArtifact::name`].
//!
//! A name becomes a file name on every TaskManager, so it must be a plain one: no directory
//! part, no `.` or `..`, nothing hidden, nothing a shell or a file system treats specially.

use serde::{Deserialize, Serialize};

use crate::base::blob_key::BlobKey;

/// The most artifacts one job may name.
pub const MAX_ARTIFACTS: usize = 256;

/// One artifact of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobArtifact {
    /// The file name its tasks see it under (unique within the job).
    pub name: String,
    /// Its bytes' SHA-256: the key it is stored and fetched by.
    pub digest: BlobKey,
    /// Its size in bytes.
    pub size: u64,
    /// Whether TaskManagers make their copy executable (a program run by a process operator);
    /// otherwise it never is.
    #[serde(default)]
    pub executable: bool,
}

/// Why a job's artifacts cannot be used. Not retryable: the job must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// A name that is not a plain file name.
    #[error(
        "artifact name `{name}` is not a plain file name: use letters, digits, `.`, `_` and `-` \
         (at most 255 bytes, not starting with `.` or `-`)"
    )]
    BadName {
        /// The name (shortened).
        name: String,
    },
    /// Two artifacts under one name.
    #[error("two artifacts are named `{name}`; names must be unique within a job")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// Over [`MAX_ARTIFACTS`].
    #[error("the job names {count} artifacts, over the limit of {MAX_ARTIFACTS}")]
    TooMany {
        /// How many.
        count: usize,
    },
}

/// Whether `name` may be a file name on a TaskManager.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with(['.', '-'])
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Checks a job's artifacts: plain, unique names, at most [`MAX_ARTIFACTS`].
pub fn validate(artifacts: &[JobArtifact]) -> Result<(), ArtifactError> {
    if artifacts.len() > MAX_ARTIFACTS {
        return Err(ArtifactError::TooMany {
            count: artifacts.len(),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for artifact in artifacts {
        if !is_plain_name(&artifact.name) {
            return Err(ArtifactError::BadName {
                name: artifact.name.chars().take(80).collect(),
            });
        }
        if !seen.insert(artifact.name.as_str()) {
            return Err(ArtifactError::DuplicateName {
                name: artifact.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> JobArtifact {
        JobArtifact {
            name: name.to_owned(),
            digest: BlobKey::of(name.as_bytes()),
            size: 1,
            executable: false,
        }
    }

    #[test]
    fn names_are_plain_file_names() {
        for good in ["tokenize.py", "model-v2.bin", "a", "lib_1.so.3"] {
            assert!(validate(&[named(good)]).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc/passwd",
            ".hidden",
            "-rf",
            "a b",
            "a\0b",
            "ä",
            &"x".repeat(256),
        ] {
            assert!(
                matches!(validate(&[named(bad)]), Err(ArtifactError::BadName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn names_are_unique_and_few() {
        assert_eq!(
            validate(&[named("a.py"), named("a.py")]),
            Err(ArtifactError::DuplicateName {
                name: "a.py".into()
            })
        );
        let many: Vec<_> = (0..=MAX_ARTIFACTS)
            .map(|i| named(&format!("f{i}")))
            .collect();
        assert!(matches!(
            validate(&many),
            Err(ArtifactError::TooMany { .. })
        ));
    }
}
