//! `DisruptionBlocked`: which nodes are due for disruption but not acted on, and the sentence
//! that says why for each, through the same [`explain`](crate::disruption::explain()) as
//! `core-svc explain`. Pure; apart from the controller, which only dedups and records them.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::nodeclaim::{CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED};
use karpenter_api::{DisruptionReason, condition};

use super::orchestration;
use super::orchestration::InFlight;
use super::pass::untainted_in_flight;
use crate::cluster::Snapshot;
use crate::disruption::candidates::node_pool_name;
use crate::disruption::{
    Blocked, BlockedReason, CandidateSelector, Explainer, Explanation, Observation, Observed,
};

/// The nodes due for disruption that nothing is doing anything about: a NodeClaim `Drifted=True`
/// (reason Drifted) or `Consolidatable=True` (reason inferred), not in a command in flight nor
/// acted on this pass, not being deleted. `(node, NodeClaim, reason)`, by node name. Pure.
pub fn due_nodes(
    snapshot: &Snapshot,
    in_flight: &[InFlight],
    acted_on: &BTreeSet<String>,
) -> Vec<(String, String, Option<DisruptionReason>)> {
    let claims = crate::disruption::candidates::node_claims_by_provider_id(snapshot);
    let involved: HashSet<&str> = in_flight.iter().flat_map(InFlight::node_claims).collect();
    let mut due = Vec::new();
    for node in snapshot.nodes() {
        let Some(claim) = crate::disruption::candidates::node_claim_of(&claims, node) else {
            continue;
        };
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        if claim.metadata.deletion_timestamp.is_some()
            || node.metadata.deletion_timestamp.is_some()
            || acted_on.contains(&claim_name)
            || involved.contains(claim_name.as_str())
        {
            continue;
        }
        let conditions = claim
            .status
            .as_ref()
            .map_or(&[][..], |status| &status.conditions[..]);
        let reason = if condition::is_true(conditions, CONDITION_DRIFTED) {
            Some(DisruptionReason::Drifted)
        } else if condition::is_true(conditions, CONDITION_CONSOLIDATABLE) {
            None
        } else {
            continue;
        };
        due.push((
            node.metadata.name.clone().unwrap_or_default(),
            claim_name,
            reason,
        ));
    }
    due
}

/// A node due for disruption and what holds it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedNode {
    /// The Node.
    pub node: String,
    /// Its NodeClaim.
    pub node_claim: String,
    /// Its NodePool.
    pub node_pool: String,
    /// Why it is not being disrupted.
    pub explanation: Explanation,
}

/// Why each of the `due` nodes is not being disrupted (those nothing holds back are left
/// out), by node name. [`explain()`](crate::disruption::explain()) counts a node against its
/// budget once it is tainted; the candidates of commands in flight are tainted only once their
/// replacements are up, so a node that explains as free (or by an old observation) in a
/// NodePool with such candidates is explained again on a copy of the snapshot where they carry
/// the taint: what holds it back then is the budget they use. A node whose drain timed out
/// less than `retry` ago is explained by that first: whatever else holds it (the very
/// PodDisruptionBudget that stopped the drain, often), it is not tried again before. Pure.
pub fn explain_due(
    selector: &CandidateSelector<'_>,
    in_flight: &[InFlight],
    due: Vec<(String, String, Option<DisruptionReason>)>,
    observations: &[Observation],
    retry: Duration,
) -> Vec<BlockedNode> {
    let snapshot = selector.snapshot();
    let now = selector.now();
    let pool_of = |claim: &str| {
        snapshot
            .node_claim(claim)
            .and_then(|claim| claim.metadata.labels.as_ref())
            .and_then(|labels| labels.get(core_domain::labels::LABEL_NODEPOOL))
            .cloned()
            .unwrap_or_default()
    };
    let untainted = untainted_in_flight(snapshot, in_flight);
    let busy_pools: BTreeSet<String> = untainted
        .iter()
        .filter_map(|(node, claim)| node_pool_name(node, claim).map(str::to_owned))
        .collect();
    let explainer = Explainer::new(selector);
    let mut out = Vec::new();
    let mut again = Vec::new();
    for (node, node_claim, reason) in due {
        let node_pool = pool_of(&node_claim);
        let explanation = explainer.explain(&node, reason, observations);
        if let Some(timed_out) = observations.iter().find(|observation| {
            observation.node == node
                && orchestration::is_drain_timeout(observation)
                && observation
                    .at
                    .saturating_add(retry)
                    .is_ok_and(|until| now < until)
        }) {
            let disruption = explanation
                .as_ref()
                .map(|explanation| explanation.disruption)
                .or(reason)
                .unwrap_or(DisruptionReason::Underutilized);
            let explanation = drain_timeout_explanation(&node, disruption, timed_out, retry);
            out.push(BlockedNode {
                node,
                node_claim,
                node_pool,
                explanation,
            });
            continue;
        }
        let weak = explanation
            .as_ref()
            .is_none_or(|e| matches!(e.reason, BlockedReason::Observed(_)));
        if weak && busy_pools.contains(&node_pool) {
            again.push((node, node_claim, node_pool, reason));
            continue;
        }
        if let Some(explanation) = explanation {
            out.push(BlockedNode {
                node,
                node_claim,
                node_pool,
                explanation,
            });
        }
    }
    if !again.is_empty() {
        let tainted = with_disrupted_taint(snapshot, &untainted);
        let tainted_selector = CandidateSelector::new(&tainted, now, selector.nominated());
        let explainer = Explainer::new(&tainted_selector);
        for (node, node_claim, node_pool, reason) in again {
            if let Some(explanation) = explainer.explain(&node, reason, observations) {
                out.push(BlockedNode {
                    node,
                    node_claim,
                    node_pool,
                    explanation,
                });
            }
        }
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// Why a node whose drain timed out at `observation.at` waits until `retry` has passed.
fn drain_timeout_explanation(
    node: &str,
    disruption: DisruptionReason,
    observation: &Observation,
    retry: Duration,
) -> Explanation {
    let why = match &observation.what {
        Observed::Other { reason } => reason.as_str(),
        _ => orchestration::DRAIN_TIMED_OUT,
    };
    let until = observation
        .at
        .saturating_add(retry)
        .unwrap_or(Timestamp::MAX);
    Explanation {
        node: node.to_owned(),
        disruption,
        reason: BlockedReason::Observed(observation.clone()),
        message: format!(
            "Node {node} is not disrupted again before {}: its disruption was abandoned at {}, {why}.",
            crate::disruption::explain::utc(until),
            crate::disruption::explain::utc(observation.at),
        ),
    }
}

/// A copy of `snapshot` where `nodes` carry the disrupted taint.
fn with_disrupted_taint(
    snapshot: &Snapshot,
    nodes: &[(&k8s_openapi::api::core::v1::Node, &karpenter_api::NodeClaim)],
) -> Snapshot {
    let names: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|(node, _)| node.metadata.name.as_deref())
        .collect();
    let mut copy = snapshot.clone();
    for node in &mut copy.nodes {
        if names.contains(node.metadata.name.as_deref().unwrap_or_default()) {
            Arc::make_mut(node)
                .spec
                .get_or_insert_with(Default::default)
                .taints
                .get_or_insert_with(Vec::new)
                .push(crate::objects::disrupted_taint());
        }
    }
    copy
}

/// Whether an explanation is a block worth an event: not the node's own state or the
/// NodePool's settings (consolidation turned off, only when empty, not consolidatable yet),
/// which say the node is not due rather than held back.
pub(super) fn worth_reporting(reason: &BlockedReason) -> bool {
    match reason {
        BlockedReason::Candidate(blocked) => !matches!(
            blocked,
            Blocked::NodeNotFound
                | Blocked::Unmanaged
                | Blocked::NotInitialized
                | Blocked::AlreadyDisrupting(_)
        ),
        BlockedReason::StaticNodePool { .. }
        | BlockedReason::ConsolidationDisabled { .. }
        | BlockedReason::OnlyWhenEmpty { .. }
        | BlockedReason::NotConsolidatableYet { .. } => false,
        BlockedReason::Budget { .. } | BlockedReason::Observed(_) => true,
    }
}

/// What an explanation says, without the instant of an observation (a new attempt failing the
/// same way is not news).
pub(super) fn dedup_key(explanation: &Explanation) -> String {
    match &explanation.reason {
        BlockedReason::Observed(observation) => format!("{:?}", observation.what),
        _ => explanation.message.clone(),
    }
}

/// The pod a block names, if any.
pub(super) fn blocking_pod(reason: &BlockedReason) -> Option<&str> {
    match reason {
        BlockedReason::Candidate(
            Blocked::DoNotDisruptPod { pod, .. }
            | Blocked::PdbBlocks { pod, .. }
            | Blocked::MultiplePdbs { pod, .. },
        ) => Some(pod),
        _ => None,
    }
}
