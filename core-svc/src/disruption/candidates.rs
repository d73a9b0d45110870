//! Which nodes may be disrupted at all (upstream kubernetes-sigs/karpenter: `NewCandidate` in
//! `pkg/controllers/disruption/types.go`, `StateNode.ValidateNodeDisruptable` and
//! `ValidatePodsDisruptable` in `pkg/controllers/state/statenode.go`, `pkg/utils/pdb`).
//!
//! A candidate is a Node paired with its NodeClaim (by provider ID) that:
//!
//! 1. is initialized (the Node's `karpenter.sh/initialized` label, or the NodeClaim's
//!    `Initialized` condition);
//! 2. is not already disrupting: no `karpenter.sh/disrupted:NoSchedule` taint (the durable form
//!    of upstream's in-memory "marked for deletion": the orchestration taints a node first),
//!    neither the Node nor the NodeClaim being deleted, no `InstanceTerminating=True`;
//! 3. is not nominated for pending pods (the caller passes the nominated node names);
//! 4. carries no `karpenter.sh/do-not-disrupt: "true"`, on the Node or on the NodeClaim;
//! 5. has a `karpenter.sh/nodepool` label naming a NodePool that exists;
//! 6. runs no pod that blocks: a running pod whose own `karpenter.sh/do-not-disrupt` is active
//!    ([`super::do_not_disrupt`]); an evictable pod (running, not tolerating the disrupted
//!    taint, not a mirror pod) whose PodDisruptionBudget allows no disruption now; an evictable
//!    pod selected by more than one PodDisruptionBudget (the eviction API refuses those).
//!
//! **Exception (upstream):** for the eventual class (drift), a NodeClaim with
//! `spec.terminationGracePeriod` is not held back by step 6: the drain's deadline will get the
//! pods off regardless, so the block is recorded on the candidate and ignored. Consolidation
//! (graceful) always honours it.
//!
//! A PodDisruptionBudget's allowance is computed by [`crate::pdb`] from the snapshot's pods as
//! the Kubernetes disruption controller computes it (healthy = Ready and not terminating;
//! `minAvailable` / `maxUnavailable` as a count or a percentage of the expected pods, rounded
//! up; the expected pods of a percentage or of `maxUnavailable` are the selected pods that a
//! controller owns and that still run, standing in for the controllers' scale). A status the
//! disruption controller wrote for the budget's current generation can only lower it: it knows
//! the workloads' scale, which the pods alone do not tell, and it counts evictions it has just
//! admitted.
//!
//! Differences from upstream: nominations come from the caller (upstream keeps them on its state
//! nodes); the orchestration queue is not consulted (a node in it is tainted, so step 2 covers
//! it); whether the NodePool has instance types is left to the caller, which holds the plugin's
//! catalogue; a PodDisruptionBudget whose selector cannot be parsed selects nothing (the API
//! server rejects such selectors, so it does not happen; upstream would fail the whole pass).

use crate::cluster::SlimPod;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::OnceLock;

use core_domain::labels::{ANNOTATION_DO_NOT_DISRUPT, LABEL_NODE_INITIALIZED, LABEL_NODEPOOL};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_INSTANCE_TERMINATING};
use karpenter_api::{DisruptionReason, NodeClaim, NodePool, condition};
use kube::core::{Selector, SelectorExt};

use super::cost;
use super::do_not_disrupt::{DoNotDisrupt, blocks_disruption, is_active, pod_key};
use crate::cluster::{PodsByNode, Snapshot};
use crate::objects::{
    has_disrupted_taint, is_mirror, is_owned_by_daemon_set, is_terminating,
    tolerates_disrupted_taint,
};
use crate::pdb;

// The budget arithmetic lives in `crate::pdb`; disruption's users keep finding it here.
pub use crate::pdb::{PdbAllowance, UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW, pdb_allowance};

/// How a disruption method treats the pods that block a node (upstream's disruption classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DisruptionClass {
    /// Consolidation (empty or underutilized nodes): blocking pods always hold the node back.
    Graceful,
    /// Drift: a NodeClaim with `terminationGracePeriod` is disrupted despite blocking pods.
    Eventual,
}

impl DisruptionClass {
    /// The class of the methods that disrupt for `reason`.
    pub fn of(reason: DisruptionReason) -> Self {
        match reason {
            DisruptionReason::Drifted => Self::Eventual,
            DisruptionReason::Empty | DisruptionReason::Underutilized => Self::Graceful,
        }
    }
}

/// Why a node counts as already being disrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disrupting {
    /// The NodeClaim's instance is being terminated (`InstanceTerminating=True`).
    InstanceTerminating,
    /// The NodeClaim is being deleted.
    NodeClaimDeleting,
    /// The Node is being deleted.
    NodeDeleting,
    /// The Node carries `karpenter.sh/disrupted:NoSchedule`: a disruption (or a drain) holds it.
    Tainted,
}

impl fmt::Display for Disrupting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InstanceTerminating => "its instance is terminating",
            Self::NodeClaimDeleting => "its NodeClaim is being deleted",
            Self::NodeDeleting => "it is being deleted",
            Self::Tainted => "it carries the karpenter.sh/disrupted:NoSchedule taint",
        })
    }
}

/// Which object carries a node-level `karpenter.sh/do-not-disrupt: "true"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnnotatedObject {
    /// The Node.
    Node,
    /// The NodeClaim.
    NodeClaim,
}

/// Why a node is not a candidate. The first reason found, in the order of the module
/// documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// No Node of that name.
    NodeNotFound,
    /// No NodeClaim has the Node's provider ID: Karpenter does not manage it.
    Unmanaged,
    /// The node is not initialized yet.
    NotInitialized,
    /// The node is already being disrupted.
    AlreadyDisrupting(Disrupting),
    /// The node was nominated for pending pods.
    Nominated,
    /// `karpenter.sh/do-not-disrupt: "true"` on the Node or the NodeClaim.
    DoNotDisruptNode {
        /// Which object carries it.
        on: AnnotatedObject,
    },
    /// Neither the Node nor the NodeClaim has a `karpenter.sh/nodepool` label.
    NoNodePoolLabel,
    /// The NodePool the node belongs to does not exist.
    NodePoolMissing {
        /// The NodePool's name.
        node_pool: String,
    },
    /// A running pod's own `karpenter.sh/do-not-disrupt` is active.
    DoNotDisruptPod {
        /// The pod, `namespace/name`.
        pod: String,
        /// What its annotation says ([`DoNotDisrupt::Always`] or [`DoNotDisrupt::Until`]).
        annotation: DoNotDisrupt,
    },
    /// A pod's PodDisruptionBudget allows no disruption now.
    PdbBlocks {
        /// The pod, `namespace/name`.
        pod: String,
        /// The budget and its arithmetic.
        pdb: PdbAllowance,
    },
    /// A pod is selected by more than one PodDisruptionBudget.
    MultiplePdbs {
        /// The pod, `namespace/name`.
        pod: String,
        /// The budgets, `namespace/name`, sorted.
        pdbs: Vec<String>,
    },
}

impl Blocked {
    /// Whether the block comes from the node's pods (the ones `terminationGracePeriod` lets
    /// drift ignore).
    pub fn is_pod_block(&self) -> bool {
        matches!(
            self,
            Self::DoNotDisruptPod { .. } | Self::PdbBlocks { .. } | Self::MultiplePdbs { .. }
        )
    }
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NodeNotFound => f.write_str("node not found"),
            Self::Unmanaged => f.write_str("node has no NodeClaim (not managed by Karpenter)"),
            Self::NotInitialized => f.write_str("node is not initialized"),
            Self::AlreadyDisrupting(why) => write!(f, "node is already disrupting: {why}"),
            Self::Nominated => f.write_str("node is nominated for pending pods"),
            Self::DoNotDisruptNode { on } => {
                let object = match on {
                    AnnotatedObject::Node => "Node",
                    AnnotatedObject::NodeClaim => "NodeClaim",
                };
                write!(f, "{object} has {ANNOTATION_DO_NOT_DISRUPT}: \"true\"")
            }
            Self::NoNodePoolLabel => write!(f, "node has no {LABEL_NODEPOOL} label"),
            Self::NodePoolMissing { node_pool } => write!(f, "NodePool {node_pool} not found"),
            Self::DoNotDisruptPod { pod, annotation } => write!(
                f,
                "pod {pod} has {ANNOTATION_DO_NOT_DISRUPT}: {:?}",
                annotation.value().unwrap_or_default()
            ),
            Self::PdbBlocks { pod, pdb } => write!(
                f,
                "PodDisruptionBudget {} allows {} disruptions (pod {pod})",
                pdb.pdb, pdb.disruptions_allowed
            ),
            Self::MultiplePdbs { pod, pdbs } => write!(
                f,
                "pod {pod} is selected by several PodDisruptionBudgets ({})",
                pdbs.join(", ")
            ),
        }
    }
}

/// A node that may be disrupted, with what the methods need to decide on it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// The Node's name.
    pub name: &'a str,
    /// The Node.
    pub node: &'a Node,
    /// Its NodeClaim.
    pub node_claim: &'a NodeClaim,
    /// Its NodePool.
    pub node_pool: &'a NodePool,
    /// Every pod bound to the node, in (namespace, name) order.
    pub pods: Vec<&'a SlimPod>,
    /// The pods that would need a new place (upstream `IsReschedulable`): running, or
    /// terminating StatefulSet pods; neither DaemonSet nor mirror pods.
    pub reschedulable_pods: Vec<&'a SlimPod>,
    /// The cost of disrupting it ([`cost::disruption_cost`]); candidates are tried cheapest
    /// first.
    pub disruption_cost: f64,
    /// 1 plus the positive eviction costs of the reschedulable pods
    /// ([`cost::reschedule_disruption_cost`]).
    pub reschedule_disruption_cost: f64,
    /// A pod block that the eventual class ignores because the NodeClaim has a
    /// `terminationGracePeriod` (worth a log line: those pods will be forced off).
    pub ignored_pod_block: Option<Blocked>,
}

impl Candidate<'_> {
    /// The NodePool's name.
    pub fn node_pool_name(&self) -> &str {
        self.node_pool.metadata.name.as_deref().unwrap_or_default()
    }

    /// The NodeClaim's name: what the disruption controller's commands name their candidates
    /// by.
    pub fn node_claim_name(&self) -> &str {
        self.node_claim.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether no pod that matters has to move (upstream v1.14 `IsEmpty`: DaemonSet and mirror
    /// pods, finished pods and pods of negligible cost do not count).
    pub fn is_empty(&self) -> bool {
        self.reschedule_disruption_cost <= 1.0
    }
}

/// The Node's name.
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn node_provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
        .unwrap_or_default()
}

/// The NodeClaims by provider ID (the first one in the snapshot's order, should two share one);
/// a NodeClaim not launched yet has none and is left out.
pub fn node_claims_by_provider_id(snapshot: &Snapshot) -> HashMap<&str, &NodeClaim> {
    // Sized for every NodeClaim at once: growing would hash every key again.
    let mut by_id = HashMap::with_capacity(snapshot.node_claims.len());
    for claim in snapshot.node_claims() {
        let id = claim
            .status
            .as_ref()
            .map(|status| status.provider_id.as_str())
            .unwrap_or_default();
        if !id.is_empty() {
            by_id.entry(id).or_insert(claim);
        }
    }
    by_id
}

/// The NodeClaim of `node`, by provider ID.
pub fn node_claim_of<'a>(
    claims: &HashMap<&str, &'a NodeClaim>,
    node: &Node,
) -> Option<&'a NodeClaim> {
    let id = node_provider_id(node);
    if id.is_empty() {
        return None;
    }
    claims.get(id).copied()
}

/// The graceful class's verdict from the eventual one: the same, except that a pod block the
/// eventual class ignores (for a NodeClaim with `terminationGracePeriod`) holds the node back.
fn graceful<'a>(eventual: &Result<Candidate<'a>, Blocked>) -> Result<Candidate<'a>, Blocked> {
    match eventual {
        Ok(candidate) => match &candidate.ignored_pod_block {
            Some(block) => Err(block.clone()),
            None => Ok(candidate.clone()),
        },
        Err(blocked) => Err(blocked.clone()),
    }
}

/// Where `pod` lives: the identity of a snapshot's pod object, which the snapshot's pods keep
/// for as long as it is borrowed. Cheaper to hash than its (namespace, name), and a pod object
/// from elsewhere, even one of the same name, is never taken for the snapshot's.
fn address(pod: &SlimPod) -> usize {
    std::ptr::from_ref(pod).addr()
}

/// Whether the node is initialized: the Node's `karpenter.sh/initialized: "true"` label (what
/// upstream reads) or the NodeClaim's `Initialized=True`.
pub fn is_initialized(node: &Node, node_claim: &NodeClaim) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_NODE_INITIALIZED))
        .is_some_and(|value| value == "true");
    labelled || claim_condition_true(node_claim, CONDITION_INITIALIZED)
}

fn claim_condition_true(node_claim: &NodeClaim, type_: &str) -> bool {
    node_claim
        .status
        .as_ref()
        .is_some_and(|status| condition::is_true(&status.conditions, type_))
}

/// Why the node already counts as disrupting, if it does.
pub fn disrupting(node: &Node, node_claim: &NodeClaim) -> Option<Disrupting> {
    if claim_condition_true(node_claim, CONDITION_INSTANCE_TERMINATING) {
        Some(Disrupting::InstanceTerminating)
    } else if node_claim.metadata.deletion_timestamp.is_some() {
        Some(Disrupting::NodeClaimDeleting)
    } else if node.metadata.deletion_timestamp.is_some() {
        Some(Disrupting::NodeDeleting)
    } else if has_disrupted_taint(node) {
        Some(Disrupting::Tainted)
    } else {
        None
    }
}

/// The NodePool the node belongs to: the Node's `karpenter.sh/nodepool` label, else the
/// NodeClaim's.
pub fn node_pool_name<'a>(node: &'a Node, node_claim: &'a NodeClaim) -> Option<&'a str> {
    let label = |labels: Option<&'a BTreeMap<String, String>>| {
        labels
            .and_then(|labels| labels.get(LABEL_NODEPOOL))
            .map(String::as_str)
            .filter(|name| !name.is_empty())
    };
    label(node.metadata.labels.as_ref()).or_else(|| label(node_claim.metadata.labels.as_ref()))
}

fn annotated_do_not_disrupt(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|annotations| annotations.get(ANNOTATION_DO_NOT_DISRUPT))
        .is_some_and(|value| value == "true")
}

/// Whether an `apps/v1` StatefulSet owns the pod: its terminating pods still need a place,
/// since their replacement is created only once they are gone.
pub fn is_owned_by_stateful_set(pod: &SlimPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.api_version == "apps/v1" && owner.kind == "StatefulSet")
}

/// Whether the pod would need a new place if its node went (upstream `IsReschedulable`).
pub fn is_reschedulable(pod: &SlimPod) -> bool {
    (is_active(pod) || (is_owned_by_stateful_set(pod) && is_terminating(pod)))
        && !is_owned_by_daemon_set(pod)
        && !is_mirror(pod)
}

fn pod_ready_status(pod: &SlimPod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|condition| condition.type_ == "Ready")
        .map(|condition| condition.status.as_str())
}

/// One budget, ready to match pods.
#[derive(Debug)]
struct PreparedPdb {
    namespace: String,
    selector: Option<Selector>,
    allowance: PdbAllowance,
}

/// Decides which nodes are candidates, over one snapshot at one instant. Building it indexes
/// the snapshot once (NodeClaims by provider ID, pods by node, every budget's allowance), so
/// asking about many nodes costs little; each node's verdict is worked out once, on the first
/// question, whichever class it is for (its private `verdicts` field says why).
#[derive(Debug)]
pub struct CandidateSelector<'a> {
    snapshot: &'a Snapshot,
    now: Timestamp,
    nominated: &'a BTreeSet<String>,
    claims: HashMap<&'a str, &'a NodeClaim>,
    pods_by_node: PodsByNode<'a>,
    pdbs: Vec<PreparedPdb>,
    /// The positions in `pdbs` of the budgets that select each pod of the snapshot, by the
    /// pod's address in the snapshot (see [`address`]).
    pdbs_of_pod: HashMap<usize, Vec<usize>>,
    /// Each Node's verdict for the eventual class, by its position in the snapshot's Nodes,
    /// once asked for. A pass asks about every node for each class its methods use, and
    /// explains the ones left out with the same question again: a verdict depends on nothing
    /// that changes while the selector lives (its snapshot, instant and nominations are
    /// fixed), and the graceful verdict follows from the eventual one ([`graceful`]).
    verdicts: Vec<OnceLock<Result<Candidate<'a>, Blocked>>>,
}

impl<'a> CandidateSelector<'a> {
    /// Prepares the selection; `nominated` holds the names of the nodes nominated for pending
    /// pods (their nomination window not over).
    pub fn new(snapshot: &'a Snapshot, now: Timestamp, nominated: &'a BTreeSet<String>) -> Self {
        // Each budget's selector is matched against the pods once, here: what the pods' budgets
        // are is asked for every pod of every node, several times a pass. The pods of one
        // workload carry the same labels and, named after it, come one after the other in the
        // snapshot's order; a pod with the namespace and labels of the pod before it is selected
        // by the same budgets (a budget reads nothing else of a pod to select it), so the
        // selectors are matched once per such run, not once per pod, and no label set is
        // hashed. Any other order only makes the runs shorter: the budgets found are the same.
        let selectors: Vec<Option<Selector>> =
            snapshot.pdbs.iter().map(|pdb| pdb::selector(pdb)).collect();
        let mut in_namespace: HashMap<&str, Vec<usize>> = HashMap::new();
        for (index, pdb) in snapshot.pdbs.iter().enumerate() {
            in_namespace
                .entry(pdb.metadata.namespace.as_deref().unwrap_or_default())
                .or_default()
                .push(index);
        }
        let mut selected: Vec<Vec<&SlimPod>> = vec![Vec::new(); snapshot.pdbs.len()];
        let mut pdbs_of_pod: HashMap<usize, Vec<usize>> =
            HashMap::with_capacity(snapshot.pods.len());
        // The run's first pod and the positions, in `snapshot.pdbs`, of the budgets selecting it.
        let mut run: Option<(&SlimPod, Vec<usize>)> = None;
        for pod in snapshot.pods() {
            let same_run = run.as_ref().is_some_and(|(first, _)| {
                first.metadata.namespace == pod.metadata.namespace
                    && first.metadata.labels == pod.metadata.labels
            });
            if !same_run {
                let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
                let positions = in_namespace
                    .get(namespace)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|&index| {
                        snapshot.pdbs.get(index).is_some_and(|pdb| {
                            let selector = selectors.get(index).and_then(Option::as_ref);
                            pdb::selects(pdb, selector, pod)
                        })
                    })
                    .collect();
                run = Some((pod, positions));
            }
            let positions = run
                .as_ref()
                .map(|(_, positions)| positions.clone())
                .unwrap_or_default();
            for &index in &positions {
                if let Some(pods) = selected.get_mut(index) {
                    pods.push(pod);
                }
            }
            pdbs_of_pod.insert(address(pod), positions);
        }
        let pdbs = snapshot
            .pdbs
            .iter()
            .zip(selectors)
            .zip(&selected)
            .map(|((pdb, selector), selected)| {
                let allowance = pdb::allowance_of_selected(pdb, selected).lowered_by_status(pdb);
                PreparedPdb {
                    namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
                    selector,
                    allowance,
                }
            })
            .collect();
        Self {
            snapshot,
            now,
            nominated,
            claims: node_claims_by_provider_id(snapshot),
            pods_by_node: snapshot.pods_by_node(),
            pdbs,
            pdbs_of_pod,
            verdicts: snapshot.nodes.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    /// The snapshot decided on.
    pub fn snapshot(&self) -> &'a Snapshot {
        self.snapshot
    }

    /// The instant decided at.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The nodes nominated for pending pods.
    pub fn nominated(&self) -> &'a BTreeSet<String> {
        self.nominated
    }

    /// The NodeClaim of `node`, by provider ID.
    pub fn node_claim(&self, node: &Node) -> Option<&'a NodeClaim> {
        node_claim_of(&self.claims, node)
    }

    /// The snapshot's bound pods by node name ([`Snapshot::pods_by_node`]).
    pub fn pods_by_node(&self) -> &PodsByNode<'a> {
        &self.pods_by_node
    }

    /// The pods bound to the node called `node_name`, in (namespace, name) order.
    pub fn pods_on(&self, node_name: &str) -> &[&'a SlimPod] {
        self.pods_by_node
            .get(node_name)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The allowances of the budgets that select `pod`, in the snapshot's order.
    pub fn pdbs_of(&self, pod: &SlimPod) -> Vec<&PdbAllowance> {
        self.matching_pdbs(pod)
            .into_iter()
            .map(|pdb| &pdb.allowance)
            .collect()
    }

    /// Every budget's allowance, `namespace/name` order.
    pub fn pdb_allowances(&self) -> impl Iterator<Item = &PdbAllowance> + '_ {
        self.pdbs.iter().map(|pdb| &pdb.allowance)
    }

    /// Whether the node called `node_name` is a candidate for a method of `class`, or the first
    /// reason it is not.
    pub fn candidate(
        &self,
        node_name: &str,
        class: DisruptionClass,
    ) -> Result<Candidate<'a>, Blocked> {
        let position = self
            .snapshot
            .node_position(node_name)
            .ok_or(Blocked::NodeNotFound)?;
        self.verdict_at(position, class)
    }

    /// [`Self::candidate`] for the Node at `position` in the snapshot's Nodes, from the
    /// eventual verdict worked out on the first question about it.
    fn verdict_at(
        &self,
        position: usize,
        class: DisruptionClass,
    ) -> Result<Candidate<'a>, Blocked> {
        let (Some(node), Some(slot)) = (
            self.snapshot.nodes.get(position),
            self.verdicts.get(position),
        ) else {
            return Err(Blocked::NodeNotFound);
        };
        let eventual = slot.get_or_init(|| self.evaluate(node));
        match class {
            DisruptionClass::Eventual => eventual.clone(),
            DisruptionClass::Graceful => graceful(eventual),
        }
    }

    /// Whether `node` is a candidate for the eventual class, or the first reason it is not: a
    /// pod block is ignored (and kept on the candidate) only when the NodeClaim has a
    /// `terminationGracePeriod`.
    fn evaluate(&self, node: &'a Node) -> Result<Candidate<'a>, Blocked> {
        let node_name = node_name(node);
        let node_claim = self.node_claim(node).ok_or(Blocked::Unmanaged)?;
        if !is_initialized(node, node_claim) {
            return Err(Blocked::NotInitialized);
        }
        if let Some(why) = disrupting(node, node_claim) {
            return Err(Blocked::AlreadyDisrupting(why));
        }
        if self.nominated.contains(node_name) {
            return Err(Blocked::Nominated);
        }
        if annotated_do_not_disrupt(node.metadata.annotations.as_ref()) {
            return Err(Blocked::DoNotDisruptNode {
                on: AnnotatedObject::Node,
            });
        }
        if annotated_do_not_disrupt(node_claim.metadata.annotations.as_ref()) {
            return Err(Blocked::DoNotDisruptNode {
                on: AnnotatedObject::NodeClaim,
            });
        }
        let pool_name = node_pool_name(node, node_claim).ok_or(Blocked::NoNodePoolLabel)?;
        let node_pool =
            self.snapshot
                .node_pool(pool_name)
                .ok_or_else(|| Blocked::NodePoolMissing {
                    node_pool: pool_name.to_owned(),
                })?;
        let pods = self.pods_on(node_name).to_vec();
        let mut ignored_pod_block = None;
        if let Some(block) = self.pod_block(&pods) {
            if node_claim.spec.termination_grace_period.is_some() {
                ignored_pod_block = Some(block);
            } else {
                return Err(block);
            }
        }
        let reschedulable_pods: Vec<&SlimPod> = pods
            .iter()
            .copied()
            .filter(|pod| is_reschedulable(pod))
            .collect();
        let disruption_cost = cost::disruption_cost(
            reschedulable_pods.iter().copied(),
            node_claim,
            self.snapshot,
            self.now,
        );
        let reschedule_disruption_cost =
            cost::reschedule_disruption_cost(reschedulable_pods.iter().copied(), self.snapshot);
        Ok(Candidate {
            name: node_name,
            node,
            node_claim,
            node_pool,
            pods,
            reschedulable_pods,
            disruption_cost,
            reschedule_disruption_cost,
            ignored_pod_block,
        })
    }

    /// The first pod-level block among `pods`: an active do-not-disrupt first (any pod), then
    /// budgets (evictable pods only), each in the pods' order.
    fn pod_block(&self, pods: &[&SlimPod]) -> Option<Blocked> {
        for pod in pods {
            if let Some(annotation) = blocks_disruption(pod, self.now) {
                return Some(Blocked::DoNotDisruptPod {
                    pod: pod_key(pod),
                    annotation,
                });
            }
        }
        for pod in pods {
            // The drain never calls the eviction API on the others, so no budget applies.
            let evictable = is_active(pod) && !tolerates_disrupted_taint(pod) && !is_mirror(pod);
            if !evictable {
                continue;
            }
            let matching = self.matching_pdbs(pod);
            match matching.as_slice() {
                [] => {}
                [pdb] => {
                    let unhealthy = pod_ready_status(pod) == Some("False");
                    if pdb.allowance.unhealthy_always_allow && unhealthy {
                        continue;
                    }
                    if pdb.allowance.disruptions_allowed <= 0 {
                        return Some(Blocked::PdbBlocks {
                            pod: pod_key(pod),
                            pdb: pdb.allowance.clone(),
                        });
                    }
                }
                several => {
                    let mut pdbs: Vec<String> = several
                        .iter()
                        .map(|pdb| pdb.allowance.pdb.clone())
                        .collect();
                    pdbs.sort();
                    return Some(Blocked::MultiplePdbs {
                        pod: pod_key(pod),
                        pdbs,
                    });
                }
            }
        }
        None
    }

    fn matching_pdbs(&self, pod: &SlimPod) -> Vec<&PreparedPdb> {
        if let Some(indices) = self.pdbs_of_pod.get(&address(pod)) {
            return indices
                .iter()
                .filter_map(|&index| self.pdbs.get(index))
                .collect();
        }
        // A pod from elsewhere (not this snapshot's object): match it here.
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        self.pdbs
            .iter()
            .filter(|pdb| pdb.namespace == namespace)
            .filter(|pdb| {
                pdb.selector
                    .as_ref()
                    .is_some_and(|selector| selector.matches(labels))
            })
            .collect()
    }

    /// Every Node of the snapshot, in name order, with its verdict for `class`.
    pub fn evaluate_all(
        &self,
        class: DisruptionClass,
    ) -> Vec<(&'a str, Result<Candidate<'a>, Blocked>)> {
        let nodes: &'a [std::sync::Arc<Node>] = &self.snapshot.nodes;
        nodes
            .iter()
            .enumerate()
            .map(|(position, node)| (node_name(node), self.verdict_at(position, class)))
            .collect()
    }

    /// The candidates for `class`, cheapest to disrupt first (ties by name).
    pub fn candidates(&self, class: DisruptionClass) -> Vec<Candidate<'a>> {
        let mut candidates: Vec<Candidate<'a>> = self
            .evaluate_all(class)
            .into_iter()
            .filter_map(|(_, verdict)| verdict.ok())
            .collect();
        cost::sort_by_disruption_cost(&mut candidates, |candidate| {
            (candidate.disruption_cost, candidate.name)
        });
        candidates
    }
}

#[cfg(test)]
mod tests;
