//! What multi-node and single-node consolidation share (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/consolidation.go`): which candidates they consider, in which order, what a
//! candidate costs, and `computeConsolidation`, which turns a simulation of removing some
//! candidates into a decision.
//!
//! **Candidates** ([`consolidation_candidates`]): of the graceful-class candidates, those that
//! are not empty (empty nodes are emptiness's), whose NodePool is not static, has a
//! `consolidateAfter` other than `Never` and `consolidationPolicy` other than `WhenEmpty`, whose
//! NodeClaim is `Consolidatable=True`, and whose node carries its instance type, zone and
//! capacity type labels, the instance type being in the NodePool's catalogue. Sorted by
//! savings ratio, price over rescheduling cost, highest first (upstream v1.14), ties by name.
//!
//! **Price** ([`candidate_price`]): the cheapest offering of the node's instance type that its
//! labels match (zone, capacity type, and any other key an offering requires), available or
//! not: the node runs whatever the cloud's availability is now. A `reserved` node whose
//! reservation is gone from the catalogue costs 0 (upstream: reserved capacity is paid for
//! anyway); any other node without a matching offering has an unknown price, counted as 0: it
//! can still be deleted, never replaced.
//!
//! **Decision** ([`decide`], upstream `computeConsolidation`), from the simulation of removing
//! the candidates:
//!
//! 1. a pod finds no place → no-op;
//! 2. no new NodeClaim → delete;
//! 3. more than one → no-op ("can't remove without creating N nodes");
//! 4. one: if every candidate is spot and the replacement may be spot, the spot-to-spot path
//!    (only with [`ConsolidationOptions::spot_to_spot`], upstream's `SpotToSpotConsolidation`
//!    feature gate, off by default): the replacement is pinned to spot, keeps the types whose
//!    worst launch price is strictly below the candidates' total, and for a single candidate
//!    needs at least [`MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT`] of them, truncated to that many
//!    (or to what the minValues need, if more). Otherwise the replacement keeps the types whose
//!    worst launch price is strictly below the candidates' total (minValues still met), and if
//!    it may be both spot and on-demand it is pinned to spot, so an insufficient spot capacity
//!    fails the launch instead of falling back to a pricier on-demand node.
//!
//! A type's worst launch price ([`worst_launch_price`], upstream `WorstLaunchPrice`) is the
//! dearest of its available offerings the replacement's requirements allow, of the capacity
//! type the launch would use (reserved, else spot, else on-demand): the plugin may pick any of
//! them, so only a type cheaper in every case saves money.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use core_domain::instance_type::{InstanceType, order_by_price};
use core_domain::labels::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE,
};
use core_domain::requirements::{MinValuesError, Requirement, Requirements};
use core_domain::scheduler::PlannedNodeClaim;
use jiff::Timestamp;
use karpenter_api::nodeclaim::CONDITION_CONSOLIDATABLE;
use karpenter_api::{ConsolidationPolicy, DisruptionReason, condition};

use super::Command;
use super::simulate::{SimulationResult, Simulator};
use crate::controllers::provisioning::input::Catalogue;
use crate::disruption::{Candidate, Observation, Observed};

/// How many cheaper instance types a single spot node's spot replacement needs (upstream
/// `MinInstanceTypesForSpotToSpotConsolidation`): with that many, the node's own type is not
/// among the cheapest and the launch has room to pick an available pool, so consolidation does
/// not walk down the price list one interruption-prone type at a time.
pub const MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT: usize = 15;

/// What consolidation may do beyond upstream's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsolidationOptions {
    /// Replace spot nodes by cheaper spot nodes (upstream's `SpotToSpotConsolidation` feature
    /// gate; off by default).
    pub spot_to_spot: bool,
}

/// A candidate with what consolidation reads of it.
#[derive(Debug, Clone)]
pub struct ConsolidationCandidate<'c, 'a> {
    /// The candidate.
    pub candidate: &'c Candidate<'a>,
    /// Its instance type, from its NodePool's catalogue.
    pub instance_type: Arc<InstanceType>,
    /// Its zone label.
    pub zone: String,
    /// Its capacity type label.
    pub capacity_type: String,
    /// What it costs per hour ([`candidate_price`]; 0 when unknown).
    pub price: f64,
}

impl ConsolidationCandidate<'_, '_> {
    /// The Node's name.
    pub fn node(&self) -> &str {
        self.candidate.name
    }

    /// The NodeClaim's name.
    pub fn node_claim(&self) -> &str {
        self.candidate.node_claim_name()
    }

    /// The NodePool's name.
    pub fn node_pool(&self) -> &str {
        self.candidate.node_pool_name()
    }

    /// Price over rescheduling cost: what removing it saves per unit of disruption.
    pub fn savings_ratio(&self) -> f64 {
        self.price / self.candidate.reschedule_disruption_cost
    }

    /// How many pods removing it moves.
    pub fn pods(&self) -> usize {
        self.candidate.reschedulable_pods.len()
    }
}

/// The label `key` of the candidate's Node, else of its NodeClaim.
fn label<'a>(candidate: &Candidate<'a>, key: &str) -> Option<&'a str> {
    let node = candidate.node.metadata.labels.as_ref();
    let claim = candidate.node_claim.metadata.labels.as_ref();
    node.and_then(|labels| labels.get(key))
        .or_else(|| claim.and_then(|labels| labels.get(key)))
        .map(String::as_str)
        .filter(|value| !value.is_empty())
}

/// Whether the candidate's NodePool and NodeClaim let consolidation of underutilized nodes
/// consider it (the gates [`explain()`](crate::disruption::explain()) reports on when they hold it back).
pub fn passes_consolidation_gates(candidate: &Candidate<'_>) -> bool {
    let pool = candidate.node_pool;
    let disruption = &pool.spec.disruption;
    !pool.is_static()
        && !disruption.consolidate_after.is_never()
        && disruption.consolidation_policy != ConsolidationPolicy::WhenEmpty
        && candidate
            .node_claim
            .status
            .as_ref()
            .is_some_and(|status| condition::is_true(&status.conditions, CONDITION_CONSOLIDATABLE))
}

/// The price of the node: its instance type's cheapest offering that `labels` match, available
/// or not; 0 for a reserved node whose offering is gone; `None` otherwise when none matches.
pub fn candidate_price(
    instance_type: &InstanceType,
    labels: &Requirements,
    capacity_type: &str,
) -> Option<f64> {
    let cheapest = instance_type
        .offerings()
        .iter()
        .filter(|offering| offering.is_compatible(labels))
        .map(|offering| offering.price)
        .min_by(f64::total_cmp);
    match cheapest {
        Some(price) => Some(price),
        None if capacity_type == CAPACITY_TYPE_RESERVED => Some(0.0),
        None => None,
    }
}

/// The sorted consolidation candidates of `candidates` (see the module documentation), and an
/// observation for each one left out for a reason the explanation would not give otherwise.
pub fn consolidation_candidates<'c, 'a>(
    candidates: &'c [Candidate<'a>],
    catalogues: &HashMap<String, Catalogue>,
    now: Timestamp,
) -> (Vec<ConsolidationCandidate<'c, 'a>>, Vec<Observation>) {
    let mut indexed: HashMap<&str, HashMap<&str, &Arc<InstanceType>>> = HashMap::new();
    let mut kept = Vec::new();
    let mut observations = Vec::new();
    let mut observe = |candidate: &Candidate<'_>, reason: String| {
        observations.push(Observation {
            node: candidate.name.to_owned(),
            at: now,
            what: Observed::Other { reason },
        });
    };
    for candidate in candidates {
        if candidate.is_empty() || !passes_consolidation_gates(candidate) {
            continue;
        }
        let (Some(type_name), Some(zone), Some(capacity_type)) = (
            label(candidate, LABEL_INSTANCE_TYPE),
            label(candidate, LABEL_TOPOLOGY_ZONE),
            label(candidate, LABEL_CAPACITY_TYPE),
        ) else {
            observe(
                candidate,
                format!(
                    "consolidation needs the node's {LABEL_INSTANCE_TYPE}, {LABEL_TOPOLOGY_ZONE} \
                     and {LABEL_CAPACITY_TYPE} labels"
                ),
            );
            continue;
        };
        let pool = candidate.node_pool_name();
        let by_name = indexed.entry(pool).or_insert_with(|| {
            catalogues
                .get(pool)
                .map(|catalogue| {
                    catalogue
                        .iter()
                        .map(|instance_type| (instance_type.name(), instance_type))
                        .collect()
                })
                .unwrap_or_default()
        });
        let Some(instance_type) = by_name.get(type_name) else {
            observe(
                candidate,
                format!("instance type {type_name} is not offered for NodePool {pool}"),
            );
            continue;
        };
        let labels = node_labels(candidate);
        let price = candidate_price(instance_type, &labels, capacity_type).unwrap_or(0.0);
        kept.push(ConsolidationCandidate {
            candidate,
            instance_type: Arc::clone(instance_type),
            zone: zone.to_owned(),
            capacity_type: capacity_type.to_owned(),
            price,
        });
    }
    sort_by_savings(&mut kept);
    (kept, observations)
}

/// The node's labels as requirements (its NodeClaim's where the Node lacks one).
fn node_labels(candidate: &Candidate<'_>) -> Requirements {
    let mut labels = candidate
        .node_claim
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    labels.extend(candidate.node.metadata.labels.clone().unwrap_or_default());
    Requirements::from_labels(labels)
}

/// Sorts by savings ratio, highest first, ties by node name (upstream v1.14 `sortCandidates`).
pub fn sort_by_savings(candidates: &mut [ConsolidationCandidate<'_, '_>]) {
    candidates.sort_by(|a, b| {
        b.savings_ratio()
            .total_cmp(&a.savings_ratio())
            .then_with(|| a.node().cmp(b.node()))
    });
}

/// Why consolidating some candidates does nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Unconsolidatable {
    /// Some pods would find no place.
    PodsWouldNotSchedule {
        /// The pods, `namespace/name`.
        pods: Vec<String>,
        /// The scheduler's reason for the first.
        reason: String,
    },
    /// Removing them would take more than one new node.
    WouldCreate(usize),
    /// No replacement type is cheaper than what the candidates cost.
    NoCheaperNode {
        /// The candidates' total price.
        price: f64,
    },
    /// The cheaper types do not meet the replacement's minValues.
    MinValues(MinValuesError),
    /// Spot nodes would be replaced by spot nodes, which the options do not allow.
    SpotToSpotDisabled,
    /// Too few cheaper spot types for a single spot node.
    TooFewSpotOptions {
        /// How many there are.
        got: usize,
    },
}

impl fmt::Display for Unconsolidatable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PodsWouldNotSchedule { pods, reason } => write!(
                f,
                "{} pod(s) would not schedule elsewhere ({}): {reason}",
                pods.len(),
                pods.first().map_or("", String::as_str)
            ),
            Self::WouldCreate(count) => {
                write!(f, "can't remove without creating {count} nodes")
            }
            Self::NoCheaperNode { price } => {
                write!(f, "can't replace with a cheaper node (current price {price})")
            }
            Self::MinValues(error) => write!(f, "filtering by price: {error}"),
            Self::SpotToSpotDisabled => f.write_str(
                "spot-to-spot consolidation is disabled, can't replace a spot node with a spot node",
            ),
            Self::TooFewSpotOptions { got } => write!(
                f,
                "spot-to-spot consolidation requires {MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT} cheaper \
                 instance type options than the current candidate to consolidate, got {got}"
            ),
        }
    }
}

impl Unconsolidatable {
    /// What the controller observed on `node`, for its explanation.
    pub fn observation(&self, node: &str, at: Timestamp) -> Observation {
        let what = match self {
            Self::PodsWouldNotSchedule { pods, reason } => Observed::PodsWouldNotSchedule {
                pods: pods.clone(),
                reason: reason.clone(),
            },
            other => Observed::Other {
                reason: other.to_string(),
            },
        };
        Observation {
            node: node.to_owned(),
            at,
            what,
        }
    }
}

/// What consolidating some candidates comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Consolidation {
    /// Delete them: their pods fit on the rest of the cluster.
    Delete,
    /// Replace them by this one cheaper node.
    Replace(Box<PlannedNodeClaim>),
    /// Nothing.
    NoOp(Unconsolidatable),
}

impl Consolidation {
    /// The command for `candidates`, decided at `now`; `None` for a no-op.
    pub fn command(
        self,
        candidates: &[&ConsolidationCandidate<'_, '_>],
        now: Timestamp,
    ) -> Option<Command> {
        let replacements = match self {
            Self::Delete => Vec::new(),
            Self::Replace(replacement) => vec![*replacement],
            Self::NoOp(_) => return None,
        };
        let names = candidates
            .iter()
            .map(|candidate| candidate.node_claim().to_owned())
            .collect();
        Some(Command::new(
            DisruptionReason::Underutilized,
            names,
            replacements,
            now,
        ))
    }
}

/// Simulates removing `candidates` and decides (upstream `computeConsolidation`).
pub fn compute_consolidation(
    simulator: &Simulator<'_>,
    candidates: &[&ConsolidationCandidate<'_, '_>],
    options: ConsolidationOptions,
) -> Consolidation {
    let nodes: Vec<&str> = candidates
        .iter()
        .map(|candidate| candidate.node())
        .collect();
    decide(
        simulator.simulate_consolidation(&nodes),
        candidates,
        options,
    )
}

/// The decision for `candidates` given the simulation of removing them (see the module
/// documentation).
pub fn decide(
    simulation: SimulationResult,
    candidates: &[&ConsolidationCandidate<'_, '_>],
    options: ConsolidationOptions,
) -> Consolidation {
    if !simulation.all_scheduled {
        return Consolidation::NoOp(Unconsolidatable::PodsWouldNotSchedule {
            pods: simulation.unschedulable_pods(),
            reason: simulation.first_reason().to_owned(),
        });
    }
    let mut new_node_claims = simulation.new_node_claims;
    let Some(mut replacement) = new_node_claims.pop() else {
        return Consolidation::Delete;
    };
    if !new_node_claims.is_empty() {
        return Consolidation::NoOp(Unconsolidatable::WouldCreate(new_node_claims.len() + 1));
    }
    let total: f64 = candidates.iter().map(|candidate| candidate.price).sum();
    let all_spot = candidates
        .iter()
        .all(|candidate| candidate.capacity_type == CAPACITY_TYPE_SPOT);
    if all_spot && allows(&replacement.requirements, CAPACITY_TYPE_SPOT) {
        return spot_to_spot(replacement, candidates.len(), total, options);
    }
    if let Err(error) = keep_cheaper(&mut replacement, total) {
        return Consolidation::NoOp(Unconsolidatable::MinValues(error));
    }
    if replacement.instance_types.is_empty() {
        return Consolidation::NoOp(Unconsolidatable::NoCheaperNode { price: total });
    }
    if allows(&replacement.requirements, CAPACITY_TYPE_SPOT)
        && allows(&replacement.requirements, CAPACITY_TYPE_ON_DEMAND)
    {
        pin_spot(&mut replacement);
    }
    Consolidation::Replace(Box::new(replacement))
}

/// Upstream `computeSpotToSpotConsolidation`.
fn spot_to_spot(
    mut replacement: PlannedNodeClaim,
    candidates: usize,
    total: f64,
    options: ConsolidationOptions,
) -> Consolidation {
    if !options.spot_to_spot {
        return Consolidation::NoOp(Unconsolidatable::SpotToSpotDisabled);
    }
    pin_spot(&mut replacement);
    if let Err(error) = keep_cheaper(&mut replacement, total) {
        return Consolidation::NoOp(Unconsolidatable::MinValues(error));
    }
    let cheaper = replacement.instance_types.len();
    if cheaper == 0 {
        return Consolidation::NoOp(Unconsolidatable::NoCheaperNode { price: total });
    }
    if candidates > 1 {
        return Consolidation::Replace(Box::new(replacement));
    }
    if cheaper < MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT {
        return Consolidation::NoOp(Unconsolidatable::TooFewSpotOptions { got: cheaper });
    }
    let needed = replacement
        .requirements
        .satisfies_min_values(
            replacement
                .instance_types
                .iter()
                .map(|it| it.requirements()),
        )
        .unwrap_or(cheaper);
    let keep = needed.max(MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT);
    if keep < cheaper {
        let truncated: Vec<Arc<InstanceType>> = replacement
            .instance_types
            .iter()
            .take(keep)
            .cloned()
            .collect();
        set_options(&mut replacement, truncated);
    }
    Consolidation::Replace(Box::new(replacement))
}

/// Whether `requirements` let the node be of `capacity_type` (no requirement allows any).
pub fn allows(requirements: &Requirements, capacity_type: &str) -> bool {
    requirements
        .get(LABEL_CAPACITY_TYPE)
        .is_none_or(|requirement| requirement.has(capacity_type))
}

/// Requires spot, keeping the options that still have an available spot offering, cheapest
/// first under the new requirements.
pub fn pin_spot(replacement: &mut PlannedNodeClaim) {
    replacement.requirements.add(Requirement::in_values(
        LABEL_CAPACITY_TYPE,
        [CAPACITY_TYPE_SPOT],
    ));
    let mut kept: Vec<Arc<InstanceType>> = replacement
        .instance_types
        .iter()
        .filter(|it| it.has_available_offering(&replacement.requirements))
        .cloned()
        .collect();
    order_by_price(&mut kept, &replacement.requirements);
    set_options(replacement, kept);
}

/// The price launching `instance_type` under `requirements` may cost at worst: the dearest
/// available offering allowed, of the first capacity type of reserved, spot, on-demand that
/// has one; infinite when none is allowed.
pub fn worst_launch_price(instance_type: &InstanceType, requirements: &Requirements) -> f64 {
    for capacity_type in [
        CAPACITY_TYPE_RESERVED,
        CAPACITY_TYPE_SPOT,
        CAPACITY_TYPE_ON_DEMAND,
    ] {
        let worst = instance_type
            .available_offerings(requirements)
            .filter(|offering| &*offering.capacity_type == capacity_type)
            .map(|offering| offering.price)
            .max_by(f64::total_cmp);
        if let Some(price) = worst {
            return price;
        }
    }
    f64::INFINITY
}

/// Keeps the options whose worst launch price is strictly below `max_price` (upstream
/// `RemoveInstanceTypeOptionsByPriceAndMinValues`); an error when the kept ones no longer meet
/// the replacement's minValues. None kept is not an error.
pub fn keep_cheaper(
    replacement: &mut PlannedNodeClaim,
    max_price: f64,
) -> Result<(), MinValuesError> {
    let kept: Vec<Arc<InstanceType>> = replacement
        .instance_types
        .iter()
        .filter(|it| worst_launch_price(it, &replacement.requirements) < max_price)
        .cloned()
        .collect();
    if !kept.is_empty() && replacement.requirements.has_min_values() {
        replacement
            .requirements
            .satisfies_min_values(kept.iter().map(|it| it.requirements()))?;
    }
    set_options(replacement, kept);
    Ok(())
}

/// Replaces the options, narrowing the instance type requirement to them.
pub fn set_options(replacement: &mut PlannedNodeClaim, options: Vec<Arc<InstanceType>>) {
    let names: Vec<&str> = options.iter().map(|it| it.name()).collect();
    let min_values = replacement
        .requirements
        .get(LABEL_INSTANCE_TYPE)
        .and_then(Requirement::min_values);
    replacement.requirements.remove(LABEL_INSTANCE_TYPE);
    if !names.is_empty() {
        replacement
            .requirements
            .add(Requirement::in_values(LABEL_INSTANCE_TYPE, names).with_min_values(min_values));
    }
    replacement.instance_types = options.into();
}

/// The instance type names of `replacement`'s options.
pub fn option_names(replacement: &PlannedNodeClaim) -> Vec<&str> {
    replacement
        .instance_types
        .iter()
        .map(|it| it.name())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use core_domain::instance_type::Offering;
    use core_domain::resources::{NodeOverhead, ResourceList};

    use super::*;

    /// An instance type `name` with offerings `(zone, capacity type, price)`, all available.
    pub(crate) fn instance_type(name: &str, offerings: &[(&str, &str, f64)]) -> Arc<InstanceType> {
        let zones: Vec<&str> = offerings.iter().map(|o| o.0).collect();
        let capacity_types: Vec<&str> = offerings.iter().map(|o| o.1).collect();
        let requirements: Requirements = [
            Requirement::in_values(LABEL_INSTANCE_TYPE, [name]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, zones),
            Requirement::in_values(LABEL_CAPACITY_TYPE, capacity_types),
        ]
        .into_iter()
        .collect();
        let offerings = offerings
            .iter()
            .map(|(zone, capacity_type, price)| {
                Offering::new(zone, capacity_type, *price, true, Requirements::new())
            })
            .collect();
        Arc::new(InstanceType::new(
            name,
            requirements,
            offerings,
            ResourceList::new(),
            NodeOverhead::default(),
        ))
    }

    /// A planned NodeClaim with `options` (ordered by price as the scheduler does) and
    /// `extra` requirements.
    pub(crate) fn planned(
        options: Vec<Arc<InstanceType>>,
        extra: &[Requirement],
    ) -> PlannedNodeClaim {
        let mut requirements: Requirements = extra.iter().cloned().collect();
        let mut options = options;
        order_by_price(&mut options, &requirements);
        let names: Vec<&str> = options.iter().map(|it| it.name()).collect();
        requirements.add(Requirement::in_values(LABEL_INSTANCE_TYPE, names));
        PlannedNodeClaim {
            node_pool: "default".into(),
            requirements,
            instance_types: options.into(),
            pods: Vec::new(),
            requests: ResourceList::new(),
        }
    }

    fn on_demand_and_spot(name: &str, on_demand: f64, spot: f64) -> Arc<InstanceType> {
        instance_type(name, &[("a", "on-demand", on_demand), ("a", "spot", spot)])
    }

    #[test]
    fn the_worst_launch_price_is_the_dearest_offering_of_the_capacity_type_launched() {
        let it = instance_type(
            "m",
            &[
                ("a", "on-demand", 1.0),
                ("b", "on-demand", 1.2),
                ("a", "spot", 0.3),
                ("b", "spot", 0.4),
            ],
        );
        assert_eq!(
            worst_launch_price(&it, &Requirements::new()),
            0.4,
            "spot before on-demand"
        );
        let on_demand: Requirements = [Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"])]
            .into_iter()
            .collect();
        assert_eq!(worst_launch_price(&it, &on_demand), 1.2);
        let zone_a: Requirements = [
            Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["a"]),
        ]
        .into_iter()
        .collect();
        assert_eq!(worst_launch_price(&it, &zone_a), 1.0);
        let nowhere: Requirements = [Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["z"])]
            .into_iter()
            .collect();
        assert_eq!(worst_launch_price(&it, &nowhere), f64::INFINITY);
    }

    #[test]
    fn only_strictly_cheaper_types_are_kept() {
        let on_demand = [Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"])];
        let mut replacement = planned(
            vec![
                instance_type("small", &[("a", "on-demand", 0.5)]),
                instance_type("same", &[("a", "on-demand", 1.0)]),
                instance_type("big", &[("a", "on-demand", 2.0)]),
            ],
            &on_demand,
        );
        keep_cheaper(&mut replacement, 1.0).unwrap();
        assert_eq!(option_names(&replacement), ["small"]);
        assert_eq!(
            replacement
                .requirements
                .get(LABEL_INSTANCE_TYPE)
                .unwrap()
                .values()
                .collect::<Vec<_>>(),
            ["small"],
            "the requirement follows the options"
        );
        keep_cheaper(&mut replacement, 0.5).unwrap();
        assert!(replacement.instance_types.is_empty());
    }

    #[test]
    fn min_values_must_still_hold_after_the_price_filter() {
        let requirement = Requirement::in_values(LABEL_INSTANCE_TYPE, ["a1", "a2", "a3"])
            .with_min_values(Some(2));
        let mut replacement = planned(
            vec![
                instance_type("a1", &[("a", "on-demand", 0.5)]),
                instance_type("a2", &[("a", "on-demand", 0.9)]),
                instance_type("a3", &[("a", "on-demand", 1.5)]),
            ],
            &[requirement],
        );
        let mut relaxed = replacement.clone();
        keep_cheaper(&mut relaxed, 1.0).unwrap();
        assert_eq!(option_names(&relaxed), ["a1", "a2"]);
        assert_eq!(
            relaxed
                .requirements
                .get(LABEL_INSTANCE_TYPE)
                .unwrap()
                .min_values(),
            Some(2)
        );
        assert!(keep_cheaper(&mut replacement, 0.6).is_err());
    }

    fn simulation(new_node_claims: Vec<PlannedNodeClaim>) -> SimulationResult {
        SimulationResult {
            all_scheduled: true,
            pods: 1,
            new_node_claims,
            ..SimulationResult::default()
        }
    }

    struct Fixture {
        pools: Vec<karpenter_api::NodePool>,
        claims: Vec<karpenter_api::NodeClaim>,
        nodes: Vec<k8s_openapi::api::core::v1::Node>,
    }

    /// Bare candidates of the default NodePool with the given capacity types and prices (only
    /// the fields `decide` reads).
    fn with_candidates<R>(
        specs: &[(&str, f64)],
        body: impl FnOnce(&[&ConsolidationCandidate<'_, '_>]) -> R,
    ) -> R {
        let specs: Vec<(&str, &str, f64)> = specs
            .iter()
            .map(|(capacity_type, price)| ("default", *capacity_type, *price))
            .collect();
        with_candidates_in(&specs, body)
    }

    /// Bare candidates `n0`, `n1`... (NodeClaims `c0`, `c1`...) of the given NodePools,
    /// capacity types and prices, each of rescheduling cost 2.
    pub(crate) fn with_candidates_in<R>(
        specs: &[(&str, &str, f64)],
        body: impl FnOnce(&[&ConsolidationCandidate<'_, '_>]) -> R,
    ) -> R {
        use crate::controllers::testing;
        use serde_json::json;
        let mut pool_names: Vec<&str> = specs.iter().map(|spec| spec.0).collect();
        pool_names.sort_unstable();
        pool_names.dedup();
        let fixture = Fixture {
            pools: pool_names
                .iter()
                .map(|name| testing::node_pool(name, json!({})))
                .collect(),
            claims: (0..specs.len())
                .map(|i| testing::node_claim(&format!("c{i}"), json!({})))
                .collect(),
            nodes: (0..specs.len())
                .map(|i| testing::node(&format!("n{i}"), json!({})))
                .collect(),
        };
        let candidates: Vec<Candidate<'_>> = specs
            .iter()
            .enumerate()
            .map(|(i, (pool, _, _))| Candidate {
                name: fixture.nodes[i].metadata.name.as_deref().unwrap(),
                node: &fixture.nodes[i],
                node_claim: &fixture.claims[i],
                node_pool: &fixture.pools[pool_names.binary_search(pool).unwrap()],
                pods: Vec::new(),
                reschedulable_pods: Vec::new(),
                disruption_cost: 1.0,
                reschedule_disruption_cost: 2.0,
                ignored_pod_block: None,
            })
            .collect();
        let wrapped: Vec<ConsolidationCandidate<'_, '_>> = specs
            .iter()
            .zip(&candidates)
            .map(
                |((_, capacity_type, price), candidate)| ConsolidationCandidate {
                    candidate,
                    instance_type: instance_type("current", &[("a", capacity_type, *price)]),
                    zone: "a".into(),
                    capacity_type: (*capacity_type).to_owned(),
                    price: *price,
                },
            )
            .collect();
        let refs: Vec<&ConsolidationCandidate<'_, '_>> = wrapped.iter().collect();
        body(&refs)
    }

    #[test]
    fn candidates_are_sorted_by_savings_ratio_highest_first_then_by_name() {
        let specs = [
            ("default", "on-demand", 1.0),
            ("default", "on-demand", 3.0),
            ("default", "on-demand", 1.0),
            ("default", "on-demand", 2.0),
        ];
        with_candidates_in(&specs, |candidates| {
            let mut owned: Vec<ConsolidationCandidate<'_, '_>> =
                candidates.iter().map(|c| (*c).clone()).collect();
            sort_by_savings(&mut owned);
            let order: Vec<&str> = owned.iter().map(ConsolidationCandidate::node).collect();
            assert_eq!(order, ["n1", "n3", "n0", "n2"]);
        });
    }

    fn replacement_names(consolidation: &Consolidation) -> Vec<String> {
        match consolidation {
            Consolidation::Replace(replacement) => option_names(replacement)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            other => panic!("not a replacement: {other:?}"),
        }
    }

    #[test]
    fn unscheduled_pods_are_a_no_op_and_no_new_node_a_delete() {
        with_candidates(&[("on-demand", 1.0)], |candidates| {
            let failed = SimulationResult {
                all_scheduled: false,
                unschedulable: vec![("default/p".into(), "no room".into())],
                ..SimulationResult::default()
            };
            let decision = decide(failed, candidates, ConsolidationOptions::default());
            assert_eq!(
                decision,
                Consolidation::NoOp(Unconsolidatable::PodsWouldNotSchedule {
                    pods: vec!["default/p".into()],
                    reason: "no room".into()
                })
            );
            assert_eq!(
                decide(
                    simulation(vec![]),
                    candidates,
                    ConsolidationOptions::default()
                ),
                Consolidation::Delete
            );
        });
    }

    #[test]
    fn more_than_one_new_node_is_a_no_op() {
        with_candidates(&[("on-demand", 10.0)], |candidates| {
            let cheap = || planned(vec![instance_type("s", &[("a", "on-demand", 0.1)])], &[]);
            assert_eq!(
                decide(
                    simulation(vec![cheap(), cheap()]),
                    candidates,
                    ConsolidationOptions::default()
                ),
                Consolidation::NoOp(Unconsolidatable::WouldCreate(2))
            );
        });
    }

    #[test]
    fn a_replacement_must_be_cheaper_than_the_candidates_together() {
        with_candidates(&[("on-demand", 0.6), ("on-demand", 0.6)], |candidates| {
            let options = vec![
                instance_type("s", &[("a", "on-demand", 1.0)]),
                instance_type("l", &[("a", "on-demand", 1.2)]),
                instance_type("xl", &[("a", "on-demand", 2.0)]),
            ];
            let on_demand = [Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"])];
            let decision = decide(
                simulation(vec![planned(options.clone(), &on_demand)]),
                candidates,
                ConsolidationOptions::default(),
            );
            assert_eq!(
                replacement_names(&decision),
                ["s"],
                "1.0 < 0.6 + 0.6 <= 1.2"
            );
            let decision = decide(
                simulation(vec![planned(options[1..].to_vec(), &on_demand)]),
                candidates,
                ConsolidationOptions::default(),
            );
            assert_eq!(
                decision,
                Consolidation::NoOp(Unconsolidatable::NoCheaperNode { price: 1.2 })
            );
        });
    }

    #[test]
    fn an_on_demand_candidate_replaced_by_either_capacity_type_is_pinned_to_spot() {
        with_candidates(&[("on-demand", 1.0)], |candidates| {
            let options = vec![
                on_demand_and_spot("s", 0.8, 0.3),
                // Cheaper than the candidate only as spot: kept, since the launch is pinned to spot.
                on_demand_and_spot("m", 1.5, 0.5),
            ];
            let decision = decide(
                simulation(vec![planned(options, &[])]),
                candidates,
                ConsolidationOptions::default(),
            );
            let Consolidation::Replace(replacement) = &decision else {
                panic!("{decision:?}");
            };
            let capacity = replacement.requirements.get(LABEL_CAPACITY_TYPE).unwrap();
            assert_eq!(capacity.values().collect::<Vec<_>>(), ["spot"]);
            assert_eq!(option_names(replacement), ["s", "m"]);
        });
    }

    #[test]
    fn spot_to_spot_is_off_by_default() {
        with_candidates(&[("spot", 1.0)], |candidates| {
            let options = (0..20)
                .map(|i| {
                    instance_type(
                        &format!("t{i:02}"),
                        &[("a", "spot", 0.1 + f64::from(i) * 0.01)],
                    )
                })
                .collect();
            let decision = decide(
                simulation(vec![planned(options, &[])]),
                candidates,
                ConsolidationOptions::default(),
            );
            assert_eq!(
                decision,
                Consolidation::NoOp(Unconsolidatable::SpotToSpotDisabled)
            );
        });
    }

    #[test]
    fn a_single_spot_node_needs_fifteen_cheaper_spot_types_and_keeps_fifteen() {
        let enabled = ConsolidationOptions { spot_to_spot: true };
        with_candidates(&[("spot", 1.0)], |candidates| {
            let types = |count: u32| -> Vec<Arc<InstanceType>> {
                (0..count)
                    .map(|i| {
                        instance_type(
                            &format!("t{i:02}"),
                            &[("a", "spot", 0.1 + f64::from(i) * 0.01)],
                        )
                    })
                    .chain([instance_type("dear", &[("a", "spot", 3.0)])])
                    .collect()
            };
            let decision = decide(
                simulation(vec![planned(types(14), &[])]),
                candidates,
                enabled,
            );
            assert_eq!(
                decision,
                Consolidation::NoOp(Unconsolidatable::TooFewSpotOptions { got: 14 })
            );
            let decision = decide(
                simulation(vec![planned(types(20), &[])]),
                candidates,
                enabled,
            );
            let names = replacement_names(&decision);
            assert_eq!(names.len(), MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT);
            assert_eq!(
                names.first().map(String::as_str),
                Some("t00"),
                "cheapest kept"
            );
            assert_eq!(names.last().map(String::as_str), Some("t14"));
        });
    }

    #[test]
    fn several_spot_nodes_need_no_fifteen_types() {
        let enabled = ConsolidationOptions { spot_to_spot: true };
        with_candidates(&[("spot", 0.5), ("spot", 0.5)], |candidates| {
            let options = vec![
                instance_type("cheap", &[("a", "spot", 0.6)]),
                instance_type("dear", &[("a", "spot", 1.1)]),
            ];
            let decision = decide(simulation(vec![planned(options, &[])]), candidates, enabled);
            assert_eq!(replacement_names(&decision), ["cheap"]);
        });
    }

    #[test]
    fn a_mixed_set_of_candidates_takes_the_ordinary_path() {
        with_candidates(&[("spot", 0.5), ("on-demand", 0.5)], |candidates| {
            let options = vec![instance_type("cheap", &[("a", "spot", 0.6)])];
            let decision = decide(
                simulation(vec![planned(options, &[])]),
                candidates,
                ConsolidationOptions::default(),
            );
            assert_eq!(replacement_names(&decision), ["cheap"]);
        });
    }

    #[test]
    fn the_price_is_the_offering_the_node_labels_match() {
        let it = instance_type(
            "m",
            &[
                ("a", "on-demand", 1.0),
                ("a", "spot", 0.3),
                ("b", "spot", 0.4),
            ],
        );
        let labels = |zone: &str, capacity_type: &str| {
            Requirements::from_labels([
                (LABEL_TOPOLOGY_ZONE, zone),
                (LABEL_CAPACITY_TYPE, capacity_type),
                ("other", "x"),
            ])
        };
        assert_eq!(
            candidate_price(&it, &labels("b", "spot"), "spot"),
            Some(0.4)
        );
        assert_eq!(
            candidate_price(&it, &labels("a", "on-demand"), "on-demand"),
            Some(1.0)
        );
        assert_eq!(
            candidate_price(&it, &labels("b", "on-demand"), "on-demand"),
            None
        );
        assert_eq!(
            candidate_price(&it, &labels("a", "reserved"), "reserved"),
            Some(0.0)
        );
    }
}
