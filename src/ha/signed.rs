//! Znode contents signed with the cluster secret (issue 34, item 4), so that whoever can write
//! the cluster's znodes — a ZooKeeper administrator, another tenant holding the digest
//! credential, anyone at all on an ensemble without ACLs — still cannot tell a Flint process
//! where its leader is, which job graph to run or how large the pool should be.
//!
//! ```text
//!  znode data = "flint-signed-v1 " ‖ hex(mac) ‖ "\n" ‖ payload
//!  mac        = HMAC-SHA256(cluster secret, "flint-znode-v1" ‖ id(path) ‖ payload)
//! ```
//!
//! The MAC covers the znode's **path** (`ROOT/CLUSTER/...`): a value signed for one znode (a
//! pool size) is refused at another (a job graph pointer), and a cluster's values are refused by
//! a cluster under another id. The data stays text, so `zkCli.sh get` still shows an operator
//! what the leader published.
//!
//! What this cannot give is freshness: a writer can put back a value this cluster signed
//! earlier (an earlier leader's address, a pointer of an earlier job). Each such replay is
//! bounded elsewhere: an earlier leader's address reaches a node that must still prove the
//! secret *as that leader* in the handshake; a pointer names only its own job's file inside
//! `storageDir`, deleted when that job ended; the pool size stays within
//! `resourcemanager.max-pool-size`. With `--insecure` the secret is empty and the signature is
//! a checksum anyone can make, as the handshake is then.

use std::fmt::Write as _;

use hmac::Mac as _;

use crate::transport::handshake::Secret;

/// Where the signed data starts.
const MAGIC: &str = "flint-signed-v1 ";

/// The MAC's domain, so a znode MAC is never a handshake proof or the other way round.
const DOMAIN: &[u8] = b"flint-znode-v1";

/// Hex digits of an HMAC-SHA256.
const MAC_HEX: usize = 64;

/// Why the data of a znode is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// Not in the signed format at all (written by hand, or by a Flint before signing).
    #[error("it is not signed (written by something other than a Flint node of this cluster)")]
    Unsigned,
    /// Signed, but not with this cluster's secret for this znode.
    #[error(
        "its signature does not verify with this process's cluster secret (written by someone \
         without it, copied from another znode, or this process has another secret)"
    )]
    Forged,
}

/// `payload` signed for the znode at `path`.
pub fn sign(secret: &Secret, path: &str, payload: &[u8]) -> Vec<u8> {
    let mac = mac_of(secret, path, payload).finalize().into_bytes();
    let mut head = String::with_capacity(MAGIC.len() + MAC_HEX + 1);
    head.push_str(MAGIC);
    for byte in mac {
        // Writing to a String cannot fail.
        let _ = write!(head, "{byte:02x}");
    }
    head.push('\n');
    let mut data = head.into_bytes();
    data.extend_from_slice(payload);
    data
}

/// The payload of `data` read from the znode at `path`, if its signature verifies (compared in
/// constant time).
pub fn verify<'a>(secret: &Secret, path: &str, data: &'a [u8]) -> Result<&'a [u8], SignatureError> {
    let rest = data
        .strip_prefix(MAGIC.as_bytes())
        .ok_or(SignatureError::Unsigned)?;
    if rest.len() <= MAC_HEX || rest[MAC_HEX] != b'\n' {
        return Err(SignatureError::Unsigned);
    }
    let (hex, payload) = (&rest[..MAC_HEX], &rest[MAC_HEX + 1..]);
    let mut mac = [0u8; MAC_HEX / 2];
    for (byte, pair) in mac.iter_mut().zip(hex.chunks_exact(2)) {
        let digits = std::str::from_utf8(pair).map_err(|_| SignatureError::Unsigned)?;
        *byte = u8::from_str_radix(digits, 16).map_err(|_| SignatureError::Unsigned)?;
    }
    mac_of(secret, path, payload)
        .verify_slice(&mac)
        .map_err(|_| SignatureError::Forged)?;
    Ok(payload)
}

fn mac_of(secret: &Secret, path: &str, payload: &[u8]) -> crate::transport::handshake::HmacSha256 {
    let mut mac = secret.mac();
    mac.update(DOMAIN);
    mac.update(&(path.len() as u64).to_be_bytes());
    mac.update(path.as_bytes());
    mac.update(payload);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::from_bytes(b"the cluster secret".to_vec())
    }

    #[test]
    fn signed_data_reads_back_only_with_the_secret_and_at_its_own_path() {
        let data = sign(&secret(), "/flint/c1/leader", b"{\"address\":\"a:1\"}");
        assert!(data.starts_with(MAGIC.as_bytes()), "readable as text");
        assert_eq!(
            verify(&secret(), "/flint/c1/leader", &data),
            Ok(&b"{\"address\":\"a:1\"}"[..])
        );
        let other = Secret::from_bytes(b"another secret".to_vec());
        assert_eq!(
            verify(&other, "/flint/c1/leader", &data),
            Err(SignatureError::Forged)
        );
        // Moved to another znode, or to another cluster's.
        for path in ["/flint/c1/pool-size", "/flint/c2/leader"] {
            assert_eq!(
                verify(&secret(), path, &data),
                Err(SignatureError::Forged),
                "{path}"
            );
        }
    }

    #[test]
    fn any_changed_byte_is_refused() {
        let data = sign(&secret(), "/p", b"42");
        for at in 0..data.len() {
            let mut changed = data.clone();
            changed[at] ^= 0x01;
            assert!(
                verify(&secret(), "/p", &changed).is_err(),
                "byte {at} changed and still verified"
            );
        }
        let mut longer = data.clone();
        longer.push(b'0');
        assert_eq!(
            verify(&secret(), "/p", &longer),
            Err(SignatureError::Forged)
        );
    }

    #[test]
    fn unsigned_and_malformed_data_is_refused_as_unsigned() {
        for data in [
            &b""[..],
            b"42",
            b"{\"address\":\"rogue:1\"}",
            b"flint-signed-v1 ",
            b"flint-signed-v1 00\n42",
        ] {
            assert_eq!(
                verify(&secret(), "/p", data),
                Err(SignatureError::Unsigned),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        let mut not_hex = sign(&secret(), "/p", b"42");
        not_hex[MAGIC.len()] = b'z';
        assert_eq!(
            verify(&secret(), "/p", &not_hex),
            Err(SignatureError::Unsigned)
        );
    }

    #[test]
    fn the_insecure_secret_signs_what_only_insecure_nodes_accept() {
        let data = sign(&Secret::insecure(), "/p", b"7");
        assert_eq!(verify(&Secret::insecure(), "/p", &data), Ok(&b"7"[..]));
        assert_eq!(verify(&secret(), "/p", &data), Err(SignatureError::Forged));
    }
}
