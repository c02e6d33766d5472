//! This executable's build id: what tells two builds of one program apart (a program's
//! operator identity and a TaskManager's fingerprint carry it).

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// This executable's build: the first 12 hex digits of its SHA-256 (computed once). A process
/// that cannot read its own executable uses its version instead.
pub fn build_id() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        // Streamed: a debug build's executable is hundreds of MiB.
        let digest = std::env::current_exe()
            .and_then(std::fs::File::open)
            .and_then(|mut file| {
                let mut hasher = Sha256::new();
                std::io::copy(&mut file, &mut hasher)?;
                Ok(hasher.finalize())
            });
        match digest {
            Ok(digest) => digest.iter().take(6).map(|b| format!("{b:02x}")).collect(),
            Err(_) => format!("v{}", env!("CARGO_PKG_VERSION")),
        }
    })
}
