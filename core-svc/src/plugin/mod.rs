//! The connection to the cloud provider plugin.
//!
//! Core never trusts a plugin answer blindly: each is validated here, at the edge, and a
//! malformed one is an error naming the field, never a decision. An unreachable plugin is
//! UNAVAILABLE, which callers treat as "unknown", never as "gone" or "drifted".

mod handshake;
pub mod instance_types;

pub use handshake::{
    Capabilities, Handshake, HandshakeError, PluginInfo, Vocabulary, handshake, probe,
    validate_info, validate_node_classes, validate_vocabulary,
};

use std::time::Duration;

use provider_sdk::tls::ClientTls;
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::identity_service_client::IdentityServiceClient;
use provider_sdk::{Endpoint, serve::MAX_MESSAGE_BYTES};
use tonic::transport::Channel;

/// Deadlines per RPC, as the API documents them: core chooses them, and every mutating RPC is
/// idempotent so a call cut off by its deadline can simply be made again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Identity calls and cheap lookups (Get, List pages, IsDrifted, ...).
    pub default: Duration,
    /// Create, which launches an instance.
    pub create: Duration,
    /// Delete, which only starts a termination.
    pub delete: Duration,
    /// GetInstanceTypes, the whole catalogue.
    pub instance_types: Duration,
}

impl Deadlines {
    /// The deadlines the API documents as core's defaults.
    pub const DEFAULT: Deadlines = Deadlines {
        default: Duration::from_secs(15),
        create: Duration::from_secs(120),
        delete: Duration::from_secs(30),
        instance_types: Duration::from_secs(60),
    };
}

/// The gRPC clients of one plugin connection.
#[derive(Debug, Clone)]
pub struct PluginConnection {
    /// The endpoint, for messages.
    pub endpoint: Endpoint,
    /// The Identity service.
    pub identity: IdentityServiceClient<Channel>,
    /// The CloudProvider service, accepting messages up to the API's limit.
    pub cloud_provider: CloudProviderServiceClient<Channel>,
    /// The channel both clients use, for calls that send a request encoded ahead
    /// ([`GrpcCloudProvider`](crate::cloudprovider::GrpcCloudProvider)'s IsDrifted).
    pub channel: Channel,
    /// The deadlines to put on calls.
    pub deadlines: Deadlines,
}

impl PluginConnection {
    /// A lazily connecting connection to `endpoint`: core may start before its plugin.
    pub fn new(
        endpoint: Endpoint,
        tls: Option<&ClientTls>,
        deadlines: Deadlines,
    ) -> Result<Self, provider_sdk::connect::ConnectError> {
        let channel = provider_sdk::connect::connect(&endpoint, tls)?;
        Ok(PluginConnection {
            endpoint,
            identity: IdentityServiceClient::new(channel.clone()),
            cloud_provider: CloudProviderServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            channel,
            deadlines,
        })
    }
}

/// `message` as a request with `deadline`.
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
}
