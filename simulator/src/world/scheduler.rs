//! The kube-scheduler: binds pending pods to Ready, schedulable Nodes where they fit, and marks
//! the others `PodScheduled=False` with reason `Unschedulable`.
//!
//! Among the Nodes a pod fits, it takes the one the default profile's score plugins rate
//! highest ([`scoring`]), or with [`KubeScheduler::FirstFit`] the first.
//!
//! Fit is decided by the domain's scheduler ([`core_domain::scheduler::solve`]) run over the
//! existing Nodes only (no NodePool, so it can plan nothing new): resources, node selectors,
//! node affinity, taints and tolerations, topology spread and pod (anti-)affinity, as the
//! provisioner judges them. Every taint of a Node counts, startup taints included, as they do
//! for the kube-scheduler.

use core_svc::cluster::SlimPod;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use core_domain::labels::{LABEL_HOSTNAME, LabelPolicy};
use core_domain::scheduler::{
    ExistingNode, PodId, PreferencePolicy, Room, SchedulingInput, WhenUnsatisfiable,
    has_inter_pod_constraints, solve,
};
use core_svc::cluster::{Cluster, InMemoryCluster, Snapshot};
use core_svc::controllers::provisioning::convert;
use core_svc::controllers::provisioning::input::existing_node;
use core_svc::controllers::provisioning::memo::NodeMemo;
use core_svc::controllers::provisioning::selection::nominated_node;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::scoring::{self, KubeScheduler, PendingPod, Scorer};
use super::{
    bound_node, is_node_ready, is_terminal, is_terminating, name_of, namespace_of, note, phase,
};

/// The pods this scheduler is responsible for: unbound, not terminating, pending, for the
/// default scheduler.
fn is_pending(pod: &SlimPod) -> bool {
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.scheduler_name.as_deref())
        .unwrap_or("default-scheduler");
    bound_node(pod).is_none()
        && !is_terminating(pod)
        && phase(pod).is_none_or(|phase| phase == "Pending")
        && scheduler == "default-scheduler"
}

fn is_marked_unschedulable(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

/// One scheduling cycle over every pending pod.
///
/// Pods whose `status.nominatedNodeName` names a schedulable Node are tried on that Node
/// first, as the kube-scheduler does (it evaluates the nominated node before any other and
/// takes it when the pod fits, kubernetes/kubernetes `pkg/scheduler/schedule_one.go`,
/// `evaluateNominatedNode`); the provisioner names the Node it planned each pod for. Those
/// that do not fit there, and every other pod, are then placed on any Node.
pub async fn step(
    cluster: &Arc<InMemoryCluster>,
    memo: &NodeMemo,
    snapshot: &Snapshot,
    policy: &LabelPolicy,
    profile: KubeScheduler,
    now: Timestamp,
) {
    let pending: Vec<&SlimPod> = snapshot.pods().filter(|p| is_pending(p)).collect();
    if pending.is_empty() {
        return;
    }
    let mut nominated = Vec::new();
    let mut others = Vec::new();
    let mut refused: Vec<(&SlimPod, String)> = Vec::new();
    let mut nodes = schedulable_nodes(snapshot, memo);
    let schedulable: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(at, node)| (node.name.clone(), at))
        .collect();
    for pod in &pending {
        match convert::pod(pod) {
            Ok(converted) => match nominated_node(pod).filter(|n| schedulable.contains_key(*n)) {
                Some(node) => nominated.push((converted, node)),
                None => others.push(converted),
            },
            Err(error) => refused.push((pod, format!("the pod cannot be read: {error}"))),
        }
    }
    // When no pod looks at other pods, a Node without room for the smallest of the pods to
    // place takes none of them and changes nothing: leave it out (in a full cluster, most are).
    let input = |pods: Vec<core_domain::scheduler::Pod>, nodes: &[Arc<ExistingNode>]| {
        let prunable = !has_inter_pod_constraints(&pods, nodes);
        let smallest = Room::smallest(&pods);
        let existing_nodes = nodes
            .iter()
            .filter(|node| !prunable || Room::free_on(node).holds(&smallest))
            .cloned()
            .collect();
        SchedulingInput {
            pods,
            existing_nodes,
            node_pools: Vec::new(),
            daemon_set_pods: Vec::new(),
            label_policy: policy.clone(),
            preference_policy: PreferencePolicy::Respect,
        }
    };
    if !nominated.is_empty() {
        let pinned = nominated
            .iter()
            .map(|(pod, node)| {
                let mut pinned = pod.clone();
                pinned
                    .node_selector
                    .insert(LABEL_HOSTNAME.to_owned(), (*node).to_owned());
                pinned
            })
            .collect();
        let placed: HashMap<PodId, String> = match solve(&input(pinned, &nodes)) {
            Ok(results) => results.existing_placements.into_iter().collect(),
            Err(error) => {
                tracing::warn!(%error, "scheduler: the scheduling input is invalid");
                return;
            }
        };
        for (pod, _) in nominated {
            match placed.get(&pod.id).and_then(|node| schedulable.get(node)) {
                Some(&at) => {
                    let (namespace, name) = (pod.id.namespace(), pod.id.name());
                    let node = &nodes[at].name;
                    note(cluster.bind_pod(namespace, name, node), || {
                        format!("scheduler: binding {namespace}/{name} to {node}")
                    });
                    nodes[at] = Arc::new(ExistingNode::clone(&nodes[at]).with_pod(pod));
                }
                None => others.push(pod),
            }
        }
    }
    let by_id: BTreeMap<(&str, &str), &SlimPod> = pending
        .iter()
        .map(|pod| ((namespace_of(pod), name_of(*pod)), *pod))
        .collect();
    let (others, nodes) = match profile {
        KubeScheduler::FirstFit => (others, nodes),
        KubeScheduler::Default => {
            let mut scorer = Scorer::new(nodes);
            let leftovers = place_scored(cluster, &mut scorer, others, &by_id, policy);
            (leftovers, scorer.nodes().to_vec())
        }
    };
    // First-fit: the domain scheduler's placement. With scoring, the pods it could not place,
    // for the reason the provisioner reads (and any the cheap filter refused wrongly).
    if !others.is_empty() {
        match solve(&input(others, &nodes)) {
            Ok(results) => {
                for (id, node) in &results.existing_placements {
                    let (namespace, name) = (id.namespace(), id.name());
                    note(cluster.bind_pod(namespace, name, node), || {
                        format!("scheduler: binding {namespace}/{name} to {node}")
                    });
                }
                for (id, reason) in &results.unschedulable {
                    if let Some(pod) = by_id.get(&(id.namespace(), id.name())) {
                        refused.push((pod, reason.clone()));
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "scheduler: the scheduling input is invalid");
                return;
            }
        }
    }
    for (pod, message) in refused {
        if !is_marked_unschedulable(pod) {
            mark_unschedulable(cluster, pod, &message, now).await;
        }
    }
}

/// Binds `pods` one at a time, in the scheduling queue's order (priority, then age), each to
/// the feasible Node that scores highest (see [`scoring`](super::scoring)); returns those that
/// fit no Node. Pods whose placement depends on other pods by a hard rule (a `DoNotSchedule`
/// spread, required pod affinity or anti-affinity, theirs or a placed pod's) are checked by
/// the domain scheduler on each Node in score order, so what fits is decided as first-fit
/// decides it.
fn place_scored(
    cluster: &Arc<InMemoryCluster>,
    scorer: &mut Scorer,
    pods: Vec<core_domain::scheduler::Pod>,
    by_id: &BTreeMap<(&str, &str), &SlimPod>,
    policy: &LabelPolicy,
) -> Vec<core_domain::scheduler::Pod> {
    // Only Nodes with room for the smallest pod can take any.
    let smallest = Room::smallest(&pods);
    let mut queue: Vec<PendingPod> = pods
        .into_iter()
        .map(|pod| {
            let original = by_id.get(&(pod.id.namespace(), pod.id.name()));
            PendingPod {
                priority: original
                    .and_then(|p| p.spec.as_ref())
                    .and_then(|spec| spec.priority)
                    .unwrap_or(0),
                default_spreading: original.is_some_and(|p| has_spreading_owner(p)),
                pod,
            }
        })
        .collect();
    queue.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.pod.created.cmp(&b.pod.created))
            .then_with(|| a.pod.id.cmp(&b.pod.id))
    });
    let mut symmetric_anti_affinity = scorer
        .nodes()
        .iter()
        .flat_map(|node| &node.pods)
        .any(|pod| !pod.pod_anti_affinity.required.is_empty());
    let roomy: Vec<usize> = (0..scorer.nodes().len())
        .filter(|&at| Room::free_on(&scorer.nodes()[at]).holds(&smallest))
        .collect();
    // Once a pod of a ReplicaSet fits nowhere, its siblings (same spec) fit nowhere in this
    // cycle either: Nodes only fill.
    let mut full_templates: HashSet<(String, String)> = HashSet::new();
    let mut leftovers = Vec::new();
    for pending in queue {
        let pod = &pending.pod;
        let template = pod
            .labels
            .get("pod-template-hash")
            .map(|hash| (pod.id.namespace().to_owned(), hash.clone()));
        let hard = symmetric_anti_affinity || has_hard_inter_pod_rules(pod);
        if !hard
            && template
                .as_ref()
                .is_some_and(|t| full_templates.contains(t))
        {
            leftovers.push(pending.pod);
            continue;
        }
        let candidates: Vec<usize> = roomy
            .iter()
            .copied()
            .filter(|&at| scoring::fits_alone(pod, &scorer.nodes()[at]))
            .collect();
        let chosen = if candidates.is_empty() {
            None
        } else {
            let scores = scorer.scores(&pending, &candidates);
            let order = scoring::ranked(scorer.nodes(), &candidates, &scores);
            if hard {
                order
                    .into_iter()
                    .find(|&at| fits_among_others(pod, scorer.nodes(), at, policy))
            } else {
                order.first().copied()
            }
        };
        let Some(at) = chosen else {
            if !hard && let Some(template) = template {
                full_templates.insert(template);
            }
            leftovers.push(pending.pod);
            continue;
        };
        let (namespace, name) = (pod.id.namespace(), pod.id.name());
        let node = &scorer.nodes()[at].name;
        note(cluster.bind_pod(namespace, name, node), || {
            format!("scheduler: binding {namespace}/{name} to {node}")
        });
        symmetric_anti_affinity |= !pod.pod_anti_affinity.required.is_empty();
        scorer.bind(at, pending.pod);
    }
    leftovers
}

/// Whether where `pod` may go depends on other pods by a hard rule.
fn has_hard_inter_pod_rules(pod: &core_domain::scheduler::Pod) -> bool {
    !pod.pod_affinity.required.is_empty()
        || !pod.pod_anti_affinity.required.is_empty()
        || pod
            .topology_spread_constraints
            .iter()
            .any(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
}

/// Whether the domain scheduler, preferences aside, places `pod` on the Node at `at` among
/// `nodes` (the hard spread and pod affinity rules, counted over every Node).
fn fits_among_others(
    pod: &core_domain::scheduler::Pod,
    nodes: &[Arc<ExistingNode>],
    at: usize,
    policy: &LabelPolicy,
) -> bool {
    let mut pinned = pod.clone();
    pinned
        .node_selector
        .insert(LABEL_HOSTNAME.to_owned(), nodes[at].name.clone());
    let input = SchedulingInput {
        pods: vec![pinned],
        existing_nodes: nodes.to_vec(),
        node_pools: Vec::new(),
        daemon_set_pods: Vec::new(),
        label_policy: policy.clone(),
        preference_policy: PreferencePolicy::Ignore,
    };
    solve(&input).is_ok_and(|results| !results.existing_placements.is_empty())
}

/// Whether kube-scheduler's system default spreading applies to `pod`: it is owned by a
/// ReplicaSet, StatefulSet or ReplicationController (the simulator has no Services).
fn has_spreading_owner(pod: &SlimPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|owner| {
        matches!(
            owner.kind.as_str(),
            "ReplicaSet" | "StatefulSet" | "ReplicationController"
        )
    })
}

/// Of `pods` (bound or not), those that could not be placed on the Ready, schedulable Nodes
/// other than `excluded`, nor on the launched NodeClaims `in_flight` (capacity on its way, as
/// core's disruption counts it), each with why; empty when every one fits. Pods that cannot
/// be read count as placed: the question is about room, not about the pod.
pub fn unplaceable(
    snapshot: &Snapshot,
    pods: &[&SlimPod],
    excluded: &std::collections::BTreeSet<&str>,
    in_flight: &[&karpenter_api::NodeClaim],
    policy: &LabelPolicy,
) -> Vec<(String, String)> {
    let nodes: Vec<Arc<ExistingNode>> = schedulable_nodes(snapshot, &NodeMemo::new())
        .into_iter()
        .filter(|node| !excluded.contains(node.name.as_str()))
        .chain(
            in_flight
                .iter()
                .filter_map(|claim| convert::in_flight_node_claim(claim, &[]).ok())
                .map(Arc::new),
        )
        .collect();
    let converted: Vec<core_domain::scheduler::Pod> = pods
        .iter()
        .filter_map(|pod| {
            let mut unbound = SlimPod::clone(pod);
            if let Some(spec) = unbound.spec.as_mut() {
                spec.node_name = None;
            }
            convert::pod(&unbound).ok()
        })
        .collect();
    if converted.is_empty() {
        return Vec::new();
    }
    let input = SchedulingInput {
        pods: converted,
        existing_nodes: nodes,
        node_pools: Vec::new(),
        daemon_set_pods: Vec::new(),
        label_policy: policy.clone(),
        preference_policy: PreferencePolicy::Respect,
    };
    match solve(&input) {
        Ok(results) => results
            .unschedulable
            .into_iter()
            .map(|(id, reason)| (format!("{}/{}", id.namespace(), id.name()), reason))
            .collect(),
        Err(error) => vec![(
            "(all)".to_owned(),
            format!("the scheduling input is invalid: {error}"),
        )],
    }
}

/// Ready Nodes that take pods, with the pods bound to them; those unchanged since the last
/// cycle come from `memo`.
fn schedulable_nodes(snapshot: &Snapshot, memo: &NodeMemo) -> Vec<Arc<ExistingNode>> {
    let pods_by_node = snapshot.pods_by_node();
    let mut nodes = Vec::new();
    let mut skipped = Vec::new();
    memo.begin_pass();
    for node in snapshot.nodes() {
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|spec| spec.unschedulable)
            .unwrap_or(false);
        if node.metadata.deletion_timestamp.is_some() || cordoned || !is_node_ready(node) {
            continue;
        }
        // Pods being deleted hold their resources but count for no topology spread, as in
        // kube-scheduler: a drained node's evicted pods do not hold their zone's place (nor,
        // here, their affinity terms and host ports: see `add_terminating_pod`).
        let (terminating, pods): (Vec<&SlimPod>, Vec<&SlimPod>) = pods_by_node
            .get(name_of(node))
            .into_iter()
            .flatten()
            .copied()
            .filter(|pod| !is_terminal(pod))
            .partition(|pod| is_terminating(pod));
        // Unreadable objects are left out, as the provisioner leaves them out.
        let Some(mut existing) = existing_node(Some(memo), node, None, &pods, &mut skipped) else {
            continue;
        };
        if !terminating.is_empty() {
            let converted: Vec<core_domain::scheduler::Pod> = terminating
                .iter()
                .filter_map(|pod| convert::pod(pod).ok())
                .collect();
            let node = Arc::make_mut(&mut existing);
            for pod in &converted {
                node.add_terminating_pod(pod);
            }
        }
        // The kube-scheduler looks at a Ready Node's taints as they are (copied only then: the
        // memo's conversion is shared).
        if !existing.initialized || !existing.startup_taints.is_empty() {
            let existing = Arc::make_mut(&mut existing);
            existing.initialized = true;
            existing.startup_taints.clear();
        }
        nodes.push(existing);
    }
    nodes
}

async fn mark_unschedulable(
    cluster: &Arc<InMemoryCluster>,
    pod: &SlimPod,
    message: &str,
    now: Timestamp,
) {
    let namespace = namespace_of(pod);
    let name = name_of(pod);
    // The merge patch replaces the whole list, and a snapshot's pod keeps only the conditions
    // core reads (`Ready`, a `PodScheduled` that is not True). An unbound pod has no others:
    // the kubelet writes the rest once it runs.
    let mut conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != "PodScheduled");
    conditions.push(PodCondition {
        type_: "PodScheduled".to_owned(),
        status: "False".to_owned(),
        reason: Some("Unschedulable".to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    });
    let patch = json!({
        "metadata": {"resourceVersion": pod.metadata.resource_version},
        "status": {"conditions": conditions},
    });
    note(
        cluster
            .merge_patch_status::<Pod>(Some(namespace), name, &patch)
            .await,
        || format!("scheduler: marking {namespace}/{name} unschedulable"),
    );
}
