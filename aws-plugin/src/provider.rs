//! The CloudProvider service of the AWS plugin.
//!
//! It manages `karpenter.k8s.aws/v1` `EC2NodeClass` objects. The EC2-backed RPCs (instance
//! types, Create, Delete, Get, List, IsDrifted, node class resolution) are not implemented
//! yet: they answer UNIMPLEMENTED, through the SDK's default implementations, so core reads
//! them as unsupported rather than failing.

use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::{
    GetSupportedNodeClassesRequest, GetSupportedNodeClassesResponse, NodeClassKind,
};
use tonic::{Request, Response, Status};

/// The node class kind this plugin manages.
pub fn ec2_node_class_kind() -> NodeClassKind {
    NodeClassKind {
        group: "karpenter.k8s.aws".to_owned(),
        version: "v1".to_owned(),
        kind: "EC2NodeClass".to_owned(),
    }
}

/// The AWS CloudProvider service.
#[derive(Debug, Clone, Default)]
pub struct AwsCloudProvider {}

#[tonic::async_trait]
impl CloudProviderService for AwsCloudProvider {
    async fn get_supported_node_classes(
        &self,
        _: Request<GetSupportedNodeClassesRequest>,
    ) -> Result<Response<GetSupportedNodeClassesResponse>, Status> {
        Ok(Response::new(GetSupportedNodeClassesResponse {
            node_classes: vec![ec2_node_class_kind()],
        }))
    }
}
