//! Secure by default: the cluster secret and REST token of a cluster whose operator configured
//! none.
//!
//! A `flint jobmanager` started without a secret (`FLINT_SECRET`, `--secret-file`) or a REST
//! token (`rest.token`, `rest.token-file`, `FLINT_REST_TOKEN`) uses, and on first use generates,
//! a random one kept in this user's state directory — `$XDG_STATE_HOME/flint`, else
//! `~/.local/state/flint` — a directory of mode 0700 holding `cluster-secret` and `rest-token`
//! (mode 0600, 32 random bytes from the operating system, as 64 hex digits), as Jupyter keeps its
//! token. The `flint` client commands and `flint taskmanager` started by the same user on the
//! same machine read them from there; anyone else on the machine can read neither, so they can
//! neither join the cluster nor use its REST API. Configured values always win, and
//! `--insecure` still means "no secret at all".
//!
//! Before trusting what is there, the directory and the files are checked as `ssh` checks
//! `~/.ssh` ([`crate::env::private`]): this user's, not a link, nobody else may read them.
//! This module never prints: the binary says where the credentials are.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::base::rng::NodeRng;
use crate::env::private::{self, PrivateError};
use crate::transport::handshake::Secret;

/// The file holding the generated cluster secret.
pub const SECRET_FILE: &str = "cluster-secret";

/// The file holding the generated REST token.
pub const TOKEN_FILE: &str = "rest-token";

/// Random bytes in a generated secret or token.
const GENERATED_BYTES: usize = 32;

/// Why the local credentials cannot be used. Not retryable without the operator's change.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Neither `XDG_STATE_HOME` nor `HOME` is set.
    #[error(
        "no directory for Flint's generated credentials: set XDG_STATE_HOME or HOME, or \
         configure a secret (FLINT_SECRET, --secret-file) and a REST token (rest.token-file)"
    )]
    NoStateDir,
    /// The directory or a file in it cannot be trusted or written.
    #[error("cannot use the generated credentials")]
    Private(#[from] PrivateError),
}

/// This user's directory of generated credentials (it may not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCredentials {
    dir: PathBuf,
}

/// A credential taken from the state directory: where, and whether it was made just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// Its file.
    pub path: PathBuf,
    /// Whether this process created it (else an earlier one did).
    pub new: bool,
}

impl fmt::Display for Generated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.path.display(),
            if self.new {
                "generated now"
            } else {
                "generated earlier"
            }
        )
    }
}

impl LocalCredentials {
    /// The state directory `env` names: `$XDG_STATE_HOME/flint`, else `$HOME/.local/state/flint`.
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>) -> Result<Self, CredentialsError> {
        let non_empty = |name: &str| env(name).filter(|value| !value.is_empty());
        let dir = match (non_empty("XDG_STATE_HOME"), non_empty("HOME")) {
            (Some(state), _) => PathBuf::from(state).join("flint"),
            (None, Some(home)) => PathBuf::from(home).join(".local/state/flint"),
            (None, None) => return Err(CredentialsError::NoStateDir),
        };
        Ok(Self { dir })
    }

    /// The state directory of this process's environment.
    pub fn of_process() -> Result<Self, CredentialsError> {
        Self::from_env(|name| std::env::var_os(name))
    }

    /// The credentials in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The generated cluster secret's file.
    pub fn secret_path(&self) -> PathBuf {
        self.dir.join(SECRET_FILE)
    }

    /// The generated REST token's file.
    pub fn token_path(&self) -> PathBuf {
        self.dir.join(TOKEN_FILE)
    }

    /// The generated cluster secret, if a JobManager of this user made one.
    pub fn secret(&self) -> Result<Option<Secret>, CredentialsError> {
        Ok(self.read(&self.secret_path())?.map(Secret::from_bytes))
    }

    /// The generated REST token, if a JobManager of this user made one.
    pub fn token(&self) -> Result<Option<String>, CredentialsError> {
        Ok(self
            .read(&self.token_path())?
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// The generated cluster secret, made now if there is none.
    pub fn secret_or_generate(&self) -> Result<(Secret, Generated), CredentialsError> {
        let (bytes, generated) = self.read_or_generate(&self.secret_path())?;
        Ok((Secret::from_bytes(bytes), generated))
    }

    /// The generated REST token's file, made now if there is none (the REST API reads it as
    /// `rest.token-file`).
    pub fn token_or_generate(&self) -> Result<Generated, CredentialsError> {
        Ok(self.read_or_generate(&self.token_path())?.1)
    }

    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, CredentialsError> {
        if !self.dir.exists() {
            return Ok(None);
        }
        private::check_dir(&self.dir, true)?;
        Ok(private::read_secret(path)?)
    }

    fn read_or_generate(&self, path: &Path) -> Result<(Vec<u8>, Generated), CredentialsError> {
        private::ensure_dir(&self.dir, true)?;
        if let Some(bytes) = private::read_secret(path)? {
            let generated = Generated {
                path: path.to_owned(),
                new: false,
            };
            return Ok((bytes, generated));
        }
        let fresh = random_hex();
        let new = private::create_secret(path, fresh.as_bytes())?;
        // Another process may have won the race: use its file, as every later reader will.
        let bytes = match new {
            true => fresh.into_bytes(),
            false => private::read_secret(path)?.unwrap_or_default(),
        };
        let generated = Generated {
            path: path.to_owned(),
            new,
        };
        Ok((bytes, generated))
    }
}

/// [`GENERATED_BYTES`] random bytes from the operating system, as hex digits: text, so it can
/// be copied into `FLINT_SECRET` or a header as it is.
fn random_hex() -> String {
    let mut rng = NodeRng::from_entropy();
    let mut hex = String::with_capacity(GENERATED_BYTES * 2);
    for _ in 0..GENERATED_BYTES / 8 {
        hex.push_str(&format!("{:016x}", rng.next_u64()));
    }
    hex
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flint-creds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_state_directory_follows_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| OsString::from(value))
            }
        };
        let xdg = LocalCredentials::from_env(env(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")]));
        assert_eq!(xdg.unwrap().dir(), Path::new("/s/flint"));
        let home = LocalCredentials::from_env(env(&[("XDG_STATE_HOME", ""), ("HOME", "/h")]));
        assert_eq!(home.unwrap().dir(), Path::new("/h/.local/state/flint"));
        assert!(matches!(
            LocalCredentials::from_env(env(&[])),
            Err(CredentialsError::NoStateDir)
        ));
    }

    #[test]
    fn credentials_are_generated_once_privately_and_read_back() {
        let dir = scratch("generate");
        let local = LocalCredentials::at(dir.join("flint"));
        assert!(local.secret().unwrap().is_none());
        assert!(local.token().unwrap().is_none());
        let (secret, generated) = local.secret_or_generate().unwrap();
        assert!(generated.new);
        assert_eq!(secret.expose().map(<[u8]>::len), Some(GENERATED_BYTES * 2));
        let (again, generated) = local.secret_or_generate().unwrap();
        assert!(!generated.new);
        assert_eq!(again.expose(), secret.expose());
        assert_eq!(local.secret().unwrap().unwrap().expose(), secret.expose());
        let token = local.token_or_generate().unwrap();
        assert!(token.new);
        let text = local.token().unwrap().unwrap();
        assert_eq!(text.len(), GENERATED_BYTES * 2);
        assert_ne!(text.as_bytes(), secret.expose().unwrap());
        let mode = |path: &Path| std::fs::metadata(path).unwrap().mode() & 0o777;
        assert_eq!(mode(local.dir()), 0o700);
        assert_eq!(mode(&local.secret_path()), 0o600);
        assert_eq!(mode(&local.token_path()), 0o600);
        // A directory others could enter is not trusted with secrets.
        std::fs::set_permissions(local.dir(), PermissionsExt::from_mode(0o755)).unwrap();
        let error = local.secret().unwrap_err();
        assert!(chain(&error).contains("mode 755"), "{error:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The error and its sources, as the binary prints them.
    fn chain(error: &CredentialsError) -> String {
        crate::base::error_chain::ErrorChain(error).to_string()
    }
}
