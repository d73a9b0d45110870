//! Facts about the Kubernetes objects core reads, as pure predicates over one object (upstream
//! kubernetes-sigs/karpenter pkg/utils/pod and pkg/utils/node): whether a pod finished, is
//! terminating, is a mirror or a DaemonSet's, tolerates the disrupted taint; whether a Node is
//! Ready or carries the marks of a drain. The lowest layer of core-svc: the disruption building
//! blocks, the drain and the controllers all read objects through these, so they agree.
//! [`SlimPod`] (`pod.rs`) is a Pod as core holds and reads it.

mod pod;

pub use pod::{SlimContainer, SlimPod, SlimPodSpec, SlimPodStatus};

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

/// The taint key core puts on a node it drains.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// The effect of the disrupted taint.
pub const DISRUPTED_TAINT_EFFECT: &str = "NoSchedule";
/// A terminating pod this long past its deletion deadline is not waited for any more (upstream
/// `IsStuckTerminating`): its kubelet is gone or stuck.
pub const STUCK_TERMINATING_AFTER: Duration = Duration::from_secs(60);
/// The grace period Kubernetes gives a pod that does not set `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_PERIOD_SECONDS: i64 = 30;
/// The annotation the kubelet puts on the API server's copy of a static pod.
pub const ANNOTATION_MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// The priority classes whose pods go last (Kubernetes' graceful node shutdown).
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] =
    ["system-cluster-critical", "system-node-critical"];

/// The object's name (empty when unset: every object read from the API server has one).
pub fn name_of<K: kube::Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or_default()
}

/// Whether the pod's priority class is one of the [`CRITICAL_PRIORITY_CLASSES`].
pub fn is_critical(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.priority_class_name.as_deref())
        .is_some_and(|class| CRITICAL_PRIORITY_CLASSES.contains(&class))
}

/// Whether an `apps/v1` DaemonSet owns the pod.
pub fn is_owned_by_daemon_set(pod: &SlimPod) -> bool {
    is_owned_by(pod, "apps/v1", "DaemonSet")
}

/// Whether the pod is a mirror of a static pod: owned by its Node (`v1`), or carrying the
/// kubelet's mirror annotation. The API server cannot delete what the kubelet runs from a file.
pub fn is_mirror(pod: &SlimPod) -> bool {
    is_owned_by(pod, "v1", "Node")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|annotations| annotations.contains_key(ANNOTATION_MIRROR_POD))
}

fn is_owned_by(pod: &SlimPod, api_version: &str, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.api_version == api_version && owner.kind == kind)
}

/// Whether the pod finished (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &SlimPod) -> bool {
    matches!(
        pod.status
            .as_ref()
            .and_then(|status| status.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the pod has been terminating for more than [`STUCK_TERMINATING_AFTER`] past its
/// deletion deadline (a pod's `deletionTimestamp` is when its grace period ends).
pub fn is_stuck_terminating(pod: &SlimPod, now: Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|deadline| now.duration_since(deadline.0) > signed(STUCK_TERMINATING_AFTER))
}

/// Whether the pod tolerates `karpenter.sh/disrupted:NoSchedule`: such a pod may run on a
/// draining node, so the drain neither evicts it nor waits for it.
pub fn tolerates_disrupted_taint(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.tolerations.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|toleration| tolerates(toleration, DISRUPTED_TAINT_KEY, "", DISRUPTED_TAINT_EFFECT))
}

/// Kubernetes' `Toleration.ToleratesTaint`: whether `toleration` tolerates the taint `key`,
/// `value`, `effect`.
pub fn tolerates(toleration: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|tolerated| !tolerated.is_empty() && tolerated != effect)
    {
        return false;
    }
    if toleration
        .key
        .as_deref()
        .is_some_and(|tolerated| !tolerated.is_empty() && tolerated != key)
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => toleration.value.as_deref().unwrap_or_default() == value,
        "Exists" => true,
        _ => false,
    }
}

/// The pod's own grace period, Kubernetes' default when unset.
pub fn pod_grace_period_seconds(pod: &SlimPod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_PERIOD_SECONDS)
}

/// The label that takes a draining node out of external load balancers (Kubernetes'
/// `LabelNodeExcludeBalancers`): a node is labelled before its pods are evicted, so load
/// balancers stop sending it traffic while it drains (upstream `Terminator.Taint`).
pub const LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// The value core writes for [`LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS`] (upstream's), so it
/// removes only a label it wrote.
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE: &str = "karpenter";

/// The taint a draining node carries: `karpenter.sh/disrupted:NoSchedule`.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: DISRUPTED_TAINT_KEY.to_owned(),
        value: None,
        effect: DISRUPTED_TAINT_EFFECT.to_owned(),
        time_added: None,
    }
}

/// Whether the Node carries `karpenter.sh/disrupted:NoSchedule`.
pub fn has_disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|taint| taint.key == DISRUPTED_TAINT_KEY && taint.effect == DISRUPTED_TAINT_EFFECT)
}

/// Whether the Node carries the load-balancer exclusion label as core writes it.
pub fn has_exclude_label(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS))
        .is_some_and(|value| value == EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE)
}

/// Whether the pod's `Ready` condition is True (upstream `IsPodReady`): what a
/// PodDisruptionBudget counts as healthy and a Deployment as available.
pub fn is_pod_ready(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// Whether a Node reports its `Ready` condition True.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}
