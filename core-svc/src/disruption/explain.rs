//! Why a node due for disruption is not being disrupted, as one sentence an operator can act
//! on: what a `DisruptionBlocked` event says, and what `core-svc explain NODE` will print.
//!
//! [`explain`] looks, in the order the disruption controller meets them, for the first thing
//! that holds the node back:
//!
//! 1. the node is not a candidate ([`Blocked`]): not managed, not initialized, already
//!    disrupting, nominated, `karpenter.sh/do-not-disrupt` on the node, its NodePool missing,
//!    a pod with an active `karpenter.sh/do-not-disrupt` (which pod, which value, until when),
//!    a PodDisruptionBudget allowing nothing (which one, its counts), a pod under several
//!    budgets;
//! 2. for consolidation (`Empty`, `Underutilized`), the NodePool's settings: static, with
//!    `consolidateAfter: Never`, `consolidationPolicy: WhenEmpty` for a node with pods, or
//!    `consolidateAfter` not yet elapsed since the node's pods last changed (and when it will);
//! 3. the NodePool's disruption budget: which one (its index and text), until when it is
//!    active, how many nodes it allows and how many already disrupt; or an invalid budget that
//!    stops the whole NodePool;
//! 4. what the controller observed on its last attempt, passed in as an [`Observation`] (a
//!    replacement that failed for insufficient capacity at a given time, pods with nowhere to
//!    go).
//!
//! `None` means nothing holds the node back: it is being disrupted or will be on the next pass.
//! Budgets are read from the snapshot: nodes the controller picked in the same pass count once
//! they carry the disrupted taint, that is from the next snapshot on.
//! Which disruption the node is due for is the caller's to say; without it, a `Drifted=True`
//! NodeClaim is taken as drifted, a node whose pods need no new place as empty, any other as a
//! consolidation candidate.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use karpenter_api::nodeclaim::{
    CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED, CONDITION_INITIALIZED,
};
use karpenter_api::{
    Condition, ConditionStatus, ConsolidationPolicy, DisruptionReason, NodeClaim, NodePool,
    condition,
};

use super::budgets::{self, Limit, NodePoolAllowance};
use super::candidates::{
    AnnotatedObject, Blocked, Candidate, CandidateSelector, DisruptionClass, PdbAllowance,
    is_reschedulable,
};
use super::cost;
use super::do_not_disrupt::DoNotDisrupt;
use crate::cluster::Snapshot;

/// What the controller saw on its last attempt to disrupt a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The node.
    pub node: String,
    /// When.
    pub at: Timestamp,
    /// What.
    pub what: Observed,
}

/// The kinds of [`Observation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Launching the replacement failed (`reason`: insufficient capacity, a NodePool limit...).
    ReplacementFailed {
        /// Why, as the provisioner or the plugin said.
        reason: String,
    },
    /// The scheduling simulation found no place for some of the node's pods.
    PodsWouldNotSchedule {
        /// The pods, `namespace/name`.
        pods: Vec<String>,
        /// Why, as the scheduler said.
        reason: String,
    },
    /// Anything else that stopped the attempt.
    Other {
        /// What happened.
        reason: String,
    },
}

/// What holds a node back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockedReason {
    /// The node is not a candidate.
    Candidate(Blocked),
    /// The NodePool is static: consolidation does not apply.
    StaticNodePool {
        /// The NodePool.
        node_pool: String,
    },
    /// `consolidateAfter: Never`.
    ConsolidationDisabled {
        /// The NodePool.
        node_pool: String,
    },
    /// `consolidationPolicy: WhenEmpty` and the node has pods.
    OnlyWhenEmpty {
        /// The NodePool.
        node_pool: String,
    },
    /// The node is not `Consolidatable` yet.
    NotConsolidatableYet {
        /// The NodePool.
        node_pool: String,
        /// Its `consolidateAfter`, as written.
        consolidate_after: String,
        /// When `consolidateAfter` has passed since the node's pods last changed, if known.
        eligible_at: Option<Timestamp>,
    },
    /// The NodePool's disruption budget allows no more disruptions for the reason.
    Budget {
        /// The NodePool.
        node_pool: String,
        /// The disruption reason.
        reason: DisruptionReason,
        /// The budget that limits it (or the invalid one).
        limit: Limit,
        /// The NodePool's nodes, as budgets count them.
        nodes: u32,
        /// Its nodes already disrupting.
        disrupting: Vec<String>,
    },
    /// What the controller saw on its last attempt.
    Observed(Observation),
}

/// Why a node is not being disrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The node.
    pub node: String,
    /// The disruption it is due for.
    pub disruption: DisruptionReason,
    /// What holds it back.
    pub reason: BlockedReason,
    /// One sentence for an operator: what holds it back and what to change.
    pub message: String,
}

/// What [`explain`] needs beyond the snapshot and the time.
#[derive(Debug, Clone, Copy)]
pub struct ExplainInputs<'a> {
    /// The disruption the node is due for; `None` to infer it (see the module documentation).
    pub reason: Option<DisruptionReason>,
    /// The nodes nominated for pending pods.
    pub nominated: &'a BTreeSet<String>,
    /// What the controller saw on its recent attempts (the latest one for the node counts).
    pub observations: &'a [Observation],
}

/// Why `node` is not being disrupted at `now`, or `None` when nothing holds it back.
pub fn explain(
    node: &str,
    snapshot: &Snapshot,
    now: Timestamp,
    inputs: &ExplainInputs<'_>,
) -> Option<Explanation> {
    let selector = CandidateSelector::new(snapshot, now, inputs.nominated);
    Explainer::new(&selector).explain(node, inputs.reason, inputs.observations)
}

/// [`explain`] for many nodes of one snapshot: over one [`CandidateSelector`] (which indexes
/// the snapshot, and which the disruption pass that decided on the snapshot shares), with the
/// budgets computed once.
#[derive(Debug)]
pub struct Explainer<'s, 'a> {
    selector: &'s CandidateSelector<'a>,
    allowances: BTreeMap<String, NodePoolAllowance>,
}

impl<'s, 'a> Explainer<'s, 'a> {
    /// Prepares explanations over the selector's snapshot, at its instant.
    pub fn new(selector: &'s CandidateSelector<'a>) -> Self {
        Self {
            selector,
            allowances: budgets::allowances(selector.snapshot(), selector.now()),
        }
    }

    /// Why `node` is not being disrupted for `reason` (inferred when `None`), or `None` when
    /// nothing holds it back.
    pub fn explain(
        &self,
        node: &str,
        reason: Option<DisruptionReason>,
        observations: &[Observation],
    ) -> Option<Explanation> {
        let disruption = reason.unwrap_or_else(|| self.due_reason(node));
        let explained = |reason: BlockedReason, node_pool: Option<&str>| {
            let message = message(node, disruption, &reason, node_pool, self.selector.now());
            Some(Explanation {
                node: node.to_owned(),
                disruption,
                reason,
                message,
            })
        };
        let candidate = match self
            .selector
            .candidate(node, DisruptionClass::of(disruption))
        {
            Ok(candidate) => candidate,
            Err(blocked) => return explained(BlockedReason::Candidate(blocked), None),
        };
        let pool = candidate.node_pool_name().to_owned();
        if disruption != DisruptionReason::Drifted
            && let Some(gate) = consolidation_gate(&candidate, disruption)
        {
            return explained(gate, Some(&pool));
        }
        if let Some(allowance) = self.allowances.get(&pool)
            && allowance.allowed(disruption) == 0
            && let Some(reason_allowance) = allowance.reasons.get(&disruption)
        {
            return explained(
                BlockedReason::Budget {
                    node_pool: pool.clone(),
                    reason: disruption,
                    limit: reason_allowance.limit.clone(),
                    nodes: allowance.nodes,
                    disrupting: allowance.disrupting.clone(),
                },
                Some(&pool),
            );
        }
        let latest = observations
            .iter()
            .filter(|observation| observation.node == node)
            .max_by_key(|observation| observation.at)?;
        explained(BlockedReason::Observed(latest.clone()), Some(&pool))
    }

    /// The disruption a node is due for when the caller does not say: drifted, else empty,
    /// else consolidation.
    fn due_reason(&self, node: &str) -> DisruptionReason {
        let snapshot = self.selector.snapshot();
        let claim = snapshot
            .node(node)
            .and_then(|node| self.selector.node_claim(node));
        if claim.is_some_and(|claim| condition_true(claim, CONDITION_DRIFTED)) {
            return DisruptionReason::Drifted;
        }
        let reschedulable = self
            .selector
            .pods_on(node)
            .iter()
            .copied()
            .filter(|pod| is_reschedulable(pod));
        if cost::reschedule_disruption_cost(reschedulable, snapshot) <= 1.0 {
            DisruptionReason::Empty
        } else {
            DisruptionReason::Underutilized
        }
    }
}

fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim_condition(claim, type_).is_some_and(|found| found.status == ConditionStatus::True)
}

fn claim_condition<'c>(claim: &'c NodeClaim, type_: &str) -> Option<&'c Condition> {
    claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, type_))
}

/// What stops consolidation of a candidate under its NodePool's settings (upstream
/// `ShouldDisrupt` of emptiness and consolidation, kubernetes-sigs/karpenter
/// `pkg/controllers/disruption/{emptiness,consolidation}.go`).
fn consolidation_gate(
    candidate: &Candidate<'_>,
    disruption: DisruptionReason,
) -> Option<BlockedReason> {
    let node_pool: &NodePool = candidate.node_pool;
    let name = candidate.node_pool_name().to_owned();
    if node_pool.is_static() {
        return Some(BlockedReason::StaticNodePool { node_pool: name });
    }
    let consolidate_after = &node_pool.spec.disruption.consolidate_after;
    let Some(after) = consolidate_after.duration() else {
        return Some(BlockedReason::ConsolidationDisabled { node_pool: name });
    };
    if disruption == DisruptionReason::Underutilized
        && node_pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty
    {
        return Some(BlockedReason::OnlyWhenEmpty { node_pool: name });
    }
    let claim = candidate.node_claim;
    if condition_true(claim, CONDITION_CONSOLIDATABLE) {
        return None;
    }
    let since = claim
        .status
        .as_ref()
        .and_then(|status| status.last_pod_event_time.as_ref())
        .map(|time| time.0)
        .or_else(|| {
            claim_condition(claim, CONDITION_INITIALIZED).map(|found| found.last_transition_time.0)
        });
    let eligible_at = since.and_then(|since| {
        SignedDuration::try_from(after)
            .ok()
            .and_then(|after| since.checked_add(after).ok())
    });
    Some(BlockedReason::NotConsolidatableYet {
        node_pool: name,
        consolidate_after: consolidate_after.as_str().to_owned(),
        eligible_at,
    })
}

/// An instant as operators read it: `2025-03-01 18:00:00 UTC`.
pub fn utc(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// Up to five names, then how many more.
fn listed(names: &[String]) -> String {
    const SHOWN: usize = 5;
    if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!(
            "{} and {} more",
            names[..SHOWN].join(", "),
            names.len() - SHOWN
        )
    }
}

fn message(
    node: &str,
    disruption: DisruptionReason,
    reason: &BlockedReason,
    node_pool: Option<&str>,
    now: Timestamp,
) -> String {
    match reason {
        BlockedReason::Candidate(Blocked::NodeNotFound) => {
            return format!("Node {node} does not exist.");
        }
        BlockedReason::Candidate(Blocked::AlreadyDisrupting(why)) => {
            return format!("Node {node} is already being disrupted: {why}.");
        }
        _ => {}
    }
    let lead = match disruption {
        DisruptionReason::Drifted => format!("Node {node} is drifted but is not being replaced"),
        DisruptionReason::Empty => format!("Node {node} is empty but is not being removed"),
        DisruptionReason::Underutilized => format!("Node {node} is not being consolidated"),
    };
    let pool = node_pool.unwrap_or("its NodePool");
    let cause = match reason {
        BlockedReason::Candidate(blocked) => candidate_cause(blocked),
        BlockedReason::StaticNodePool { node_pool } => format!(
            "its NodePool {node_pool} is static (spec.replicas is set), and consolidation does not apply to static NodePools"
        ),
        BlockedReason::ConsolidationDisabled { node_pool } => format!(
            "its NodePool {node_pool} has consolidateAfter: Never, which turns consolidation off; set a duration to enable it"
        ),
        BlockedReason::OnlyWhenEmpty { node_pool } => format!(
            "its NodePool {node_pool} has consolidationPolicy: WhenEmpty, so only nodes without pods are consolidated; use WhenEmptyOrUnderutilized to consolidate this one"
        ),
        BlockedReason::NotConsolidatableYet {
            node_pool,
            consolidate_after,
            eligible_at,
        } => match eligible_at {
            Some(at) if *at > now => format!(
                "its NodePool {node_pool} has consolidateAfter: {consolidate_after}, which has not passed since its pods last changed; it becomes consolidatable at {}",
                utc(*at)
            ),
            Some(at) => format!(
                "consolidateAfter ({consolidate_after}, NodePool {node_pool}) passed at {}, but its Consolidatable condition is not set yet; it is set on the next NodeClaim pass",
                utc(*at)
            ),
            None => format!(
                "it is not Consolidatable yet (NodePool {node_pool}, consolidateAfter: {consolidate_after})"
            ),
        },
        BlockedReason::Budget {
            node_pool,
            reason,
            limit,
            nodes,
            disrupting,
        } => budget_cause(node_pool, *reason, limit, *nodes, disrupting),
        BlockedReason::Observed(observation) => observed_cause(observation, pool),
    };
    format!("{lead}: {cause}.")
}

fn candidate_cause(blocked: &Blocked) -> String {
    match blocked {
        Blocked::NodeNotFound => "the node does not exist".to_owned(),
        Blocked::Unmanaged => {
            "no NodeClaim has its provider ID, so Karpenter does not manage it".to_owned()
        }
        Blocked::NotInitialized => {
            "it has not finished initializing (its NodeClaim is not Initialized yet)".to_owned()
        }
        Blocked::AlreadyDisrupting(why) => format!("it is already being disrupted: {why}"),
        Blocked::Nominated => {
            "provisioning just nominated it for pending pods; it is considered again once the nomination expires".to_owned()
        }
        Blocked::DoNotDisruptNode { on } => {
            let object = match on {
                AnnotatedObject::Node => "the Node",
                AnnotatedObject::NodeClaim => "its NodeClaim",
            };
            format!(
                "{object} carries the annotation karpenter.sh/do-not-disrupt: \"true\"; remove it to allow disruption"
            )
        }
        Blocked::NoNodePoolLabel => {
            "it has no karpenter.sh/nodepool label, so it belongs to no NodePool".to_owned()
        }
        Blocked::NodePoolMissing { node_pool } => {
            format!("its NodePool {node_pool} does not exist")
        }
        Blocked::DoNotDisruptPod { pod, annotation } => match annotation {
            DoNotDisrupt::Until { value, until } => format!(
                "pod {pod} carries the annotation karpenter.sh/do-not-disrupt: \"{value}\", which protects it until {}; wait, or remove the annotation",
                utc(*until)
            ),
            other => format!(
                "pod {pod} carries the annotation karpenter.sh/do-not-disrupt: \"{}\"; remove the annotation, or wait for the pod to finish",
                other.value().unwrap_or("true")
            ),
        },
        Blocked::PdbBlocks { pod, pdb } => pdb_cause(pod, pdb),
        Blocked::MultiplePdbs { pod, pdbs } => format!(
            "pod {pod} is selected by {} PodDisruptionBudgets ({}), and the eviction API refuses a pod with more than one; make their selectors disjoint",
            pdbs.len(),
            pdbs.join(", ")
        ),
    }
}

fn pdb_cause(pod: &str, pdb: &PdbAllowance) -> String {
    if pdb.fully_blocking {
        return format!(
            "PodDisruptionBudget {} never allows an eviction (maxUnavailable 0 or minAvailable 100%) and selects pod {pod}; relax the budget or move the pod",
            pdb.pdb
        );
    }
    format!(
        "PodDisruptionBudget {} allows 0 disruptions now ({} of {} expected pods healthy, {} must stay healthy) and selects pod {pod}; the node waits until the budget allows an eviction",
        pdb.pdb, pdb.current_healthy, pdb.expected_pods, pdb.desired_healthy
    )
}

fn budget_cause(
    node_pool: &str,
    reason: DisruptionReason,
    limit: &Limit,
    nodes: u32,
    disrupting: &[String],
) -> String {
    let already = if disrupting.is_empty() {
        format!("none of its {nodes} nodes is disrupting")
    } else {
        format!(
            "{} of its {nodes} nodes already are ({})",
            disrupting.len(),
            listed(disrupting)
        )
    };
    match limit {
        Limit::Invalid(error) => format!(
            "NodePool {node_pool} has an invalid disruption budget #{} ({}): {}; none of its nodes is disrupted, for any reason, until it is fixed",
            error.index, error.budget, error.problem
        ),
        Limit::Unlimited => format!("NodePool {node_pool} allows no {reason:?} disruption now"),
        Limit::Budget(active) => {
            let until = match (active.scheduled, active.active_until) {
                (false, _) => String::new(),
                (true, Some(until)) => format!(", active until {}", utc(until)),
                (true, None) => ", active with no end in sight".to_owned(),
            };
            if active.limit == 0 {
                format!(
                    "NodePool {node_pool}'s disruption budget #{} ({}) allows no {reason:?} disruptions{until}; {already}",
                    active.index, active.budget
                )
            } else {
                format!(
                    "NodePool {node_pool}'s disruption budget #{} ({}) allows {} of its {nodes} nodes to be disrupted at once{until}, and {} already are ({})",
                    active.index,
                    active.budget,
                    active.limit,
                    disrupting.len(),
                    listed(disrupting)
                )
            }
        }
    }
}

fn observed_cause(observation: &Observation, node_pool: &str) -> String {
    let at = utc(observation.at);
    match &observation.what {
        Observed::ReplacementFailed { reason } => format!(
            "launching its replacement failed at {at}: {reason}; it is retried on a later pass (check NodePool {node_pool}'s requirements and limits)"
        ),
        Observed::PodsWouldNotSchedule { pods, reason } => format!(
            "at {at} some of its pods had nowhere else to go ({}): {reason}",
            listed(pods)
        ),
        Observed::Other { reason } => format!("at {at}: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_in_utc_to_the_second() {
        let at: Timestamp = "2025-03-01T18:00:00Z".parse().unwrap();
        assert_eq!(utc(at), "2025-03-01 18:00:00 UTC");
    }

    #[test]
    fn long_lists_are_cut_after_five() {
        let names: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
        assert_eq!(listed(&names), "n1, n2, n3, n4, n5 and 2 more");
        assert_eq!(listed(&names[..2]), "n1, n2");
    }
}
