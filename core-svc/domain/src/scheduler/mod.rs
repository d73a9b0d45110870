//! The scheduler (bin-packer): given pending pods, existing nodes and in-flight NodeClaims,
//! NodePools and their instance types, decide which pods go onto existing capacity, which new
//! NodeClaims to launch, and why the rest cannot be placed. It follows upstream Karpenter's
//! `provisioning/scheduling` package (kubernetes-sigs/karpenter `pkg/controllers/provisioning/scheduling`).
//!
//! # Using it
//!
//! Build a [`SchedulingInput`] (the kube edge converts Kubernetes objects into [`Pod`],
//! [`ExistingNode`] and [`NodePoolSpec`]; tests use their `with_*` builders) and call
//! [`solve`]. The run is pure and deterministic: the same input gives the same
//! [`SchedulingResults`], in the same order, every time.
//!
//! # The algorithm
//!
//! Decreasing placement, as upstream: pods are taken by cpu, then memory, descending (then
//! oldest, then UID). Each pod goes to the first existing node that takes it (initialised
//! nodes first, by name), else to a NodeClaim planned in this run (those with the fewest pods
//! first), else to a new NodeClaim of the first NodePool, by weight, that can launch one for
//! it. If nothing takes it, its preferences are relaxed one step at a time, in upstream's
//! order: the first of several required node affinity terms, the heaviest preferred pod
//! affinity term, the heaviest preferred pod anti-affinity term, the heaviest preferred node
//! affinity term, a `ScheduleAnyway` spread constraint, then tolerating `PreferNoSchedule`
//! taints; until relaxed, preferences are held as requirements. A pod that still fails goes
//! to the back of the queue, and the run ends when a whole pass over the queue places
//! nothing, which lets affinity and spread settle.
//!
//! # Cost-aware packing
//!
//! Upstream lets a planned NodeClaim take pods as long as some instance type holds them, so
//! it grows until only the largest, often dearest, types can. Here a planned NodeClaim keeps
//! as efficient the options priced within 2% (3% for pods with a spread or anti-affinity of
//! their own) of its best per pod like its first, and refuses a pod that would leave it none
//! (`cost.rs`): the pod goes to another NodeClaim or a new one, or back to it when nothing
//! else can take it. An improvement pass then re-places the pods of the most wasteful
//! NodeClaims, splits NodeClaims onto smaller nodes, and mixes NodeClaims that leave cpu or
//! memory idle with NodeClaims of pods that ask for more of it, when that costs less
//! (`improve.rs`). Up to 1,000 pending pods, first-fit's plan is made too and the better one
//! kept. [`Packing::FirstFit`] keeps
//! upstream's packing for comparison. No hard rule is traded for cost.
//!
//! # Measuring a plan's cost
//!
//! [`bound::plan_lower_bound`] gives what no plan for the same placed pods can beat: the
//! linear-programming optimum of covering their total requests with the NodePools'
//! offerings (see [`bound`]). Plan cost over bound is what packing and constraints cost.
//!
//! # Data structures, for cost
//!
//! - Each NodePool's instance types compatible with its template are computed once per run
//!   into a catalogue of flat entries (allocatable as four integers, offerings as interned
//!   zone and capacity type indices); a planned NodeClaim's options are a bitset over it.
//! - A NodeClaim keeps the smallest and largest allocatable of its options, so most pods are
//!   accepted (they fit the smallest) or refused (they exceed the largest) without a scan,
//!   and narrowing re-checks only the requirement keys that changed.
//! - Topology groups are shared between pods with the same constraint and count pods per
//!   domain in small maps; each new NodeClaim is its own hostname domain.
//! - Results of NodeClaims with the same options share one instance type list.
//! - Refusals and per-NodePool feasibility are remembered by (requirements, requests), so
//!   replicas that cannot be placed cost one explanation, not one each.
//!
//! # Where it deliberately differs from upstream
//!
//! - Ties are broken by name, never at random: the same input always gives the same result.
//! - Where a rule on zone or capacity type leaves a new or unpinned NodeClaim several
//!   domains, it is pinned to one that its options can launch in: spread takes the least
//!   loaded, affinity the most loaded, anti-affinity the first empty one. Upstream keeps
//!   several for affinity and anti-affinity, which blocks every one of them for zonal
//!   anti-affinity and so places one such pod per run.
//! - A pod placed where a key is not yet known blocks every domain it may end up in for
//!   anti-affinity; upstream records nothing then.
//! - Domains are the zones and capacity types of *available* offerings (and the values of the
//!   NodePools' types for other keys), plus existing nodes' labels; a zone the template lists
//!   but nothing can launch in is not a domain, so it cannot pin a spread's minimum at zero.
//! - Every attempt at a pod starts from its full constraints and relaxes step by step;
//!   `ScheduleAnyway` constraints are relaxed in declaration order. A spread's node filter
//!   (`nodeAffinityPolicy: Honor`) is all of the pod's required node affinity terms, not the
//!   one a relaxation step is trying.
//! - A NodePool's taints, host ports and requirements are checked before its limits, so the
//!   reason names what the pod itself can change.
//! - `PreferNoSchedule` taints on existing nodes also enable their relaxation step.
//!
//! # Not supported yet
//!
//! `nodeTaintsPolicy`, volume topology and volume limits, DRA, reserved capacity
//! (reservation IDs), the `BestEffort` minValues policy, pod affinity's `matchLabelKeys`, and
//! the default topology spread of a scheduler configuration. Namespace selectors are
//! resolved by the caller into [`Namespaces::Listed`].

mod bits;
pub mod bound;
mod catalog;
mod constraints;
mod cost;
mod daemons;
mod diagnosis;
mod dimensions;
mod fit;
mod ids;
mod improve;
mod node;
mod nodeclaim;
mod nodepool;
mod plan;
mod pod;
mod pool;
mod preferences;
mod queue;
mod reasons;
mod results;
mod room;
mod selector;
mod solver;
mod taints;
mod topology;
mod zones;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;

use crate::labels::LabelPolicy;

pub use constraints::{
    HostPort, NodeInclusionPolicy, PodAffinity, PodAffinityTerm, Protocol,
    TopologySpreadConstraint, Weighted, WhenUnsatisfiable,
};
pub use node::ExistingNode;
pub use nodepool::{Limits, NODES, NodePoolSpec};
pub use pod::{Pod, PodId};
pub use results::{PlannedNodeClaim, SchedulingResults};
pub use room::{Room, has_inter_pod_constraints};
pub use selector::{LabelSelector, Namespaces, SelectorExpression, SelectorOperator};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};

/// Whether preferences are held until relaxed or ignored from the start (upstream
/// `--preference-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreferencePolicy {
    /// Preferred terms and `ScheduleAnyway` constraints are kept until a pod cannot schedule.
    #[default]
    Respect,
    /// They are ignored.
    Ignore,
}

/// Everything one scheduling run looks at.
#[derive(Debug, Clone, Default)]
pub struct SchedulingInput {
    /// The pods to place.
    pub pods: Vec<Pod>,
    /// Nodes, and in-flight NodeClaims, that pods may go to before anything new is planned.
    /// Shared: the scheduler only reads them, so a caller that keeps converted nodes from one
    /// run to the next (or shows a run only some of them) hands them over without a copy.
    pub existing_nodes: Vec<Arc<ExistingNode>>,
    /// The NodePools new NodeClaims may come from (ready, not being deleted).
    pub node_pools: Vec<NodePoolSpec>,
    /// One pod per DaemonSet: what it would add to each node it runs on.
    pub daemon_set_pods: Vec<Pod>,
    /// Which labels are well known (core's and the cloud provider's).
    pub label_policy: LabelPolicy,
    /// Whether preferences count.
    pub preference_policy: PreferencePolicy,
}

/// Why the scheduler refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulingError {
    /// Two pending pods have the same namespace and name.
    #[error("pod {0} is listed more than once")]
    DuplicatePod(PodId),
    /// Two NodePools have the same name.
    #[error("NodePool {0} is listed more than once")]
    DuplicateNodePool(String),
    /// Two existing nodes have the same name.
    #[error("node {0} is listed more than once")]
    DuplicateNode(String),
}

/// How new NodeClaims are packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Packing {
    /// A planned NodeClaim stops taking pods when that would cost more than opening another,
    /// and the plan is improved afterwards (see the module documentation); up to
    /// 1,000 pending pods, first-fit's plan is made too and kept when it is better. What
    /// [`solve`] does.
    #[default]
    CostAware,
    /// Upstream's first-fit decreasing: a planned NodeClaim takes pods as long as some
    /// instance type holds them. For comparisons (the benchmarks, the tests).
    FirstFit,
}

/// Decides where the input's pods go (see the module documentation).
pub fn solve(input: &SchedulingInput) -> Result<SchedulingResults, SchedulingError> {
    solve_with(input, Packing::CostAware)
}

/// [`solve`] with the given packing.
pub fn solve_with(
    input: &SchedulingInput,
    packing: Packing,
) -> Result<SchedulingResults, SchedulingError> {
    validate(input)?;
    let plan = |packing| {
        let mut solver = solver::Solver::new(input, packing);
        solver.run(input.preference_policy);
        solver.improve(input.preference_policy);
        solver.finish()
    };
    let planned = plan(packing);
    if packing == Packing::FirstFit || input.pods.len() > COMPARED_UP_TO {
        return Ok(planned);
    }
    // Cost caps decide NodeClaim by NodeClaim, and a rule that pins pods (a zone spread, say)
    // can make the whole cost more than first-fit's. For a run this small, first-fit's plan
    // costs little to make, and the plan that places more pods, then costs less, is kept.
    let first_fit = plan(Packing::FirstFit);
    let better = first_fit.placed_pod_count() > planned.placed_pod_count()
        || (first_fit.placed_pod_count() == planned.placed_pod_count()
            && first_fit.estimated_cost() < planned.estimated_cost());
    Ok(if better { first_fit } else { planned })
}

/// Up to this many pending pods, a cost-aware run also plans with first-fit packing and keeps
/// the better plan (see [`solve_with`]).
const COMPARED_UP_TO: usize = 1000;

fn validate(input: &SchedulingInput) -> Result<(), SchedulingError> {
    let mut pods = HashSet::new();
    if let Some(pod) = input.pods.iter().find(|p| !pods.insert(&p.id)) {
        return Err(SchedulingError::DuplicatePod(pod.id.clone()));
    }
    let mut pools = HashSet::new();
    if let Some(pool) = input.node_pools.iter().find(|p| !pools.insert(&p.name)) {
        return Err(SchedulingError::DuplicateNodePool(pool.name.clone()));
    }
    let mut nodes = HashSet::new();
    if let Some(node) = input.existing_nodes.iter().find(|n| !nodes.insert(&n.name)) {
        return Err(SchedulingError::DuplicateNode(node.name.clone()));
    }
    Ok(())
}
