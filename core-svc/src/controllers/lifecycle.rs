//! The NodeClaim lifecycle (upstream `pkg/controllers/nodeclaim/lifecycle`): the termination
//! finalizer, the launch through the plugin, registration of the Node that joins with the
//! NodeClaim's provider ID, initialization once that Node is ready, and the liveness timeouts.
//!
//! Each pass plans every NodeClaim from the snapshot ([`plan`], pure), then applies the steps
//! through the ports. A NodeClaim moves one stage per pass at most beyond its finalizer: the
//! writes of a stage are changes, which make the runner call the next pass.
//!
//! Finalization belongs to the termination controller, except for one case handled here: a
//! NodeClaim deleted before it launched (no provider ID). Create may still have succeeded with
//! its answer lost, so the plugin is asked to delete by NodeClaim name until it answers Gone,
//! and only then does the finalizer go.
//!
//! Differences from upstream: the registration timeout counts from the NodeClaim's creation
//! (upstream counts from the `Registered` condition's transition, which it initialises at
//! creation: the same instant in practice); initialization waits for the extended resources the
//! NodeClaim requests (upstream checks every requested resource, cpu and memory included, which a
//! kubelet always reports); there are no registration hooks and no metrics yet.

use std::collections::BTreeMap;
use std::time::Duration;

use core_domain::labels::{
    LABEL_CAPACITY_TYPE, LABEL_DO_NOT_SYNC_TAINTS, LABEL_INSTANCE_TYPE, LABEL_NODE_INITIALIZED,
    LABEL_NODE_REGISTERED, LABEL_NODEPOOL, LABEL_TOPOLOGY_ZONE,
};
use core_domain::quantity::Quantity;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint as KubeTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};
use karpenter_api::{ConditionStatus, NodeClaim, NodeClaimStatus, condition};
use kube::Resource;
use serde_json::{Map, Value, json};

use super::nodeclaim::{
    age, has_termination_finalizer, is_condition_true, is_managed, kube_quantities, provider_id_of,
    quantities_of, request_of,
};
use super::{Context, Controller, ControllerError, Requeue, Snapshot, TERMINATION_FINALIZER};
use crate::cloudprovider::{
    CloudProvider, CloudProviderError, Deletion, LaunchedNodeClaim, NodeClassKind,
};
use crate::cluster::{Cluster, ClusterError, ClusterExt, DeleteOptions};
use crate::events::{EventType, ObjectRef, Reason};
use crate::objects::is_node_ready;

/// The taint a Node joins with until its NodeClaim registers it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

/// Taints a Node carries only while it starts; an initialized Node has none of them (upstream
/// `KnownEphemeralTaints`).
const EPHEMERAL_TAINTS: [(&str, &str); 4] = [
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
    (UNREGISTERED_TAINT_KEY, "NoExecute"),
];

/// How soon a launch that failed for an unknown reason is tried again. Upstream backs off
/// exponentially; a flat period is enough while the launch timeout bounds the attempts.
const LAUNCH_RETRY: Duration = Duration::from_secs(5);

/// Longest `Launched` message kept from a plugin error (upstream truncates at 300).
const MAX_MESSAGE: usize = 300;

/// The `Launched` reason of a NodeClaim the plugin called invalid: not sent again, the launch
/// timeout deletes it.
const REASON_INVALID_REQUEST: &str = "InvalidRequest";

/// One thing to do for a NodeClaim in this pass, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Add the termination finalizer.
    AddFinalizer,
    /// Call Create and record what it launched.
    Launch,
    /// Register the Node of this name: sync it from the NodeClaim, set `Registered`.
    Register {
        /// The Node whose `spec.providerID` is the NodeClaim's.
        node: String,
    },
    /// Mark the Node of this name and the NodeClaim initialized.
    Initialize {
        /// The registered Node.
        node: String,
    },
    /// Delete the NodeClaim: it did not get far enough in time.
    Delete(Timeout),
    /// The NodeClaim is being deleted and never launched: make sure no instance exists, then
    /// remove the finalizer.
    FinalizeUnlaunched,
}

/// Which liveness deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Not launched within the launch timeout.
    Launch,
    /// Launched, but no Node registered within the registration timeout.
    Registration,
}

impl Timeout {
    /// The reason recorded on the deletion event.
    pub fn reason(self) -> &'static str {
        match self {
            Timeout::Launch => "LaunchTimeout",
            Timeout::Registration => "RegistrationTimeout",
        }
    }
}

/// The steps of one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaimPlan {
    /// The NodeClaim's name.
    pub node_claim: String,
    /// What to do, in order.
    pub steps: Vec<Step>,
}

/// What a pass will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Per NodeClaim with something to do, in name order.
    pub node_claims: Vec<NodeClaimPlan>,
    /// When the next deadline falls, if nothing changes before.
    pub requeue: Requeue,
}

fn created_at(node_claim: &NodeClaim) -> Option<Timestamp> {
    node_claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|time| time.0)
}

/// Time left until `deadline` after `since`; `None` once it has passed.
fn remaining(since: Option<Timestamp>, deadline: Duration, now: Timestamp) -> Option<Duration> {
    let elapsed = since.map_or(Duration::ZERO, |since| age(since, now));
    deadline.checked_sub(elapsed).filter(|left| !left.is_zero())
}

/// Decides what every managed NodeClaim needs in this pass. Pure.
pub fn plan(
    snapshot: &Snapshot,
    now: Timestamp,
    settings: &super::Settings,
    kinds: &[NodeClassKind],
) -> Plan {
    let nodes_by_provider_id: BTreeMap<&str, &Node> = snapshot
        .nodes()
        .filter_map(|node| {
            let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
            (!provider_id.is_empty()).then_some((provider_id, node))
        })
        .collect();
    let mut requeue = Requeue::OnChange;
    let mut node_claims = Vec::new();
    for node_claim in snapshot
        .node_claims()
        .filter(|node_claim| is_managed(node_claim, kinds))
    {
        let mut steps = Vec::new();
        let name = node_claim.metadata.name.clone().unwrap_or_default();
        if node_claim.metadata.deletion_timestamp.is_some() {
            if has_termination_finalizer(node_claim) && provider_id_of(node_claim).is_empty() {
                steps.push(Step::FinalizeUnlaunched);
            }
        } else {
            if !has_termination_finalizer(node_claim) {
                steps.push(Step::AddFinalizer);
            }
            let (more, deadline) = plan_live(node_claim, &nodes_by_provider_id, now, settings);
            steps.extend(more);
            if let Some(deadline) = deadline {
                requeue = requeue.min(Requeue::After(deadline));
            }
        }
        if !steps.is_empty() {
            node_claims.push(NodeClaimPlan {
                node_claim: name,
                steps,
            });
        }
    }
    Plan {
        node_claims,
        requeue,
    }
}

/// The steps of a NodeClaim that is not being deleted, and the time to its next deadline.
fn plan_live(
    node_claim: &NodeClaim,
    nodes_by_provider_id: &BTreeMap<&str, &Node>,
    now: Timestamp,
    settings: &super::Settings,
) -> (Vec<Step>, Option<Duration>) {
    let created = created_at(node_claim);
    let provider_id = provider_id_of(node_claim);
    if provider_id.is_empty() {
        return match remaining(created, settings.launch_timeout, now) {
            None => (vec![Step::Delete(Timeout::Launch)], None),
            Some(left) if launch_refused(node_claim) => (vec![], Some(left)),
            Some(left) => (vec![Step::Launch], Some(left)),
        };
    }
    if !is_condition_true(node_claim, CONDITION_REGISTERED) {
        return match nodes_by_provider_id.get(provider_id) {
            Some(node) => (
                vec![Step::Register {
                    node: node.metadata.name.clone().unwrap_or_default(),
                }],
                None,
            ),
            None => match remaining(created, settings.registration_timeout, now) {
                None => (vec![Step::Delete(Timeout::Registration)], None),
                Some(left) => (vec![], Some(left)),
            },
        };
    }
    if !is_condition_true(node_claim, CONDITION_INITIALIZED) {
        let node_name = node_claim
            .status
            .as_ref()
            .map_or("", |status| status.node_name.as_str());
        if let Some(node) = nodes_by_provider_id
            .get(provider_id)
            .filter(|node| node.metadata.name.as_deref() == Some(node_name))
            && initialization_blocker(node_claim, node).is_none()
        {
            return (
                vec![Step::Initialize {
                    node: node_name.to_owned(),
                }],
                None,
            );
        }
    }
    (vec![], None)
}

/// Whether the plugin called this NodeClaim's request invalid: the same request would be
/// refused again, so it waits for the launch timeout.
fn launch_refused(node_claim: &NodeClaim) -> bool {
    node_claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, CONDITION_LAUNCHED))
        .is_some_and(|launched| {
            launched.status == ConditionStatus::Unknown
                && launched.reason.as_deref() == Some(REASON_INVALID_REQUEST)
        })
}

/// What a failed Create means for the NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchFailure {
    /// Delete the NodeClaim (no capacity, node class not ready): the provisioner places its pods
    /// again.
    Delete {
        /// The plugin's reason, as the event's `reason` field.
        reason: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// Set `Launched=Unknown` with this reason and message and try again later (or, for an
    /// invalid request, let the launch timeout delete it).
    Unknown {
        /// The condition's reason.
        reason: &'static str,
        /// The condition's message, truncated.
        message: String,
        /// Whether to send Create again.
        retry: bool,
    },
    /// The plugin could not be reached or answered nonsense: change nothing, try again.
    PluginUnavailable,
}

/// How core reacts to a failed Create (the port's contract). Pure.
pub fn launch_failure(error: &CloudProviderError) -> LaunchFailure {
    match error {
        CloudProviderError::InsufficientCapacity(message) => LaunchFailure::Delete {
            reason: "InsufficientCapacity",
            message: message.clone(),
        },
        CloudProviderError::NodeClassNotReady(message) => LaunchFailure::Delete {
            reason: "NodeClassNotReady",
            message: message.clone(),
        },
        CloudProviderError::InvalidRequest(message) => LaunchFailure::Unknown {
            reason: REASON_INVALID_REQUEST,
            message: truncated(message),
            retry: false,
        },
        CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_) => {
            LaunchFailure::PluginUnavailable
        }
        CloudProviderError::NotFound(_)
        | CloudProviderError::Unsupported { .. }
        | CloudProviderError::Other { .. } => LaunchFailure::Unknown {
            reason: "LaunchFailed",
            message: truncated(&error.to_string()),
            retry: true,
        },
    }
}

fn truncated(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE) {
        Some((end, _)) => message[..end].to_owned(),
        None => message.to_owned(),
    }
}

/// The metadata merge patch recording a launch: the launch's labels and annotations the
/// NodeClaim does not set itself (its own win). `None` when there is nothing to add. Pure.
pub fn launch_metadata_patch(
    node_claim: &NodeClaim,
    launched: &LaunchedNodeClaim,
) -> Option<Value> {
    fn missing(
        own: Option<&BTreeMap<String, String>>,
        from_launch: &BTreeMap<String, String>,
    ) -> Map<String, Value> {
        from_launch
            .iter()
            .filter(|(key, _)| !own.is_some_and(|own| own.contains_key(*key)))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect()
    }
    let labels = missing(node_claim.metadata.labels.as_ref(), &launched.labels);
    let annotations = missing(
        node_claim.metadata.annotations.as_ref(),
        &launched.annotations,
    );
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".to_owned(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
    Some(json!({ "metadata": metadata }))
}

/// The status of a NodeClaim after a launch. Pure.
pub fn launched_status(
    status: Option<&NodeClaimStatus>,
    launched: &LaunchedNodeClaim,
    now: Timestamp,
) -> NodeClaimStatus {
    let mut status = status.cloned().unwrap_or_default();
    status.provider_id = launched.provider_id.clone();
    status.image_id = launched.image_id.clone().unwrap_or_default();
    status.capacity = kube_quantities(&launched.capacity);
    status.allocatable = kube_quantities(&launched.allocatable);
    super::nodeclaim::set_condition(
        &mut status.conditions,
        CONDITION_LAUNCHED,
        ConditionStatus::True,
        "",
        "",
        now,
    );
    status
}

fn node_taints(node: &Node) -> &[KubeTaint] {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
}

fn same_taint(a: &KubeTaint, b: &KubeTaint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// The merge patch that registers `node` to `node_claim` (upstream `syncNode`): the NodeClaim's
/// labels (with `karpenter.sh/registered=true`) and annotations over the Node's, the termination
/// finalizer, an owner reference to the NodeClaim, the NodeClaim's taints and startup taints
/// added once (not when the Node was registered before, since a DaemonSet may have removed the
/// startup taints since, nor with `karpenter.sh/do-not-sync-taints=true`), and the unregistered
/// taint removed. It carries the Node's `resourceVersion`, since lists are replaced whole. Pure.
pub fn registration_patch(node_claim: &NodeClaim, node: &Node) -> Value {
    let mut labels: Map<String, Value> = node_claim
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), Value::String(value.clone())))
        .collect();
    labels.insert(
        LABEL_NODE_REGISTERED.to_owned(),
        Value::String("true".to_owned()),
    );
    let annotations: Map<String, Value> = node_claim
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), Value::String(value.clone())))
        .collect();

    let mut metadata = Map::new();
    if let Some(resource_version) = &node.metadata.resource_version {
        metadata.insert(
            "resourceVersion".to_owned(),
            Value::String(resource_version.clone()),
        );
    }
    metadata.insert("labels".to_owned(), Value::Object(labels));
    if !annotations.is_empty() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
    if node.metadata.deletion_timestamp.is_none() && !has_termination_finalizer(node) {
        let mut finalizers = node.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(TERMINATION_FINALIZER.to_owned());
        metadata.insert("finalizers".to_owned(), json!(finalizers));
    }
    let owner = owner_reference(node_claim);
    let owners = node
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    if !owners.contains(&owner) {
        let mut updated: Vec<OwnerReference> = owners
            .iter()
            .filter(|present| present.uid != owner.uid)
            .cloned()
            .collect();
        updated.push(owner);
        metadata.insert("ownerReferences".to_owned(), json!(updated));
    }

    let mut taints = node_taints(node).to_vec();
    let already_registered = node
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_NODE_REGISTERED))
        .is_some_and(|value| value == "true");
    let do_not_sync = node_claim
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_DO_NOT_SYNC_TAINTS))
        .is_some_and(|value| value == "true");
    if !already_registered && !do_not_sync {
        for taint in node_claim
            .spec
            .taints
            .iter()
            .chain(&node_claim.spec.startup_taints)
        {
            if !taints.iter().any(|present| same_taint(present, taint)) {
                taints.push(taint.clone());
            }
        }
    }
    taints.retain(|taint| !(taint.key == UNREGISTERED_TAINT_KEY && taint.effect == "NoExecute"));
    let taints = if taints.is_empty() {
        Value::Null
    } else {
        json!(taints)
    };
    json!({ "metadata": metadata, "spec": { "taints": taints } })
}

fn owner_reference(node_claim: &NodeClaim) -> OwnerReference {
    OwnerReference {
        api_version: NodeClaim::api_version(&()).into_owned(),
        kind: NodeClaim::kind(&()).into_owned(),
        name: node_claim.metadata.name.clone().unwrap_or_default(),
        uid: node_claim.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    }
}

/// Why `node` does not count as initialized for `node_claim` yet; `None` when it does
/// (upstream `initialization.go`): Ready, no startup taint of the NodeClaim and no ephemeral
/// taint left, every extended resource the NodeClaim requests reported allocatable. Pure.
pub fn initialization_blocker(node_claim: &NodeClaim, node: &Node) -> Option<String> {
    if !is_node_ready(node) {
        return Some("the node is not ready".to_owned());
    }
    let taints = node_taints(node);
    if let Some(taint) = node_claim
        .spec
        .startup_taints
        .iter()
        .find(|startup| taints.iter().any(|present| same_taint(present, startup)))
    {
        return Some(format!(
            "startup taint {}:{} is still on the node",
            taint.key, taint.effect
        ));
    }
    if let Some(taint) = taints.iter().find(|present| {
        EPHEMERAL_TAINTS
            .iter()
            .any(|(key, effect)| present.key == *key && present.effect == *effect)
    }) {
        return Some(format!(
            "ephemeral taint {}:{} is still on the node",
            taint.key, taint.effect
        ));
    }
    let requests = quantities_of("", &node_claim.spec.resources.requests).unwrap_or_default();
    let empty = BTreeMap::new();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|status| status.allocatable.as_ref())
        .unwrap_or(&empty);
    let allocatable = quantities_of("", allocatable).unwrap_or_default();
    requests
        .iter()
        .filter(|(name, quantity)| {
            is_extended_resource(name.as_str()) && **quantity > Quantity::ZERO
        })
        .find(|(name, _)| {
            allocatable
                .get(*name)
                .is_none_or(|quantity| *quantity <= Quantity::ZERO)
        })
        .map(|(name, _)| format!("requested resource {name} is not allocatable on the node yet"))
}

/// Kubernetes' `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`.
fn is_extended_resource(name: &str) -> bool {
    match name.split_once('/') {
        None => false,
        Some((domain, _)) => {
            domain != "kubernetes.io"
                && !domain.ends_with(".kubernetes.io")
                && !name.starts_with("requests.")
        }
    }
}

/// The lifecycle controller.
#[derive(Debug, Clone)]
pub struct LifecycleController<C, P> {
    ctx: Context<C, P>,
}

/// What applying one NodeClaim's steps asks of the pass.
#[derive(Debug, Default)]
struct Outcome {
    requeue: Option<Duration>,
    plugin_unavailable: bool,
}

impl<C: Cluster, P: CloudProvider> LifecycleController<C, P> {
    /// A controller on `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self { ctx }
    }

    fn node_claim_ref(name: &str) -> ObjectRef {
        ObjectRef::cluster_scoped("NodeClaim", name)
    }

    async fn apply(
        &self,
        snapshot: &Snapshot,
        node_claim_plan: &NodeClaimPlan,
    ) -> Result<Outcome, ClusterError> {
        let mut outcome = Outcome::default();
        let Some(mut node_claim) = snapshot.node_claim(&node_claim_plan.node_claim).cloned() else {
            return Ok(outcome);
        };
        for step in &node_claim_plan.steps {
            match step {
                Step::AddFinalizer => {
                    node_claim = self
                        .ctx
                        .cluster
                        .add_finalizer(&node_claim, TERMINATION_FINALIZER)
                        .await?;
                }
                Step::Launch => {
                    self.launch(snapshot, &node_claim, &mut outcome).await?;
                }
                Step::Register { node } => {
                    if let Some(node) = snapshot.node(node) {
                        self.register(&node_claim, node).await?;
                    }
                }
                Step::Initialize { node } => {
                    self.initialize(&node_claim, node).await?;
                }
                Step::Delete(timeout) => {
                    self.delete(&node_claim, timeout.reason(), "").await?;
                }
                Step::FinalizeUnlaunched => {
                    self.finalize_unlaunched(&node_claim, &mut outcome).await?;
                }
            }
        }
        Ok(outcome)
    }

    async fn launch(
        &self,
        snapshot: &Snapshot,
        node_claim: &NodeClaim,
        outcome: &mut Outcome,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let reference = &node_claim.spec.node_class_ref;
        let Some(node_class) = snapshot.node_class_for(reference) else {
            let message = format!(
                "{} {}/{} not found",
                reference.kind, reference.group, reference.name
            );
            self.mark_launch_unknown(
                node_claim,
                "NodeClassNotFound",
                &message,
                Reason::NodeClassNotFound,
            )
            .await?;
            return Ok(());
        };
        let node_class = match serde_json::to_value(node_class) {
            Ok(value) => value,
            Err(error) => {
                tracing::error!(node_claim = name, %error, "node class does not serialize");
                return Ok(());
            }
        };
        let request = match request_of(node_claim) {
            Ok(request) => request,
            Err(error) => {
                self.mark_launch_unknown(
                    node_claim,
                    REASON_INVALID_REQUEST,
                    &error.to_string(),
                    Reason::LaunchFailed,
                )
                .await?;
                return Ok(());
            }
        };
        match self.ctx.cloud.create(&request, &node_class).await {
            Ok(launched) => self.record_launch(node_claim, &launched).await,
            Err(error) => match launch_failure(&error) {
                LaunchFailure::Delete { reason, message } => {
                    tracing::info!(node_claim = name, reason, %message, "launch failed, deleting the NodeClaim");
                    self.ctx.event(
                        Self::node_claim_ref(name),
                        EventType::Warning,
                        Reason::LaunchFailed,
                        format!("Launch failed: {message}"),
                        self.fields(node_claim, [("reason", reason.to_owned())]),
                    );
                    self.delete(node_claim, reason, &message).await
                }
                LaunchFailure::Unknown {
                    reason,
                    message,
                    retry,
                } => {
                    tracing::warn!(node_claim = name, reason, %message, "launch failed");
                    if retry {
                        outcome.requeue = Some(LAUNCH_RETRY);
                    }
                    self.mark_launch_unknown(node_claim, reason, &message, Reason::LaunchFailed)
                        .await
                }
                LaunchFailure::PluginUnavailable => {
                    tracing::warn!(node_claim = name, %error, "plugin unavailable, launch postponed");
                    outcome.plugin_unavailable = true;
                    outcome.requeue = Some(LAUNCH_RETRY);
                    Ok(())
                }
            },
        }
    }

    /// Sets `Launched=Unknown`; the Warning event `event_reason` goes out only when the
    /// condition changes, so a NodeClaim waiting on the same problem does not repeat it every
    /// pass.
    async fn mark_launch_unknown(
        &self,
        node_claim: &NodeClaim,
        reason: &str,
        message: &str,
        event_reason: Reason,
    ) -> Result<(), ClusterError> {
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        if !super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_LAUNCHED,
            ConditionStatus::Unknown,
            reason,
            message,
            self.ctx.clock.now(),
        ) {
            return Ok(());
        }
        self.ctx.cluster.replace_status(&updated).await?;
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Warning,
            event_reason,
            message,
            self.fields(node_claim, [("reason", reason.to_owned())]),
        );
        Ok(())
    }

    async fn record_launch(
        &self,
        node_claim: &NodeClaim,
        launched: &LaunchedNodeClaim,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        // Metadata first: once the status says Launched, no pass copies the labels any more;
        // the other way round, a lost status write only means Create is asked again, which
        // answers the same instance.
        let node_claim = match launch_metadata_patch(node_claim, launched) {
            Some(patch) => {
                self.ctx
                    .cluster
                    .merge_patch::<NodeClaim>(None, name, &patch)
                    .await?
            }
            None => node_claim.clone(),
        };
        let mut updated = node_claim.clone();
        updated.status = Some(launched_status(
            node_claim.status.as_ref(),
            launched,
            self.ctx.clock.now(),
        ));
        let updated = self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(
            node_claim = name,
            provider_id = %launched.provider_id,
            "launched"
        );
        let labels = updated.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeClaimLaunched,
            format!("Launched {}", launched.provider_id),
            self.fields(
                &updated,
                [
                    ("instanceType", label(LABEL_INSTANCE_TYPE)),
                    ("zone", label(LABEL_TOPOLOGY_ZONE)),
                    ("capacityType", label(LABEL_CAPACITY_TYPE)),
                    ("imageID", launched.image_id.clone().unwrap_or_default()),
                    ("providerID", launched.provider_id.clone()),
                ],
            ),
        );
        Ok(())
    }

    async fn register(&self, node_claim: &NodeClaim, node: &Node) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        // The Node first: a Registered NodeClaim is never synced again.
        self.ctx
            .cluster
            .merge_patch::<Node>(None, node_name, &registration_patch(node_claim, node))
            .await?;
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        status.node_name = node_name.to_owned();
        super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_REGISTERED,
            ConditionStatus::True,
            "",
            "",
            self.ctx.clock.now(),
        );
        self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(node_claim = name, node = node_name, "registered");
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeRegistered,
            format!("Node {node_name} registered"),
            self.fields(
                node_claim,
                [
                    ("node", node_name.to_owned()),
                    ("providerID", provider_id_of(node_claim).to_owned()),
                ],
            ),
        );
        Ok(())
    }

    async fn initialize(
        &self,
        node_claim: &NodeClaim,
        node_name: &str,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({ "metadata": { "labels": { LABEL_NODE_INITIALIZED: "true" } } });
        self.ctx
            .cluster
            .merge_patch::<Node>(None, node_name, &patch)
            .await?;
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_INITIALIZED,
            ConditionStatus::True,
            "",
            "",
            self.ctx.clock.now(),
        );
        self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(node_claim = name, node = node_name, "initialized");
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeInitialized,
            format!("Node {node_name} initialized"),
            self.fields(node_claim, [("node", node_name.to_owned())]),
        );
        Ok(())
    }

    async fn delete(
        &self,
        node_claim: &NodeClaim,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let mut options = DeleteOptions::default();
        options.preconditions.uid = node_claim.metadata.uid.clone();
        match self
            .ctx
            .cluster
            .delete::<NodeClaim>(None, name, options)
            .await
        {
            Ok(()) => {}
            Err(error) if error.is_not_found() => return Ok(()),
            Err(error) => return Err(error),
        }
        tracing::info!(node_claim = name, reason, "deleted the NodeClaim");
        let message = if message.is_empty() {
            format!("Deleted NodeClaim {name}: {reason}")
        } else {
            format!("Deleted NodeClaim {name}: {reason}: {message}")
        };
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeClaimDeleted,
            message,
            self.fields(node_claim, [("reason", reason.to_owned())]),
        );
        Ok(())
    }

    async fn finalize_unlaunched(
        &self,
        node_claim: &NodeClaim,
        outcome: &mut Outcome,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        match self.ctx.cloud.delete("", name).await {
            Ok(Deletion::Gone) => {
                self.ctx
                    .cluster
                    .remove_finalizer(node_claim, TERMINATION_FINALIZER)
                    .await?;
                tracing::info!(node_claim = name, "no instance left, finalizer removed");
            }
            Ok(Deletion::Terminating) => {
                outcome.requeue = Some(self.ctx.settings.termination_poll);
            }
            Err(error) => {
                if matches!(
                    error,
                    CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
                ) {
                    outcome.plugin_unavailable = true;
                }
                tracing::warn!(node_claim = name, %error, "could not make sure no instance was launched");
                outcome.requeue = Some(self.ctx.settings.termination_poll);
            }
        }
        Ok(())
    }

    fn fields<const N: usize>(
        &self,
        node_claim: &NodeClaim,
        extra: [(&str, String); N],
    ) -> BTreeMap<String, String> {
        let mut fields = BTreeMap::new();
        fields.insert(
            "nodeClaim".to_owned(),
            node_claim.metadata.name.clone().unwrap_or_default(),
        );
        if let Some(node_pool) = node_claim
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_NODEPOOL))
        {
            fields.insert("nodePool".to_owned(), node_pool.clone());
        }
        for (key, value) in extra {
            if !value.is_empty() {
                fields.insert(key.to_owned(), value);
            }
        }
        fields
    }
}

impl<C: Cluster, P: CloudProvider> Controller for LifecycleController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.lifecycle"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let plan = plan(
            &snapshot,
            now,
            &self.ctx.settings,
            self.ctx.cloud.supported_node_classes(),
        );
        let mut requeue = plan.requeue;
        // The first NodeClaim held up by the plugin carries the one event of the pass.
        let mut plugin_unavailable: Option<&str> = None;
        for node_claim_plan in &plan.node_claims {
            match self.apply(&snapshot, node_claim_plan).await {
                Ok(outcome) => {
                    if let Some(after) = outcome.requeue {
                        requeue = requeue.min(Requeue::After(after));
                    }
                    if outcome.plugin_unavailable && plugin_unavailable.is_none() {
                        plugin_unavailable = Some(node_claim_plan.node_claim.as_str());
                    }
                }
                Err(error @ ClusterError::Unavailable(_)) => return Err(error.into()),
                Err(error) if error.is_conflict() || error.is_not_found() => {
                    // Someone else wrote first, or the object went: read again at once.
                    tracing::debug!(node_claim = %node_claim_plan.node_claim, %error, "write refused");
                    requeue = requeue.min(Requeue::After(Duration::ZERO));
                }
                Err(error) => {
                    tracing::warn!(node_claim = %node_claim_plan.node_claim, %error, "write refused");
                    requeue = requeue.min(Requeue::After(LAUNCH_RETRY));
                }
            }
        }
        if let Some(first) = plugin_unavailable {
            self.ctx.event(
                Self::node_claim_ref(first),
                EventType::Warning,
                Reason::PluginUnavailable,
                "The cloud provider plugin is unavailable; launches wait",
                BTreeMap::new(),
            );
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::Settings;
    use crate::controllers::testing::{self, at, kinds, merge, merged, snapshot};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn node_claim(extra: Value) -> NodeClaim {
        testing::node_claim(
            "default-abcde",
            merged(
                json!({
                    "metadata": {
                        "uid": "uid-1",
                        "resourceVersion": "7",
                        "creationTimestamp": at(0).to_string(),
                        "labels": { "karpenter.sh/nodepool": "default", "team": "a" },
                        "finalizers": [TERMINATION_FINALIZER],
                    },
                    "spec": {
                        "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
                        "startupTaints": [{ "key": "init", "effect": "NoSchedule" }],
                        "resources": { "requests": { "cpu": "1", "example.com/fpga": "1" } },
                    },
                }),
                extra,
            ),
        )
    }

    fn node(extra: Value) -> Node {
        testing::node(
            "node-1",
            merged(
                json!({
                    "metadata": { "resourceVersion": "3", "labels": { "kubelet": "own", "team": "b" } },
                    "spec": {
                        "providerID": "fake:///z/i-1",
                        "taints": [
                            { "key": UNREGISTERED_TAINT_KEY, "effect": "NoExecute" },
                            { "key": "kubelet-own", "effect": "NoSchedule" },
                        ],
                    },
                }),
                extra,
            ),
        )
    }

    fn launched_condition(status: &str, reason: &str) -> Value {
        json!({ "type": "Launched", "status": status, "reason": reason, "lastTransitionTime": at(0).to_string() })
    }

    fn steps(snapshot: &Snapshot, now: Timestamp) -> Vec<Step> {
        plan(snapshot, now, &Settings::default(), &kinds())
            .node_claims
            .into_iter()
            .flat_map(|plan| plan.steps)
            .collect()
    }

    #[test]
    fn a_new_node_claim_gets_the_finalizer_then_launches() {
        let fresh = node_claim(json!({ "metadata": { "finalizers": null } }));
        let plan = plan(
            &snapshot(vec![fresh], vec![]),
            at(10),
            &Settings::default(),
            &kinds(),
        );
        assert_eq!(
            plan.node_claims[0].steps,
            vec![Step::AddFinalizer, Step::Launch]
        );
        assert_eq!(
            plan.requeue,
            Requeue::After(Duration::from_secs(290)),
            "the launch deadline"
        );
    }

    #[test]
    fn a_node_claim_of_another_provider_is_left_alone() {
        let foreign = node_claim(json!({ "spec": { "nodeClassRef": { "group": "other.sh" } } }));
        assert_eq!(steps(&snapshot(vec![foreign], vec![]), at(10)), vec![]);
    }

    #[test]
    fn launch_times_out_at_the_launch_timeout() {
        let pending = snapshot(vec![node_claim(json!({}))], vec![]);
        assert_eq!(steps(&pending, at(299)), vec![Step::Launch]);
        assert_eq!(
            steps(&pending, at(300)),
            vec![Step::Delete(Timeout::Launch)]
        );
    }

    #[test]
    fn an_invalid_request_is_not_sent_again() {
        let refused = node_claim(json!({ "status": {
            "conditions": [launched_condition("Unknown", REASON_INVALID_REQUEST)]
        } }));
        let snapshot = snapshot(vec![refused], vec![]);
        assert_eq!(steps(&snapshot, at(10)), vec![]);
        assert_eq!(
            steps(&snapshot, at(300)),
            vec![Step::Delete(Timeout::Launch)]
        );
    }

    #[test]
    fn a_launched_node_claim_registers_its_node_or_times_out() {
        let launched = node_claim(json!({ "status": {
            "providerID": "fake:///z/i-1",
            "conditions": [launched_condition("True", "")]
        } }));
        let without_node = snapshot(vec![launched.clone()], vec![]);
        assert_eq!(steps(&without_node, at(899)), vec![]);
        assert_eq!(
            steps(&without_node, at(900)),
            vec![Step::Delete(Timeout::Registration)]
        );
        let with_node = snapshot(vec![launched], vec![node(json!({}))]);
        assert_eq!(
            steps(&with_node, at(900)),
            vec![Step::Register {
                node: "node-1".into()
            }]
        );
    }

    #[test]
    fn a_deleted_node_claim_that_never_launched_is_finalized_here_only() {
        let deleting = json!({ "metadata": { "deletionTimestamp": at(5).to_string() } });
        let unlaunched = node_claim(deleting.clone());
        assert_eq!(
            steps(&snapshot(vec![unlaunched], vec![]), at(10)),
            vec![Step::FinalizeUnlaunched]
        );
        let mut launched = deleting;
        merge(
            &mut launched,
            json!({ "status": { "providerID": "fake:///z/i-1" } }),
        );
        assert_eq!(
            steps(&snapshot(vec![node_claim(launched)], vec![]), at(10)),
            vec![],
            "termination's job"
        );
    }

    #[test]
    fn launch_failures_map_to_the_port_contract() {
        assert!(matches!(
            launch_failure(&CloudProviderError::InsufficientCapacity("none".into())),
            LaunchFailure::Delete {
                reason: "InsufficientCapacity",
                ..
            }
        ));
        assert!(matches!(
            launch_failure(&CloudProviderError::NodeClassNotReady("x".into())),
            LaunchFailure::Delete {
                reason: "NodeClassNotReady",
                ..
            }
        ));
        assert!(matches!(
            launch_failure(&CloudProviderError::InvalidRequest("x".into())),
            LaunchFailure::Unknown { retry: false, .. }
        ));
        assert_eq!(
            launch_failure(&CloudProviderError::Unavailable("down".into())),
            LaunchFailure::PluginUnavailable
        );
        let LaunchFailure::Unknown { message, retry, .. } =
            launch_failure(&CloudProviderError::Other {
                kind: crate::cloudprovider::FailureKind::Internal,
                message: "x".repeat(1000),
            })
        else {
            panic!("expected Unknown");
        };
        assert!(retry);
        assert_eq!(message.chars().count(), MAX_MESSAGE);
    }

    #[test]
    fn the_node_claims_own_labels_win_over_the_launchs() {
        let launched = LaunchedNodeClaim {
            provider_id: "fake:///z/i-1".into(),
            image_id: None,
            labels: BTreeMap::from([
                ("team".into(), "from-cloud".into()),
                (LABEL_INSTANCE_TYPE.into(), "m5.large".into()),
            ]),
            annotations: BTreeMap::new(),
            capacity: Default::default(),
            allocatable: Default::default(),
            state: Default::default(),
        };
        assert_eq!(
            launch_metadata_patch(&node_claim(json!({})), &launched),
            Some(json!({ "metadata": { "labels": { LABEL_INSTANCE_TYPE: "m5.large" } } }))
        );
    }

    #[test]
    fn registration_syncs_the_node_and_drops_the_unregistered_taint() {
        let patch = registration_patch(&node_claim(json!({})), &node(json!({})));
        assert_eq!(patch["metadata"]["resourceVersion"], "3");
        assert_eq!(
            patch["metadata"]["labels"]["team"], "a",
            "the NodeClaim's labels win"
        );
        assert_eq!(patch["metadata"]["labels"][LABEL_NODE_REGISTERED], "true");
        assert_eq!(
            patch["metadata"]["finalizers"],
            json!([TERMINATION_FINALIZER])
        );
        assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(
            patch["spec"]["taints"],
            json!([
                { "key": "kubelet-own", "effect": "NoSchedule" },
                { "key": "dedicated", "value": "gpu", "effect": "NoSchedule" },
                { "key": "init", "effect": "NoSchedule" },
            ])
        );
    }

    #[test]
    fn a_node_registered_before_does_not_get_its_startup_taints_back() {
        let registered =
            node(json!({ "metadata": { "labels": { LABEL_NODE_REGISTERED: "true" } } }));
        let patch = registration_patch(&node_claim(json!({})), &registered);
        assert_eq!(
            patch["spec"]["taints"],
            json!([{ "key": "kubelet-own", "effect": "NoSchedule" }])
        );
    }

    #[test]
    fn initialization_waits_for_readiness_taints_and_extended_resources() {
        let node_claim = node_claim(json!({}));
        let ready = json!({ "conditions": [{ "type": "Ready", "status": "True" }] });
        let not_ready = node(json!({ "spec": { "taints": null } }));
        assert_eq!(
            initialization_blocker(&node_claim, &not_ready).as_deref(),
            Some("the node is not ready")
        );
        let startup_taint = node(json!({
            "spec": { "taints": [{ "key": "init", "effect": "NoSchedule" }] },
            "status": ready.clone(),
        }));
        assert!(
            initialization_blocker(&node_claim, &startup_taint)
                .unwrap()
                .contains("init")
        );
        let uninitialized = node(json!({
            "spec": { "taints": [{ "key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule" }] },
            "status": ready.clone(),
        }));
        assert!(
            initialization_blocker(&node_claim, &uninitialized)
                .unwrap()
                .contains("uninitialized")
        );
        let no_fpga = node(json!({ "spec": { "taints": null }, "status": ready.clone() }));
        assert!(
            initialization_blocker(&node_claim, &no_fpga)
                .unwrap()
                .contains("example.com/fpga")
        );
        let mut status = ready;
        merge(
            &mut status,
            json!({ "allocatable": { "example.com/fpga": "1" } }),
        );
        let initialized = node(json!({ "spec": { "taints": null }, "status": status }));
        assert_eq!(initialization_blocker(&node_claim, &initialized), None);
    }

    #[test]
    fn extended_resources_are_the_domain_prefixed_ones_outside_kubernetes_io() {
        assert!(is_extended_resource("nvidia.com/gpu"));
        assert!(!is_extended_resource("cpu"));
        assert!(!is_extended_resource("hugepages-2Mi"));
        assert!(!is_extended_resource("kubernetes.io/something"));
    }

    #[test]
    fn launched_status_sets_launched_and_the_instance_fields() {
        let launched = LaunchedNodeClaim {
            provider_id: "fake:///z/i-1".into(),
            image_id: Some("img".into()),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            capacity: Default::default(),
            allocatable: Default::default(),
            state: Default::default(),
        };
        let status = launched_status(None, &launched, at(3));
        assert_eq!(status.provider_id, "fake:///z/i-1");
        assert_eq!(status.image_id, "img");
        assert!(condition::is_true(&status.conditions, CONDITION_LAUNCHED));
        assert_eq!(status.conditions[0].last_transition_time, Time(at(3)));
    }
}
