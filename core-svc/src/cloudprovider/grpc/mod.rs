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

pub mod answers;
mod convert;
mod encoded;
mod metrics;

use std::collections::BTreeMap;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use core_domain::instance_type::InstanceType;
use provider_sdk::v1;
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Status};

use self::convert::*;
use self::encoded::{EncodedCodec, EncodedNodeClasses, is_drifted_request};
use super::retry::{Decision, RetryPolicy, Timer, TokioTimer};
use super::{
    CloudInstance, CloudProvider, CloudProviderError, Deletion, DriftReason, FailureKind,
    InterruptionStream, LaunchedNodeClaim, NodeClaimRequest, NodeClassKind, RepairPolicy,
    ResolvedNodeClass, Rpc,
};
use crate::plugin::instance_types::catalogue_from_proto;
use crate::plugin::{Deadlines, Handshake, PluginConnection, with_deadline};
use provider_sdk::serve::MAX_MESSAGE_BYTES;

pub use self::metrics::{AttemptCount, CallMetrics, DurationLabels, ErrorCount, ErrorKind};

/// The most List pages one listing reads; beyond, the plugin is paging in circles.
const MAX_LIST_PAGES: usize = 10_000;

type Client = CloudProviderServiceClient<Channel>;

/// The CloudProvider service's path for IsDrifted, which is called with its request encoded
/// ahead ([`encoded`]).
const IS_DRIFTED_PATH: &str = "/karpenter.cloudprovider.v1.CloudProviderService/IsDrifted";

/// The cloud provider plugin, reached over gRPC, as a [`CloudProvider`].
#[derive(Debug, Clone)]
pub struct GrpcCloudProvider<C = TokioTimer> {
    client: Client,
    /// The client's channel, for a request encoded ahead (IsDrifted), with the same limit on
    /// answers.
    raw: tonic::client::Grpc<Channel>,
    /// The node classes IsDrifted sent lately, encoded.
    encoded_node_classes: Arc<EncodedNodeClasses>,
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
            raw: tonic::client::Grpc::new(connection.channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            encoded_node_classes: Arc::default(),
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
            raw: self.raw,
            encoded_node_classes: self.encoded_node_classes,
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

    /// An answer of `rpc` that the API does not allow, counted (`InvalidAnswer`) and logged;
    /// `problem` starts with the field.
    fn refuse(&self, rpc: Rpc, problem: impl std::fmt::Display) -> CloudProviderError {
        let error = invalid(rpc, problem);
        self.count_refused(rpc, &error);
        error
    }

    /// `result`, the reading of an answer of `rpc`, with a refused answer counted and logged.
    fn checked<T>(
        &self,
        rpc: Rpc,
        result: Result<T, CloudProviderError>,
    ) -> Result<T, CloudProviderError> {
        if let Err(error @ CloudProviderError::InvalidResponse(_)) = &result {
            self.count_refused(rpc, error);
        }
        result
    }

    fn count_refused(&self, rpc: Rpc, error: &CloudProviderError) {
        self.metrics.record_error(rpc, ErrorKind::InvalidAnswer);
        tracing::warn!(rpc = rpc.as_str(), %error, "plugin answer refused");
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
                    self.metrics
                        .observe_call(rpc, self.timer.now().saturating_duration_since(start));
                    return Ok(answer);
                }
                Err(status) => status,
            };
            let kind = if is_too_large(&status) {
                ErrorKind::MessageTooLarge
            } else {
                ErrorKind::Status(status.code())
            };
            self.metrics
                .record_attempt_as(rpc, status.code(), Some(kind));
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
                    self.metrics.observe_call(rpc, elapsed);
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
    if is_too_large(status) {
        return invalid(
            rpc,
            format!(
                "a message over core's limit of {MAX_MESSAGE_BYTES} bytes, refused unread \
                 ({message}); the API keeps each message, each GetInstanceTypes chunk, under 1 MiB"
            ),
        );
    }
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

/// Whether `status` is the client's own refusal of an answer over the message size limit
/// (tonic's decoder answers OUT_OF_RANGE, which the plugin may also send for reasons of its own:
/// its message tells them apart).
fn is_too_large(status: &Status) -> bool {
    status.code() == Code::OutOfRange
        && status
            .message()
            .starts_with("Error, decoded message length too large")
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

    fn answer_refused(&self, rpc: Rpc, problem: &str) {
        self.metrics
            .record_error(rpc, ErrorKind::InconsistentAnswer);
        tracing::warn!(
            rpc = rpc.as_str(),
            problem,
            "plugin answer refused: it contradicts another"
        );
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
        self.checked(rpc, resolved_from_proto(answer))
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
        if types.is_empty() {
            // Core's drift check would read every type as gone; the API has a status for a node
            // class that selects nothing.
            return Err(self.refuse(
                rpc,
                "instance_types: empty: a catalogue lists every instance type the cloud has, \
                 at least one; a node class that selects none answers FAILED_PRECONDITION with \
                 ERROR_REASON_NODE_CLASS_NOT_READY",
            ));
        }
        catalogue_from_proto(&types).map_err(|e| self.refuse(rpc, e))
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
        match v1::LaunchState::try_from(answer.state) {
            Ok(v1::LaunchState::Launched) => {
                let launched =
                    self.checked(rpc, launched_from_proto(answer.node_claim, &request.name))?;
                launch_fits_request(&launched, request).map_err(|e| self.refuse(rpc, e))?;
                Ok(launched)
            }
            Ok(v1::LaunchState::Pending) => Err(CloudProviderError::LaunchPending {
                message: answer.message,
                retry_after: answer
                    .retry_after
                    .and_then(|after| convert::duration_from_proto(after).ok()),
            }),
            Ok(v1::LaunchState::Unspecified) | Err(_) => Err(self.refuse(
                rpc,
                format!(
                    "state: {} is neither LAUNCH_STATE_LAUNCHED nor LAUNCH_STATE_PENDING",
                    answer.state
                ),
            )),
        }
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
                Err(_) => Err(self.refuse(
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
                    .ok_or_else(|| self.refuse(rpc, "node_claim: missing"))?;
                let instance =
                    instance_from_proto(claim, "node_claim").map_err(|e| self.refuse(rpc, e))?;
                if instance.provider_id != provider_id {
                    return Err(self.refuse(
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
                    .map_err(|e| self.refuse(rpc, e))?;
                instances.insert(instance.provider_id.clone(), instance);
            }
            pages += 1;
            if page.next_page_token.is_empty() {
                return Ok(instances.into_values().collect());
            }
            if page.next_page_token == token || pages >= MAX_LIST_PAGES {
                return Err(self.refuse(
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
        // Encoded once: an attempt shares the bytes (see `encoded`).
        let request = is_drifted_request(
            node_claim_to_proto(node_claim, Some(launched))?,
            &self.encoded_node_classes.field_of(node_class)?,
        );
        let answer = self
            .call(rpc, self.deadlines.default, &node_claim.name, |_, left| {
                let mut raw = self.raw.clone();
                let mut request = with_deadline(request.clone(), left);
                // As the generated client's `is_drifted`, with the request as it is.
                request.extensions_mut().insert(tonic::GrpcMethod::new(
                    "karpenter.cloudprovider.v1.CloudProviderService",
                    "IsDrifted",
                ));
                async move {
                    raw.ready().await.map_err(|error| {
                        Status::unknown(format!("Service was not ready: {error}"))
                    })?;
                    let path = http::uri::PathAndQuery::from_static(IS_DRIFTED_PATH);
                    let answer: v1::IsDriftedResponse = raw
                        .unary(request, path, EncodedCodec::default())
                        .await?
                        .into_inner();
                    Ok(answer)
                }
            })
            .await
            .map_err(|e| classify(rpc, &e))?;
        if answer.reason.is_empty() {
            return Ok(None);
        }
        if !is_condition_reason(&answer.reason) {
            return Err(self.refuse(
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
            .map(|(i, policy)| repair_policy_from_proto(policy, i).map_err(|e| self.refuse(rpc, e)))
            .collect()
    }

    async fn watch_interruptions(&self) -> Result<InterruptionStream, CloudProviderError> {
        use futures::StreamExt as _;

        let rpc = Rpc::WatchInterruptions;
        // Opening is bounded by the default deadline; the stream itself has none.
        let mut client = self.client.clone();
        let opened = tokio::time::timeout(
            self.deadlines.default,
            client.watch_interruptions(v1::WatchInterruptionsRequest {}),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(
                "WatchInterruptions: no answer to the opening",
            ))
        })
        .map_err(received);
        self.metrics
            .record_attempt(rpc, opened.as_ref().map_or_else(Status::code, |_| Code::Ok));
        let stream = opened
            .map_err(|status| {
                classify(
                    rpc,
                    &CallError {
                        status,
                        attempts: 1,
                    },
                )
            })?
            .into_inner();
        let metrics = Arc::clone(&self.metrics);
        Ok(Box::pin(stream.map(move |batch| {
            let batch = batch.map_err(|status| {
                classify(
                    rpc,
                    &CallError {
                        status: received(status),
                        attempts: 1,
                    },
                )
            })?;
            Ok(batch
                .notices
                .into_iter()
                .enumerate()
                .filter_map(|(i, notice)| {
                    // One bad notice is dropped, said; the rest of the batch stands.
                    interruption_from_proto(notice, &format!("notices[{i}]"))
                        .map_err(|problem| {
                            metrics.record_error(rpc, ErrorKind::InvalidAnswer);
                            tracing::warn!(%problem, "WatchInterruptions: invalid notice dropped");
                        })
                        .ok()
                })
                .collect())
        })))
    }

    async fn ack_interruptions(&self, event_ids: &[String]) -> Result<(), CloudProviderError> {
        let rpc = Rpc::AckInterruptions;
        let request = v1::AckInterruptionsRequest {
            event_ids: event_ids.to_vec(),
        };
        self.call(rpc, self.deadlines.default, "", |mut client, left| {
            let request = with_deadline(request.clone(), left);
            async move { Ok(client.ack_interruptions(request).await?.into_inner()) }
        })
        .await
        .map_err(|e| classify(rpc, &e))?;
        Ok(())
    }
}

/// An answer of `rpc` that the API does not allow; `problem` starts with the field.
fn invalid(rpc: Rpc, problem: impl std::fmt::Display) -> CloudProviderError {
    CloudProviderError::InvalidResponse(format!("{rpc} answer: {problem}"))
}

#[cfg(test)]
mod tests;
