//! Why a NodePool refuses a pod, worked out after the fact: which limit, which of the pod's
//! requirements, or which of its requests no instance type can meet. Only failures pay for
//! this; the placement path answers yes or no.

use crate::requirements::{CompatibilityError, Requirement, Requirements};
use crate::scheduler::bits::Bits;
use crate::scheduler::catalog::Narrowing;
use crate::scheduler::fit::Demand;
use crate::scheduler::nodeclaim::{Candidate, Miss};
use crate::scheduler::plan::{Constraints, PodPlan};
use crate::scheduler::pool::PoolState;
use crate::scheduler::reasons::{Mismatch, Origin, Refusal};
use crate::scheduler::solver::State;

impl State<'_> {
    /// Why a new NodeClaim of `pool` could not take the pod.
    pub(super) fn explain(
        &self,
        pool_index: usize,
        miss: Miss,
        plan: &PodPlan<'_>,
        candidate: &Candidate<'_>,
    ) -> Refusal {
        match miss {
            Miss::HostPort(port) => Refusal::HostPort(port),
            Miss::Topology(broken) | Miss::Domain(broken) => {
                Refusal::Topology(self.topology.violation(broken))
            }
            Miss::MinValues(error) => Refusal::MinValues(error),
            // A new NodeClaim has no cost cap yet, so the cost misses are not expected here;
            // if one came, what the pod needs is still the answer.
            Miss::Requirements
            | Miss::Resources
            | Miss::Narrowed
            | Miss::Cost
            | Miss::NarrowedCost => self.diagnose(pool_index, plan, candidate),
        }
    }

    /// Which of the limits, the pod's requirements or its requests no instance type of the
    /// NodePool can meet, naming the requirement when one alone is enough to rule them all out.
    fn diagnose(
        &self,
        pool_index: usize,
        plan: &PodPlan<'_>,
        candidate: &Candidate<'_>,
    ) -> Refusal {
        let pool = &self.pools[pool_index];
        let wanted = &candidate.constraints.requirements;
        let mut combined = pool.base.clone();
        combined.add_all(wanted);
        let demand = candidate.demand;
        let catalog = &pool.catalog;
        let narrowing = catalog.narrowing(&pool.base, &combined, &self.dims);
        let meeting = catalog.filter(&pool.all.options, &narrowing, demand);
        if !meeting.options.is_empty() && !pool.remaining.is_empty() {
            return limit_refusal(pool, &meeting.options);
        }
        for requirement in wanted.iter() {
            let Some(alone) = combined.get(requirement.key()) else {
                continue;
            };
            let single: Requirements = [alone.clone()].into_iter().collect();
            let any = pool
                .all
                .options
                .iter()
                .any(|i| catalog.instance_type(i).is_compatible(&single));
            if !any {
                let origin = origin(plan, candidate.constraints, requirement.key());
                return Refusal::NoInstanceType(Mismatch::Requirement(origin));
            }
        }
        let by_requirements = catalog.filter(&pool.all.options, &narrowing, &Demand::default());
        if by_requirements.options.is_empty() {
            return Refusal::NoInstanceType(Mismatch::Requirements(wanted.clone()));
        }
        let requests = plan.pod.requests.clone();
        let daemon_overhead = catalog.least_overhead(pool.all.options.iter(), |g| &g.requests);
        let by_resources = catalog.filter(&pool.all.options, &Narrowing::none(&pool.base), demand);
        if by_resources.options.is_empty() || wanted.is_empty() {
            return Refusal::NoInstanceType(Mismatch::Resources {
                requests,
                daemon_overhead,
            });
        }
        Refusal::NoInstanceType(Mismatch::ResourcesWithRequirements {
            requirements: wanted.clone(),
            requests,
            daemon_overhead,
        })
    }
}

/// The limit that rules out `candidates` (the types that would otherwise do).
pub(super) fn limit_refusal(pool: &PoolState<'_>, candidates: &Bits) -> Refusal {
    match pool.limiting(candidates) {
        Some(remaining) => Refusal::Limit {
            resource: remaining.resource.clone(),
            limit: remaining.limit,
        },
        None => Refusal::NoCompatibleTypes,
    }
}

/// The refusal for pod requirements the NodePool's template cannot meet.
pub(super) fn incompatibility(
    error: CompatibilityError,
    plan: &PodPlan<'_>,
    constraints: &Constraints,
) -> Refusal {
    match error {
        CompatibilityError::UndefinedLabel { key, hint } => Refusal::UndefinedLabel {
            origin: origin(plan, constraints, &key),
            key,
            hint,
        },
        CompatibilityError::Conflicts(conflicts) => match conflicts.into_iter().next() {
            Some(conflict) => Refusal::Conflict {
                origin: origin(plan, constraints, &conflict.key),
                allowed: conflict.existing,
            },
            None => Refusal::NoCompatibleTypes,
        },
    }
}

/// How the pod spec states its requirement on `key`.
fn origin(plan: &PodPlan<'_>, constraints: &Constraints, key: &str) -> Origin {
    if let Some((k, v)) = plan.node_selector_entry(key) {
        return Origin::NodeSelector(k.to_owned(), v.to_owned());
    }
    match constraints.requirements.get(key) {
        Some(requirement) => Origin::NodeAffinity(requirement.clone()),
        None => Origin::NodeAffinity(Requirement::exists(key)),
    }
}
