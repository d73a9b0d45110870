//! The Identity service of the AWS plugin.

use std::collections::HashMap;

use provider_sdk::v1::PluginCapability;
use provider_sdk::v1::identity_service_server::IdentityService;
use provider_sdk::v1::plugin_capability::{self, rpc};
use provider_sdk::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, GetPluginVocabularyRequest, GetPluginVocabularyResponse, ProbeRequest,
    ProbeResponse,
};
use tonic::{Request, Response, Status};

use crate::PLUGIN_NAME;
/// Who the plugin is and whether it is ready.
#[derive(Debug, Clone)]
pub struct Identity {
    manifest: HashMap<String, String>,
    interruptions: bool,
}

impl Identity {
    /// The identity of a plugin managing `region`, reaching EC2 at `ec2_endpoint` when that
    /// is overridden (an emulator, a VPC endpoint).
    pub fn new(region: &str, ec2_endpoint: Option<&str>) -> Self {
        let mut manifest = HashMap::from([("region".to_owned(), region.to_owned())]);
        if let Some(endpoint) = ec2_endpoint {
            manifest.insert("ec2_endpoint".to_owned(), endpoint.to_owned());
        }
        Identity {
            manifest,
            interruptions: false,
        }
    }

    /// Announces WatchInterruptions, served from the SQS queue `queue`.
    pub fn with_interruption_queue(mut self, queue: &str) -> Self {
        self.manifest
            .insert("interruption_queue".to_owned(), queue.to_owned());
        self.interruptions = true;
        self
    }
}

#[tonic::async_trait]
impl IdentityService for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: PLUGIN_NAME.to_owned(),
            vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
            api_version: provider_sdk::API_VERSION.to_owned(),
            manifest: self.manifest.clone(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        // Every optional RPC is implemented; interruptions only with a queue to read.
        let capabilities = [
            rpc::Type::ResolveNodeClass,
            rpc::Type::Get,
            rpc::Type::List,
            rpc::Type::IsDrifted,
            rpc::Type::GetRepairPolicies,
            rpc::Type::ConvertNodeClass,
        ]
        .into_iter()
        .chain(self.interruptions.then_some(rpc::Type::WatchInterruptions))
        .map(|t| PluginCapability {
            r#type: Some(plugin_capability::Type::Rpc(plugin_capability::Rpc {
                r#type: t as i32,
            })),
        })
        .collect();
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn get_plugin_vocabulary(
        &self,
        _: Request<GetPluginVocabularyRequest>,
    ) -> Result<Response<GetPluginVocabularyResponse>, Status> {
        Ok(Response::new(crate::labels::vocabulary()))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        // The plugin serves only once its AWS configuration loaded, so serving means ready.
        Ok(Response::new(ProbeResponse {
            ready: Some(true),
            message: String::new(),
        }))
    }
}
