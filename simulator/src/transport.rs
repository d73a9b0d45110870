//! The plugin API over an in-process transport: aws-plugin's services served by tonic on
//! `tokio::io::duplex` streams, and core's [`PluginConnection`] reaching them through a
//! connector that opens a new duplex pair per connection. Every byte goes through the real
//! HTTP/2 and protobuf code, the handshake included; only the socket is missing.

use std::time::{Duration, Instant};

use aws_plugin::identity::Identity;
use aws_plugin::provider::AwsCloudProvider;
use core_svc::cloudprovider::{GrpcCloudProvider, RetryPolicy, Timer};
use core_svc::plugin::{Deadlines, Handshake, HandshakeError, PluginConnection, handshake};
use hyper_util::rt::TokioIo;
use provider_sdk::Endpoint as PluginEndpoint;
use provider_sdk::serve::{MAX_MESSAGE_BYTES, plugin_routes};
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::identity_service_client::IdentityServiceClient;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint, Server, Uri};

/// The buffer of each direction of a connection: large enough that a catalogue chunk never
/// waits on the other side.
const DUPLEX_BUFFER: usize = 4 * 1024 * 1024;

/// The endpoint core's messages name for the in-process plugin.
const ENDPOINT_PATH: &str = "/in-process/aws-plugin.sock";

/// The core side of the plugin: what the controllers call.
pub type GrpcProvider = GrpcCloudProvider<ImmediateTimer>;

/// Why the plugin could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The handshake failed.
    #[error("plugin handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// The plugin said it is not ready.
    #[error("the plugin is not ready: {0}")]
    NotReady(String),
}

/// aws-plugin, served in this process.
#[derive(Debug)]
pub struct InProcessPlugin {
    connections: mpsc::UnboundedSender<DuplexStream>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl InProcessPlugin {
    /// Serves `identity` and `provider` (with health and reflection, as the plugin binary
    /// does) on the current tokio runtime.
    pub async fn start(identity: Identity, provider: AwsCloudProvider) -> Self {
        let (routes, health) = plugin_routes(identity, provider).await;
        let (connections, accepted) = mpsc::unbounded_channel::<DuplexStream>();
        let incoming = UnboundedReceiverStream::new(accepted).map(Ok::<_, std::io::Error>);
        let server = tokio::spawn(async move {
            // Health answers as long as the server runs.
            let _health = health;
            Server::builder()
                .add_routes(routes)
                .serve_with_incoming(incoming)
                .await
        });
        Self {
            connections,
            server,
        }
    }

    /// A channel to the plugin; each connection it makes is a new duplex pair.
    pub fn channel(&self) -> Channel {
        let connections = self.connections.clone();
        let connector = tower::service_fn(move |_: Uri| {
            let connections = connections.clone();
            async move {
                let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
                connections.send(server).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "the in-process plugin has stopped",
                    )
                })?;
                Ok::<_, std::io::Error>(TokioIo::new(client))
            }
        });
        Endpoint::from_static("http://in-process.invalid").connect_with_connector_lazy(connector)
    }

    /// A new connection from core: clients, handshake, and the provider the controllers use,
    /// as `core-svc run` builds them.
    pub async fn connect(
        &self,
    ) -> Result<(PluginConnection, Handshake, GrpcProvider), TransportError> {
        let channel = self.channel();
        let connection = PluginConnection {
            endpoint: PluginEndpoint::Unix(ENDPOINT_PATH.into()),
            identity: IdentityServiceClient::new(channel.clone()),
            cloud_provider: CloudProviderServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            channel,
            deadlines: Deadlines::DEFAULT,
        };
        let handshake = handshake(&connection).await?;
        if let Err(why) = &handshake.ready {
            return Err(TransportError::NotReady(why.clone()));
        }
        let provider = GrpcCloudProvider::new(&connection, &handshake)
            .with_timer(ImmediateTimer::new())
            .with_retry_policy(RetryPolicy::NEVER);
        Ok((connection, handshake, provider))
    }
}

impl Drop for InProcessPlugin {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The retry timer of the simulated connection: waits return at once (virtual time does not
/// move inside a controller pass), and time is what it has waited.
#[derive(Debug, Clone)]
pub struct ImmediateTimer {
    origin: Instant,
}

impl ImmediateTimer {
    /// A timer that never waited.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for ImmediateTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl Timer for ImmediateTimer {
    fn now(&self) -> Instant {
        self.origin
    }

    fn sleep(&self, _duration: Duration) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}
