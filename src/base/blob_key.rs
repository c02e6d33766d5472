//! The name of a job artifact: the SHA-256 of its bytes (Flink's `PermanentBlobKey`, content
//! addressed). The same bytes always have the same key, so an artifact is stored once however
//! many jobs name it, and a copy is checked against its key before anything trusts it.
//!
//! A key is written as 64 lower-case hex digits and parsed only from exactly that: it is the
//! only part of a stored artifact's path that comes from outside, so nothing else (a `/`, a
//! `..`) can ever reach a file name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// See the module docs.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobKey([u8; 32]);

/// A key that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an artifact digest: expected 64 hex digits (a SHA-256)")]
pub struct BlobKeyError(pub String);

impl BlobKey {
    /// The key of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The key a finished hash names.
    pub fn from_hasher(hasher: Sha256) -> Self {
        Self(hasher.finalize().into())
    }

    /// The digest's bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.to_string()[..12].to_owned()
    }
}

impl fmt::Display for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobKey({})", self.short())
    }
}

impl FromStr for BlobKey {
    type Err = BlobKeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BlobKeyError(text.chars().take(80).collect());
        let text_bytes = text.as_bytes();
        if text_bytes.len() != 64 {
            return Err(bad());
        }
        let mut key = [0u8; 32];
        for (i, pair) in text_bytes.chunks(2).enumerate() {
            let digit = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            };
            let (Some(high), Some(low)) = (digit(pair[0]), digit(pair[1])) else {
                return Err(bad());
            };
            key[i] = high << 4 | low;
        }
        Ok(Self(key))
    }
}

// As text in JSON and TOML (readable, and what `sha256sum` prints); the 32 bytes themselves in
// the binary codec.
impl Serialize for BlobKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for BlobKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_the_sha256_of_the_bytes_as_sha256sum_prints_it() {
        // `printf abc | sha256sum`
        assert_eq!(
            BlobKey::of(b"abc").to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn only_64_hex_digits_parse() {
        let key = BlobKey::of(b"x");
        assert_eq!(key.to_string().parse::<BlobKey>(), Ok(key));
        assert_eq!(key.to_string().to_uppercase().parse::<BlobKey>(), Ok(key));
        for bad in [
            "",
            "../../etc/passwd",
            &key.to_string()[..63],
            &format!("{key}0"),
            &format!("{}/x", &key.to_string()[..62]),
            &format!("{}g", &key.to_string()[..63]),
        ] {
            assert!(bad.parse::<BlobKey>().is_err(), "{bad}");
        }
    }

    #[test]
    fn text_in_json_bytes_in_the_codec() {
        let key = BlobKey::of(b"x");
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, format!("\"{key}\""));
        assert_eq!(serde_json::from_str::<BlobKey>(&json).unwrap(), key);
        assert!(serde_json::from_str::<BlobKey>("\"nope\"").is_err());
        let bytes = crate::base::codec::encode(&key).unwrap();
        assert_eq!(bytes.len(), 32);
        assert_eq!(crate::base::codec::decode::<BlobKey>(&bytes).unwrap(), key);
    }
}
