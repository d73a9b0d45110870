//! The kubelets, the cloud node lifecycle controller and the pod garbage collector.
//!
//! - A launched NodeClaim's instance that has been running for `registrationDelay` joins as a
//!   Node named after its private DNS name, with the NodeClaim's labels, capacity and
//!   allocatable, its taints and startup taints and `karpenter.sh/unregistered:NoExecute`
//!   (which core removes on registration), and Ready.
//! - Once core registered it (`karpenter.sh/registered=true`), the NodeClaim's startup taints
//!   go, as the DaemonSet agent that owns them would remove them.
//! - A Node whose instance shuts down turns NotReady; one whose instance is gone is deleted
//!   (the cloud node lifecycle controller).
//! - Pods bound to a Ready node run and become Ready; a graceful deletion completes
//!   [`POD_STOP`] after it started (or at its deadline if shorter); pods bound to a Node that
//!   no longer exists are deleted at once (the pod garbage collector).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use core_svc::cluster::{Cluster, ClusterExt, DeleteOptions, InMemoryCluster, SlimPod, Snapshot};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::NodeClaim;
use serde_json::json;

use super::{
    bound_node, is_node_ready, is_pod_ready, is_terminal, is_terminating, name_of, namespace_of,
    note, phase,
};
use crate::cloud::InstanceView;
use crate::scenario::parse_provider_id;

/// How long a pod takes to stop once deleted (at most its grace period).
pub const POD_STOP: Duration = Duration::from_secs(2);

/// The taint a Node joins with until core registers it.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// The label core sets on a Node it registered.
const LABEL_REGISTERED: &str = "karpenter.sh/registered";

/// Instances whose kubelet never joins the cluster (a broken bootstrap): the next `pending`
/// instances due to join before `until` fail, and are remembered in `failed` by provider ID.
#[derive(Debug, Clone, Default)]
pub struct FailingRegistrations {
    /// How many of the next instances due to join will not.
    pub pending: usize,
    /// When the bootstrap is fixed: later joins succeed whatever `pending` says.
    pub until: Option<Timestamp>,
    /// The provider IDs of those that did not.
    pub failed: BTreeSet<String>,
}

/// The cloud's delays that decide when a Node joins.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Create returns -> instance running.
    pub launch_delay: Duration,
    /// Instance running -> Node registered and Ready.
    pub registration_delay: Duration,
}

fn provider_id_of(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
        .filter(|id| !id.is_empty())
}

fn claim_provider_id(claim: &NodeClaim) -> &str {
    claim
        .status
        .as_ref()
        .map_or("", |status| status.provider_id.as_str())
}

/// The instance behind a provider ID.
fn instance_of<'a>(
    instances: &BTreeMap<String, &'a InstanceView>,
    provider_id: &str,
) -> Option<&'a InstanceView> {
    let (_, id) = parse_provider_id(provider_id).ok()?;
    instances.get(&id).copied()
}

fn seconds(time: Timestamp) -> i64 {
    time.as_second()
}

/// One step of every kubelet and of the node and pod lifecycle controllers.
pub async fn step(
    cluster: &Arc<InMemoryCluster>,
    snapshot: &Snapshot,
    instances: &[InstanceView],
    timing: Timing,
    failing: &mut FailingRegistrations,
    now: Timestamp,
) {
    let by_id: BTreeMap<String, &InstanceView> = instances
        .iter()
        .filter_map(|view| {
            parse_provider_id(&view.provider_id)
                .ok()
                .map(|(_, id)| (id, view))
        })
        .collect();
    register_nodes(cluster, snapshot, &by_id, timing, failing, now).await;
    node_lifecycle(cluster, snapshot, &by_id, now).await;
    pods(cluster, snapshot, now).await;
}

/// The first time after `now` at which a kubelet acts by the clock alone, with nothing else
/// changing: a running instance's Node joins, a deleted pod stops. The engine may skip the
/// quiet steps before it; what the cloud's own clock changes (an instance starting or
/// finishing termination) it learns from the cloud.
pub fn next_due(
    snapshot: &Snapshot,
    instances: &[InstanceView],
    timing: Timing,
    failed: &BTreeSet<String>,
    now: Timestamp,
) -> Option<Timestamp> {
    let joined: BTreeSet<&str> = snapshot.nodes().filter_map(provider_id_of).collect();
    let by_id: BTreeMap<&str, &InstanceView> = instances
        .iter()
        .map(|view| (view.provider_id.as_str(), view))
        .collect();
    let delay = i64::try_from((timing.launch_delay + timing.registration_delay).as_secs())
        .unwrap_or(i64::MAX);
    let joins = snapshot
        .node_claims()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .map(claim_provider_id)
        .filter(|id| !id.is_empty() && !joined.contains(id) && !failed.contains(*id))
        .filter_map(|id| by_id.get(id))
        .filter(|instance| instance.state == "running")
        .filter_map(|instance| instance.launch_time)
        .filter_map(|launched| Timestamp::from_second(launched.saturating_add(delay)).ok());
    let stops = snapshot
        .pods()
        .filter(|pod| is_terminating(pod) && bound_node(pod).is_some())
        .filter_map(stop_time);
    joins.chain(stops).filter(|at| *at > now).min()
}

async fn register_nodes(
    cluster: &Arc<InMemoryCluster>,
    snapshot: &Snapshot,
    instances: &BTreeMap<String, &InstanceView>,
    timing: Timing,
    failing: &mut FailingRegistrations,
    now: Timestamp,
) {
    let joined: BTreeSet<&str> = snapshot.nodes().filter_map(provider_id_of).collect();
    let names: BTreeSet<&str> = snapshot.nodes().map(name_of).collect();
    for claim in snapshot.node_claims() {
        let provider_id = claim_provider_id(claim);
        if provider_id.is_empty()
            || claim.metadata.deletion_timestamp.is_some()
            || joined.contains(provider_id)
            || failing.failed.contains(provider_id)
        {
            continue;
        }
        let Some(instance) = instance_of(instances, provider_id) else {
            continue;
        };
        let delay = timing.launch_delay + timing.registration_delay;
        let due = instance.launch_time.map(|launched| {
            launched.saturating_add(i64::try_from(delay.as_secs()).unwrap_or(i64::MAX))
        });
        if instance.state != "running" || due.is_none_or(|due| seconds(now) < due) {
            continue;
        }
        if failing.pending > 0 && failing.until.is_some_and(|until| now < until) {
            failing.pending -= 1;
            failing.failed.insert(provider_id.to_owned());
            tracing::debug!(
                provider_id,
                "kubelet: the node never joins (simulated failure)"
            );
            continue;
        }
        let node = node_for(claim, instance, now);
        let name = name_of(&node).to_owned();
        if names.contains(name.as_str()) {
            continue;
        }
        note(cluster.create(&node).await, || {
            format!("kubelet: registering node {name}")
        });
    }
}

/// The Node a NodeClaim's instance registers as.
fn node_for(claim: &NodeClaim, instance: &InstanceView, now: Timestamp) -> Node {
    let id = instance.provider_id.rsplit('/').next().unwrap_or_default();
    let name = instance
        .private_dns_name
        .clone()
        .unwrap_or_else(|| id.to_owned());
    let mut labels = claim.metadata.labels.clone().unwrap_or_default();
    labels.insert("kubernetes.io/hostname".to_owned(), name.clone());
    labels
        .entry("kubernetes.io/os".to_owned())
        .or_insert_with(|| "linux".to_owned());
    labels
        .entry("node.kubernetes.io/instance-type".to_owned())
        .or_insert_with(|| instance.instance_type.clone());
    labels
        .entry("topology.kubernetes.io/zone".to_owned())
        .or_insert_with(|| instance.zone.clone());
    labels
        .entry("karpenter.sh/capacity-type".to_owned())
        .or_insert_with(|| instance.capacity_type.clone());
    let mut taints: Vec<Taint> = claim.spec.taints.clone();
    for taint in &claim.spec.startup_taints {
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            taints.push(taint.clone());
        }
    }
    taints.push(Taint {
        key: UNREGISTERED_TAINT.to_owned(),
        effect: "NoExecute".to_owned(),
        ..Taint::default()
    });
    let status = claim.status.clone().unwrap_or_default();
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": instance.provider_id, "taints": taints},
        "status": {
            "capacity": status.capacity,
            "allocatable": status.allocatable,
            "conditions": [ready_condition("True", "KubeletReady", now)],
        },
    });
    // Every field above is one a Node has, with the type it has.
    serde_json::from_value(node).unwrap_or_default()
}

fn ready_condition(status: &str, reason: &str, now: Timestamp) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        message: None,
    }
}

async fn set_node_ready(
    cluster: &Arc<InMemoryCluster>,
    node: &Node,
    status: &str,
    reason: &str,
    now: Timestamp,
) {
    let name = name_of(node);
    let now = Time(now);
    let mut conditions: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    // Called only when the status changes, so the transition is now.
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
        message: None,
    });
    let patch = json!({"status": {"conditions": conditions}});
    note(
        cluster.merge_patch_status::<Node>(None, name, &patch).await,
        || format!("kubelet: node {name} Ready={status}"),
    );
}

async fn node_lifecycle(
    cluster: &Arc<InMemoryCluster>,
    snapshot: &Snapshot,
    instances: &BTreeMap<String, &InstanceView>,
    now: Timestamp,
) {
    let claims_by_provider: BTreeMap<&str, &NodeClaim> = snapshot
        .node_claims()
        .map(|claim| (claim_provider_id(claim), claim))
        .filter(|(id, _)| !id.is_empty())
        .collect();
    for node in snapshot.nodes() {
        let name = name_of(node);
        let Some(provider_id) = provider_id_of(node) else {
            continue;
        };
        if !provider_id.starts_with("aws:///") {
            continue;
        }
        match instance_of(instances, provider_id) {
            None => {
                if node.metadata.deletion_timestamp.is_none() {
                    note(
                        cluster
                            .delete::<Node>(None, name, DeleteOptions::default())
                            .await,
                        || format!("node lifecycle: deleting node {name}, its instance is gone"),
                    );
                }
            }
            Some(instance) if instance.state == "terminated" => {
                if node.metadata.deletion_timestamp.is_none() {
                    note(
                        cluster
                            .delete::<Node>(None, name, DeleteOptions::default())
                            .await,
                        || format!("node lifecycle: deleting node {name}, its instance terminated"),
                    );
                }
            }
            Some(instance) if instance.state == "shutting-down" || instance.state == "stopping" => {
                if is_node_ready(node) {
                    set_node_ready(cluster, node, "Unknown", "NodeStatusUnknown", now).await;
                }
            }
            Some(_) => {
                let registered = node
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(LABEL_REGISTERED))
                    .is_some_and(|value| value == "true");
                if registered
                    && is_node_ready(node)
                    && let Some(claim) = claims_by_provider.get(provider_id)
                {
                    remove_startup_taints(cluster, node, claim).await;
                }
            }
        }
    }
}

async fn remove_startup_taints(cluster: &Arc<InMemoryCluster>, node: &Node, claim: &NodeClaim) {
    let taints = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default();
    let present = |startup: &&Taint| {
        taints
            .iter()
            .any(|t| t.key == startup.key && t.effect == startup.effect)
    };
    // Most Nodes carry none by now: copy the Node only when there is one to remove.
    if !claim
        .spec
        .startup_taints
        .iter()
        .any(|startup| present(&startup))
    {
        return;
    }
    let mut current = node.clone();
    for startup in &claim.spec.startup_taints {
        if present(&startup) {
            let name = name_of(node).to_owned();
            match cluster
                .remove_node_taint(&current, &startup.key, &startup.effect)
                .await
            {
                Ok(updated) => current = updated,
                Err(error) => {
                    note::<()>(Err(error), || {
                        format!("startup taint agent: removing {} from {name}", startup.key)
                    });
                    return;
                }
            }
        }
    }
}

async fn pods(cluster: &Arc<InMemoryCluster>, snapshot: &Snapshot, now: Timestamp) {
    let nodes: BTreeMap<&str, &Node> = snapshot.nodes().map(|node| (name_of(node), node)).collect();
    for pod in snapshot.pods() {
        let Some(node_name) = bound_node(pod) else {
            continue;
        };
        let namespace = namespace_of(pod);
        let name = name_of(pod);
        let Some(node) = nodes.get(node_name) else {
            note(
                cluster
                    .delete::<k8s_openapi::api::core::v1::Pod>(
                        Some(namespace),
                        name,
                        DeleteOptions::grace_period(0),
                    )
                    .await,
                || format!("pod gc: deleting {namespace}/{name}, its node {node_name} is gone"),
            );
            continue;
        };
        if is_terminating(pod) {
            if stop_time(pod).is_some_and(|stop| now >= stop) {
                note(cluster.finish_pod_termination(namespace, name), || {
                    format!("kubelet: stopping {namespace}/{name}")
                });
            }
            continue;
        }
        if is_terminal(pod) || !is_node_ready(node) {
            continue;
        }
        if phase(pod) != Some("Running") || !is_pod_ready(pod) {
            note(cluster.set_pod_ready(namespace, name, true), || {
                format!("kubelet: starting {namespace}/{name}")
            });
        }
    }
}

/// When a deleted pod has stopped: [`POD_STOP`] after its deletion started, or its deadline
/// if that comes first.
fn stop_time(pod: &SlimPod) -> Option<Timestamp> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .unwrap_or(0)
        .max(0);
    let stop = i64::try_from(POD_STOP.as_secs())
        .unwrap_or(i64::MAX)
        .min(grace);
    let started = deadline
        .saturating_sub(jiff::SignedDuration::from_secs(grace))
        .unwrap_or(deadline);
    Some(
        started
            .saturating_add(jiff::SignedDuration::from_secs(stop))
            .unwrap_or(deadline),
    )
}
