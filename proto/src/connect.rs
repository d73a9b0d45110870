//! A channel from core (or a test, or a conformance suite) to a plugin endpoint.
//!
//! The channel connects lazily and reconnects by itself, so core can start before its plugin
//! sidecar and survive a plugin restart; calls made while the plugin is down fail with
//! UNAVAILABLE, which core retries.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Uri};

use crate::Endpoint;
use crate::tls::{ClientTls, TlsError};

/// How long establishing a connection may take before the call fails with UNAVAILABLE.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a channel could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// TLS was asked for on a Unix socket.
    #[error("TLS applies to tcp:// endpoints only")]
    TlsOnUnixSocket,
    /// The certificates could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The endpoint could not be configured.
    #[error("configuring the channel to {endpoint}: {source}")]
    Transport {
        /// The endpoint.
        endpoint: Endpoint,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

/// A lazily connecting channel to `endpoint`, with TLS when `tls` is given (TCP only).
pub fn connect(endpoint: &Endpoint, tls: Option<&ClientTls>) -> Result<Channel, ConnectError> {
    let transport_error = |source| ConnectError::Transport {
        endpoint: endpoint.clone(),
        source,
    };
    match endpoint {
        Endpoint::Unix(path) => {
            if tls.is_some() {
                return Err(ConnectError::TlsOnUnixSocket);
            }
            // The URI is required by the HTTP/2 layer but unused: the connector below decides
            // where the bytes go.
            let channel = tonic::transport::Endpoint::from_static("http://plugin.invalid")
                .connect_timeout(CONNECT_TIMEOUT)
                .connect_with_connector_lazy(tower::service_fn({
                    let path = path.clone();
                    move |_: Uri| {
                        let path = path.clone();
                        async move { UnixStream::connect(path).await.map(TokioIo::new) }
                    }
                }));
            Ok(channel)
        }
        Endpoint::Tcp(address) => {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut builder =
                tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))
                    .map_err(transport_error)?
                    .connect_timeout(CONNECT_TIMEOUT);
            if let Some(tls) = tls {
                builder = builder.tls_config(tls.load()?).map_err(transport_error)?;
            }
            Ok(builder.connect_lazy())
        }
    }
}
