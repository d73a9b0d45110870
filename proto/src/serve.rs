//! Serving a plugin: the plugin's two services plus `grpc.health.v1` and server reflection
//! (v1 and v1alpha, so both current and older grpcurl builds can `list` and `describe`), on a
//! Unix socket (mode 0600) or TCP (TLS or mTLS when certificates are given), until a shutdown
//! signal, then gracefully: health turns NOT_SERVING, in-flight calls finish, the socket file
//! is removed. Unix connections go through `AuthorityFix`, so clients that send the socket
//! path as HTTP/2 authority (grpcurl) work too.

use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::service::Routes;
use tonic::transport::Server;
use tonic_health::server::HealthReporter;

use crate::authority::AuthorityFix;
use crate::tls::{ServerTls, TlsError};
use crate::v1::cloud_provider_service_server::{CloudProviderService, CloudProviderServiceServer};
use crate::v1::identity_service_server::{IdentityService, IdentityServiceServer};
use crate::{Endpoint, FILE_DESCRIPTOR_SET};

/// The most bytes core accepts in one message; plugins should stay far below (see
/// `GetInstanceTypesResponse`), so this is also what the SDK's server sends at most.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub endpoint: Endpoint,
    /// TLS for a TCP endpoint; `None` serves plaintext.
    pub tls: Option<ServerTls>,
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The endpoint could not be bound.
    #[error("binding {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: Endpoint,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A live server already listens on the socket.
    #[error("{0} is in use: another process is serving on it")]
    SocketInUse(Endpoint),
    /// Something that is not a socket sits at the socket path; it is left alone.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// TLS was asked for on a Unix socket.
    #[error(
        "TLS applies to tcp:// endpoints only; a unix:// socket is protected by its file mode (0600)"
    )]
    TlsOnUnixSocket,
    /// The certificates could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The gRPC server failed.
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// A bound endpoint, ready to serve.
#[derive(Debug)]
pub struct Listener {
    kind: ListenerKind,
    local: Endpoint,
}

#[derive(Debug)]
enum ListenerKind {
    Unix(UnixListener, SocketFile),
    Tcp(TcpListener),
}

impl Listener {
    /// Binds `endpoint`. A Unix socket is created with mode 0600 (bound under a temporary name,
    /// restricted, then renamed into place, so it is never reachable with a looser mode). A
    /// stale socket file left by a crashed plugin is replaced; a live one is an error, and so
    /// is any file at the path that is not a socket.
    pub async fn bind(endpoint: &Endpoint) -> Result<Self, ServeError> {
        let bind_error = |source| ServeError::Bind {
            endpoint: endpoint.clone(),
            source,
        };
        match endpoint {
            Endpoint::Unix(path) => {
                remove_stale_socket(endpoint, path).await?;
                let temporary = temporary_socket_path(path);
                let listener = UnixListener::bind(&temporary).map_err(bind_error)?;
                let placed =
                    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))
                        .and_then(|()| std::fs::rename(&temporary, path));
                if let Err(source) = placed {
                    let _ = std::fs::remove_file(&temporary);
                    return Err(bind_error(source));
                }
                Ok(Listener {
                    kind: ListenerKind::Unix(listener, SocketFile(path.clone())),
                    local: endpoint.clone(),
                })
            }
            Endpoint::Tcp(address) => {
                let listener = TcpListener::bind(address).await.map_err(bind_error)?;
                let local = Endpoint::Tcp(listener.local_addr().map_err(bind_error)?);
                Ok(Listener {
                    kind: ListenerKind::Tcp(listener),
                    local,
                })
            }
        }
    }

    /// The endpoint as bound; for `tcp://…:0` it carries the port the system chose.
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.local
    }
}

/// The routes of a plugin: its two services, health (overall and per service, SERVING) and
/// reflection v1 and v1alpha. Also what an in-process transport serves (the simulator).
pub async fn plugin_routes<I, C>(identity: I, cloud_provider: C) -> (Routes, HealthReporter)
where
    I: IdentityService,
    C: CloudProviderService,
{
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<IdentityServiceServer<I>>()
        .await;
    health_reporter
        .set_serving::<CloudProviderServiceServer<C>>()
        .await;

    // Both reflection versions know every descriptor, including each other's, so `list`
    // shows both whichever version a client speaks.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
    };
    // An error here means our own embedded descriptor set is broken, which the crate's tests
    // rule out; the plugin still serves, without reflection, and says so.
    let reflection_v1 = reflection().build_v1();
    let reflection_v1alpha = reflection().build_v1alpha();

    let mut routes = Routes::builder();
    routes
        .add_service(
            IdentityServiceServer::new(identity).max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            CloudProviderServiceServer::new(cloud_provider)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(health_service);
    match (reflection_v1, reflection_v1alpha) {
        (Ok(v1), Ok(v1alpha)) => {
            routes.add_service(v1).add_service(v1alpha);
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "server reflection unavailable: the embedded descriptor set is invalid");
        }
    }
    (routes.routes(), health_reporter)
}

/// Serves a plugin on `listener` until `shutdown` completes, then shuts down gracefully.
pub async fn serve<I, C, F>(
    listener: Listener,
    tls: Option<ServerTls>,
    identity: I,
    cloud_provider: C,
    shutdown: F,
) -> Result<(), ServeError>
where
    I: IdentityService,
    C: CloudProviderService,
    F: Future<Output = ()>,
{
    let (routes, health_reporter) = plugin_routes(identity, cloud_provider).await;
    let mut server = Server::builder();
    let endpoint = listener.local.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!(%endpoint, "shutting down: finishing in-flight calls");
        health_reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
    };
    match listener.kind {
        ListenerKind::Unix(unix, socket_file) => {
            if tls.is_some() {
                return Err(ServeError::TlsOnUnixSocket);
            }
            tracing::info!(endpoint = %listener.local, "serving plugin");
            let result = server
                .add_routes(routes)
                .serve_with_incoming_shutdown(
                    UnixListenerStream::new(unix)
                        .map(|connection| connection.map(AuthorityFix::new)),
                    shutdown,
                )
                .await;
            drop(socket_file);
            result?;
        }
        ListenerKind::Tcp(tcp) => {
            if let Some(tls) = &tls {
                server = server.tls_config(tls.load()?)?;
            }
            tracing::info!(endpoint = %listener.local, tls = tls.is_some(), mtls = tls.as_ref().is_some_and(|t| t.client_ca_file.is_some()), "serving plugin");
            server
                .add_routes(routes)
                .serve_with_incoming_shutdown(TcpListenerStream::new(tcp), shutdown)
                .await?;
        }
    }
    tracing::info!("plugin stopped");
    Ok(())
}

/// The one call a plugin's `main` makes: bind `options.endpoint`, serve until SIGTERM or
/// SIGINT, shut down gracefully.
pub async fn serve_until_signal<I, C>(
    options: ServeOptions,
    identity: I,
    cloud_provider: C,
) -> Result<(), ServeError>
where
    I: IdentityService,
    C: CloudProviderService,
{
    let listener = Listener::bind(&options.endpoint).await?;
    serve(
        listener,
        options.tls,
        identity,
        cloud_provider,
        shutdown_signal(),
    )
    .await
}

/// Completes on SIGTERM (what Kubernetes sends) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut terminate), Ok(mut interrupt)) => {
            tokio::select! {
                _ = terminate.recv() => tracing::info!(signal = "SIGTERM", "received"),
                _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "received"),
            }
        }
        (Err(e), _) | (_, Err(e)) => {
            // Without signal handlers the process can only be killed; serve anyway.
            tracing::warn!(error = %e, "cannot install signal handlers; graceful shutdown disabled");
            std::future::pending::<()>().await;
        }
    }
}

/// The socket file, removed when serving ends.
#[derive(Debug)]
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.0)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "could not remove the socket file");
        }
    }
}

fn temporary_socket_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

async fn remove_stale_socket(endpoint: &Endpoint, path: &Path) -> Result<(), ServeError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ServeError::Bind {
                endpoint: endpoint.clone(),
                source,
            });
        }
    };
    if !metadata.file_type().is_socket() {
        return Err(ServeError::NotASocket(path.to_owned()));
    }
    if UnixStream::connect(path).await.is_ok() {
        return Err(ServeError::SocketInUse(endpoint.clone()));
    }
    tracing::info!(path = %path.display(), "removing a stale socket left by an earlier run");
    std::fs::remove_file(path).map_err(|source| ServeError::Bind {
        endpoint: endpoint.clone(),
        source,
    })
}
