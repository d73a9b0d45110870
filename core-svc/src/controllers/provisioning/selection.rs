//! Which pods wait for capacity and which NodePools may provide it (upstream kubernetes-sigs/karpenter `pkg/controllers/provisioning/provisioner.go`).
//!
//! A pod waits for capacity when the kube-scheduler gave up on it (provisionable), or when it
//! runs on a node being deleted and will need a place to go (reschedulable), as upstream's
//! provisioner schedules both so that replacement capacity is ready before the drain.

use crate::cluster::SlimPod;
use std::collections::HashSet;
use std::fmt;

use karpenter_api::{LabelPolicy, NodePool};
use kube::core::DynamicObject;
use serde_json::Value;

use crate::cloudprovider::NodeClassKind;
use crate::cluster::Snapshot;

/// The annotation the kubelet puts on the API server's copy of a static pod.
pub const ANNOTATION_MIRROR_POD: &str = "kubernetes.io/config.mirror";

/// Whether the kube-scheduler gave up on the pod and only new capacity can help (upstream
/// `IsProvisionable`): unbound, not terminating, Pending, `PodScheduled=False` with reason
/// `Unschedulable`, not nominated by the kube-scheduler's preemption, not a DaemonSet's or a
/// static pod.
///
/// This is upstream's rule on the pod alone, which reads every `nominatedNodeName` as a
/// preemption; [`waiting_pods`] refines it with the cluster's view (see [`Preemptions`]).
pub fn is_provisionable(pod: &SlimPod) -> bool {
    is_unschedulable(pod) && nominated_node(pod).is_none()
}

/// Upstream's `IsProvisionable` but for the nomination: the kube-scheduler tried the pod and
/// found no node for it.
fn is_unschedulable(pod: &SlimPod) -> bool {
    let status = pod.status.as_ref();
    let unschedulable = status
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|condition| {
            condition.type_ == "PodScheduled"
                && condition.status == "False"
                && condition.reason.as_deref() == Some("Unschedulable")
        });
    let pending = status
        .and_then(|status| status.phase.as_deref())
        .is_none_or(|phase| phase == "Pending");
    node_name(pod).is_none()
        && !is_terminating(pod)
        && pending
        && unschedulable
        && !is_daemon_set_pod(pod)
        && !is_static_pod(pod)
}

/// The pod's `status.nominatedNodeName`, when set.
pub fn nominated_node(pod: &SlimPod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.nominated_node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// Which `nominatedNodeName`s are the kube-scheduler's preemptions in progress.
///
/// Two writers set the field. The kube-scheduler sets it when it preempts lower-priority pods
/// for the pod, and the pod then waits for their graceful termination: upstream skips such a
/// pod, as no new capacity is needed. The provisioner sets it too, as a placement hint for
/// the kube-scheduler on the Nodes of the NodeClaims it launched ([`super::hints`]; Kubernetes
/// KEP-5278 lets external components do so): a pod hinted at a Node that could not take it
/// after all must still get capacity.
///
/// So a nomination counts as a preemption only when it names a live Node (not gone, not being
/// deleted) that no NodeClaim manages, or a managed Node where some pod is terminating (the
/// victims). A nomination of a Node that is gone or being deleted is stale whoever wrote it.
#[derive(Debug)]
pub struct Preemptions<'a> {
    live: HashSet<&'a str>,
    managed: HashSet<&'a str>,
    with_terminating_pods: HashSet<&'a str>,
}

impl<'a> Preemptions<'a> {
    /// The Nodes of `snapshot` as nomination targets.
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let deleting = deleting_nodes(snapshot);
        let live = snapshot
            .nodes()
            .filter_map(|node| node.metadata.name.as_deref())
            .filter(|name| !deleting.contains(name))
            .collect();
        let managed = super::hints::nodes_of_claims(snapshot)
            .map(|(_, node)| node)
            .collect();
        let with_terminating_pods = snapshot
            .pods()
            .filter(|pod| is_terminating(pod))
            .filter_map(node_name)
            .collect();
        Self {
            live,
            managed,
            with_terminating_pods,
        }
    }

    /// Whether a pod nominated to `node` waits for a preemption there.
    pub fn is_preemption(&self, node: &str) -> bool {
        self.live.contains(node)
            && (!self.managed.contains(node) || self.with_terminating_pods.contains(node))
    }
}

/// Whether the pod would have to move if its node went away (upstream `IsReschedulable`):
/// neither terminal nor terminating, and neither a DaemonSet's nor a static pod.
pub fn is_reschedulable(pod: &SlimPod) -> bool {
    !is_terminal(pod) && !is_terminating(pod) && !is_daemon_set_pod(pod) && !is_static_pod(pod)
}

pub use crate::objects::{is_terminal, is_terminating};

/// Whether a DaemonSet owns the pod.
pub fn is_daemon_set_pod(pod: &SlimPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "DaemonSet")
}

/// Whether the pod is a static pod (a mirror pod, or one owned by its Node): it cannot move.
pub fn is_static_pod(pod: &SlimPod) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| annotations.contains_key(ANNOTATION_MIRROR_POD));
    let node_owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "Node");
    mirror || node_owned
}

/// The node the pod is bound to.
pub fn node_name(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// The names of the Nodes being deleted, directly or through their NodeClaim.
pub fn deleting_nodes(snapshot: &Snapshot) -> HashSet<&str> {
    let nodes = snapshot
        .nodes()
        .filter(|node| node.metadata.deletion_timestamp.is_some())
        .filter_map(|node| node.metadata.name.as_deref());
    let claimed = snapshot
        .node_claims()
        .filter(|claim| claim.metadata.deletion_timestamp.is_some())
        .filter_map(|claim| claim.status.as_ref())
        .map(|status| status.node_name.as_str())
        .filter(|name| !name.is_empty());
    nodes.chain(claimed).collect()
}

/// The pods waiting for capacity, in the snapshot's order: the provisionable ones and the
/// reschedulable pods of the nodes being deleted.
pub fn waiting_pods(snapshot: &Snapshot) -> Vec<&SlimPod> {
    let deleting = deleting_nodes(snapshot);
    // Indexed only for the first unschedulable pod nominated to a node: most passes meet
    // none, and the index reads every Node, NodeClaim and pod.
    let preemptions = std::cell::OnceCell::new();
    snapshot
        .pods()
        .filter(|pod| match node_name(pod) {
            None => {
                is_unschedulable(pod)
                    && nominated_node(pod).is_none_or(|node| {
                        !preemptions
                            .get_or_init(|| Preemptions::new(snapshot))
                            .is_preemption(node)
                    })
            }
            Some(node) => deleting.contains(node) && is_reschedulable(pod),
        })
        .collect()
}

/// The pod's UID, or `namespace/name` for a pod that has none (not from an API server).
pub fn pod_uid(pod: &SlimPod) -> String {
    match &pod.metadata.uid {
        Some(uid) => uid.clone(),
        None => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// Why a NodePool cannot provide capacity now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// It is being deleted.
    Deleting,
    /// It is static (`spec.replicas`): its size does not follow pods.
    Static,
    /// Its node class is of a kind the cloud provider does not manage.
    UnsupportedNodeClass {
        /// The node class's `group/kind`.
        kind: String,
    },
    /// Its node class does not exist.
    NodeClassMissing,
    /// Its node class is not Ready.
    NodeClassNotReady {
        /// The Ready condition's reason and message, or why there is none.
        reason: String,
    },
    /// It fails validation under the plugin's label vocabulary (its `ValidationSucceeded`
    /// condition says the same).
    Invalid {
        /// Every validation error, joined.
        errors: String,
    },
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Deleting => f.write_str("the NodePool is being deleted"),
            Unusable::Static => f.write_str("the NodePool is static"),
            Unusable::UnsupportedNodeClass { kind } => {
                write!(
                    f,
                    "node class kind {kind} is not managed by the cloud provider"
                )
            }
            Unusable::NodeClassMissing => f.write_str("the node class does not exist"),
            Unusable::NodeClassNotReady { reason } => {
                write!(f, "the node class is not ready: {reason}")
            }
            Unusable::Invalid { errors } => write!(f, "the NodePool is not valid: {errors}"),
        }
    }
}

/// A NodePool that may provide capacity, with its node class (absent only when readiness is
/// not checked and the object does not exist).
#[derive(Debug, Clone, Copy)]
pub struct UsableNodePool<'a> {
    /// The NodePool.
    pub pool: &'a NodePool,
    /// Its node class.
    pub node_class: Option<&'a DynamicObject>,
}

/// The NodePools that may provide capacity, highest weight first then by name, and why each
/// other one may not. A NodePool must pass validation under `label_policy` (core's with the
/// plugin's vocabulary), and needs a node class of a kind the provider manages (`supported`;
/// empty means any) and, when `require_ready_node_class`, that node class to exist with
/// `Ready=True` (it is false when the plugin does not implement ResolveNodeClass: then every
/// node class counts as ready).
pub fn usable_node_pools<'a>(
    snapshot: &'a Snapshot,
    supported: &[NodeClassKind],
    require_ready_node_class: bool,
    label_policy: &LabelPolicy,
) -> (Vec<UsableNodePool<'a>>, Vec<(&'a NodePool, Unusable)>) {
    let mut usable = Vec::new();
    let mut unusable = Vec::new();
    for pool in snapshot.node_pools() {
        let usable_pool =
            usability(snapshot, pool, supported, require_ready_node_class).and_then(|node_class| {
                validation(pool, label_policy)
                    .map(|()| node_class)
                    .map_err(|errors| Unusable::Invalid { errors })
            });
        match usable_pool {
            Ok(node_class) => usable.push(UsableNodePool { pool, node_class }),
            Err(reason) => unusable.push((pool, reason)),
        }
    }
    usable.sort_by(|a, b| {
        let weight = |p: &UsableNodePool<'_>| p.pool.spec.weight.unwrap_or(0);
        weight(b)
            .cmp(&weight(a))
            .then_with(|| a.pool.metadata.name.cmp(&b.pool.metadata.name))
    });
    (usable, unusable)
}

fn usability<'a>(
    snapshot: &'a Snapshot,
    pool: &NodePool,
    supported: &[NodeClassKind],
    require_ready_node_class: bool,
) -> Result<Option<&'a DynamicObject>, Unusable> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Err(Unusable::Deleting);
    }
    if pool.is_static() {
        return Err(Unusable::Static);
    }
    let reference = &pool.spec.template.spec.node_class_ref;
    if !supported.is_empty()
        && !supported
            .iter()
            .any(|kind| kind.group == reference.group && kind.kind == reference.kind)
    {
        return Err(Unusable::UnsupportedNodeClass {
            kind: format!("{}/{}", reference.group, reference.kind),
        });
    }
    let node_class = snapshot.node_class_for(reference);
    if !require_ready_node_class {
        return Ok(node_class);
    }
    let node_class = node_class.ok_or(Unusable::NodeClassMissing)?;
    if node_class.metadata.deletion_timestamp.is_some() {
        return Err(Unusable::NodeClassNotReady {
            reason: "it is being deleted".to_owned(),
        });
    }
    node_class_readiness(node_class)
        .map(|()| Some(node_class))
        .map_err(|reason| Unusable::NodeClassNotReady { reason })
}

/// Whether a NodePool is valid under `policy`: every validation error, joined, when it is not.
pub fn validation(pool: &NodePool, policy: &LabelPolicy) -> Result<(), String> {
    validation_with_warnings(pool, policy).map(|_| ())
}

/// [`validation`], and when the NodePool is valid, what its CRD admits although it cannot
/// work as written ([`NodePool::warnings`]), joined (empty when nothing), from one check.
pub fn validation_with_warnings(pool: &NodePool, policy: &LabelPolicy) -> Result<String, String> {
    let joined = |list: Vec<karpenter_api::validation::ValidationError>| {
        list.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (errors, warnings) = pool.errors_and_warnings(policy);
    if errors.is_empty() {
        Ok(joined(warnings))
    } else {
        Err(joined(errors))
    }
}

/// Whether a node class's `Ready` condition is True; otherwise its reason and message.
pub fn node_class_readiness(node_class: &DynamicObject) -> Result<(), String> {
    let ready = node_class
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some("Ready"));
    let Some(ready) = ready else {
        return Err("it has no Ready condition yet".to_owned());
    };
    let field = |name: &str| ready.get(name).and_then(Value::as_str).unwrap_or_default();
    if field("status") == "True" {
        return Ok(());
    }
    Err(match (field("reason"), field("message")) {
        ("", "") => format!("Ready is {}", field("status")),
        (reason, "") => reason.to_owned(),
        ("", message) => message.to_owned(),
        (reason, message) => format!("{reason}: {message}"),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Node;
    use karpenter_api::NodeClaim;
    use serde_json::json;

    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing::{self, from_json, kinds, node_pool};

    fn pod(name: &str, extra: Value) -> Pod {
        Pod::from(testing::unschedulable_pod(name, extra))
    }

    #[test]
    fn given_an_unschedulable_pending_pod_then_it_is_provisionable() {
        assert!(is_provisionable(&pod("a", json!({}))));
    }

    #[test]
    fn given_pods_the_kube_scheduler_has_not_given_up_on_then_they_are_not_provisionable() {
        let cases = [
            ("bound", json!({ "spec": { "nodeName": "node-1" } })),
            (
                "terminating",
                json!({ "metadata": { "deletionTimestamp": "2025-01-01T00:00:00Z" } }),
            ),
            ("running", json!({ "status": { "phase": "Running" } })),
            (
                "not tried",
                json!({ "status": { "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "SchedulingGated" }] } }),
            ),
            (
                "scheduled",
                json!({ "status": { "conditions": [{ "type": "PodScheduled", "status": "True" }] } }),
            ),
            (
                "preempting",
                json!({ "status": { "nominatedNodeName": "node-2" } }),
            ),
            (
                "daemon set",
                json!({ "metadata": { "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u" }] } }),
            ),
            (
                "mirror",
                json!({ "metadata": { "annotations": { ANNOTATION_MIRROR_POD: "x" } } }),
            ),
        ];
        for (case, extra) in cases {
            assert!(!is_provisionable(&pod("p", extra)), "{case}");
        }
    }

    #[test]
    fn given_a_node_being_deleted_then_its_reschedulable_pods_wait_too() {
        let node = |name: &str, deleting: bool| -> Node {
            let mut value =
                json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } });
            if deleting {
                value["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
                value["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
            }
            from_json(value)
        };
        let claim: NodeClaim = from_json(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": "c", "deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": ["x"] },
            "spec": { "nodeClassRef": { "group": "g", "kind": "K", "name": "n" }, "requirements": [] },
            "status": { "nodeName": "claimed" },
        }));
        let running = |name: &str, node: &str| {
            pod(
                name,
                json!({ "spec": { "nodeName": node }, "status": { "phase": "Running", "conditions": [] } }),
            )
        };
        let mut snapshot = Snapshot {
            nodes: vec![
                Arc::new(node("deleting", true)),
                Arc::new(node("claimed", false)),
                Arc::new(node("live", false)),
            ],
            node_claims: vec![Arc::new(claim)],
            pods: vec![
                Arc::new(pod("pending", json!({}))),
                Arc::new(running("on-deleting", "deleting")),
                Arc::new(running("on-claimed", "claimed")),
                Arc::new(running("on-live", "live")),
                Arc::new(pod(
                    "done",
                    json!({ "spec": { "nodeName": "deleting" }, "status": { "phase": "Succeeded" } }),
                )),
            ],
            ..Snapshot::default()
        };
        snapshot.sort();
        let names: Vec<&str> = waiting_pods(&snapshot)
            .into_iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        assert_eq!(names, ["on-claimed", "on-deleting", "pending"]);
    }

    #[test]
    fn given_nominated_pods_then_only_a_preemption_in_progress_keeps_one_from_waiting() {
        let claim = |name: &str, node: &str| {
            testing::node_claim(name, json!({ "status": { "nodeName": node } }))
        };
        let nominated =
            |name: &str, node: &str| pod(name, json!({ "status": { "nominatedNodeName": node } }));
        let victim = pod(
            "victim",
            json!({
                "metadata": { "deletionTimestamp": "2025-01-01T00:00:00Z" },
                "spec": { "nodeName": "managed-preempting" },
                "status": { "phase": "Running", "conditions": [] },
            }),
        );
        let mut snapshot = Snapshot {
            nodes: ["unmanaged", "managed", "managed-preempting"]
                .map(|name| Arc::new(testing::node(name, json!({}))))
                .to_vec(),
            node_claims: vec![
                Arc::new(claim("a", "managed")),
                Arc::new(claim("b", "managed-preempting")),
            ],
            pods: vec![
                Arc::new(nominated("on-unmanaged", "unmanaged")),
                Arc::new(nominated("hinted", "managed")),
                Arc::new(nominated("preemptor", "managed-preempting")),
                Arc::new(nominated("stale", "gone")),
                Arc::new(victim),
            ],
            ..Snapshot::default()
        };
        snapshot.sort();
        let names: Vec<&str> = waiting_pods(&snapshot)
            .into_iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        assert_eq!(names, ["hinted", "stale"]);
        assert!(
            snapshot.pods().all(|pod| !is_provisionable(pod)),
            "upstream's rule on the pod alone reads every nomination as a preemption"
        );
    }

    fn node_class(name: &str, ready: &str) -> DynamicObject {
        testing::node_class(
            name,
            json!({ "status": { "conditions": [{ "type": "Ready", "status": ready, "reason": "SubnetsNotFound" }] } }),
        )
    }

    #[test]
    fn given_node_pools_then_usable_ones_come_by_weight_and_the_others_say_why() {
        let other_class =
            json!({ "spec": { "template": { "spec": { "nodeClassRef": { "name": "other" } } } } });
        let mut snapshot = Snapshot {
            node_pools: vec![
                Arc::new(node_pool("a-light", json!({}))),
                Arc::new(node_pool("b-heavy", json!({ "spec": { "weight": 50 } }))),
                Arc::new(node_pool("c-static", json!({ "spec": { "replicas": 1 } }))),
                Arc::new(node_pool("d-not-ready", other_class)),
                Arc::new(node_pool(
                    "e-foreign",
                    json!({ "spec": { "template": { "spec": { "nodeClassRef": { "kind": "EC2NodeClass" } } } } }),
                )),
                Arc::new(node_pool(
                    "f-missing",
                    json!({ "spec": { "template": { "spec": { "nodeClassRef": { "name": "missing" } } } } }),
                )),
            ],
            node_classes: vec![
                Arc::new(node_class("default", "True")),
                Arc::new(node_class("other", "False")),
            ],
            ..Snapshot::default()
        };
        snapshot.sort();
        let (usable, unusable) = usable_node_pools(&snapshot, &kinds(), true, &LabelPolicy::core());
        let names: Vec<&str> = usable
            .iter()
            .filter_map(|u| u.pool.metadata.name.as_deref())
            .collect();
        assert_eq!(names, ["b-heavy", "a-light"]);
        let reasons: Vec<(&str, String)> = unusable
            .iter()
            .map(|(pool, why)| (pool.metadata.name.as_deref().unwrap(), why.to_string()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("c-static", "the NodePool is static".to_owned()),
                (
                    "d-not-ready",
                    "the node class is not ready: SubnetsNotFound".to_owned()
                ),
                (
                    "e-foreign",
                    "node class kind test.karpenter.sh/EC2NodeClass is not managed by the cloud provider"
                        .to_owned()
                ),
                ("f-missing", "the node class does not exist".to_owned()),
            ]
        );
        let (usable, _) = usable_node_pools(&snapshot, &kinds(), false, &LabelPolicy::core());
        assert_eq!(
            usable.len(),
            4,
            "readiness unchecked: not-ready and missing count"
        );
    }
}
