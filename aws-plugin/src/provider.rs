//! The CloudProvider service of the AWS plugin: every RPC of `karpenter.cloudprovider.v1`
//! over EC2, IAM and SSM.
//!
//! It manages `karpenter.k8s.aws/v1` `EC2NodeClass` objects. Node class resolution
//! ([`NodeClassResolver`]) serves ResolveNodeClass and feeds Create and IsDrifted, so all
//! three see the same images, subnets and security groups; GetInstanceTypes answers from
//! [`InstanceTypeProvider`]; Create, Delete, Get and List go through [`InstanceProvider`];
//! IsDrifted applies the rules of [`crate::drift`].
//!
//! Errors become gRPC statuses following the proto's tables: bad input INVALID_ARGUMENT
//! naming the field, AWS throttling or no answer UNAVAILABLE, refused credentials
//! PERMISSION_DENIED, other AWS errors INTERNAL, each with AWS's error code in the message.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use provider_sdk::InstanceTypeStream;
use provider_sdk::chunk::{RECOMMENDED_CHUNK_BYTES, chunk_instance_types};
use provider_sdk::json::{json_to_struct, struct_to_json};
use provider_sdk::status;
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::{
    self, AckInterruptionsRequest, AckInterruptionsResponse, ConditionStatus, ConversionWarning,
    ConvertNodeClassRequest, ConvertNodeClassResponse, CreateRequest, CreateResponse,
    DeleteRequest, DeleteResponse, GetInstanceTypesRequest, GetRepairPoliciesRequest,
    GetRepairPoliciesResponse, GetRequest, GetResponse, GetSupportedNodeClassesRequest,
    GetSupportedNodeClassesResponse, IsDriftedRequest, IsDriftedResponse, LaunchState, ListRequest,
    ListResponse, NodeClassKind, RepairPolicy, ResolveNodeClassRequest, ResolveNodeClassResponse,
    WatchInterruptionsRequest, WatchInterruptionsResponse,
};
use tonic::{Request, Response, Status};

use crate::aws_error::AwsError;
use crate::bootstrap::ClusterSettings;
use crate::drift;
use crate::ec2::Ec2;
use crate::iam::Iam;
use crate::instance::InstanceProvider;
use crate::instance_type_provider::{Clock, InstanceTypeError, InstanceTypeProvider};
use crate::interruption::InterruptionQueue;
use crate::labels::LABEL_PLACEMENT_GROUP_ID;
use crate::node_class::{
    ClusterIdentity, NodeClassResolver, RESOLVE_AGAIN_AFTER, ResolveError, ResolvedNodeClass,
};
use crate::ssm::Ssm;

/// The node class kind this plugin manages.
pub fn ec2_node_class_kind() -> NodeClassKind {
    NodeClassKind {
        group: "karpenter.k8s.aws".to_owned(),
        version: "v1".to_owned(),
        kind: "EC2NodeClass".to_owned(),
    }
}

/// The AWS APIs the provider calls, each behind its port.
#[derive(Debug, Clone)]
pub struct AwsClients {
    /// EC2.
    pub ec2: Arc<dyn Ec2>,
    /// IAM (instance profiles).
    pub iam: Arc<dyn Iam>,
    /// SSM (image aliases, `ssmParameter` terms).
    pub ssm: Arc<dyn Ssm>,
}

/// What the provider knows of its cluster.
#[derive(Debug, Clone, Default)]
pub struct ProviderSettings {
    /// Name, region and Kubernetes version: names and tags of what the plugin creates, and
    /// image aliases.
    pub cluster: ClusterIdentity,
    /// How nodes join the cluster (user data).
    pub bootstrap: ClusterSettings,
    /// How long a node class resolution is reused (`None`: the default).
    pub node_class_cache_ttl: Option<Duration>,
}

/// How many node class objects [`RecentNodeClasses`] keeps: a fleet has a handful of node
/// classes, each seen in a few versions at once.
const RECENT_NODE_CLASSES: usize = 16;

/// The node class objects requests brought lately, newest first, each with its JSON. Core
/// sends the same object with the IsDrifted of every NodeClaim of the class, and comparing
/// a `Struct` costs a fraction of converting it.
#[derive(Debug, Default)]
struct RecentNodeClasses(Mutex<VecDeque<(prost_types::Struct, Arc<serde_json::Value>)>>);

impl RecentNodeClasses {
    /// `node_class` as JSON: the conversion kept for an equal object, or a new one.
    fn json_of(&self, node_class: prost_types::Struct) -> Arc<serde_json::Value> {
        let mut recent = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = recent.iter().position(|(seen, _)| *seen == node_class)
            && let Some(entry) = recent.remove(index)
        {
            let json = Arc::clone(&entry.1);
            recent.push_front(entry);
            return json;
        }
        let json = Arc::new(struct_to_json(node_class.clone()));
        recent.truncate(RECENT_NODE_CLASSES - 1);
        recent.push_front((node_class, Arc::clone(&json)));
        json
    }
}

/// The AWS CloudProvider service.
#[derive(Debug, Clone)]
pub struct AwsCloudProvider {
    instance_types: Arc<InstanceTypeProvider>,
    node_classes: Arc<NodeClassResolver>,
    instances: Arc<InstanceProvider>,
    recent_node_classes: Arc<RecentNodeClasses>,
    interruptions: Option<Arc<InterruptionQueue>>,
}

impl AwsCloudProvider {
    /// The service over `clients`, reading time from `clock`. Calls nothing yet: AWS is first
    /// called by the first RPC that needs it, so the plugin starts without network.
    pub fn new(clients: AwsClients, settings: ProviderSettings, clock: Arc<dyn Clock>) -> Self {
        let instance_types = InstanceTypeProvider::new(
            Arc::clone(&clients.ec2),
            &settings.cluster.region,
            Arc::clone(&clock),
        );
        Self::from_instance_types(clients, settings, clock, instance_types)
    }

    /// The service over an instance type provider configured by the caller (refresh period,
    /// TTLs).
    pub fn from_instance_types(
        clients: AwsClients,
        settings: ProviderSettings,
        clock: Arc<dyn Clock>,
        instance_types: InstanceTypeProvider,
    ) -> Self {
        let instance_types = Arc::new(instance_types);
        let mut resolver = NodeClassResolver::new(
            Arc::clone(&clients.ec2),
            clients.iam,
            clients.ssm,
            settings.cluster.clone(),
            Arc::clone(&clock),
        );
        if let Some(ttl) = settings.node_class_cache_ttl {
            resolver = resolver.with_cache_ttl(ttl);
        }
        let instances = InstanceProvider::new(
            clients.ec2,
            Arc::clone(&instance_types),
            settings.cluster,
            settings.bootstrap,
        )
        .with_clock(Arc::clone(&clock));
        Self {
            instance_types,
            node_classes: Arc::new(resolver),
            instances: Arc::new(instances),
            recent_node_classes: Arc::default(),
            interruptions: None,
        }
    }

    /// Serves WatchInterruptions from the SQS queue `queue` (read with `sqs`; its notices'
    /// instances looked up with `ec2`).
    pub fn with_interruption_queue(
        mut self,
        sqs: Arc<dyn crate::sqs::Sqs>,
        ec2: Arc<dyn Ec2>,
        queue: &str,
    ) -> Self {
        let cluster = self.node_classes.cluster().name.clone();
        self.interruptions = Some(Arc::new(InterruptionQueue::new(
            sqs,
            ec2,
            Arc::clone(&self.instance_types),
            queue,
            &cluster,
        )));
        self
    }

    /// The instance type provider (Create marks offerings unavailable on it).
    pub fn instance_type_provider(&self) -> &InstanceTypeProvider {
        &self.instance_types
    }

    /// Resolves the node class of a request, or the status saying why not.
    async fn resolve(
        &self,
        node_class: Option<prost_types::Struct>,
    ) -> Result<(Arc<serde_json::Value>, Arc<ResolvedNodeClass>), Status> {
        let node_class = node_class.ok_or_else(|| {
            status::invalid_field(
                "node_class",
                "missing; send the EC2NodeClass object as JSON",
            )
        })?;
        let json = self.recent_node_classes.json_of(node_class);
        check_node_class_kind(&json)?;
        let resolved = self.node_classes.resolve(&json).await.map_err(|e| {
            tracing::warn!(error = %e, "node class resolution failed");
            resolve_status(&e)
        })?;
        Ok((json, resolved))
    }

    async fn drift_of(
        &self,
        node_claim: &v1::NodeClaim,
        node_class: &serde_json::Value,
        resolved: &ResolvedNodeClass,
    ) -> Result<Option<drift::Drift>, Status> {
        let claim_annotations: BTreeMap<String, String> = node_claim
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let class_annotations: BTreeMap<String, String> = node_class
            .pointer("/metadata/annotations")
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default();
        if let Some(found) = drift::static_drift(&claim_annotations, &class_annotations, resolved) {
            return Ok(Some(found));
        }
        let provider_id = node_claim
            .status
            .as_ref()
            .map(|s| s.provider_id.as_str())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                status::invalid_field(
                    "node_claim.status.provider_id",
                    "missing; IsDrifted needs a launched NodeClaim",
                )
            })?;
        let instance = self
            .instances
            .instance(provider_id)
            .await
            .map_err(|e| e.to_status())?
            .ok_or_else(|| {
                status::instance_not_found(
                    "provider_id",
                    provider_id,
                    format!("instance {provider_id} is gone"),
                )
            })?;
        let image_id = node_claim
            .status
            .as_ref()
            .map(|s| s.image_id.clone())
            .filter(|i| !i.is_empty())
            .or_else(|| instance.image_id.clone())
            .unwrap_or_default();
        let architecture = match node_claim.labels.get("kubernetes.io/arch") {
            Some(arch) => arch.clone(),
            None => {
                self.architecture_of(&instance.instance_type, node_class)
                    .await?
            }
        };
        Ok(drift::ami_drift(&image_id, &architecture, resolved)
            .or_else(|| drift::security_group_drift(&instance.security_group_ids, resolved))
            .or_else(|| drift::subnet_drift(instance.subnet_id.as_deref(), resolved))
            .or_else(|| {
                drift::capacity_reservation_drift(
                    instance.capacity_reservation_id.as_deref(),
                    resolved,
                )
            })
            .or_else(|| {
                drift::placement_group_drift(
                    node_claim
                        .labels
                        .get(LABEL_PLACEMENT_GROUP_ID)
                        .map(String::as_str),
                    resolved,
                )
            }))
    }

    /// The `kubernetes.io/arch` of an instance type, from the catalogue.
    async fn architecture_of(
        &self,
        instance_type: &str,
        node_class: &serde_json::Value,
    ) -> Result<String, Status> {
        let types = self
            .instance_types
            .instance_types(Some(node_class))
            .await
            .map_err(|e| instance_types_status(&e))?;
        types
            .iter()
            .find(|t| t.name == instance_type)
            .and_then(|t| {
                t.requirements
                    .iter()
                    .find(|r| r.key == "kubernetes.io/arch")
                    .and_then(|r| r.values.first().cloned())
            })
            .ok_or_else(|| {
                status::plugin_internal(
                    tonic::Code::Internal,
                    format!(
                        "instance type {instance_type} is not in the catalogue; cannot tell its \
                         architecture"
                    ),
                )
            })
    }
}

/// Refuses a Create the proto does not allow before anything is launched: a name, and an `In`
/// requirement on the instance type with at least one value (without it every type would be a
/// candidate, which core never asks for).
fn check_create_request(node_claim: &v1::NodeClaim) -> Result<(), Status> {
    if node_claim.name.is_empty() {
        return Err(status::invalid_field(
            "node_claim.name",
            "must not be empty",
        ));
    }
    let spec = node_claim.spec.as_ref();
    let names_types = spec.is_some_and(|spec| {
        spec.requirements.iter().any(|r| {
            r.key == "node.kubernetes.io/instance-type"
                && r.operator == v1::Operator::In as i32
                && !r.values.is_empty()
        })
    });
    if !names_types {
        return Err(status::invalid_field(
            "node_claim.spec.requirements",
            "an In requirement on node.kubernetes.io/instance-type with at least one value is \
             required",
        ));
    }
    Ok(())
}

/// The status of a failed node class resolution.
fn resolve_status(error: &ResolveError) -> Status {
    match error {
        ResolveError::Invalid(invalid) => {
            status::invalid_field(&format!("node_class.{}", invalid.field), &invalid.message)
        }
        ResolveError::Aws(aws) => aws_status(aws, error.to_string()),
    }
}

/// The status of an AWS error, per the proto's tables, with AWS's code in its ErrorInfo.
pub(crate) fn aws_status(error: &AwsError, message: String) -> Status {
    let code = match error {
        AwsError::Throttled { .. } | AwsError::Transport { .. } => tonic::Code::Unavailable,
        AwsError::Unauthorized { .. } => tonic::Code::PermissionDenied,
        _ => tonic::Code::Internal,
    };
    status::cloud_api_error(code, Some(error.code()), message)
}

/// Refuses a node class of another kind than EC2NodeClass (`karpenter.k8s.aws/v1`): a foreign
/// object would otherwise be read as an EC2NodeClass with every field missing.
fn check_node_class_kind(node_class: &serde_json::Value) -> Result<(), Status> {
    let text = |pointer: &str| {
        node_class
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
    };
    let api_version = text("/apiVersion").unwrap_or_default();
    let kind = text("/kind").unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    if group == crate::apis::GROUP && kind == "EC2NodeClass" {
        return Ok(());
    }
    let found = format!("{group}/{kind}");
    Err(status::node_class_kind_unsupported(
        &found,
        format!(
            "node_class: {found:?} (apiVersion {api_version:?}) is not a kind this plugin \
             manages; it manages {}/EC2NodeClass",
            crate::apis::GROUP
        ),
    ))
}

/// The status of a failed GetInstanceTypes.
fn instance_types_status(error: &InstanceTypeError) -> Status {
    match error {
        InstanceTypeError::InvalidNodeClass { field, message } => {
            status::invalid_field(&format!("node_class.{field}"), message)
        }
        InstanceTypeError::NoPriceTable(_) => {
            status::plugin_internal(tonic::Code::FailedPrecondition, error.to_string())
        }
        InstanceTypeError::Ec2(ec2) => aws_status(ec2, error.to_string()),
    }
}

/// Upstream's AWS repair policies: how long a node condition may hold before the node is
/// replaced.
pub fn repair_policies() -> Vec<RepairPolicy> {
    let policy = |condition: &str, status: ConditionStatus, minutes: u64| RepairPolicy {
        condition_type: condition.to_owned(),
        condition_status: status as i32,
        toleration_duration: Some(prost_types::Duration {
            seconds: (minutes * 60) as i64,
            nanos: 0,
        }),
    };
    vec![
        policy("Ready", ConditionStatus::False, 30),
        policy("Ready", ConditionStatus::Unknown, 30),
        policy("AcceleratedHardwareReady", ConditionStatus::False, 10),
        policy("StorageReady", ConditionStatus::False, 30),
        policy("NetworkingReady", ConditionStatus::False, 30),
        policy("KernelReady", ConditionStatus::False, 30),
        policy("ContainerRuntimeReady", ConditionStatus::False, 30),
    ]
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

    async fn resolve_node_class(
        &self,
        request: Request<ResolveNodeClassRequest>,
    ) -> Result<Response<ResolveNodeClassResponse>, Status> {
        let (_, resolved) = self.resolve(request.into_inner().node_class).await?;
        let conditions = resolved
            .conditions
            .iter()
            .map(|c| v1::Condition {
                r#type: c.type_.to_owned(),
                status: if c.ready {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                } as i32,
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect();
        Ok(Response::new(ResolveNodeClassResponse {
            status: json_to_struct(&resolved.status_json()),
            conditions,
            static_hash: resolved.static_hash.clone(),
            static_hash_version: crate::node_class::hash::HASH_VERSION.to_owned(),
            resolve_again_after: Some(prost_types::Duration {
                seconds: RESOLVE_AGAIN_AFTER.as_secs() as i64,
                nanos: 0,
            }),
        }))
    }

    async fn get_instance_types(
        &self,
        request: Request<GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let node_class = request
            .into_inner()
            .node_class
            .map(struct_to_json)
            .filter(|json| json.as_object().is_some_and(|o| !o.is_empty()));
        // With a node class, only the zones it has subnets in and the architectures it has
        // images for are launchable; without one (someone browsing the catalogue with grpcurl)
        // everything is shown.
        let launchable = match &node_class {
            Some(json) => {
                let resolved = self.node_classes.resolve(json).await.map_err(|e| {
                    tracing::warn!(error = %e, "GetInstanceTypes: node class resolution failed");
                    resolve_status(&e)
                })?;
                if !resolved.is_ready() {
                    return Err(provider_sdk::status::node_class_not_ready(
                        resolved.name(),
                        resolved.not_ready_message().unwrap_or_default(),
                    ));
                }
                Some(self.instance_types.launchable(&resolved))
            }
            None => None,
        };
        let types = self
            .instance_types
            .launchable_instance_types(node_class.as_ref(), launchable.as_ref())
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "GetInstanceTypes failed");
                instance_types_status(&e)
            })?;
        let chunks = chunk_instance_types(types, RECOMMENDED_CHUNK_BYTES);
        Ok(Response::new(Box::pin(tokio_stream::iter(
            chunks.into_iter().map(Ok),
        ))))
    }

    async fn create(
        &self,
        request: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        let request = request.into_inner();
        let node_claim = request
            .node_claim
            .ok_or_else(|| status::invalid_field("node_claim", "missing"))?;
        check_create_request(&node_claim)?;
        let (json, resolved) = self.resolve(request.node_class).await?;
        let launched = self
            .instances
            .create(&node_claim, &json, &resolved)
            .await
            .map_err(|e| {
                tracing::warn!(node_claim = %node_claim.name, error = %e, "Create failed");
                e.to_status()
            })?;
        tracing::info!(
            node_claim = %node_claim.name,
            provider_id = launched.status.as_ref().map_or("", |s| s.provider_id.as_str()),
            instance_type = launched.labels.get("node.kubernetes.io/instance-type").map_or("", String::as_str),
            "launched"
        );
        // EC2 launches synchronously (CreateFleet instant): never PENDING.
        Ok(Response::new(CreateResponse {
            node_claim: Some(launched),
            state: LaunchState::Launched as i32,
            ..CreateResponse::default()
        }))
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let request = request.into_inner();
        // Required by the API: it names what to terminate when Create never answered, and
        // the log line of every termination.
        if request.node_claim_name.is_empty() {
            return Err(status::invalid_field(
                "node_claim_name",
                "must not be empty",
            ));
        }
        let state = self
            .instances
            .delete(&request.provider_id, &request.node_claim_name)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(DeleteResponse {
            state: state as i32,
        }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let provider_id = request.into_inner().provider_id;
        match self.instances.get(&provider_id).await {
            Ok(Some(node_claim)) => Ok(Response::new(GetResponse {
                node_claim: Some(node_claim),
            })),
            Ok(None) => Err(status::instance_not_found(
                "provider_id",
                &provider_id,
                format!("no instance {provider_id}"),
            )),
            Err(e) => Err(e.to_status()),
        }
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let request = request.into_inner();
        let (node_claims, next_page_token) = self
            .instances
            .list(request.page_size, &request.page_token)
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(ListResponse {
            node_claims,
            next_page_token,
        }))
    }

    async fn is_drifted(
        &self,
        request: Request<IsDriftedRequest>,
    ) -> Result<Response<IsDriftedResponse>, Status> {
        let request = request.into_inner();
        let node_claim = match (request.node_claim, request.node_claim_object) {
            (Some(node_claim), _) => node_claim,
            (None, Some(object)) => {
                let object = provider_sdk::json::try_struct_to_json(object, "node_claim_object")
                    .map_err(|e| status::invalid_field("node_claim_object", e))?;
                crate::kube_object::node_claim_from_object(serde_json::Value::Object(object))
                    .map_err(|e| status::invalid_field("node_claim_object", e))?
            }
            (None, None) => {
                return Err(status::invalid_field(
                    "node_claim",
                    "missing (or node_claim_object, the NodeClaim as kubectl prints it)",
                ));
            }
        };
        let (json, resolved) = self.resolve(request.node_class).await?;
        if !resolved.is_ready() {
            return Err(provider_sdk::status::node_class_not_ready(
                resolved.name(),
                resolved.not_ready_message().unwrap_or_default(),
            ));
        }
        let found = self.drift_of(&node_claim, &json, &resolved).await?;
        if let Some(found) = &found {
            tracing::info!(node_claim = %node_claim.name, reason = found.reason, message = %found.message, "drifted");
        }
        Ok(Response::new(found.map_or_else(
            IsDriftedResponse::default,
            |d| IsDriftedResponse {
                reason: d.reason.to_owned(),
                message: d.message,
            },
        )))
    }

    async fn get_repair_policies(
        &self,
        _: Request<GetRepairPoliciesRequest>,
    ) -> Result<Response<GetRepairPoliciesResponse>, Status> {
        Ok(Response::new(GetRepairPoliciesResponse {
            policies: repair_policies(),
        }))
    }

    async fn watch_interruptions(
        &self,
        _: Request<WatchInterruptionsRequest>,
    ) -> Result<Response<provider_sdk::InterruptionStream>, Status> {
        let Some(queue) = self.interruptions.clone() else {
            return Err(Status::unimplemented(
                "WatchInterruptions: no interruption queue (--interruption-queue)",
            ));
        };
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let polled = tokio::select! {
                    () = tx.closed() => return,
                    polled = queue.poll() => polled,
                };
                let answer = match polled {
                    Ok(notices) if notices.is_empty() => continue,
                    Ok(notices) => Ok(WatchInterruptionsResponse { notices }),
                    Err(e) => Err(interruption_queue_status(queue.name(), &e)),
                };
                let failed = answer.is_err();
                if tx.send(answer).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn ack_interruptions(
        &self,
        request: Request<AckInterruptionsRequest>,
    ) -> Result<Response<AckInterruptionsResponse>, Status> {
        let Some(queue) = &self.interruptions else {
            return Err(Status::unimplemented(
                "AckInterruptions: no interruption queue (--interruption-queue)",
            ));
        };
        queue
            .acknowledge(&request.into_inner().event_ids)
            .await
            .map_err(|e| interruption_queue_status(queue.name(), &e))?;
        Ok(Response::new(AckInterruptionsResponse {}))
    }

    async fn convert_node_class(
        &self,
        request: Request<ConvertNodeClassRequest>,
    ) -> Result<Response<ConvertNodeClassResponse>, Status> {
        let request = request.into_inner();
        Ok(Response::new(convert_node_class(
            request,
            self.node_classes.cluster(),
        )?))
    }
}

/// A failure to read or delete from the interruption queue: UNAVAILABLE (core re-opens the
/// stream with backoff), with the cloud's code.
fn interruption_queue_status(queue: &str, error: &AwsError) -> Status {
    status::cloud_api_error(
        tonic::Code::Unavailable,
        Some(error.code()),
        format!("interruption queue {queue}: {error}"),
    )
}

/// ConvertNodeClass: the request's source converted by [`crate::convert`]. The cluster's
/// name and Kubernetes version are the request's, else the plugin's own.
pub fn convert_node_class(
    request: ConvertNodeClassRequest,
    cluster: &ClusterIdentity,
) -> Result<ConvertNodeClassResponse, Status> {
    use provider_sdk::v1::convert_node_class_request::Source as Requested;

    let as_object = |value: serde_json::Value, field: &str| match value {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(status::invalid_field(field, "expected a JSON object")),
    };
    let source = match request.source {
        Some(Requested::Object(object)) => {
            crate::convert::Source::Object(as_object(struct_to_json(object), "object")?)
        }
        Some(Requested::InlineProvider(inline)) => crate::convert::Source::InlineProvider {
            provider: as_object(
                inline.provider.map(struct_to_json).unwrap_or_default(),
                "inline_provider.provider",
            )?,
            name: inline.name,
        },
        None => return Err(status::invalid_field("source", "missing")),
    };
    let kubelet = match request.kubelet.map(struct_to_json) {
        Some(serde_json::Value::Object(kubelet)) => Some(kubelet),
        _ => None,
    };
    let settings: std::collections::BTreeMap<String, String> =
        request.global_settings.into_iter().collect();
    let context = crate::convert::Context {
        cluster_name: Some(request.cluster_name.as_str())
            .filter(|name| !name.is_empty())
            .or(Some(cluster.name.as_str()).filter(|name| !name.is_empty())),
        kubernetes_version: cluster.kubernetes_version.as_deref(),
        global_settings: (!settings.is_empty()).then_some(&settings),
        kubelet: kubelet.as_ref(),
    };
    let converted = crate::convert::convert(source, &context)
        .map_err(|e| status::invalid_field(&e.field, &e.message))?;
    Ok(match converted {
        None => ConvertNodeClassResponse::default(),
        Some(converted) => ConvertNodeClassResponse {
            known: true,
            object: json_to_struct(&converted.object),
            warnings: converted
                .warnings
                .into_iter()
                .map(|w| ConversionWarning {
                    path: w.path,
                    message: w.message,
                })
                .collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio_stream::StreamExt as _;

    use super::*;
    use crate::node_class::fixture::{Fixture, node_class};

    fn provider(f: &Fixture) -> AwsCloudProvider {
        AwsCloudProvider::new(
            f.cloud.clients(),
            ProviderSettings {
                cluster: f.cluster.clone(),
                bootstrap: ClusterSettings {
                    name: f.cluster.name.clone(),
                    endpoint: "https://demo.example".to_owned(),
                    ca_bundle: None,
                    cidr: Some("10.100.0.0/16".to_owned()),
                },
                node_class_cache_ttl: Some(Duration::ZERO),
            },
            Arc::clone(&f.clock) as _,
        )
    }

    async fn get(
        provider: &AwsCloudProvider,
        node_class: Option<prost_types::Struct>,
    ) -> Result<Vec<v1::InstanceType>, Status> {
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

    fn with_kubelet(kubelet: serde_json::Value) -> Option<prost_types::Struct> {
        let mut class = node_class();
        class["spec"]["kubelet"] = kubelet;
        json_to_struct(&class)
    }

    #[tokio::test]
    async fn get_instance_types_streams_the_catalogue_in_chunks() {
        let f = Fixture::new();
        let provider = provider(&f);
        let types = get(&provider, None).await.unwrap();
        assert_eq!(types.len(), 1243);
        let types = get(&provider, with_kubelet(json!({"maxPods": 17})))
            .await
            .unwrap();
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        assert_eq!(m5.capacity.get("pods").map(String::as_str), Some("17"));
    }

    #[tokio::test]
    async fn offerings_outside_the_node_class_subnets_zones_are_unavailable() {
        let f = Fixture::new();
        let types = get(&provider(&f), with_kubelet(json!({}))).await.unwrap();
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        // The fixture's subnets are in us-east-1a and us-east-1b only.
        for offering in &m5.offerings {
            let launchable = matches!(offering.zone.as_str(), "us-east-1a" | "us-east-1b");
            assert_eq!(offering.is_available(), launchable, "{offering:?}");
        }
        // Without a node class every zone is shown.
        let all = get(&provider(&f), None).await.unwrap();
        let m5 = all.iter().find(|t| t.name == "m5.large").unwrap();
        assert!(
            m5.offerings
                .iter()
                .any(|o| o.zone == "us-east-1c" && o.is_available())
        );
    }

    #[tokio::test]
    async fn offerings_of_an_architecture_without_an_image_are_unavailable() {
        let f = Fixture::new();
        let arm_available = |types: &[v1::InstanceType]| {
            let m6g = types.iter().find(|t| t.name == "m6g.large").unwrap();
            m6g.offerings.iter().any(v1::Offering::is_available)
        };
        let both = get(&provider(&f), with_kubelet(json!({}))).await.unwrap();
        assert!(arm_available(&both), "the fixture has images for both");
        // Only an x86_64 image selected: Create could never launch an arm64 type, so the
        // catalogue must not call one available.
        let image = f
            .cloud
            .ec2
            .add_image("only-x86", "x86_64", "2026-01-01T00:00:00Z", vec![]);
        let mut class = node_class();
        class["spec"]["amiFamily"] = json!("AL2023");
        class["spec"]["amiSelectorTerms"] = json!([{"id": image.id}]);
        let amd64_only = get(&provider(&f), json_to_struct(&class)).await.unwrap();
        assert!(!arm_available(&amd64_only));
        let m5 = amd64_only.iter().find(|t| t.name == "m5.large").unwrap();
        assert!(m5.offerings.iter().any(v1::Offering::is_available));
    }

    #[tokio::test]
    async fn instance_types_of_a_node_class_that_is_not_ready_are_refused_with_the_reason() {
        let f = Fixture::new();
        let mut class = node_class();
        class["spec"]["subnetSelectorTerms"] =
            json!([{"tags": {"karpenter.sh/discovery": "none"}}]);
        let err = get(&provider(&f), json_to_struct(&class))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            provider_sdk::status::error_reason(&err),
            Some(v1::ErrorReason::NodeClassNotReady)
        );
    }

    #[tokio::test]
    async fn an_unparsable_node_class_is_invalid_argument_naming_the_field() {
        let f = Fixture::new();
        let err = get(&provider(&f), with_kubelet(json!({"maxPods": "many"})))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("spec.kubelet.maxPods"), "{err:?}");
    }

    #[tokio::test]
    async fn resolve_node_class_answers_status_conditions_and_hash() {
        let f = Fixture::new();
        let answer = provider(&f)
            .resolve_node_class(Request::new(ResolveNodeClassRequest {
                node_class: json_to_struct(&node_class()),
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            answer.static_hash_version,
            crate::node_class::hash::HASH_VERSION
        );
        assert!(answer.static_hash.parse::<u64>().is_ok());
        assert!(
            answer
                .conditions
                .iter()
                .all(|c| c.status == ConditionStatus::True as i32)
        );
        let status = struct_to_json(answer.status.unwrap());
        assert_eq!(status["subnets"].as_array().unwrap().len(), 2);
        assert_eq!(answer.resolve_again_after.unwrap().seconds, 300);

        let mut bad = node_class();
        bad["spec"]["amiSelectorTerms"] = json!("al2023");
        let err = provider(&f)
            .resolve_node_class(Request::new(ResolveNodeClassRequest {
                node_class: json_to_struct(&bad),
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("spec.amiSelectorTerms"), "{err:?}");
    }

    #[tokio::test]
    async fn a_node_claim_without_requirements_is_invalid_argument() {
        let f = Fixture::new();
        let err = provider(&f)
            .create(Request::new(CreateRequest {
                node_claim: Some(v1::NodeClaim {
                    name: "default-abcde".to_owned(),
                    spec: Some(v1::NodeClaimSpec::default()),
                    ..v1::NodeClaim::default()
                }),
                node_class: json_to_struct(&node_class()),
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("requirements"), "{err:?}");
        assert_eq!(
            provider_sdk::status::error_reason(&err),
            Some(v1::ErrorReason::InvalidField)
        );
    }

    #[tokio::test]
    async fn a_create_without_an_instance_type_requirement_launches_nothing() {
        let f = Fixture::new();
        let zone_only = v1::NodeClaim {
            name: "default-abcde".to_owned(),
            spec: Some(v1::NodeClaimSpec {
                requirements: vec![v1::Requirement::in_values(
                    "topology.kubernetes.io/zone",
                    ["us-east-1a"],
                )],
                ..v1::NodeClaimSpec::default()
            }),
            ..v1::NodeClaim::default()
        };
        let err = provider(&f)
            .create(Request::new(CreateRequest {
                node_claim: Some(zone_only),
                node_class: json_to_struct(&node_class()),
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message()
                .starts_with("node_claim.spec.requirements: an In requirement on node.kubernetes.io/instance-type"),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_node_class_of_another_kind_is_refused_with_its_kind() {
        let f = Fixture::new();
        let mut foreign = node_class();
        foreign["apiVersion"] = json!("example.dev/v1");
        foreign["kind"] = json!("ExampleNodeClass");
        let err = provider(&f)
            .resolve_node_class(Request::new(ResolveNodeClassRequest {
                node_class: json_to_struct(&foreign),
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            provider_sdk::status::error_reason(&err),
            Some(v1::ErrorReason::NodeClassKindUnsupported)
        );
        assert!(
            err.message().contains("example.dev/ExampleNodeClass"),
            "{err:?}"
        );
    }

    #[test]
    fn equal_node_class_objects_share_one_conversion_and_a_changed_one_gets_its_own() {
        let recent = RecentNodeClasses::default();
        let class = node_class();
        let first = recent.json_of(json_to_struct(&class).unwrap());
        assert_eq!(*first, class);
        let again = recent.json_of(json_to_struct(&class).unwrap());
        assert!(
            Arc::ptr_eq(&first, &again),
            "an equal object is not converted again"
        );
        let mut changed = class.clone();
        changed["metadata"]["resourceVersion"] = json!("2");
        let other = recent.json_of(json_to_struct(&changed).unwrap());
        assert_eq!(*other, changed);
        for version in 0..2 * RECENT_NODE_CLASSES {
            changed["metadata"]["resourceVersion"] = json!(format!("v{version}"));
            recent.json_of(json_to_struct(&changed).unwrap());
        }
        assert_eq!(
            recent.0.lock().unwrap().len(),
            RECENT_NODE_CLASSES,
            "bounded"
        );
        let evicted = recent.json_of(json_to_struct(&class).unwrap());
        assert_eq!(
            *evicted, class,
            "converted again once forgotten, to the same JSON"
        );
    }

    #[tokio::test]
    async fn create_then_is_drifted_after_a_new_image_then_delete() {
        let f = Fixture::new();
        let provider = provider(&f);
        let claim = v1::NodeClaim {
            name: "default-abcde".to_owned(),
            labels: [("karpenter.sh/nodepool".to_owned(), "default".to_owned())].into(),
            spec: Some(v1::NodeClaimSpec {
                requirements: vec![
                    v1::Requirement::in_values("node.kubernetes.io/instance-type", ["m5.large"]),
                    v1::Requirement::in_values("karpenter.sh/capacity-type", ["on-demand"]),
                ],
                ..v1::NodeClaimSpec::default()
            }),
            ..v1::NodeClaim::default()
        };
        let launched = provider
            .create(Request::new(CreateRequest {
                node_claim: Some(claim.clone()),
                node_class: json_to_struct(&node_class()),
            }))
            .await
            .unwrap()
            .into_inner()
            .node_claim
            .unwrap();
        let status = launched.status.clone().unwrap();
        assert!(
            status.provider_id.starts_with("aws:///us-east-1"),
            "{status:?}"
        );

        let ask = |launched: v1::NodeClaim| IsDriftedRequest {
            node_claim: Some(launched),
            node_class: json_to_struct(&node_class()),
            node_claim_object: None,
        };
        let answer = provider
            .is_drifted(Request::new(ask(launched.clone())))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.reason, "", "{answer:?}");

        f.cloud
            .publish_alias_image(
                crate::apis::ec2nodeclass::AMIFamily::Al2023,
                crate::node_class::fixture::K8S,
                "x86_64",
                "al2023-x86_64-v2",
            )
            .unwrap();
        let answer = provider
            .is_drifted(Request::new(ask(launched.clone())))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.reason, "AMIDrift");
        assert!(answer.message.contains(&status.image_id), "{answer:?}");
        assert!(answer.message.contains("al2023-x86_64-v2"), "{answer:?}");

        let delete = || {
            provider.delete(Request::new(DeleteRequest {
                provider_id: status.provider_id.clone(),
                node_claim_name: claim.name.clone(),
            }))
        };
        let first = delete().await.unwrap().into_inner();
        assert_ne!(first.state, v1::DeletionState::Unspecified as i32);
        f.cloud.ec2.advance(Duration::from_secs(3600));
        let gone = delete().await.unwrap().into_inner();
        assert_eq!(gone.state, v1::DeletionState::Gone as i32);
        let err = provider
            .is_drifted(Request::new(ask(launched)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
    }

    #[tokio::test]
    async fn capabilities_and_repair_policies_are_served() {
        let f = Fixture::new();
        let policies = provider(&f)
            .get_repair_policies(Request::new(GetRepairPoliciesRequest {}))
            .await
            .unwrap()
            .into_inner()
            .policies;
        let ready_false = policies
            .iter()
            .find(|p| {
                p.condition_type == "Ready" && p.condition_status == ConditionStatus::False as i32
            })
            .unwrap();
        assert_eq!(ready_false.toleration_duration.unwrap().seconds, 1800);
    }

    #[test]
    fn aws_errors_map_to_the_documented_statuses_with_the_aws_code() {
        let cases = [
            ("RequestLimitExceeded", tonic::Code::Unavailable),
            ("UnauthorizedOperation", tonic::Code::PermissionDenied),
            ("AuthFailure", tonic::Code::PermissionDenied),
            ("InternalError", tonic::Code::Internal),
            ("InvalidParameterValue", tonic::Code::Internal),
        ];
        for (code, expected) in cases {
            let error = InstanceTypeError::Ec2(AwsError::from_code(code, "no"));
            let status = instance_types_status(&error);
            assert_eq!(status.code(), expected, "{code}");
            assert!(status.message().contains(code), "{status:?}");
        }
        let transport = InstanceTypeError::Ec2(AwsError::transport("dispatch", "refused"));
        assert_eq!(
            instance_types_status(&transport).code(),
            tonic::Code::Unavailable
        );
    }
}
