//! The cloud provider port: what core's controllers need from a cloud, in core's own types.
//!
//! Controllers are generic over [`CloudProvider`]; production runs them on
//! [`grpc::GrpcCloudProvider`] (the plugin over `karpenter.cloudprovider.v1`), tests on
//! [`fake::FakeCloudProvider`]. Every answer that reaches a controller through this port has
//! been validated: a malformed plugin answer is [`CloudProviderError::InvalidResponse`], never a
//! decision.
//!
//! # Unknown is not gone
//!
//! Only three answers mean that an instance no longer exists: `Ok(Deletion::Gone)` from
//! [`CloudProvider::delete`], `Ok(None)` from [`CloudProvider::get`], and absence from a complete
//! `Ok` listing of [`CloudProvider::list`]. Every error, whatever its variant, means "unknown":
//! callers keep finalizers, leave Drifted unchanged and skip garbage collection.

pub mod fake;
pub mod grpc;
pub mod retry;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use core_domain::instance_type::InstanceType;
use core_domain::requirements::NodeSelectorRequirement;
use core_domain::resources::Quantities;
use core_domain::scheduler::Taint;
use karpenter_api::ConditionStatus;

pub use fake::FakeCloudProvider;
pub use grpc::{CallMetrics, GrpcCloudProvider};
pub use retry::{RetryPolicy, Timer, TokioTimer};

/// What core's controllers need from a cloud. One implementation per plugin connection.
///
/// The async methods return `impl Future + Send`, so the trait is not object-safe: controllers
/// are generic over it (`C: CloudProvider`), which also keeps the fake's calls inlined in tests.
///
/// The async methods are cancellation-safe in the sense that matters here: every RPC behind
/// them is idempotent, so dropping a call half-way and making it again is always correct.
pub trait CloudProvider: Send + Sync + fmt::Debug {
    /// The provider's name (the plugin's `GetPluginInfo` name), for logs, metrics and Events.
    fn name(&self) -> &str;

    /// The node class kinds this provider manages, the default first. A NodePool or NodeClaim
    /// whose `nodeClassRef` names another kind is not this provider's.
    fn supported_node_classes(&self) -> &[NodeClassKind];

    /// Tells the provider that a controller refused an answer of `rpc` because it contradicts
    /// another answer or what the cluster knows (List omitting an instance Get finds, Create
    /// answering an instance another NodeClaim holds, IsDrifted about an instance Get does not
    /// find): `problem` says how, naming the field. The provider counts it with the answers it
    /// refused itself (`karpenter_cloudprovider_errors_total`, error `InconsistentAnswer`).
    /// Nothing else changes: the caller has already decided to act on neither answer.
    fn answer_refused(&self, rpc: Rpc, problem: &str) {
        let _ = (rpc, problem);
    }

    /// Validates a node class (its JSON, with its status) and resolves what it selects.
    /// `Unsupported` means every node class is ready and there is no node class drift;
    /// `InvalidRequest` means Ready=False with the message; `Unavailable` leaves status and
    /// hash unchanged.
    fn resolve_node_class(
        &self,
        node_class: &serde_json::Value,
    ) -> impl Future<Output = Result<ResolvedNodeClass, CloudProviderError>> + Send;

    /// Every instance type the cloud offers for a NodePool (its JSON), given its node class (JSON,
    /// with its published status). The whole catalogue or an error, never part of one: core keeps
    /// its previous catalogue on any error. `NodeClassNotReady` means skip the NodePool.
    fn instance_types(
        &self,
        node_pool: &serde_json::Value,
        node_class: Option<&serde_json::Value>,
    ) -> impl Future<Output = Result<Vec<Arc<InstanceType>>, CloudProviderError>> + Send;

    /// Launches one instance for a NodeClaim, or returns the one already launched for its name,
    /// given the node class its `nodeClassRef` names (JSON, with its published status).
    /// `InsufficientCapacity` and `NodeClassNotReady` mean delete the NodeClaim;
    /// `InvalidRequest` means Launched=Unknown with the message; anything else means try again.
    fn create(
        &self,
        request: &NodeClaimRequest,
        node_class: &serde_json::Value,
    ) -> impl Future<Output = Result<LaunchedNodeClaim, CloudProviderError>> + Send;

    /// Starts terminating the instance of a NodeClaim (`provider_id` may be empty when Create
    /// never answered). Called until it answers [`Deletion::Gone`]; errors keep the finalizer.
    fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> impl Future<Output = Result<Deletion, CloudProviderError>> + Send;

    /// Looks up one instance. `Ok(None)` means gone; any error (`Unsupported` included) means
    /// assume it exists.
    fn get(
        &self,
        provider_id: &str,
    ) -> impl Future<Output = Result<Option<CloudInstance>, CloudProviderError>> + Send;

    /// Every instance the provider launched for the cluster, each once, from a complete listing.
    /// `Unsupported` means no garbage collection; any other error means skip this pass.
    fn list(&self) -> impl Future<Output = Result<Vec<CloudInstance>, CloudProviderError>> + Send;

    /// Whether a launched NodeClaim's instance drifted from its node class (JSON, with status
    /// and annotations). `node_claim` carries the NodeClaim's current labels and annotations
    /// (the node class hash annotations included), `launched` what its status says was launched.
    /// `Ok(None)` clears Drifted; every error leaves it unchanged (`Unsupported`: no provider
    /// drift at all).
    fn is_drifted(
        &self,
        node_claim: &NodeClaimRequest,
        launched: &LaunchedNodeClaim,
        node_class: &serde_json::Value,
    ) -> impl Future<Output = Result<Option<DriftReason>, CloudProviderError>> + Send;

    /// The node conditions that make core replace a node. `Unsupported` means repair nothing.
    fn repair_policies(
        &self,
    ) -> impl Future<Output = Result<Vec<RepairPolicy>, CloudProviderError>> + Send;

    /// Opens the stream of the cloud's interruption notices. `Unsupported` means no
    /// interruption handling. The stream's end, or an error in it, means "open it again"
    /// (with backoff), never "no interruptions". Delivery is at least once.
    fn watch_interruptions(
        &self,
    ) -> impl Future<Output = Result<InterruptionStream, CloudProviderError>> + Send;

    /// Tells the plugin core acted on these notices (or chose to ignore them), so it forgets
    /// them. An error means acknowledge them again later (a notice not acknowledged comes
    /// again).
    fn ack_interruptions(
        &self,
        event_ids: &[String],
    ) -> impl Future<Output = Result<(), CloudProviderError>> + Send;
}

/// Batches of interruption notices as the plugin sends them.
pub type InterruptionStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<Vec<Interruption>, CloudProviderError>> + Send>,
>;

/// What the cloud said about one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// The notice's id: the same each time it is sent again.
    pub event_id: String,
    /// What it says.
    pub kind: InterruptionKind,
    /// The instance.
    pub provider_id: String,
    /// When the cloud sent it.
    pub time: Option<SystemTime>,
    /// When the instance will be gone, when the notice says.
    pub deadline: Option<SystemTime>,
    /// The cloud's own words.
    pub message: String,
}

/// The kinds of [`Interruption`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InterruptionKind {
    /// A spot instance is reclaimed at the deadline.
    SpotInterruption,
    /// A spot instance is at a higher risk of interruption.
    RebalanceRecommendation,
    /// Maintenance stops or retires the instance at the deadline.
    ScheduledChange,
    /// The instance is stopping, not by core.
    Stopping,
    /// The instance is terminating, not by core.
    Terminating,
    /// The instance's capacity reservation is reclaimed at the deadline.
    CapacityReservationInterruption,
}

impl InterruptionKind {
    /// Upstream's name of the kind (`spot_interrupted`, ...), the `reason` of
    /// `karpenter_nodeclaims_disrupted_total` and `message_type` of
    /// `karpenter_interruption_received_messages_total`.
    pub fn metric_name(self) -> &'static str {
        match self {
            Self::SpotInterruption => "spot_interrupted",
            Self::RebalanceRecommendation => "rebalance_recommendation",
            Self::ScheduledChange => "scheduled_change",
            Self::Stopping => "instance_stopped",
            Self::Terminating => "instance_terminated",
            Self::CapacityReservationInterruption => "capacity_reservation_interrupted",
        }
    }

    /// The kind as the API and the simulator's scenarios spell it (`SpotInterruption`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SpotInterruption => "SpotInterruption",
            Self::RebalanceRecommendation => "RebalanceRecommendation",
            Self::ScheduledChange => "ScheduledChange",
            Self::Stopping => "Stopping",
            Self::Terminating => "Terminating",
            Self::CapacityReservationInterruption => "CapacityReservationInterruption",
        }
    }

    /// Whether core replaces and drains the instance (everything but a rebalance
    /// recommendation).
    pub fn replaces(self) -> bool {
        self != Self::RebalanceRecommendation
    }
}

/// Why a call through the port failed. Each variant says what the caller may conclude; none of
/// them means "gone" or "drifted".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudProviderError {
    /// Create only: no offering the NodeClaim allows could be launched. Delete the NodeClaim;
    /// the provisioner places its pods again.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The node class is not ready (not resolved, or it selects nothing usable).
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// Create only: the launch started and has not finished (the plugin answered PENDING).
    /// Not a failure: call Create again with the same name, after `retry_after` when set.
    #[error("launch in progress: {message}")]
    LaunchPending {
        /// What the launch waits for, for people.
        message: String,
        /// How soon the plugin asked to be called again.
        retry_after: Option<std::time::Duration>,
    },
    /// The request was malformed (INVALID_ARGUMENT); the message names the field. Do not send
    /// the same request again soon.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// NOT_FOUND where it does not mean "gone" (IsDrifted: the instance is gone, which garbage
    /// collection handles; drift stays unchanged).
    #[error("not found: {0}")]
    NotFound(String),
    /// The plugin does not implement this optional RPC (UNIMPLEMENTED). "Not supported", not a
    /// failure: never log it as an error.
    #[error("{rpc} is not supported by the plugin")]
    Unsupported {
        /// The RPC, as the API names it.
        rpc: &'static str,
    },
    /// The plugin or its cloud could not be reached, even after retries (UNAVAILABLE,
    /// DEADLINE_EXCEEDED, a broken connection). Keep hands off until it answers again.
    #[error("cloud provider unavailable: {0}")]
    Unavailable(String),
    /// The plugin answered something the API does not allow; the message names the field.
    /// Treat like `Unavailable`.
    #[error("invalid answer from the cloud provider: {0}")]
    InvalidResponse(String),
    /// Any other failure ([`FailureKind`]). Unknown: try again later.
    #[error("cloud provider error {kind:?}: {message}")]
    Other {
        /// What kind of failure it was, for people: every kind means the same to a caller.
        kind: FailureKind,
        /// The plugin's message.
        message: String,
    },
}

/// The kinds of [`CloudProviderError::Other`]: failures for which the port has no variant of
/// their own, because no caller concludes anything from them but "unknown, try again later".
/// They tell people (logs, condition messages) where to look; the adapter maps its transport's
/// errors to them (`grpc.rs`: from the status codes `cloudprovider.proto` lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The cloud refused the plugin's identity, or the plugin refused core's.
    PermissionDenied,
    /// A rate limit, a quota or a message size limit: not insufficient capacity, which is
    /// [`CloudProviderError::InsufficientCapacity`].
    ResourceExhausted,
    /// The request conflicts with the cloud's current state (another call for the same
    /// object under way, or a precondition that does not hold), still so after retries.
    Conflict,
    /// A bug or an unexpected answer, in the plugin or in its cloud.
    Internal,
}

/// The RPCs of `CloudProviderService` that go through the port (GetSupportedNodeClasses is part
/// of the handshake).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rpc {
    /// ResolveNodeClass.
    ResolveNodeClass,
    /// GetInstanceTypes.
    GetInstanceTypes,
    /// Create.
    Create,
    /// Delete.
    Delete,
    /// Get.
    Get,
    /// List.
    List,
    /// IsDrifted.
    IsDrifted,
    /// GetRepairPolicies.
    GetRepairPolicies,
    /// WatchInterruptions.
    WatchInterruptions,
    /// AckInterruptions.
    AckInterruptions,
}

impl Rpc {
    /// Every RPC, in declaration order.
    pub const ALL: [Rpc; 10] = [
        Rpc::ResolveNodeClass,
        Rpc::GetInstanceTypes,
        Rpc::Create,
        Rpc::Delete,
        Rpc::Get,
        Rpc::List,
        Rpc::IsDrifted,
        Rpc::GetRepairPolicies,
        Rpc::WatchInterruptions,
        Rpc::AckInterruptions,
    ];

    /// The RPC's name in the proto.
    pub fn as_str(self) -> &'static str {
        match self {
            Rpc::ResolveNodeClass => "ResolveNodeClass",
            Rpc::GetInstanceTypes => "GetInstanceTypes",
            Rpc::Create => "Create",
            Rpc::Delete => "Delete",
            Rpc::Get => "Get",
            Rpc::List => "List",
            Rpc::IsDrifted => "IsDrifted",
            Rpc::GetRepairPolicies => "GetRepairPolicies",
            Rpc::WatchInterruptions => "WatchInterruptions",
            Rpc::AckInterruptions => "AckInterruptions",
        }
    }

    /// The position in [`Rpc::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Rpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node class kind a provider manages, e.g. `karpenter.k8s.aws/v1 EC2NodeClass`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeClassKind {
    /// The API group.
    pub group: String,
    /// The API version.
    pub version: String,
    /// The kind.
    pub kind: String,
}

impl NodeClassKind {
    /// Whether `reference` names an object of this kind (references carry no version).
    pub fn matches(&self, reference: &NodeClassRef) -> bool {
        self.group == reference.group && self.kind == reference.kind
    }
}

/// A NodeClaim's or NodePool's `nodeClassRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeClassRef {
    /// The API group.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The object's name (node classes are cluster-scoped).
    pub name: String,
}

/// What resolving a node class produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNodeClass {
    /// The status fields to publish, `conditions` excepted; core replaces these fields of the
    /// object's status and leaves the others alone.
    pub status: serde_json::Map<String, serde_json::Value>,
    /// The node class's own conditions; `Ready` is derived from them ([`Self::readiness`]).
    pub conditions: Vec<NodeClassCondition>,
    /// The hash of the node class's static fields; `None` means no static drift is reported.
    pub static_hash: Option<String>,
    /// The version of the hashing scheme behind `static_hash` (may be empty).
    pub static_hash_version: String,
    /// When to resolve again even if nothing changes; the API's default when the plugin left it
    /// unset ([`DEFAULT_RESOLVE_AGAIN_AFTER`]).
    pub resolve_again_after: Duration,
}

/// How long core waits before resolving an unchanged node class again, unless the plugin says.
pub const DEFAULT_RESOLVE_AGAIN_AFTER: Duration = Duration::from_secs(5 * 60);

impl ResolvedNodeClass {
    /// The `Ready` condition the API derives: ready when every condition is True (or there are
    /// none), otherwise not ready with the reason and message of the first that is not True.
    pub fn readiness(&self) -> Readiness<'_> {
        match self
            .conditions
            .iter()
            .find(|c| c.status != ConditionStatus::True)
        {
            None => Readiness::Ready,
            Some(condition) => Readiness::NotReady {
                condition: condition.type_.as_str(),
                reason: condition.reason.as_str(),
                message: condition.message.as_str(),
            },
        }
    }
}

/// A node class's derived `Ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness<'a> {
    /// Every condition is True.
    Ready,
    /// The first condition that is not True.
    NotReady {
        /// Its type.
        condition: &'a str,
        /// Its reason (may be empty).
        reason: &'a str,
        /// Its message (may be empty).
        message: &'a str,
    },
}

/// One of a node class's own conditions, as the plugin reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassCondition {
    /// The condition type, e.g. `AMIsReady`.
    pub type_: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// A one-word UpperCamelCase reason; empty when True.
    pub reason: String,
    /// A sentence for people; empty when True.
    pub message: String,
}

/// A NodeClaim as core hands it to the provider (Create, IsDrifted).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClaimRequest {
    /// `metadata.name`: unique, and the idempotency key of Create.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The NodeClaim's labels.
    pub labels: BTreeMap<String, String>,
    /// The NodeClaim's annotations (with the node class hash annotations core stamped).
    pub annotations: BTreeMap<String, String>,
    /// The node class to launch with.
    pub node_class_ref: NodeClassRef,
    /// The requirements the node must meet; instance-type values cheapest first.
    pub requirements: Vec<NodeSelectorRequirement>,
    /// What the pods planned onto the node request in total.
    pub resource_requests: Quantities,
    /// Taints the node keeps.
    pub taints: Vec<Taint>,
    /// Taints the node starts with and loses once ready.
    pub startup_taints: Vec<Taint>,
    /// How long the node may live; `None` means never expires.
    pub expire_after: Option<Duration>,
    /// How long draining may take before it is forced; `None` means no limit.
    pub termination_grace_period: Option<Duration>,
    /// When the NodeClaim was created.
    pub creation_time: Option<SystemTime>,
    /// When the NodeClaim started being deleted.
    pub deletion_time: Option<SystemTime>,
}

/// What Create launched: what core copies onto the NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchedNodeClaim {
    /// The cloud's ID of the instance, as the kubelet writes it into `spec.providerID`.
    pub provider_id: String,
    /// The machine image, when known.
    pub image_id: Option<String>,
    /// Labels the launch resolved (instance type, zone, capacity type at least); the
    /// NodeClaim's own labels win over these.
    pub labels: BTreeMap<String, String>,
    /// Annotations to add to the NodeClaim.
    pub annotations: BTreeMap<String, String>,
    /// The instance's full capacity.
    pub capacity: Quantities,
    /// What is left for pods.
    pub allocatable: Quantities,
    /// The instance's state in the cloud.
    pub state: InstanceState,
}

/// An instance as Get and List describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudInstance {
    /// The NodeClaim it was launched for, when the provider knows it.
    pub node_claim_name: Option<String>,
    /// The cloud's ID of the instance.
    pub provider_id: String,
    /// The machine image, when known.
    pub image_id: Option<String>,
    /// The instance's labels (instance type, zone, ...), as far as the provider knows them.
    pub labels: BTreeMap<String, String>,
    /// The instance's full capacity (may be empty).
    pub capacity: Quantities,
    /// What is left for pods (may be empty).
    pub allocatable: Quantities,
    /// When the instance was created, when known.
    pub creation_time: Option<SystemTime>,
    /// When the instance started shutting down; `None` while it is not.
    pub deletion_time: Option<SystemTime>,
    /// The instance's state in the cloud.
    pub state: InstanceState,
}

impl CloudInstance {
    /// Whether the instance is shutting down.
    pub fn is_deleting(&self) -> bool {
        self.deletion_time.is_some() || self.state == InstanceState::Terminating
    }
}

/// The lifecycle state of a cloud instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// The provider did not say.
    #[default]
    Unknown,
    /// Launched, not yet running.
    Pending,
    /// Running.
    Running,
    /// Stopping.
    Stopping,
    /// Stopped; it still exists.
    Stopped,
    /// Shutting down.
    Terminating,
}

/// How far the termination of an instance has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Termination started; the instance still exists. Ask again later.
    Terminating,
    /// No instance exists any more (or never did): the finalizer may go.
    Gone,
}

/// Why an instance drifted from its node class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftReason {
    /// A one-word UpperCamelCase reason, e.g. `AMIDrift`.
    pub reason: String,
    /// What differs, for people (may be empty).
    pub message: String,
}

/// A node condition that, held long enough, makes core replace the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The Node condition type, e.g. `Ready`.
    pub condition_type: String,
    /// The status that counts as unhealthy.
    pub condition_status: ConditionStatus,
    /// How long it must hold before the node is repaired; positive.
    pub toleration_duration: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: ConditionStatus, reason: &str) -> NodeClassCondition {
        NodeClassCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: format!("{type_} says {reason}"),
        }
    }

    #[test]
    fn readiness_is_the_first_condition_that_is_not_true() {
        let mut resolved = ResolvedNodeClass {
            status: serde_json::Map::new(),
            conditions: vec![],
            static_hash: None,
            static_hash_version: String::new(),
            resolve_again_after: DEFAULT_RESOLVE_AGAIN_AFTER,
        };
        assert_eq!(
            resolved.readiness(),
            Readiness::Ready,
            "no conditions: ready"
        );
        resolved.conditions = vec![
            condition("AMIsReady", ConditionStatus::True, ""),
            condition("SubnetsReady", ConditionStatus::Unknown, "Resolving"),
            condition("SecurityGroupsReady", ConditionStatus::False, "NotFound"),
        ];
        assert_eq!(
            resolved.readiness(),
            Readiness::NotReady {
                condition: "SubnetsReady",
                reason: "Resolving",
                message: "SubnetsReady says Resolving",
            }
        );
    }

    #[test]
    fn rpc_indexes_follow_all() {
        for (i, rpc) in Rpc::ALL.iter().enumerate() {
            assert_eq!(rpc.index(), i, "{rpc}");
        }
    }

    #[test]
    fn node_class_kinds_match_references_by_group_and_kind() {
        let kind = NodeClassKind {
            group: "karpenter.k8s.aws".into(),
            version: "v1".into(),
            kind: "EC2NodeClass".into(),
        };
        let mut reference = NodeClassRef {
            group: "karpenter.k8s.aws".into(),
            kind: "EC2NodeClass".into(),
            name: "default".into(),
        };
        assert!(kind.matches(&reference));
        reference.kind = "KWOKNodeClass".into();
        assert!(!kind.matches(&reference));
    }

    #[test]
    fn an_instance_shutting_down_is_deleting() {
        let mut instance =
            crate::controllers::testing::running_instance(None, "fake:///zone-a/i-1");
        assert!(!instance.is_deleting());
        instance.state = InstanceState::Terminating;
        assert!(instance.is_deleting());
        instance.state = InstanceState::Running;
        instance.deletion_time = Some(SystemTime::UNIX_EPOCH);
        assert!(instance.is_deleting());
    }
}
