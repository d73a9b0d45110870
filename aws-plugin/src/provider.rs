//! The CloudProvider service of the AWS plugin.
//!
//! It manages `karpenter.k8s.aws/v1` `EC2NodeClass` objects. `GetInstanceTypes` answers from
//! EC2 through [`InstanceTypeProvider`]. The other EC2-backed RPCs (Create, Delete, Get, List,
//! IsDrifted, node class resolution) are not implemented yet: they answer UNIMPLEMENTED,
//! through the SDK's default implementations, so core reads them as unsupported rather than
//! failing.
//!
//! Errors become gRPC statuses in one place, [`status`], following the proto's tables.

use std::sync::Arc;

use provider_sdk::InstanceTypeStream;
use provider_sdk::chunk::{RECOMMENDED_CHUNK_BYTES, chunk_instance_types};
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::{
    GetInstanceTypesRequest, GetSupportedNodeClassesRequest, GetSupportedNodeClassesResponse,
    NodeClassKind,
};
use tonic::{Request, Response, Status};

use crate::ec2::{AwsError, Ec2};
use crate::instance_type_provider::{Clock, InstanceTypeError, InstanceTypeProvider};

/// The node class kind this plugin manages.
pub fn ec2_node_class_kind() -> NodeClassKind {
    NodeClassKind {
        group: "karpenter.k8s.aws".to_owned(),
        version: "v1".to_owned(),
        kind: "EC2NodeClass".to_owned(),
    }
}

/// The AWS CloudProvider service.
#[derive(Debug, Clone)]
pub struct AwsCloudProvider {
    instance_types: Arc<InstanceTypeProvider>,
}

impl AwsCloudProvider {
    /// The service for `region` over `ec2`, reading time from `clock`. Calls nothing yet: EC2
    /// is first called by the first RPC that needs it, so the plugin starts without network.
    pub fn new(ec2: Arc<dyn Ec2>, region: &str, clock: Arc<dyn Clock>) -> Self {
        Self::from_instance_types(InstanceTypeProvider::new(ec2, region, clock))
    }

    /// The service over an instance type provider configured by the caller (refresh period,
    /// TTLs).
    pub fn from_instance_types(instance_types: InstanceTypeProvider) -> Self {
        Self {
            instance_types: Arc::new(instance_types),
        }
    }

    /// The instance type provider (Create marks offerings unavailable on it).
    pub fn instance_type_provider(&self) -> &InstanceTypeProvider {
        &self.instance_types
    }
}

/// The gRPC status of an error, as the proto's tables say: EC2 throttling or no answer is
/// UNAVAILABLE (core retries), refused credentials PERMISSION_DENIED, any other EC2 error
/// INTERNAL, each with EC2's error code in the message; a node class that does not parse is
/// INVALID_ARGUMENT naming the field.
fn status(error: &InstanceTypeError) -> Status {
    match error {
        InstanceTypeError::InvalidNodeClass { .. } => Status::invalid_argument(error.to_string()),
        InstanceTypeError::NoPriceTable(_) => Status::failed_precondition(error.to_string()),
        InstanceTypeError::Ec2(ec2) => match ec2 {
            AwsError::Throttled { .. } | AwsError::Transport { .. } => {
                Status::unavailable(error.to_string())
            }
            AwsError::Unauthorized { .. } => Status::permission_denied(error.to_string()),
            _ => Status::internal(error.to_string()),
        },
    }
}

/// A `google.protobuf.Struct` as JSON.
fn struct_to_json(value: prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        value
            .fields
            .into_iter()
            .map(|(key, value)| (key, value_to_json(value)))
            .collect(),
    )
}

fn value_to_json(value: prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        // Struct numbers are doubles; whole ones go back to JSON integers so fields typed as
        // integers (maxPods) parse.
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                serde_json::Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, Into::into)
            }
        }
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(value_to_json).collect())
        }
    }
}

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

    async fn get_instance_types(
        &self,
        request: Request<GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let node_class = request.into_inner().node_class.map(struct_to_json);
        let types = self
            .instance_types
            .instance_types(node_class.as_ref())
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "GetInstanceTypes failed");
                status(&e)
            })?;
        let chunks = chunk_instance_types(types, RECOMMENDED_CHUNK_BYTES);
        Ok(Response::new(Box::pin(tokio_stream::iter(
            chunks.into_iter().map(Ok),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use prost_types::value::Kind;
    use tokio_stream::StreamExt as _;

    use super::*;
    use crate::ec2::memory::MemoryEc2;
    use crate::instance_type_provider::SystemClock;

    fn provider() -> AwsCloudProvider {
        let ec2 = Arc::new(MemoryEc2::new("us-east-1").unwrap());
        AwsCloudProvider::new(ec2, "us-east-1", Arc::new(SystemClock))
    }

    fn value(kind: Kind) -> prost_types::Value {
        prost_types::Value { kind: Some(kind) }
    }

    fn object(fields: Vec<(&str, Kind)>) -> prost_types::Struct {
        prost_types::Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_owned(), value(v)))
                .collect(),
        }
    }

    /// An EC2NodeClass as core sends it, with `kubelet` as given.
    fn node_class(kubelet: prost_types::Struct) -> prost_types::Struct {
        let list = |items: Vec<prost_types::Struct>| {
            Kind::ListValue(prost_types::ListValue {
                values: items
                    .into_iter()
                    .map(|s| value(Kind::StructValue(s)))
                    .collect(),
            })
        };
        let id = |id: &str| object(vec![("id", Kind::StringValue(id.to_owned()))]);
        object(vec![(
            "spec",
            Kind::StructValue(object(vec![
                ("role", Kind::StringValue("R".to_owned())),
                (
                    "amiSelectorTerms",
                    list(vec![object(vec![(
                        "alias",
                        Kind::StringValue("al2023@latest".to_owned()),
                    )])]),
                ),
                ("subnetSelectorTerms", list(vec![id("subnet-1")])),
                ("securityGroupSelectorTerms", list(vec![id("sg-1")])),
                ("kubelet", Kind::StructValue(kubelet)),
            ])),
        )])
    }

    async fn get(
        provider: &AwsCloudProvider,
        node_class: Option<prost_types::Struct>,
    ) -> Result<Vec<provider_sdk::v1::InstanceType>, Status> {
        let response = provider
            .get_instance_types(Request::new(GetInstanceTypesRequest {
                node_pool: None,
                node_class,
            }))
            .await?;
        let mut stream = response.into_inner();
        let mut types = Vec::new();
        let mut chunks = 0;
        while let Some(chunk) = stream.next().await {
            types.extend(chunk?.instance_types);
            chunks += 1;
        }
        assert!(chunks > 1, "a catalogue this size comes in several chunks");
        Ok(types)
    }

    #[tokio::test]
    async fn get_instance_types_streams_the_catalogue_in_chunks() {
        let provider = provider();
        let types = get(&provider, None).await.unwrap();
        assert_eq!(types.len(), 1243);
        let max_pods = object(vec![("maxPods", Kind::NumberValue(17.0))]);
        let types = get(&provider, Some(node_class(max_pods))).await.unwrap();
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        assert_eq!(m5.capacity.get("pods").map(String::as_str), Some("17"));
    }

    #[tokio::test]
    async fn an_unparsable_node_class_is_invalid_argument_naming_the_field() {
        let bad = object(vec![("maxPods", Kind::StringValue("many".to_owned()))]);
        let err = get(&provider(), Some(node_class(bad))).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("spec.kubelet.maxPods"), "{err:?}");
    }

    #[test]
    fn ec2_errors_map_to_the_documented_statuses_with_the_aws_code() {
        let cases = [
            ("RequestLimitExceeded", tonic::Code::Unavailable),
            ("UnauthorizedOperation", tonic::Code::PermissionDenied),
            ("AuthFailure", tonic::Code::PermissionDenied),
            ("InternalError", tonic::Code::Internal),
            ("InvalidParameterValue", tonic::Code::Internal),
        ];
        for (code, expected) in cases {
            let error = InstanceTypeError::Ec2(AwsError::from_code(code, "no"));
            let status = status(&error);
            assert_eq!(status.code(), expected, "{code}");
            assert!(status.message().contains(code), "{status:?}");
        }
        let transport = InstanceTypeError::Ec2(AwsError::transport("dispatch", "refused"));
        assert_eq!(status(&transport).code(), tonic::Code::Unavailable);
    }

    #[test]
    fn struct_numbers_become_json_integers_when_whole() {
        let s = object(vec![
            ("a", Kind::NumberValue(17.0)),
            ("b", Kind::NumberValue(0.5)),
            ("c", Kind::NullValue(0)),
            ("d", Kind::BoolValue(true)),
        ]);
        assert_eq!(
            struct_to_json(s),
            serde_json::json!({"a": 17, "b": 0.5, "c": null, "d": true})
        );
    }
}
