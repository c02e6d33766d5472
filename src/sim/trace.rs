//! The record of one simulated run: every network event, fault, scenario step and cluster
//! event, stamped with virtual time, folded into a digest. Two runs of a seed must agree on it.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// A shared, append-only trace. Lines are kept only when asked for (a replay prints them); the
/// digest always covers all of them.
#[derive(Clone)]
pub struct Trace(Arc<Mutex<Inner>>);

struct Inner {
    start: Instant,
    hasher: Sha256,
    lines: Option<Vec<String>>,
    count: u64,
}

impl Trace {
    /// A trace whose clock starts now; `keep` keeps every line for printing.
    pub fn new(keep: bool) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            start: Instant::now(),
            hasher: Sha256::new(),
            lines: keep.then(Vec::new),
            count: 0,
        })))
    }

    /// Appends one line, stamped with the virtual time since the start.
    pub fn record(&self, line: impl AsRef<str>) {
        let mut inner = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = inner.start.elapsed();
        let mut stamped = String::with_capacity(line.as_ref().len() + 16);
        let _ = write!(
            stamped,
            "{:>6}.{:06} {}",
            elapsed.as_secs(),
            elapsed.subsec_micros(),
            line.as_ref()
        );
        inner.hasher.update(stamped.as_bytes());
        inner.hasher.update(b"\n");
        inner.count += 1;
        if let Some(lines) = &mut inner.lines {
            lines.push(stamped);
        }
    }

    /// The digest of everything recorded so far (hex, 16 bytes).
    pub fn digest(&self) -> String {
        let inner = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let digest = inner.hasher.clone().finalize();
        digest[..16].iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    /// Lines recorded.
    pub fn len(&self) -> u64 {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).count
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kept lines (empty unless the trace was made with `keep`).
    pub fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines
            .clone()
            .unwrap_or_default()
    }
}
