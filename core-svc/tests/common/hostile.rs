//! A hostile cloud provider plugin: a real tonic server of the CloudProvider and Identity
//! services on a Unix socket of its own, answering whatever a test scripts (duplicate instance
//! types, NaN prices, another NodeClaim's instance, a List that Get contradicts, answers past
//! the deadline, answers over the message size limit), with no limit of its own on what it
//! sends: provider-sdk's `serve` refuses to encode more than core accepts, so it is not used.
//!
//! Only `hostile_plugin.rs` includes this module (`#[path]`), so the other test crates do not
//! compile a server they do not use.

#![allow(dead_code, reason = "each test uses a part of the script")]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use core_svc::cloudprovider::GrpcCloudProvider;
use core_svc::plugin::{Deadlines, PluginConnection, handshake};
use provider_sdk::v1;
use provider_sdk::v1::cloud_provider_service_server::{
    CloudProviderService, CloudProviderServiceServer,
};
use provider_sdk::v1::identity_service_server::{IdentityService, IdentityServiceServer};
use provider_sdk::{Endpoint, InstanceTypeStream};
use tonic::{Request, Response, Status};

/// What the plugin answers. Every RPC answers the same each time it is called.
#[derive(Default)]
pub(crate) struct Script {
    /// GetInstanceTypes: one chunk with these types.
    pub(crate) instance_types: Vec<v1::InstanceType>,
    /// Create; `None` answers INTERNAL.
    pub(crate) create: Option<v1::CreateResponse>,
    /// Get finds these, by provider ID; any other is NOT_FOUND.
    pub(crate) get: BTreeMap<String, v1::NodeClaim>,
    /// List: one page with these.
    pub(crate) list: Vec<v1::NodeClaim>,
    /// IsDrifted.
    pub(crate) drift: v1::IsDriftedResponse,
    /// How long every CloudProvider call takes before answering.
    pub(crate) delay: Option<Duration>,
    /// Calls per RPC.
    pub(crate) calls: BTreeMap<&'static str, usize>,
}

/// The plugin; clones share the script.
#[derive(Clone, Default)]
pub(crate) struct HostilePlugin(Arc<Mutex<Script>>);

impl HostilePlugin {
    /// The script, to change what the plugin answers.
    pub(crate) fn script(&self) -> MutexGuard<'_, Script> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many times `rpc` was called.
    pub(crate) fn calls(&self, rpc: &str) -> usize {
        self.script().calls.get(rpc).copied().unwrap_or(0)
    }

    /// Counts the call, waits the scripted delay, then answers what `answer` reads from the
    /// script.
    async fn answer<T>(
        &self,
        rpc: &'static str,
        answer: impl FnOnce(&Script) -> Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        let delay = {
            let mut script = self.script();
            *script.calls.entry(rpc).or_default() += 1;
            script.delay
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        answer(&self.script()).map(Response::new)
    }
}

#[tonic::async_trait]
impl CloudProviderService for HostilePlugin {
    async fn get_supported_node_classes(
        &self,
        _: Request<v1::GetSupportedNodeClassesRequest>,
    ) -> Result<Response<v1::GetSupportedNodeClassesResponse>, Status> {
        Ok(Response::new(v1::GetSupportedNodeClassesResponse {
            node_classes: vec![v1::NodeClassKind {
                group: "test.karpenter.sh".into(),
                version: "v1".into(),
                kind: "TestNodeClass".into(),
            }],
        }))
    }

    async fn get_instance_types(
        &self,
        _: Request<v1::GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let chunk = self
            .answer("GetInstanceTypes", |s| {
                Ok(v1::GetInstanceTypesResponse {
                    instance_types: s.instance_types.clone(),
                })
            })
            .await?
            .into_inner();
        Ok(Response::new(Box::pin(tonic::codegen::tokio_stream::iter(
            [Ok(chunk)],
        ))))
    }

    async fn create(
        &self,
        _: Request<v1::CreateRequest>,
    ) -> Result<Response<v1::CreateResponse>, Status> {
        self.answer("Create", |s| {
            s.create
                .clone()
                .ok_or_else(|| Status::internal("unscripted Create"))
        })
        .await
    }

    async fn delete(
        &self,
        _: Request<v1::DeleteRequest>,
    ) -> Result<Response<v1::DeleteResponse>, Status> {
        self.answer("Delete", |_| {
            Ok(v1::DeleteResponse {
                state: v1::DeletionState::Gone.into(),
            })
        })
        .await
    }

    async fn get(
        &self,
        request: Request<v1::GetRequest>,
    ) -> Result<Response<v1::GetResponse>, Status> {
        let provider_id = request.into_inner().provider_id;
        self.answer("Get", |s| match s.get.get(&provider_id) {
            Some(claim) => Ok(v1::GetResponse {
                node_claim: Some(claim.clone()),
            }),
            None => Err(Status::not_found(format!("no instance {provider_id}"))),
        })
        .await
    }

    async fn list(
        &self,
        _: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        self.answer("List", |s| {
            Ok(v1::ListResponse {
                node_claims: s.list.clone(),
                next_page_token: String::new(),
            })
        })
        .await
    }

    async fn is_drifted(
        &self,
        _: Request<v1::IsDriftedRequest>,
    ) -> Result<Response<v1::IsDriftedResponse>, Status> {
        self.answer("IsDrifted", |s| Ok(s.drift.clone())).await
    }
}

#[derive(Clone)]
struct Identity;

#[tonic::async_trait]
impl IdentityService for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<v1::GetPluginInfoRequest>,
    ) -> Result<Response<v1::GetPluginInfoResponse>, Status> {
        Ok(Response::new(v1::GetPluginInfoResponse {
            name: "hostile.example.com".into(),
            vendor_version: "6.6.6".into(),
            api_version: "1.0".into(),
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<v1::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<v1::GetPluginCapabilitiesResponse>, Status> {
        let rpc = |kind: v1::plugin_capability::rpc::Type| v1::PluginCapability {
            r#type: Some(v1::plugin_capability::Type::Rpc(
                v1::plugin_capability::Rpc {
                    r#type: kind.into(),
                },
            )),
        };
        Ok(Response::new(v1::GetPluginCapabilitiesResponse {
            capabilities: vec![
                rpc(v1::plugin_capability::rpc::Type::Get),
                rpc(v1::plugin_capability::rpc::Type::List),
                rpc(v1::plugin_capability::rpc::Type::IsDrifted),
            ],
        }))
    }

    async fn probe(
        &self,
        _: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeResponse>, Status> {
        Ok(Response::new(v1::ProbeResponse {
            ready: Some(true),
            message: String::new(),
        }))
    }
}

/// The served plugin, and core's client of it: the real connection, handshake and adapter.
pub(crate) struct Served {
    /// The plugin, to script.
    pub(crate) plugin: HostilePlugin,
    /// Core's adapter, connected and past the handshake.
    pub(crate) provider: GrpcCloudProvider,
    socket: PathBuf,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A socket path no other test of this process or another uses.
fn socket_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "hostile-plugin-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Serves a fresh hostile plugin and connects core to it with `deadlines`.
pub(crate) async fn serve(deadlines: Deadlines) -> Served {
    let socket = socket_path();
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind the plugin's socket");
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let connection = listener.accept().await.map(|(stream, _)| stream);
        Some((connection, listener))
    });
    let plugin = HostilePlugin::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(IdentityServiceServer::new(Identity))
        .add_service(
            CloudProviderServiceServer::new(plugin.clone())
                .max_encoding_message_size(usize::MAX)
                .max_decoding_message_size(usize::MAX),
        )
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    let endpoint: Endpoint = format!("unix://{}", socket.display())
        .parse()
        .expect("a unix:// endpoint");
    let connection = PluginConnection::new(endpoint, None, deadlines).expect("a connection");
    let handshake = handshake(&connection).await.expect("the handshake");
    Served {
        plugin,
        provider: GrpcCloudProvider::new(&connection, &handshake),
        socket,
        _stop: stop,
    }
}
