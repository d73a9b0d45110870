//! What the lifecycle controller does to each NodeClaim, decided from the snapshot alone
//! ([`plan`]: the next [`Step`] or the [`Timeout`] that ends it) and the patches each step
//! writes. Pure; apart from the controller so that every stage is unit-tested without a port.

use std::collections::BTreeMap;
use std::time::Duration;

use core_domain::labels::{LABEL_DO_NOT_SYNC_TAINTS, LABEL_NODE_REGISTERED};
use core_domain::quantity::Quantity;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint as KubeTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};
use karpenter_api::{ConditionStatus, NodeClaim, NodeClaimStatus, condition};
use kube::Resource;
use serde_json::{Map, Value, json};

use crate::cloudprovider::{CloudProviderError, LaunchedNodeClaim, NodeClassKind};
use crate::controllers::nodeclaim::{
    age, has_termination_finalizer, is_condition_true, is_managed, kube_quantities, provider_id_of,
    quantities_of,
};
use crate::controllers::{Requeue, Snapshot, TERMINATION_FINALIZER};
use crate::objects::is_node_ready;

/// The taint a Node joins with until its NodeClaim registers it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

/// Taints a Node carries only while it starts; an initialized Node has none of them (upstream
/// `KnownEphemeralTaints`).
pub(super) const EPHEMERAL_TAINTS: [(&str, &str); 4] = [
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
pub(super) const LAUNCH_RETRY: Duration = Duration::from_secs(5);

/// Longest `Launched` message kept from a plugin error (upstream truncates at 300).
pub(super) const MAX_MESSAGE: usize = 300;

/// The `Launched` reason of a NodeClaim the plugin called invalid: not sent again, the launch
/// timeout deletes it.
pub(super) const REASON_INVALID_REQUEST: &str = "InvalidRequest";

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

pub(super) fn created_at(node_claim: &NodeClaim) -> Option<Timestamp> {
    node_claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|time| time.0)
}

/// Time left until `deadline` after `since`; `None` once it has passed.
pub(super) fn remaining(
    since: Option<Timestamp>,
    deadline: Duration,
    now: Timestamp,
) -> Option<Duration> {
    let elapsed = since.map_or(Duration::ZERO, |since| age(since, now));
    deadline.checked_sub(elapsed).filter(|left| !left.is_zero())
}

/// Decides what every managed NodeClaim needs in this pass. Pure.
pub fn plan(
    snapshot: &Snapshot,
    now: Timestamp,
    settings: &crate::controllers::Settings,
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
pub(super) fn plan_live(
    node_claim: &NodeClaim,
    nodes_by_provider_id: &BTreeMap<&str, &Node>,
    now: Timestamp,
    settings: &crate::controllers::Settings,
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
pub(super) fn launch_refused(node_claim: &NodeClaim) -> bool {
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
    /// The launch is under way: set `Launched=Unknown` (reason [`REASON_LAUNCHING`]) and call
    /// Create again after `retry_after`.
    Pending {
        /// The plugin's message, truncated.
        message: String,
        /// How soon to call Create again: the plugin's wish within 1 s to 1 min, by default
        /// 5 seconds (the launch retry interval).
        retry_after: Duration,
    },
}

/// The `Launched=Unknown` reason while the plugin reports the launch pending.
pub const REASON_LAUNCHING: &str = "Launching";

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
        CloudProviderError::LaunchPending {
            message,
            retry_after,
        } => LaunchFailure::Pending {
            message: truncated(message),
            // Bounded: a plugin asking for less than a second would spin the controller, one
            // asking for more than a minute would sleep past most of the launch timeout.
            retry_after: retry_after
                .unwrap_or(LAUNCH_RETRY)
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
        },
        CloudProviderError::NotFound(_)
        | CloudProviderError::Unsupported { .. }
        | CloudProviderError::Other { .. } => LaunchFailure::Unknown {
            reason: "LaunchFailed",
            message: truncated(&error.to_string()),
            retry: true,
        },
    }
}

pub(super) fn truncated(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE) {
        Some((end, _)) => message[..end].to_owned(),
        None => message.to_owned(),
    }
}

/// Why a LAUNCHED answer about `node_claim` must not be recorded, when it names an instance
/// another NodeClaim of `snapshot` already holds: recording it would give two NodeClaims one
/// instance, and the deletion of either would terminate the other's node. The problem names
/// the field. Pure.
pub fn foreign_launch(
    snapshot: &Snapshot,
    node_claim: &str,
    launched: &LaunchedNodeClaim,
) -> Option<String> {
    let holder = snapshot.node_claims().find(|other| {
        other.metadata.name.as_deref() != Some(node_claim)
            && provider_id_of(other) == launched.provider_id
    })?;
    Some(format!(
        "Create answer: node_claim.status.provider_id: {:?} is the instance of NodeClaim {:?}, \
         not one launched for {node_claim:?}; not recorded",
        launched.provider_id,
        holder.metadata.name.as_deref().unwrap_or_default()
    ))
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
    crate::controllers::nodeclaim::set_condition(
        &mut status.conditions,
        CONDITION_LAUNCHED,
        ConditionStatus::True,
        "",
        "",
        now,
    );
    status
}

pub(super) fn node_taints(node: &Node) -> &[KubeTaint] {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
}

pub(super) fn same_taint(a: &KubeTaint, b: &KubeTaint) -> bool {
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

pub(super) fn owner_reference(node_claim: &NodeClaim) -> OwnerReference {
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
pub(super) fn is_extended_resource(name: &str) -> bool {
    match name.split_once('/') {
        None => false,
        Some((domain, _)) => {
            domain != "kubernetes.io"
                && !domain.ends_with(".kubernetes.io")
                && !name.starts_with("requests.")
        }
    }
}
