//! The one drain path, which both routes to a node's end take: the termination controller's
//! (a deleted NodeClaim or Node, bounded by the NodeClaim's terminationGracePeriod) and the
//! disruption controller's drain before it deletes a candidate (bounded by its drain timeout).
//! As upstream (kubernetes-sigs/karpenter pkg/controllers/node/termination/terminator), a
//! node is first cordoned: tainted `karpenter.sh/disrupted:NoSchedule` and labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers` ([`cordon`]), then each pass
//! deletes the pods the deadline requires and evicts the tier [`plan`] says
//! ([`drain_node`]), and looks again as [`retry_after`] says.
//!
//! - [`plan`]: the drain's decisions, pure (which pods, in which order, which now).
//! - [`cordon`] / [`uncordon`]: the taint and the label, together; [`uncordon`] is a rolled
//!   back disruption's, and removes only the label core wrote.
//! - [`drain_node`]: one pass over one node; [`evict_pod`]: the eviction step (UID precondition,
//!   `PodEvicted` / `EvictionBlocked`).

pub mod plan;

use crate::cluster::SlimPod;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::Context;
use crate::cloudprovider::CloudProvider;
use crate::cluster::{Cluster, ClusterError, ClusterExt, DeleteOptions, Preconditions};
use crate::events::{EventType, ObjectRef, Reason, non_empty_fields};
use crate::objects::{
    DISRUPTED_TAINT_EFFECT, DISRUPTED_TAINT_KEY, EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE,
    LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS, disrupted_taint, has_disrupted_taint,
    has_exclude_label, name_of,
};
use plan::DrainPlan;

/// How soon a drain that did something this pass looks again.
pub const DRAIN_POLL: Duration = Duration::from_secs(1);
/// How long a drain that could do nothing (PDBs, do-not-disrupt, pods terminating) waits at
/// most before trying again (upstream's eviction backoff ceiling).
pub const DRAIN_RETRY_MAX: Duration = Duration::from_secs(10);

/// Decides whether an event with a reason about a key (a pod's UID) is due now; the
/// controllers dedupe repeated `EvictionBlocked` events with it.
pub type EventDue<'c> = &'c (dyn Fn(&str, &str) -> bool + Sync);

/// A node as [`cordon`] left it.
#[derive(Debug, Clone)]
pub struct Cordoned {
    /// The Node as written (or as read, when nothing was written).
    pub node: Node,
    /// Whether the taint or the label was written.
    pub wrote: bool,
}

/// Taints the Node `karpenter.sh/disrupted:NoSchedule` and labels it out of external load
/// balancers (upstream `Terminator.Taint`), each only when missing; an existing label keeps
/// its value. A conflict is retried once on a fresh read; `None` when the Node is gone.
pub async fn cordon<C: Cluster>(
    cluster: &C,
    node: &Node,
) -> Result<Option<Cordoned>, ClusterError> {
    match cordon_once(cluster, node).await {
        Err(error) if error.is_conflict() => match fresh(cluster, node).await? {
            Some(node) => absent_if_gone(cordon_once(cluster, &node).await),
            None => Ok(None),
        },
        other => absent_if_gone(other),
    }
}

async fn cordon_once<C: Cluster>(cluster: &C, node: &Node) -> Result<Cordoned, ClusterError> {
    let mut wrote = false;
    let mut node = node.clone();
    if !has_disrupted_taint(&node) {
        node = cluster.add_node_taint(&node, &disrupted_taint()).await?;
        wrote = true;
    }
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS));
    if !labelled {
        let patch = json!({ "metadata": { "labels": {
            LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS_VALUE,
        } } });
        node = cluster
            .merge_patch::<Node>(None, name_of(&node), &patch)
            .await?;
        wrote = true;
    }
    Ok(Cordoned { node, wrote })
}

/// Undoes [`cordon`] for a disruption that did not go ahead: removes the taint, and the label
/// when it has core's value. The label goes first: should a crash stop this half-way, the
/// taint left still marks the node for the next pass. A conflict is retried once on a fresh
/// read; a Node gone is left alone.
pub async fn uncordon<C: Cluster>(cluster: &C, node: &Node) -> Result<(), ClusterError> {
    match uncordon_once(cluster, node).await {
        Err(error) if error.is_conflict() => match fresh(cluster, node).await? {
            Some(node) => absent_if_gone(uncordon_once(cluster, &node).await).map(|_| ()),
            None => Ok(()),
        },
        other => absent_if_gone(other).map(|_| ()),
    }
}

async fn uncordon_once<C: Cluster>(cluster: &C, node: &Node) -> Result<(), ClusterError> {
    let mut node = node.clone();
    if has_exclude_label(&node) {
        let patch = json!({ "metadata": { "labels": {
            LABEL_EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: Value::Null,
        } } });
        node = cluster
            .merge_patch::<Node>(None, name_of(&node), &patch)
            .await?;
    }
    cluster
        .remove_node_taint(&node, DISRUPTED_TAINT_KEY, DISRUPTED_TAINT_EFFECT)
        .await?;
    Ok(())
}

/// Whether the Node carries a mark of [`cordon`] (the taint, or core's label).
pub fn is_cordoned(node: &Node) -> bool {
    has_disrupted_taint(node) || has_exclude_label(node)
}

async fn fresh<C: Cluster>(cluster: &C, node: &Node) -> Result<Option<Node>, ClusterError> {
    cluster.get::<Node>(None, name_of(node)).await
}

fn absent_if_gone<T>(result: Result<T, ClusterError>) -> Result<Option<T>, ClusterError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

/// What one pass of [`drain_node`] came to.
#[derive(Debug, Clone)]
pub struct NodePass {
    /// The Node as [`cordon`] left it.
    pub node: Node,
    /// Whether the taint or the label was written.
    pub cordoned_now: bool,
    /// Whether a pod was deleted or evicted.
    pub acted: bool,
    /// Whether the plan counts the node as drained (nothing left, or the deadline passed).
    pub drained: bool,
    /// The next time a waiting pod becomes due for deletion, if one will.
    pub next_force_delete: Option<Timestamp>,
}

/// One pass of the drain of `node` (of `node_claim`, empty for a Node without one), whose pods
/// are `pods`, at `now`, bounded by `deadline` (the NodeClaim's terminationGracePeriod; `None`
/// for none): cordon it, then delete and evict as [`plan::plan`] says. `None` when the Node is
/// gone. Past the deadline the plan still deletes what runs: the drain is over, but the pods
/// get their last second.
pub async fn drain_node<C: Cluster, P: CloudProvider>(
    ctx: &Context<C, P>,
    node: &Node,
    pods: &[&SlimPod],
    node_claim: &str,
    deadline: Option<Timestamp>,
    now: Timestamp,
    event_due: EventDue<'_>,
) -> Result<Option<NodePass>, ClusterError> {
    let Some(Cordoned { node, wrote }) = cordon(ctx.cluster.as_ref(), node).await? else {
        return Ok(None);
    };
    let plan = plan::plan(pods.iter().copied(), now, deadline);
    let acted = execute(ctx, &plan, name_of(&node), node_claim, event_due).await?;
    Ok(Some(NodePass {
        cordoned_now: wrote,
        acted,
        drained: plan.is_drained(),
        next_force_delete: plan.next_force_delete,
        node,
    }))
}

/// How long a drain waits before its next pass: [`DRAIN_POLL`] when this pass deleted or
/// evicted a pod, otherwise until the soonest of `due` (a force delete, a deadline, a
/// timeout), at most [`DRAIN_RETRY_MAX`], at least [`DRAIN_POLL`].
pub fn retry_after(
    acted: bool,
    due: impl IntoIterator<Item = Timestamp>,
    now: Timestamp,
) -> Duration {
    if acted {
        return DRAIN_POLL;
    }
    due.into_iter()
        .map(|due| Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO))
        .fold(DRAIN_RETRY_MAX, Duration::min)
        .max(DRAIN_POLL)
}

/// Carries out one pass of a node's drain plan; answers whether any pod was deleted or
/// evicted.
async fn execute<C: Cluster, P: CloudProvider>(
    ctx: &Context<C, P>,
    plan: &DrainPlan<'_>,
    node: &str,
    node_claim: &str,
    event_due: EventDue<'_>,
) -> Result<bool, ClusterError> {
    let mut acted = false;
    for force in &plan.force_delete {
        let pod = force.pod;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let options = DeleteOptions {
            grace_period_seconds: Some(force.grace_period_seconds),
            preconditions: uid_preconditions(pod),
        };
        match ctx
            .cluster
            .delete::<Pod>(Some(namespace), name_of(pod), options)
            .await
        {
            Ok(()) => {}
            // Gone, or a new pod under the same name: nothing of this one to delete.
            Err(error) if error.is_not_found() || error.is_conflict() => continue,
            Err(error) => return Err(error),
        }
        acted = true;
        let qualified = qualified_pod_name(pod);
        let grace = force.grace_period_seconds.to_string();
        tracing::info!(
            pod = %qualified,
            node,
            node_claim,
            grace_period_seconds = force.grace_period_seconds,
            "deleting pod for the terminationGracePeriod deadline"
        );
        ctx.event(
            ObjectRef::namespaced("Pod", namespace, name_of(pod)),
            EventType::Normal,
            Reason::PodDeleted,
            format!(
                "Deleting the pod with a grace period of {grace}s so that it stops before the node's terminationGracePeriod ends"
            ),
            non_empty_fields(&[
                ("pod", &qualified),
                ("node", node),
                ("nodeClaim", node_claim),
                ("reason", "TerminationGracePeriod"),
                ("gracePeriodSeconds", &grace),
            ]),
        );
    }
    for pod in &plan.evict {
        acted |= evict_pod(ctx, pod, node, node_claim, event_due).await? == Eviction::Evicted;
    }
    Ok(acted)
}

/// What asking the eviction API for one pod came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// Admitted: the pod is going.
    Evicted,
    /// Gone, or recreated under the same name since the read: nothing of this pod to evict.
    Gone,
    /// Refused by a PodDisruptionBudget (`namespace/name`), or by several selecting the pod
    /// (comma-separated), which the eviction API does not support.
    Blocked {
        /// The budget or budgets.
        budgets: String,
    },
}

/// Evicts `pod` from `node` (of `node_claim`, empty for a Node without one) through the
/// eviction API, with the pod's UID as precondition, and records `PodEvicted`, or
/// `EvictionBlocked` when `event_due("EvictionBlocked", key)` says one is due for the pod (`key`:
/// its UID). The one eviction step of the drain.
pub async fn evict_pod<C: Cluster, P: CloudProvider>(
    ctx: &Context<C, P>,
    pod: &SlimPod,
    node: &str,
    node_claim: &str,
    event_due: EventDue<'_>,
) -> Result<Eviction, ClusterError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = name_of(pod);
    let qualified = qualified_pod_name(pod);
    let object = ObjectRef::namespaced("Pod", namespace, name);
    let dedupe_key = pod
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| qualified.clone());
    match ctx
        .cluster
        .evict(namespace, name, &uid_preconditions(pod))
        .await
    {
        Ok(()) => {
            tracing::info!(pod = %qualified, node, node_claim, "evicted pod");
            ctx.event(
                object,
                EventType::Normal,
                Reason::PodEvicted,
                format!("Evicted pod from node {node}"),
                non_empty_fields(&[
                    ("pod", &qualified),
                    ("node", node),
                    ("nodeClaim", node_claim),
                ]),
            );
            Ok(Eviction::Evicted)
        }
        // Gone, or recreated under the same name since the read: not this drain's pod.
        Err(error) if error.is_not_found() || error.is_conflict() => Ok(Eviction::Gone),
        Err(ClusterError::TooManyRequests { budget, reason, .. }) => {
            tracing::debug!(pod = %qualified, node, budget = %budget, "eviction blocked by a PodDisruptionBudget");
            let budget = format!("{namespace}/{budget}");
            if event_due("EvictionBlocked", &dedupe_key) {
                ctx.event(
                    object,
                    EventType::Normal,
                    Reason::EvictionBlocked,
                    format!("Eviction blocked by PodDisruptionBudget {budget}: {reason}"),
                    non_empty_fields(&[
                        ("pod", &qualified),
                        ("node", node),
                        ("nodeClaim", node_claim),
                        ("podDisruptionBudget", &budget),
                    ]),
                );
            }
            Ok(Eviction::Blocked { budgets: budget })
        }
        Err(ClusterError::MultipleDisruptionBudgets { budgets, .. }) => {
            let budgets = budgets.join(",");
            tracing::warn!(pod = %qualified, node, budgets = %budgets, "pod matches several PodDisruptionBudgets; eviction refused");
            if event_due("EvictionBlocked", &dedupe_key) {
                ctx.event(
                    object,
                    EventType::Warning,
                    Reason::EvictionBlocked,
                    format!(
                        "Eviction refused: the pod matches more than one PodDisruptionBudget ({budgets}), which eviction does not support"
                    ),
                    non_empty_fields(&[
                        ("pod", &qualified),
                        ("node", node),
                        ("nodeClaim", node_claim),
                        ("podDisruptionBudget", &budgets),
                    ]),
                );
            }
            Ok(Eviction::Blocked { budgets })
        }
        Err(error) => Err(error),
    }
}

pub(crate) fn uid_preconditions<K: kube::Resource>(object: &K) -> Preconditions {
    object
        .meta()
        .uid
        .as_ref()
        .map(Preconditions::uid)
        .unwrap_or_default()
}

pub(crate) fn qualified_pod_name(pod: &SlimPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        name_of(pod)
    )
}
