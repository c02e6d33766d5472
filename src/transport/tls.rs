//! Optional TLS (rustls) under the handshake: confidentiality and server authentication on
//! the wire. The HMAC handshake still runs inside it, so a node proves it holds the cluster
//! secret whether or not TLS is on; TLS adds that nobody on the path reads or alters frames.
//!
//! Every node both accepts and dials, so each has a certificate and key (presented when it
//! accepts) and the CA that signed its peers' certificates (checked when it dials, against the
//! host it dials — the certificate must name that host or IP). Client certificates are not
//! asked for: the cluster secret authenticates the dialling side.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// `[transport.tls]`: where a node's PEM files are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TlsConfig {
    /// This node's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificate(s) (PEM) that peers' certificates must chain to.
    pub ca: PathBuf,
}

/// Why TLS could not be set up or a TLS session not opened.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("TLS {what} {}: {reason}", path.display())]
    File {
        /// Which file (certificate, key, CA).
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificates or key.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The dialled host is not a valid DNS name or IP address.
    #[error("cannot check a TLS certificate against {0:?}: not a DNS name or IP address")]
    ServerName(String),
    /// The TLS handshake did not finish within the handshake timeout.
    #[error("no TLS handshake within {0:?}")]
    Timeout(std::time::Duration),
    /// The TLS handshake failed (untrusted or mismatched certificate, a peer without TLS, ...).
    #[error("TLS handshake failed")]
    Handshake(#[source] std::io::Error),
}

/// A node's loaded TLS setup: the acceptor and the connector.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls { .. }")
    }
}

fn file_error(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certificates.is_empty() {
        return Err(file_error(what, path, "no CERTIFICATE block"));
    }
    Ok(certificates)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The host part of `host:port` (`[v6]:port` too), which the peer's certificate must name.
fn server_host(peer: &str) -> &str {
    peer.rsplit_once(':')
        .map_or(peer, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']')
}

impl Tls {
    /// Reads and checks the files of `config`.
    pub fn load(config: &TlsConfig) -> Result<Self, TlsError> {
        let chain = read_certificates("certificate", &config.cert)?;
        let key = PrivateKeyDer::from_pem_file(&config.key)
            .map_err(|e| file_error("key", &config.key, e))?;
        let mut roots = RootCertStore::empty();
        for ca in read_certificates("CA", &config.ca)? {
            roots.add(ca).map_err(|e| file_error("CA", &config.ca, e))?;
        }
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// Opens TLS as the accepting side.
    pub async fn accept<S>(
        &self,
        stream: S,
    ) -> Result<impl AsyncRead + AsyncWrite + Unpin + use<S>, TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        self.acceptor
            .accept(stream)
            .await
            .map_err(TlsError::Handshake)
    }

    /// Opens TLS towards `peer` (`host:port`), checking its certificate names `host`.
    pub async fn connect<S>(
        &self,
        peer: &str,
        stream: S,
    ) -> Result<impl AsyncRead + AsyncWrite + Unpin + use<S>, TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let host = server_host(peer);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| TlsError::ServerName(host.to_owned()))?;
        self.connector
            .connect(name, stream)
            .await
            .map_err(TlsError::Handshake)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flint-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn config(dir: &Path) -> TlsConfig {
        TlsConfig {
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            ca: dir.join("ca.pem"),
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = scratch("missing");
        let error = Tls::load(&config(&dir)).unwrap_err().to_string();
        assert!(error.starts_with("TLS certificate "), "{error}");
        assert!(error.contains("node.pem"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_without_certificates_is_refused_with_the_reason() {
        let dir = scratch("empty");
        std::fs::write(dir.join("node.pem"), "not a certificate\n").unwrap();
        let error = Tls::load(&config(&dir)).unwrap_err().to_string();
        assert!(error.contains("no CERTIFICATE block"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_server_name_is_the_dialled_host() {
        for (peer, host) in [
            ("10.0.0.5:6123", "10.0.0.5"),
            ("node-a.example:1", "node-a.example"),
            ("[::1]:6123", "::1"),
        ] {
            assert!(
                ServerName::try_from(server_host(peer).to_owned()).is_ok(),
                "{peer}"
            );
            assert_eq!(server_host(peer), host);
        }
    }
}
