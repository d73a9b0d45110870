//! The port over the plugin's gRPC API: [`GrpcCloudProvider`].
//!
//! Each call gets the RPC's deadline ([`Deadlines`]) for all of its attempts together; the
//! [`RetryPolicy`] decides which failures are tried again and how long to wait. Statuses become
//! [`CloudProviderError`]s following the status tables of `cloudprovider.proto`, and every answer
//! is converted into core's types field by field, an invalid one refused with the field named.
//!
//! A status the client produced itself (the socket is missing, the connection broke) is read as
//! UNAVAILABLE whatever its code: tonic turns a missing Unix socket into NOT_FOUND, which must
//! never reach Delete or Get as "the instance is gone".

use std::collections::{BTreeMap, HashMap};
use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use core_domain::instance_type::InstanceType;
use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use core_domain::quantity::Quantity;
use core_domain::requirements::{NodeSelectorRequirement, Operator};
use core_domain::resources::{Quantities, ResourceName};
use core_domain::scheduler::{Taint, TaintEffect};
use karpenter_api::ConditionStatus;
use karpenter_api::patterns::is_qualified_name;
use provider_sdk::v1;
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::retry::{Decision, RetryPolicy, Timer, TokioTimer};
use super::{
    CloudInstance, CloudProvider, CloudProviderError, DEFAULT_RESOLVE_AGAIN_AFTER, Deletion,
    DriftReason, FailureKind, InstanceState, LaunchedNodeClaim, NodeClaimRequest,
    NodeClassCondition, NodeClassKind, RepairPolicy, ResolvedNodeClass, Rpc,
};
use crate::plugin::instance_types::catalogue_from_proto;
use crate::plugin::{Deadlines, Handshake, PluginConnection, with_deadline};

/// The most List pages one listing reads; beyond, the plugin is paging in circles.
const MAX_LIST_PAGES: usize = 10_000;

type Client = CloudProviderServiceClient<Channel>;

/// The cloud provider plugin, reached over gRPC, as a [`CloudProvider`].
#[derive(Debug, Clone)]
pub struct GrpcCloudProvider<C = TokioTimer> {
    client: Client,
    deadlines: Deadlines,
    name: String,
    node_classes: Vec<NodeClassKind>,
    retry: RetryPolicy,
    timer: C,
    metrics: Arc<CallMetrics>,
}

impl GrpcCloudProvider<TokioTimer> {
    /// The provider behind `connection`, named and with the node class kinds its handshake
    /// reported, with the default retry policy on tokio's timer.
    pub fn new(connection: &PluginConnection, handshake: &Handshake) -> Self {
        GrpcCloudProvider {
            client: connection.cloud_provider.clone(),
            deadlines: connection.deadlines,
            name: handshake.info.name.clone(),
            node_classes: handshake.node_class_kinds(),
            retry: RetryPolicy::DEFAULT,
            timer: TokioTimer,
            metrics: Arc::new(CallMetrics::new()),
        }
    }
}

impl<C: Timer> GrpcCloudProvider<C> {
    /// The same provider waiting and reading time on `timer` (a [`super::retry::FakeTimer`] in
    /// tests, so retries do not sleep).
    pub fn with_timer<D: Timer>(self, timer: D) -> GrpcCloudProvider<D> {
        GrpcCloudProvider {
            client: self.client,
            deadlines: self.deadlines,
            name: self.name,
            node_classes: self.node_classes,
            retry: self.retry,
            timer,
            metrics: self.metrics,
        }
    }

    /// The same provider retrying by `retry`.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same provider counting its calls into `metrics` (shared with an exporter that
    /// exists before the plugin's handshake does).
    pub fn with_metrics(mut self, metrics: Arc<CallMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The counters of attempts and retries, for a metrics exporter.
    pub fn metrics(&self) -> &Arc<CallMetrics> {
        &self.metrics
    }

    /// Makes one call of `rpc`: attempts until one succeeds, the policy gives up, or `deadline`
    /// (for the whole call) passes. `attempt` gets a client and the time left.
    async fn call<T, F, Fut>(
        &self,
        rpc: Rpc,
        deadline: Duration,
        key: &str,
        mut attempt: F,
    ) -> Result<T, CallError>
    where
        F: FnMut(Client, Duration) -> Fut + Send,
        Fut: Future<Output = Result<T, Status>> + Send,
        T: Send,
    {
        let start = self.timer.now();
        let mut attempts = 1;
        loop {
            let left = deadline.saturating_sub(self.timer.now().saturating_duration_since(start));
            // The header deadline is the plugin's to honour; this one is ours, for a plugin
            // that does not (or a stream that stalls half-way).
            let result = match tokio::time::timeout(left, attempt(self.client.clone(), left)).await
            {
                Ok(result) => result.map_err(received),
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "no complete answer within {left:?}"
                ))),
            };
            let status = match result {
                Ok(answer) => {
                    self.metrics.record_attempt(rpc, Code::Ok);
                    return Ok(answer);
                }
                Err(status) => status,
            };
            self.metrics.record_attempt(rpc, status.code());
            let elapsed = self.timer.now().saturating_duration_since(start);
            match self
                .retry
                .decide(rpc, status.code(), attempts, elapsed, deadline, key)
            {
                Decision::RetryAfter(wait) => {
                    tracing::warn!(
                        rpc = rpc.as_str(),
                        attempt = attempts,
                        code = ?status.code(),
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        message = status.message(),
                        "plugin call failed; retrying"
                    );
                    self.metrics.record_retry(rpc);
                    self.timer.sleep(wait).await;
                    attempts += 1;
                }
                Decision::GiveUp(why) => {
                    tracing::debug!(
                        rpc = rpc.as_str(),
                        attempts,
                        code = ?status.code(),
                        why = %why,
                        "plugin call failed"
                    );
                    return Err(CallError { status, attempts });
                }
            }
        }
    }
}

/// A call that failed for good: the last status and how many attempts were made.
#[derive(Debug)]
struct CallError {
    status: Status,
    attempts: u32,
}

impl CallError {
    fn code(&self) -> Code {
        self.status.code()
    }
}

/// A status as the plugin sent it; for one the client made up from a transport error (those
/// carry the error as their source, statuses read from the wire do not), DEADLINE_EXCEEDED when
/// the client's own timer ran out, UNAVAILABLE otherwise.
fn received(status: Status) -> Status {
    let Some(source) = status.source() else {
        return status;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
    while let Some(error) = cause {
        if error.is::<tonic::TimeoutExpired>() {
            return Status::deadline_exceeded(format!("{} (client deadline)", status.message()));
        }
        cause = error.source();
    }
    Status::unavailable(format!("{} (transport: {source})", status.message()))
}

/// The error a failed call means, by the status tables of `cloudprovider.proto`. The meanings
/// particular to one RPC (NOT_FOUND from Delete and Get, INVALID_ARGUMENT from List) are handled
/// by that RPC before this.
fn classify(rpc: Rpc, error: &CallError) -> CloudProviderError {
    let status = &error.status;
    let message = status.message().to_owned();
    let reason = provider_sdk::status::error_reason(status);
    match status.code() {
        Code::Unimplemented => CloudProviderError::Unsupported { rpc: rpc.as_str() },
        Code::Unavailable | Code::DeadlineExceeded => CloudProviderError::Unavailable(format!(
            "{rpc} failed after {} attempt(s): {:?}: {message}",
            error.attempts,
            status.code()
        )),
        Code::InvalidArgument => CloudProviderError::InvalidRequest(message),
        Code::NotFound => CloudProviderError::NotFound(message),
        Code::ResourceExhausted
            if rpc == Rpc::Create && reason == Some(v1::ErrorReason::InsufficientCapacity) =>
        {
            CloudProviderError::InsufficientCapacity(message)
        }
        Code::FailedPrecondition if reason == Some(v1::ErrorReason::NodeClassNotReady) => {
            CloudProviderError::NodeClassNotReady(message)
        }
        code => CloudProviderError::Other {
            kind: failure_kind(code),
            message,
        },
    }
}

/// The port's kind of failure for a status code that has no meaning of its own in the API's
/// tables (the codes `classify` does not tell apart).
fn failure_kind(code: Code) -> FailureKind {
    match code {
        Code::PermissionDenied | Code::Unauthenticated => FailureKind::PermissionDenied,
        Code::ResourceExhausted => FailureKind::ResourceExhausted,
        Code::Aborted | Code::AlreadyExists | Code::FailedPrecondition => FailureKind::Conflict,
        // INTERNAL, UNKNOWN, DATA_LOSS, OUT_OF_RANGE, CANCELLED; the codes `classify` gives a
        // meaning of their own never get here.
        _ => FailureKind::Internal,
    }
}

impl<C: Timer> CloudProvider for GrpcCloudProvider<C> {
    fn name(&self) -> &str {
        &self.name
    }

    fn supported_node_classes(&self) -> &[NodeClassKind] {
        &self.node_classes
    }

    async fn resolve_node_class(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<ResolvedNodeClass, CloudProviderError> {
        let rpc = Rpc::ResolveNodeClass;
        let request = v1::ResolveNodeClassRequest {
            node_class: Some(json_to_struct(node_class, "node_class")?),
        };
        let answer = self
            .call(
                rpc,
                self.deadlines.default,
                object_name(node_class),
                |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move { Ok(client.resolve_node_class(request).await?.into_inner()) }
                },
            )
            .await
            .map_err(|e| classify(rpc, &e))?;
        resolved_from_proto(answer)
    }

    async fn instance_types(
        &self,
        node_pool: &serde_json::Value,
        node_class: Option<&serde_json::Value>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        let rpc = Rpc::GetInstanceTypes;
        let request = v1::GetInstanceTypesRequest {
            node_pool: Some(json_to_struct(node_pool, "node_pool")?),
            node_class: node_class
                .map(|n| json_to_struct(n, "node_class"))
                .transpose()?,
        };
        let types = self
            .call(
                rpc,
                self.deadlines.instance_types,
                object_name(node_pool),
                |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move {
                        let mut stream = client.get_instance_types(request).await?.into_inner();
                        // Chunks only count once the stream ends OK: an error drops them all.
                        let mut types = Vec::new();
                        while let Some(chunk) = stream.message().await? {
                            types.extend(chunk.instance_types);
                        }
                        Ok(types)
                    }
                },
            )
            .await
            .map_err(|e| classify(rpc, &e))?;
        catalogue_from_proto(&types).map_err(|e| invalid(rpc, e))
    }

    async fn create(
        &self,
        request: &NodeClaimRequest,
        node_class: &serde_json::Value,
    ) -> Result<LaunchedNodeClaim, CloudProviderError> {
        let rpc = Rpc::Create;
        if request.name.is_empty() {
            return Err(CloudProviderError::InvalidRequest(
                "node_claim.name: must not be empty".into(),
            ));
        }
        let message = v1::CreateRequest {
            node_claim: Some(node_claim_to_proto(request, None)?),
            node_class: Some(json_to_struct(node_class, "node_class")?),
        };
        let answer = self
            .call(
                rpc,
                self.deadlines.create,
                &request.name,
                |mut client, left| {
                    let message = with_deadline(message.clone(), left);
                    async move { Ok(client.create(message).await?.into_inner()) }
                },
            )
            .await
            .map_err(|e| classify(rpc, &e))?;
        launched_from_proto(answer.node_claim, &request.name)
    }

    async fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> Result<Deletion, CloudProviderError> {
        let rpc = Rpc::Delete;
        if node_claim_name.is_empty() {
            return Err(CloudProviderError::InvalidRequest(
                "node_claim_name: must not be empty".into(),
            ));
        }
        let request = v1::DeleteRequest {
            provider_id: provider_id.to_owned(),
            node_claim_name: node_claim_name.to_owned(),
        };
        let answer = self
            .call(
                rpc,
                self.deadlines.delete,
                node_claim_name,
                |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move { Ok(client.delete(request).await?.into_inner()) }
                },
            )
            .await;
        match answer {
            Ok(answer) => match v1::DeletionState::try_from(answer.state) {
                Ok(v1::DeletionState::Gone) => Ok(Deletion::Gone),
                // UNSPECIFIED is never sent; the API reads it as still terminating.
                Ok(v1::DeletionState::Terminating | v1::DeletionState::Unspecified) => {
                    Ok(Deletion::Terminating)
                }
                Err(_) => Err(invalid(
                    rpc,
                    format!("state: {} is not a known deletion state", answer.state),
                )),
            },
            // Accepted for plugins ported from Karpenter, where NotFound ends a deletion.
            Err(error) if error.code() == Code::NotFound => Ok(Deletion::Gone),
            Err(error) => Err(classify(rpc, &error)),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudProviderError> {
        let rpc = Rpc::Get;
        if provider_id.is_empty() {
            return Err(CloudProviderError::InvalidRequest(
                "provider_id: must not be empty".into(),
            ));
        }
        let request = v1::GetRequest {
            provider_id: provider_id.to_owned(),
        };
        let answer = self
            .call(
                rpc,
                self.deadlines.default,
                provider_id,
                |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move { Ok(client.get(request).await?.into_inner()) }
                },
            )
            .await;
        match answer {
            Ok(answer) => {
                let claim = answer
                    .node_claim
                    .ok_or_else(|| invalid(rpc, "node_claim: missing"))?;
                let instance =
                    instance_from_proto(claim, "node_claim").map_err(|e| invalid(rpc, e))?;
                if instance.provider_id != provider_id {
                    return Err(invalid(
                        rpc,
                        format!(
                            "node_claim.status.provider_id: {:?} is not the instance asked for, {provider_id:?}",
                            instance.provider_id
                        ),
                    ));
                }
                Ok(Some(instance))
            }
            Err(error) if error.code() == Code::NotFound => Ok(None),
            Err(error) => Err(classify(rpc, &error)),
        }
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudProviderError> {
        let rpc = Rpc::List;
        // Keyed by provider ID: pages need not form a snapshot, so an instance may show twice;
        // the later page is the newer news.
        let mut instances = BTreeMap::new();
        let mut token = String::new();
        let mut restarted = false;
        let mut pages = 0;
        loop {
            let request = v1::ListRequest {
                page_size: 0,
                page_token: token.clone(),
            };
            let answer = self
                .call(rpc, self.deadlines.default, "", |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move { Ok(client.list(request).await?.into_inner()) }
                })
                .await;
            let page = match answer {
                Ok(page) => page,
                Err(error)
                    if error.code() == Code::InvalidArgument && !token.is_empty() && !restarted =>
                {
                    tracing::info!(
                        rpc = rpc.as_str(),
                        pages,
                        message = error.status.message(),
                        "page token refused as stale; listing again from the start"
                    );
                    restarted = true;
                    token.clear();
                    instances.clear();
                    pages = 0;
                    continue;
                }
                Err(error) => return Err(classify(rpc, &error)),
            };
            for (i, claim) in page.node_claims.into_iter().enumerate() {
                let instance = instance_from_proto(claim, &format!("node_claims[{i}]"))
                    .map_err(|e| invalid(rpc, e))?;
                instances.insert(instance.provider_id.clone(), instance);
            }
            pages += 1;
            if page.next_page_token.is_empty() {
                return Ok(instances.into_values().collect());
            }
            if page.next_page_token == token || pages >= MAX_LIST_PAGES {
                return Err(invalid(
                    rpc,
                    format!(
                        "next_page_token: {:?} after {pages} page(s) would page forever",
                        page.next_page_token
                    ),
                ));
            }
            token = page.next_page_token;
        }
    }

    async fn is_drifted(
        &self,
        node_claim: &NodeClaimRequest,
        launched: &LaunchedNodeClaim,
        node_class: &serde_json::Value,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        let rpc = Rpc::IsDrifted;
        let request = v1::IsDriftedRequest {
            node_claim: Some(node_claim_to_proto(node_claim, Some(launched))?),
            node_class: Some(json_to_struct(node_class, "node_class")?),
        };
        let answer = self
            .call(
                rpc,
                self.deadlines.default,
                &node_claim.name,
                |mut client, left| {
                    let request = with_deadline(request.clone(), left);
                    async move { Ok(client.is_drifted(request).await?.into_inner()) }
                },
            )
            .await
            .map_err(|e| classify(rpc, &e))?;
        if answer.reason.is_empty() {
            return Ok(None);
        }
        if !is_condition_reason(&answer.reason) {
            return Err(invalid(
                rpc,
                format!(
                    "reason: {:?} is not a one-word UpperCamelCase reason",
                    answer.reason
                ),
            ));
        }
        Ok(Some(DriftReason {
            reason: answer.reason,
            message: answer.message,
        }))
    }

    async fn repair_policies(&self) -> Result<Vec<RepairPolicy>, CloudProviderError> {
        let rpc = Rpc::GetRepairPolicies;
        let answer = self
            .call(rpc, self.deadlines.default, "", |mut client, left| {
                let request = with_deadline(v1::GetRepairPoliciesRequest {}, left);
                async move { Ok(client.get_repair_policies(request).await?.into_inner()) }
            })
            .await
            .map_err(|e| classify(rpc, &e))?;
        answer
            .policies
            .into_iter()
            .enumerate()
            .map(|(i, policy)| repair_policy_from_proto(policy, i).map_err(|e| invalid(rpc, e)))
            .collect()
    }
}

/// An answer of `rpc` that the API does not allow; `problem` starts with the field.
fn invalid(rpc: Rpc, problem: impl std::fmt::Display) -> CloudProviderError {
    CloudProviderError::InvalidResponse(format!("{rpc} answer: {problem}"))
}

/// Counters of plugin calls per RPC: attempts by status code (OK included) and retries, for a
/// metrics exporter to read. Lock-free; shared by clones of one provider.
#[derive(Debug)]
pub struct CallMetrics {
    attempts: [[AtomicU64; CODES]; Rpc::ALL.len()],
    retries: [AtomicU64; Rpc::ALL.len()],
}

/// gRPC status codes are 0 (OK) to 16 (UNAUTHENTICATED).
const CODES: usize = 17;

/// One non-zero counter of [`CallMetrics::attempts_by_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCount {
    /// The RPC.
    pub rpc: Rpc,
    /// The status the attempt ended with.
    pub code: Code,
    /// How many attempts ended so.
    pub count: u64,
}

impl CallMetrics {
    /// All counters at zero.
    pub fn new() -> Self {
        CallMetrics {
            attempts: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            retries: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// How many attempts of `rpc` ended with `code`.
    pub fn attempts(&self, rpc: Rpc, code: Code) -> u64 {
        self.attempts[rpc.index()][code_index(code)].load(Ordering::Relaxed)
    }

    /// How many times a failed attempt of `rpc` was followed by another.
    pub fn retries(&self, rpc: Rpc) -> u64 {
        self.retries[rpc.index()].load(Ordering::Relaxed)
    }

    /// Every non-zero attempt counter, by RPC then code.
    pub fn attempts_by_code(&self) -> Vec<AttemptCount> {
        let mut counts = Vec::new();
        for rpc in Rpc::ALL {
            for (index, counter) in self.attempts[rpc.index()].iter().enumerate() {
                let count = counter.load(Ordering::Relaxed);
                if count > 0 {
                    let code = i32::try_from(index).map_or(Code::Unknown, Code::from);
                    counts.push(AttemptCount { rpc, code, count });
                }
            }
        }
        counts
    }

    /// Counts one attempt of `rpc` that ended with `code`.
    pub fn record_attempt(&self, rpc: Rpc, code: Code) {
        self.attempts[rpc.index()][code_index(code)].fetch_add(1, Ordering::Relaxed);
    }

    fn record_retry(&self, rpc: Rpc) {
        self.retries[rpc.index()].fetch_add(1, Ordering::Relaxed);
    }
}

impl Default for CallMetrics {
    fn default() -> Self {
        CallMetrics::new()
    }
}

fn code_index(code: Code) -> usize {
    usize::try_from(i32::from(code))
        .unwrap_or(CODES - 1)
        .min(CODES - 1)
}

// ---- Core → proto ----------------------------------------------------------------------------

/// `metadata.name` of a Kubernetes object's JSON, or empty.
fn object_name(object: &serde_json::Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

/// A JSON object as a `google.protobuf.Struct` (numbers become doubles, as the Struct type has
/// them; Kubernetes objects keep integers beyond 2^53 in strings).
fn json_to_struct(
    value: &serde_json::Value,
    field: &str,
) -> Result<prost_types::Struct, CloudProviderError> {
    provider_sdk::json::json_to_struct(value).ok_or_else(|| {
        CloudProviderError::InvalidRequest(format!("{field}: must be a JSON object, not {value}"))
    })
}

fn node_claim_to_proto(
    claim: &NodeClaimRequest,
    launched: Option<&LaunchedNodeClaim>,
) -> Result<v1::NodeClaim, CloudProviderError> {
    let invalid_request = |field: &str, problem: String| {
        CloudProviderError::InvalidRequest(format!("node_claim.{field}: {problem}"))
    };
    let duration = |d: Option<Duration>, field: &str| {
        d.map(prost_types::Duration::try_from)
            .transpose()
            .map_err(|e| invalid_request(field, e.to_string()))
    };
    let requirements = claim
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| {
            requirement_to_proto(r)
                .map_err(|p| invalid_request(&format!("spec.requirements[{i}]"), p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(v1::NodeClaim {
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        labels: to_hash_map(&claim.labels),
        annotations: to_hash_map(&claim.annotations),
        creation_timestamp: claim.creation_time.map(prost_types::Timestamp::from),
        deletion_timestamp: claim.deletion_time.map(prost_types::Timestamp::from),
        spec: Some(v1::NodeClaimSpec {
            node_class_ref: Some(v1::NodeClassReference {
                group: claim.node_class_ref.group.clone(),
                kind: claim.node_class_ref.kind.clone(),
                name: claim.node_class_ref.name.clone(),
            }),
            requirements,
            resource_requests: quantities_to_proto(&claim.resource_requests),
            taints: claim.taints.iter().map(taint_to_proto).collect(),
            startup_taints: claim.startup_taints.iter().map(taint_to_proto).collect(),
            expire_after: duration(claim.expire_after, "spec.expire_after")?,
            termination_grace_period: duration(
                claim.termination_grace_period,
                "spec.termination_grace_period",
            )?,
        }),
        status: launched.map(|launched| v1::NodeClaimStatus {
            provider_id: launched.provider_id.clone(),
            image_id: launched.image_id.clone().unwrap_or_default(),
            capacity: quantities_to_proto(&launched.capacity),
            allocatable: quantities_to_proto(&launched.allocatable),
            instance_state: instance_state_to_proto(launched.state).into(),
        }),
    })
}

fn requirement_to_proto(requirement: &NodeSelectorRequirement) -> Result<v1::Requirement, String> {
    let operator = match requirement.operator {
        Operator::In => v1::Operator::In,
        Operator::NotIn => v1::Operator::NotIn,
        Operator::Exists => v1::Operator::Exists,
        Operator::DoesNotExist => v1::Operator::DoesNotExist,
        Operator::Gt => v1::Operator::Gt,
        Operator::Lt => v1::Operator::Lt,
        Operator::Gte => v1::Operator::Gte,
        Operator::Lte => v1::Operator::Lte,
    };
    let min_values = requirement
        .min_values
        .map(i32::try_from)
        .transpose()
        .map_err(|_| {
            format!(
                "min_values {:?} is beyond the API's range",
                requirement.min_values
            )
        })?;
    Ok(v1::Requirement {
        key: requirement.key.clone(),
        operator: operator.into(),
        values: requirement.values.clone(),
        min_values,
    })
}

fn taint_to_proto(taint: &Taint) -> v1::Taint {
    let effect = match taint.effect {
        TaintEffect::NoSchedule => v1::TaintEffect::NoSchedule,
        TaintEffect::PreferNoSchedule => v1::TaintEffect::PreferNoSchedule,
        TaintEffect::NoExecute => v1::TaintEffect::NoExecute,
    };
    v1::Taint {
        key: taint.key.clone(),
        value: taint.value.clone(),
        effect: effect.into(),
    }
}

fn quantities_to_proto(quantities: &Quantities) -> HashMap<String, String> {
    quantities
        .iter()
        .map(|(name, quantity)| (name.as_str().to_owned(), quantity.to_string()))
        .collect()
}

fn instance_state_to_proto(state: InstanceState) -> v1::InstanceState {
    match state {
        InstanceState::Unknown => v1::InstanceState::Unspecified,
        InstanceState::Pending => v1::InstanceState::Pending,
        InstanceState::Running => v1::InstanceState::Running,
        InstanceState::Stopping => v1::InstanceState::Stopping,
        InstanceState::Stopped => v1::InstanceState::Stopped,
        InstanceState::Terminating => v1::InstanceState::Terminating,
    }
}

fn to_hash_map(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

// ---- Proto → core, validated ----------------------------------------------------------------
//
// Each validator returns the problem as text starting with the field's path; the caller adds
// the RPC.

fn resolved_from_proto(
    answer: v1::ResolveNodeClassResponse,
) -> Result<ResolvedNodeClass, CloudProviderError> {
    let rpc = Rpc::ResolveNodeClass;
    let status = match answer.status {
        Some(status) => {
            provider_sdk::json::try_struct_to_json(status, "status").map_err(|e| invalid(rpc, e))?
        }
        None => serde_json::Map::new(),
    };
    if status.contains_key("conditions") {
        return Err(invalid(
            rpc,
            "status.conditions: conditions travel in the conditions field, not in status",
        ));
    }
    let mut conditions: Vec<NodeClassCondition> = Vec::with_capacity(answer.conditions.len());
    for (i, condition) in answer.conditions.into_iter().enumerate() {
        let field = format!("conditions[{i}]");
        let condition = condition_from_proto(condition, &field).map_err(|e| invalid(rpc, e))?;
        if conditions.iter().any(|c| c.type_ == condition.type_) {
            return Err(invalid(
                rpc,
                format!("{field}.type: {:?} appears twice", condition.type_),
            ));
        }
        conditions.push(condition);
    }
    let resolve_again_after = match answer.resolve_again_after {
        None => DEFAULT_RESOLVE_AGAIN_AFTER,
        Some(d) => match Duration::try_from(d) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                return Err(invalid(
                    rpc,
                    format!("resolve_again_after: {d} is not a positive duration"),
                ));
            }
        },
    };
    Ok(ResolvedNodeClass {
        status,
        conditions,
        static_hash: Some(answer.static_hash).filter(|h| !h.is_empty()),
        static_hash_version: answer.static_hash_version,
        resolve_again_after,
    })
}

fn condition_from_proto(
    condition: v1::Condition,
    field: &str,
) -> Result<NodeClassCondition, String> {
    if condition.r#type.len() > 316 || !is_qualified_name(&condition.r#type) {
        return Err(format!(
            "{field}.type: {:?} is not a condition type",
            condition.r#type
        ));
    }
    let status = condition_status_from_proto(condition.status).ok_or_else(|| {
        format!(
            "{field}.status: {} is not True, False or Unknown",
            condition.status
        )
    })?;
    if !condition.reason.is_empty() && !is_condition_reason(&condition.reason) {
        return Err(format!(
            "{field}.reason: {:?} is not a one-word UpperCamelCase reason",
            condition.reason
        ));
    }
    Ok(NodeClassCondition {
        type_: condition.r#type,
        status,
        reason: condition.reason,
        message: condition.message,
    })
}

fn condition_status_from_proto(status: i32) -> Option<ConditionStatus> {
    match v1::ConditionStatus::try_from(status) {
        Ok(v1::ConditionStatus::True) => Some(ConditionStatus::True),
        Ok(v1::ConditionStatus::False) => Some(ConditionStatus::False),
        Ok(v1::ConditionStatus::Unknown) => Some(ConditionStatus::Unknown),
        Ok(v1::ConditionStatus::Unspecified) | Err(_) => None,
    }
}

/// A condition reason as the CRDs allow it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most
/// 1024 characters): it lands in a condition core publishes.
fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 1024
                && first.is_ascii_alphabetic()
                && (last.is_ascii_alphanumeric() || *last == b'_')
                && bytes.iter().all(inner)
        }
        _ => false,
    }
}

fn repair_policy_from_proto(
    policy: v1::RepairPolicy,
    index: usize,
) -> Result<RepairPolicy, String> {
    let field = format!("policies[{index}]");
    if policy.condition_type.is_empty() {
        return Err(format!("{field}.condition_type: must not be empty"));
    }
    let condition_status =
        condition_status_from_proto(policy.condition_status).ok_or_else(|| {
            format!(
                "{field}.condition_status: {} is not True, False or Unknown",
                policy.condition_status
            )
        })?;
    let toleration_duration = policy
        .toleration_duration
        .ok_or_else(|| format!("{field}.toleration_duration: missing"))
        .and_then(|d| {
            Duration::try_from(d)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("{field}.toleration_duration: {d} is not positive"))
        })?;
    Ok(RepairPolicy {
        condition_type: policy.condition_type,
        condition_status,
        toleration_duration,
    })
}

/// The fields of a NodeClaimStatus that describe an instance.
struct InstanceStatus {
    provider_id: String,
    image_id: Option<String>,
    capacity: Quantities,
    allocatable: Quantities,
    state: InstanceState,
}

fn instance_status_from_proto(
    status: Option<v1::NodeClaimStatus>,
    field: &str,
) -> Result<InstanceStatus, String> {
    let status = status.ok_or_else(|| format!("{field}.status: missing"))?;
    if status.provider_id.is_empty() {
        return Err(format!("{field}.status.provider_id: must not be empty"));
    }
    let state = match v1::InstanceState::try_from(status.instance_state) {
        Ok(v1::InstanceState::Unspecified) => InstanceState::Unknown,
        Ok(v1::InstanceState::Pending) => InstanceState::Pending,
        Ok(v1::InstanceState::Running) => InstanceState::Running,
        Ok(v1::InstanceState::Stopping) => InstanceState::Stopping,
        Ok(v1::InstanceState::Stopped) => InstanceState::Stopped,
        Ok(v1::InstanceState::Terminating) => InstanceState::Terminating,
        Err(_) => {
            return Err(format!(
                "{field}.status.instance_state: {} is not a known instance state",
                status.instance_state
            ));
        }
    };
    Ok(InstanceStatus {
        capacity: quantities_from_proto(&status.capacity, &format!("{field}.status.capacity"))?,
        allocatable: quantities_from_proto(
            &status.allocatable,
            &format!("{field}.status.allocatable"),
        )?,
        provider_id: status.provider_id,
        image_id: Some(status.image_id).filter(|i| !i.is_empty()),
        state,
    })
}

fn launched_from_proto(
    claim: Option<v1::NodeClaim>,
    requested_name: &str,
) -> Result<LaunchedNodeClaim, CloudProviderError> {
    let rpc = Rpc::Create;
    let claim = claim.ok_or_else(|| invalid(rpc, "node_claim: missing"))?;
    if !claim.name.is_empty() && claim.name != requested_name {
        return Err(invalid(
            rpc,
            format!(
                "node_claim.name: {:?} is not the NodeClaim asked for, {requested_name:?}",
                claim.name
            ),
        ));
    }
    let status =
        instance_status_from_proto(claim.status, "node_claim").map_err(|e| invalid(rpc, e))?;
    let labels =
        string_map_from_proto(claim.labels, "node_claim.labels").map_err(|e| invalid(rpc, e))?;
    for key in [
        LABEL_INSTANCE_TYPE,
        LABEL_TOPOLOGY_ZONE,
        LABEL_CAPACITY_TYPE,
    ] {
        if labels.get(key).is_none_or(String::is_empty) {
            return Err(invalid(
                rpc,
                format!("node_claim.labels[{key}]: missing; the launch must resolve it"),
            ));
        }
    }
    Ok(LaunchedNodeClaim {
        provider_id: status.provider_id,
        image_id: status.image_id,
        labels,
        annotations: string_map_from_proto(claim.annotations, "node_claim.annotations")
            .map_err(|e| invalid(rpc, e))?,
        capacity: status.capacity,
        allocatable: status.allocatable,
        state: status.state,
    })
}

fn instance_from_proto(claim: v1::NodeClaim, field: &str) -> Result<CloudInstance, String> {
    let status = instance_status_from_proto(claim.status, field)?;
    let time = |t: Option<prost_types::Timestamp>, name: &str| {
        t.map(|t| SystemTime::try_from(t).map_err(|e| format!("{field}.{name}: {e}")))
            .transpose()
    };
    Ok(CloudInstance {
        node_claim_name: Some(claim.name).filter(|n| !n.is_empty()),
        provider_id: status.provider_id,
        image_id: status.image_id,
        labels: string_map_from_proto(claim.labels, &format!("{field}.labels"))?,
        capacity: status.capacity,
        allocatable: status.allocatable,
        creation_time: time(claim.creation_timestamp, "creation_timestamp")?,
        deletion_time: time(claim.deletion_timestamp, "deletion_timestamp")?,
        state: status.state,
    })
}

fn string_map_from_proto(
    map: HashMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, String> {
    if map.contains_key("") {
        return Err(format!("{field}: a key is empty"));
    }
    Ok(map.into_iter().collect())
}

fn quantities_from_proto(map: &HashMap<String, String>, field: &str) -> Result<Quantities, String> {
    let mut entries: Vec<(&String, &String)> = map.iter().collect();
    // Sorted so that an answer with two bad entries is always refused for the same one.
    entries.sort();
    let mut quantities = Quantities::new();
    for (name, text) in entries {
        if name.is_empty() {
            return Err(format!("{field}: a resource name is empty"));
        }
        let quantity = Quantity::parse(text).map_err(|e| format!("{field}[{name}]: {e}"))?;
        if quantity.is_negative() {
            return Err(format!("{field}[{name}]: {text} is negative"));
        }
        quantities.insert(ResourceName::new(name), quantity);
    }
    Ok(quantities)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    fn call_error(status: Status) -> CallError {
        CallError {
            status,
            attempts: 1,
        }
    }

    #[test]
    fn json_survives_the_struct_round_trip_with_integers_kept() {
        let object = json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "metadata": {"name": "default", "generation": 3},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "ratio": 0.5, "tags": null, "ok": true}
        });
        let pb = json_to_struct(&object, "node_class").unwrap();
        let back = provider_sdk::json::try_struct_to_json(pb, "node_class").unwrap();
        assert_eq!(serde_json::Value::Object(back), object);
        assert_eq!(
            json_to_struct(&json!([1, 2]), "node_pool").unwrap_err(),
            CloudProviderError::InvalidRequest(
                "node_pool: must be a JSON object, not [1,2]".into()
            )
        );
    }

    #[test]
    fn a_struct_holding_nan_is_refused_naming_the_path() {
        let pb = prost_types::Struct {
            fields: [(
                "amis".to_owned(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::ListValue(
                        prost_types::ListValue {
                            values: vec![prost_types::Value {
                                kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
                            }],
                        },
                    )),
                },
            )]
            .into(),
        };
        assert_eq!(
            provider_sdk::json::try_struct_to_json(pb, "status").unwrap_err(),
            "status.amis[0]: NaN is not a JSON number"
        );
    }

    #[test]
    fn statuses_map_to_errors_by_the_common_table() {
        let cases = [
            (Status::unimplemented("no"), Rpc::Get, "Unsupported"),
            (Status::unavailable("down"), Rpc::Create, "Unavailable"),
            (Status::deadline_exceeded("slow"), Rpc::List, "Unavailable"),
            (
                Status::invalid_argument("name"),
                Rpc::Create,
                "InvalidRequest",
            ),
            (Status::not_found("gone"), Rpc::IsDrifted, "NotFound"),
            (
                provider_sdk::status::insufficient_capacity("ice", HashMap::new()),
                Rpc::Create,
                "InsufficientCapacity",
            ),
            (
                provider_sdk::status::node_class_not_ready("default", "no subnets"),
                Rpc::GetInstanceTypes,
                "NodeClassNotReady",
            ),
            (
                Status::resource_exhausted("message too large"),
                Rpc::Create,
                "Other",
            ),
            (
                Status::failed_precondition("no reason"),
                Rpc::Create,
                "Other",
            ),
            (Status::permission_denied("iam"), Rpc::Create, "Other"),
            (Status::internal("bug"), Rpc::Delete, "Other"),
            (Status::aborted("busy"), Rpc::Create, "Other"),
        ];
        for (status, rpc, expected) in cases {
            let error = classify(rpc, &call_error(status.clone()));
            let variant = format!("{error:?}");
            assert!(
                variant.starts_with(expected),
                "{rpc} {status:?} -> {variant}, expected {expected}"
            );
        }
        assert_eq!(
            classify(Rpc::List, &call_error(Status::unimplemented(""))),
            CloudProviderError::Unsupported { rpc: "List" }
        );
    }

    #[test]
    fn statuses_without_a_meaning_of_their_own_map_to_a_failure_kind() {
        let cases = [
            (Code::PermissionDenied, FailureKind::PermissionDenied),
            (Code::Unauthenticated, FailureKind::PermissionDenied),
            (Code::ResourceExhausted, FailureKind::ResourceExhausted),
            (Code::Aborted, FailureKind::Conflict),
            (Code::AlreadyExists, FailureKind::Conflict),
            (Code::FailedPrecondition, FailureKind::Conflict),
            (Code::Internal, FailureKind::Internal),
            (Code::Unknown, FailureKind::Internal),
            (Code::DataLoss, FailureKind::Internal),
            (Code::OutOfRange, FailureKind::Internal),
            (Code::Cancelled, FailureKind::Internal),
        ];
        for (code, kind) in cases {
            assert_eq!(
                classify(Rpc::Create, &call_error(Status::new(code, "why"))),
                CloudProviderError::Other {
                    kind,
                    message: "why".into()
                },
                "{code:?}"
            );
        }
        // The ErrorInfo reasons only mean something where the API says so.
        assert_eq!(
            classify(
                Rpc::Delete,
                &call_error(provider_sdk::status::insufficient_capacity(
                    "ice",
                    HashMap::new()
                ))
            ),
            CloudProviderError::Other {
                kind: FailureKind::ResourceExhausted,
                message: "ice".into()
            }
        );
        // What people read keeps the wording it had when the port carried the gRPC code.
        assert_eq!(
            classify(Rpc::Get, &call_error(Status::internal("bug"))).to_string(),
            "cloud provider error Internal: bug"
        );
    }

    #[test]
    fn a_transport_error_is_unavailable_whatever_its_code() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such socket");
        let status = Status::from_error(Box::new(io));
        let status = received(status);
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let timed_out = received(Status::from_error(Box::new(tonic::TimeoutExpired(()))));
        assert_eq!(timed_out.code(), Code::DeadlineExceeded, "{timed_out:?}");
        let from_the_wire = received(Status::not_found("no instance"));
        assert_eq!(from_the_wire.code(), Code::NotFound);
    }

    fn launched_answer() -> v1::NodeClaim {
        v1::NodeClaim {
            name: "default-abcde".into(),
            labels: HashMap::from([
                (LABEL_INSTANCE_TYPE.into(), "m5.large".into()),
                (LABEL_TOPOLOGY_ZONE.into(), "us-east-1a".into()),
                (LABEL_CAPACITY_TYPE.into(), "on-demand".into()),
            ]),
            status: Some(v1::NodeClaimStatus {
                provider_id: "aws:///us-east-1a/i-0123".into(),
                image_id: "ami-1".into(),
                capacity: HashMap::from([
                    ("cpu".into(), "2".into()),
                    ("memory".into(), "8Gi".into()),
                ]),
                allocatable: HashMap::from([("cpu".into(), "1930m".into())]),
                instance_state: v1::InstanceState::Pending.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_create_answer_converts() {
        let launched = launched_from_proto(Some(launched_answer()), "default-abcde").unwrap();
        assert_eq!(launched.provider_id, "aws:///us-east-1a/i-0123");
        assert_eq!(launched.image_id.as_deref(), Some("ami-1"));
        assert_eq!(launched.state, InstanceState::Pending);
        assert_eq!(
            launched.allocatable.get(&ResourceName::CPU),
            Some(&Quantity::from_millis(1930))
        );
        assert_eq!(launched.labels[LABEL_INSTANCE_TYPE], "m5.large");
    }

    #[test]
    fn each_kind_of_bad_create_answer_is_refused_naming_the_field() {
        type Mutation = Box<dyn Fn(&mut v1::NodeClaim)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|c| c.status.as_mut().unwrap().provider_id.clear()),
                "node_claim.status.provider_id: must not be empty",
            ),
            (Box::new(|c| c.status = None), "node_claim.status: missing"),
            (
                Box::new(|c| {
                    c.status
                        .as_mut()
                        .unwrap()
                        .capacity
                        .insert("memory".into(), "8 Gi".into());
                }),
                "node_claim.status.capacity[memory]: invalid quantity",
            ),
            (
                Box::new(|c| {
                    c.status
                        .as_mut()
                        .unwrap()
                        .allocatable
                        .insert("cpu".into(), "-1".into());
                }),
                "node_claim.status.allocatable[cpu]: -1 is negative",
            ),
            (
                Box::new(|c| c.status.as_mut().unwrap().instance_state = 42),
                "node_claim.status.instance_state: 42 is not a known instance state",
            ),
            (
                Box::new(|c| {
                    c.labels.remove(LABEL_TOPOLOGY_ZONE);
                }),
                "node_claim.labels[topology.kubernetes.io/zone]: missing",
            ),
            (
                Box::new(|c| c.name = "someone-else".into()),
                "node_claim.name: \"someone-else\" is not the NodeClaim asked for",
            ),
        ];
        for (mutate, expected) in cases {
            let mut answer = launched_answer();
            mutate(&mut answer);
            let error = launched_from_proto(Some(answer), "default-abcde").unwrap_err();
            let CloudProviderError::InvalidResponse(message) = &error else {
                panic!("{error:?} is not InvalidResponse");
            };
            assert!(
                message.starts_with("Create answer: ") && message.contains(expected),
                "{message:?} should contain {expected:?}"
            );
        }
        assert_eq!(
            launched_from_proto(None, "x").unwrap_err(),
            CloudProviderError::InvalidResponse("Create answer: node_claim: missing".into())
        );
    }

    #[test]
    fn instances_from_get_and_list_need_only_a_provider_id() {
        let claim = v1::NodeClaim {
            status: Some(v1::NodeClaimStatus {
                provider_id: "fake:///a/i-1".into(),
                ..Default::default()
            }),
            deletion_timestamp: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let instance = instance_from_proto(claim, "node_claims[0]").unwrap();
        assert_eq!(instance.node_claim_name, None);
        assert_eq!(instance.state, InstanceState::Unknown);
        assert!(instance.is_deleting());
        assert_eq!(
            instance.deletion_time,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(
            instance_from_proto(v1::NodeClaim::default(), "node_claims[3]").unwrap_err(),
            "node_claims[3].status: missing"
        );
    }

    #[test]
    fn requests_carry_every_field_of_the_nodeclaim() {
        let request = NodeClaimRequest {
            name: "default-abcde".into(),
            uid: "uid-1".into(),
            labels: BTreeMap::from([("team".into(), "a".into())]),
            requirements: vec![NodeSelectorRequirement {
                key: LABEL_INSTANCE_TYPE.into(),
                operator: Operator::In,
                values: vec!["m5.large".into(), "m5.xlarge".into()],
                min_values: Some(2),
            }],
            resource_requests: Quantities::from([(ResourceName::CPU, Quantity::from_millis(1500))]),
            taints: vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)],
            startup_taints: vec![Taint::new("init", "", TaintEffect::NoExecute)],
            expire_after: Some(Duration::from_secs(720 * 3600)),
            creation_time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10)),
            ..Default::default()
        };
        let pb = node_claim_to_proto(&request, None).unwrap();
        let spec = pb.spec.unwrap();
        assert_eq!(pb.name, "default-abcde");
        assert_eq!(pb.labels["team"], "a");
        assert_eq!(spec.requirements[0].operator, i32::from(v1::Operator::In));
        assert_eq!(
            spec.requirements[0].values,
            ["m5.large", "m5.xlarge"],
            "order kept"
        );
        assert_eq!(spec.requirements[0].min_values, Some(2));
        assert_eq!(spec.resource_requests["cpu"], "1500m");
        assert_eq!(
            spec.taints[0].effect,
            i32::from(v1::TaintEffect::NoSchedule)
        );
        assert_eq!(
            spec.startup_taints[0].effect,
            i32::from(v1::TaintEffect::NoExecute)
        );
        assert_eq!(spec.expire_after.unwrap().seconds, 720 * 3600);
        assert_eq!(spec.termination_grace_period, None);
        assert_eq!(pb.creation_timestamp.unwrap().seconds, 10);
        assert!(pb.status.is_none(), "Create sends no status");
    }

    #[test]
    fn resolve_answers_are_validated() {
        let ok = v1::ResolveNodeClassResponse {
            status: Some(json_to_struct(&json!({"amis": [{"id": "ami-1"}]}), "status").unwrap()),
            conditions: vec![v1::Condition {
                r#type: "AMIsReady".into(),
                status: v1::ConditionStatus::True.into(),
                reason: String::new(),
                message: String::new(),
            }],
            static_hash: "123".into(),
            static_hash_version: "v4".into(),
            resolve_again_after: None,
        };
        let resolved = resolved_from_proto(ok.clone()).unwrap();
        assert_eq!(resolved.static_hash.as_deref(), Some("123"));
        assert_eq!(resolved.resolve_again_after, DEFAULT_RESOLVE_AGAIN_AFTER);
        assert_eq!(resolved.status["amis"][0]["id"], "ami-1");

        let refused = |mutate: &dyn Fn(&mut v1::ResolveNodeClassResponse)| {
            let mut answer = ok.clone();
            mutate(&mut answer);
            resolved_from_proto(answer).unwrap_err().to_string()
        };
        assert!(refused(&|a| a.conditions[0].status = 0).contains("conditions[0].status: 0"));
        assert!(
            refused(&|a| a.conditions[0].r#type = "not a type".into())
                .contains("conditions[0].type")
        );
        assert!(
            refused(&|a| a.conditions[0].reason = "two words".into())
                .contains("conditions[0].reason")
        );
        assert!(refused(&|a| a.conditions.push(a.conditions[0].clone())).contains("appears twice"));
        assert!(
            refused(&|a| a.resolve_again_after = Some(prost_types::Duration {
                seconds: -5,
                nanos: 0
            }))
            .contains("resolve_again_after")
        );
    }

    #[test]
    fn condition_reasons_follow_the_crd_pattern() {
        for good in [
            "AMIDrift",
            "NodeClassDrift",
            "a",
            "Reason_1",
            "With:Colon,Comma_",
        ] {
            assert!(is_condition_reason(good), "{good}");
        }
        for bad in [
            "",
            "1Drift",
            "Two Words",
            "Trailing:",
            "dash-ed",
            &"A".repeat(1025),
        ] {
            assert!(!is_condition_reason(bad), "{bad}");
        }
    }

    #[test]
    fn repair_policies_need_a_status_and_a_positive_duration() {
        let policy = |status: v1::ConditionStatus, seconds: Option<i64>| v1::RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: status.into(),
            toleration_duration: seconds.map(|seconds| prost_types::Duration { seconds, nanos: 0 }),
        };
        assert_eq!(
            repair_policy_from_proto(policy(v1::ConditionStatus::False, Some(600)), 0).unwrap(),
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: ConditionStatus::False,
                toleration_duration: Duration::from_secs(600),
            }
        );
        assert!(
            repair_policy_from_proto(policy(v1::ConditionStatus::Unspecified, Some(600)), 1)
                .unwrap_err()
                .starts_with("policies[1].condition_status")
        );
        assert!(
            repair_policy_from_proto(policy(v1::ConditionStatus::False, None), 0)
                .unwrap_err()
                .contains("toleration_duration: missing")
        );
        assert!(
            repair_policy_from_proto(policy(v1::ConditionStatus::False, Some(0)), 0)
                .unwrap_err()
                .contains("is not positive")
        );
    }

    #[test]
    fn metrics_count_attempts_by_code() {
        let metrics = CallMetrics::new();
        metrics.record_attempt(Rpc::Create, Code::Unavailable);
        metrics.record_attempt(Rpc::Create, Code::Unavailable);
        metrics.record_attempt(Rpc::Create, Code::Ok);
        metrics.record_retry(Rpc::Create);
        assert_eq!(metrics.attempts(Rpc::Create, Code::Unavailable), 2);
        assert_eq!(metrics.retries(Rpc::Create), 1);
        assert_eq!(metrics.attempts(Rpc::Get, Code::Ok), 0);
        assert_eq!(
            metrics.attempts_by_code(),
            [
                AttemptCount {
                    rpc: Rpc::Create,
                    code: Code::Ok,
                    count: 1
                },
                AttemptCount {
                    rpc: Rpc::Create,
                    code: Code::Unavailable,
                    count: 2
                },
            ]
        );
    }
}
