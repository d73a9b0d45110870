//! What a run decided: pods placed on existing capacity, the NodeClaims to launch (each with
//! its instance type options, cheapest first and at most [`MAX_INSTANCE_TYPES`], and its
//! requirements narrowed to them), and the pods left unschedulable with the reason.

use std::collections::HashMap;
use std::sync::Arc;

use crate::instance_type::{InstanceType, MAX_INSTANCE_TYPES};
use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{Requirement, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::pod::PodId;
use crate::scheduler::reasons::Unschedulable;
use crate::scheduler::solver::Solver;

/// A NodeClaim to launch. Naming it is the caller's job; results identify it by its index in
/// [`SchedulingResults::new_node_claims`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedNodeClaim {
    /// The NodePool it belongs to.
    pub node_pool: String,
    /// What its node must satisfy: the template's requirements narrowed by its pods and
    /// topology, with `node.kubernetes.io/instance-type In [options]` and the zones and
    /// capacity types of the options' offerings.
    pub requirements: Requirements,
    /// The instance types it may launch as, cheapest first, at most
    /// [`MAX_INSTANCE_TYPES`]. NodeClaims with the same options share one list.
    pub instance_types: Arc<[Arc<InstanceType>]>,
    /// Its pods, in the order they were placed.
    pub pods: Vec<PodId>,
    /// What its pods and the DaemonSet pods that will run on it request (`pods` counts them).
    pub requests: ResourceList,
}

impl PlannedNodeClaim {
    /// The price of the cheapest available offering of its cheapest option that its
    /// requirements accept.
    pub fn cheapest_price(&self) -> Option<f64> {
        let first = self.instance_types.first()?;
        first.cheapest_offering(&self.requirements).map(|o| o.price)
    }
}

/// What a run decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SchedulingResults {
    /// Pods placed on existing nodes or in-flight NodeClaims, with the node's name, in the
    /// order they were placed.
    pub existing_placements: Vec<(PodId, String)>,
    /// NodeClaims to launch, in the order they were planned.
    pub new_node_claims: Vec<PlannedNodeClaim>,
    /// Pods that cannot be placed, in input order, with the reason.
    pub unschedulable: Vec<(PodId, String)>,
}

impl SchedulingResults {
    /// How many new nodes the run asks for.
    pub fn node_count(&self) -> usize {
        self.new_node_claims.len()
    }

    /// How many pods the run placed, on existing capacity or on new NodeClaims.
    pub fn placed_pod_count(&self) -> usize {
        self.existing_placements.len()
            + self
                .new_node_claims
                .iter()
                .map(|c| c.pods.len())
                .sum::<usize>()
    }

    /// The hourly cost of the new NodeClaims if each launches as its cheapest option.
    pub fn estimated_cost(&self) -> f64 {
        self.new_node_claims
            .iter()
            .filter_map(PlannedNodeClaim::cheapest_price)
            .sum()
    }
}

/// Instance type lists already built, shared by NodeClaims with the same options: the
/// options and the requirements they add.
type Finished = (Arc<[Arc<InstanceType>]>, Vec<Requirement>);

/// What a finished list depends on: the NodePool, the options kept, and the NodeClaim's zone
/// and capacity type requirements.
type FinishedKey = (usize, Vec<u32>, Option<Requirement>, Option<Requirement>);

impl Solver<'_> {
    /// The results of the run.
    pub(super) fn finish(mut self) -> SchedulingResults {
        let mut reasons = std::mem::take(&mut self.state.reasons);
        let mut finished: HashMap<FinishedKey, Finished> = HashMap::new();
        let mut new_node_claims = Vec::with_capacity(self.state.claims.len());
        for claim in self.state.claims.iter().filter(|c| !c.retired) {
            let pool = &mut self.state.pools[claim.pool];
            let ordered =
                pool.catalog
                    .by_price(&claim.options, &claim.requirements, &self.state.dims);
            let kept = &ordered[..ordered.len().min(MAX_INSTANCE_TYPES)];
            if claim.requirements.has_min_values()
                && let Err(error) = claim.requirements.satisfies_min_values(
                    kept.iter()
                        .map(|&i| pool.catalog.instance_type(i as usize).requirements()),
                )
            {
                for &pod in &claim.pods {
                    self.state.placed[pod] = false;
                    reasons[pod] = Some(Unschedulable::Truncated {
                        pool: pool.spec.name.clone(),
                        error: error.clone(),
                    });
                }
                continue;
            }
            let key = (
                claim.pool,
                kept.to_vec(),
                claim.requirements.get(LABEL_TOPOLOGY_ZONE).cloned(),
                claim.requirements.get(LABEL_CAPACITY_TYPE).cloned(),
            );
            let (instance_types, added) = finished
                .entry(key)
                .or_insert_with(|| {
                    let catalog = &pool.catalog;
                    let types: Arc<[Arc<InstanceType>]> = kept
                        .iter()
                        .map(|&i| catalog.instance_type(i as usize).clone())
                        .collect();
                    let names = kept
                        .iter()
                        .map(|&i| catalog.name(i as usize).clone())
                        .collect();
                    let mut added = vec![Requirement::in_shared_values(LABEL_INSTANCE_TYPE, names)];
                    let (zones, capacity_types) = catalog.offered(
                        kept.iter().copied(),
                        &claim.requirements,
                        &self.state.dims,
                    );
                    if !zones.is_empty() {
                        added.push(Requirement::in_shared_values(LABEL_TOPOLOGY_ZONE, zones));
                    }
                    if !capacity_types.is_empty() {
                        added.push(Requirement::in_shared_values(
                            LABEL_CAPACITY_TYPE,
                            capacity_types,
                        ));
                    }
                    (types, added)
                })
                .clone();
            let mut requirements = claim.requirements.clone();
            requirements.extend(added);
            new_node_claims.push(PlannedNodeClaim {
                node_pool: pool.spec.name.clone(),
                requirements,
                instance_types,
                pods: claim
                    .pods
                    .iter()
                    .map(|&p| self.plans[p].pod.id.clone())
                    .collect(),
                requests: claim.demand.list.saturating_add(
                    &pool
                        .catalog
                        .least_overhead(kept.iter().map(|&i| i as usize), |g| &g.demand.list),
                ),
            });
        }
        let existing_placements = self
            .state
            .node_placements
            .iter()
            .filter(|(pod, _)| self.state.placed[*pod])
            .map(|&(pod, node)| {
                (
                    self.plans[pod].pod.id.clone(),
                    self.state.nodes[node].node.name.clone(),
                )
            })
            .collect();
        let unschedulable = self
            .plans
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.state.placed[*i])
            .map(|(i, plan)| {
                let reason = reasons[i]
                    .as_ref()
                    .map_or_else(|| "not tried".to_owned(), ToString::to_string);
                (plan.pod.id.clone(), reason)
            })
            .collect();
        SchedulingResults {
            existing_placements,
            new_node_claims,
            unschedulable,
        }
    }
}
