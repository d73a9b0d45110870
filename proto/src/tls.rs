//! TLS and mutual TLS for TCP endpoints, from PEM files.
//!
//! A Unix socket needs none: it is created with mode 0600, so only the plugin's own user (and
//! root) can connect, which in the sidecar deployment means the containers of the same pod.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// The server side: its certificate and key, and, for mutual TLS, the CA that client
/// certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// PEM certificate chain of the server.
    pub cert_file: PathBuf,
    /// PEM private key of the server.
    pub key_file: PathBuf,
    /// PEM CA bundle; when set, clients must present a certificate it signed (mTLS).
    pub client_ca_file: Option<PathBuf>,
}

/// The client side: the CA that the server's certificate must chain to and, for mutual TLS,
/// the client's own certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM CA bundle the server certificate must chain to.
    pub ca_file: PathBuf,
    /// PEM certificate chain of the client (mTLS); requires `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client (mTLS); requires `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name to verify the server certificate against; defaults to the endpoint's IP.
    pub server_name: Option<String>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {what} {path}: {source}")]
    Read {
        /// Which file, in words.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A client certificate without its key, or the other way round.
    #[error("a client certificate and its key must be given together")]
    IncompleteClientIdentity,
}

/// Makes `ring` the process's rustls crypto provider unless one is installed already. rustls
/// cannot pick one by itself when a build enables more than one (aws-config brings aws-lc-rs,
/// tonic brings ring), and would panic at the first handshake.
fn ensure_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // An error means another provider was installed first, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl ServerTls {
    /// Reads the files into a tonic server configuration.
    pub fn load(&self) -> Result<ServerTlsConfig, TlsError> {
        ensure_crypto_provider();
        let identity = Identity::from_pem(
            read("server certificate", &self.cert_file)?,
            read("server key", &self.key_file)?,
        );
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca_file {
            config = config.client_ca_root(Certificate::from_pem(read("client CA", ca)?));
        }
        Ok(config)
    }
}

impl ClientTls {
    /// Reads the files into a tonic client configuration.
    pub fn load(&self) -> Result<ClientTlsConfig, TlsError> {
        ensure_crypto_provider();
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("server CA", &self.ca_file)?));
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read("client certificate", cert)?,
                    read("client key", key)?,
                ));
            }
            (None, None) => {}
            _ => return Err(TlsError::IncompleteClientIdentity),
        }
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.clone());
        }
        Ok(config)
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}
