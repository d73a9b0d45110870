//! A lower bound on what new capacity for a set of pods can cost, to measure plans against:
//! the optimum of the linear-programming relaxation of buying nodes for the pods' total
//! requests.
//!
//! # The programme
//!
//! One variable `x_o >= 0` per instance type `o` a NodePool allows: how many nodes of it to
//! buy, fractions allowed, at the price of its cheapest available offering that the NodePool's
//! requirements accept (its other offerings hold the same and cost at least as much, so
//! leaving them out does not change the optimum; a NodePool that allows only on-demand, or
//! only some zones, gets those prices). Minimise `Σ price_o x_o` subject to, for every resource
//! `r` the pods request (cpu, memory, the pod count, and ephemeral storage or extended
//! resources such as GPUs when any pod asks for them), `Σ supply_{o,r} x_o >= demand_r`.
//! `supply` is the type's allocatable less the overhead of the DaemonSets that would run on
//! it, which the scheduler reserves on every new node of that NodePool and type; a type that
//! cannot hold its overhead is left out, as the scheduler leaves it out. Several NodePools give one column per
//! (NodePool, type), each with its own overhead and prices, so the bound is over the union of
//! what they allow.
//!
//! # Zone spread
//!
//! [`plan_lower_bound`] also holds the plan to what zone spread forces on it, when that can
//! be known exactly: no node exists yet, so every zone the NodePools can launch in is a
//! domain and starts empty. Each zone then holds at least `ceil((n - (Z - 1) * maxSkew) / Z)`
//! of a spread's `n` pods over `Z` zones (the fullest zone has at most `maxSkew` more than
//! the emptiest one, and together they hold all `n`), so the programme gets one column per
//! (type, zone) at that zone's price and, for every zone, a row per resource covering what
//! those pods request at least. Without it, a spread over zones of unequal prices would be
//! measured against capacity bought in the cheapest zone alone, which no spread plan can
//! buy. A spread counts only when it is certain to hold that way: `DoNotSchedule`, no
//! `minDomains` or `matchLabelKeys`, its pods free to go to every zone, and every pod its
//! selector counts placed under that same spread.
//!
//! # Why it is a lower bound
//!
//! A plan that places the pods on new nodes of these NodePools buys whole nodes whose
//! allocatable, less DaemonSets, covers what its pods request, each at no less than its type's
//! cheapest accepted offering: a feasible point of the programme, so it costs at least the
//! optimum. What the programme leaves out (that a pod must fit on one node, whole nodes, node
//! selectors and affinity, spread, taints, NodePool weights and limits, reservations'
//! capacity) only constrains plans further, and the zone rows hold for every plan that keeps
//! the spread. Plan cost over bound therefore says how much
//! packing and constraints cost together; `1.00x` is unbeatable.
//!
//! # How close a plan can come
//!
//! The programme may fill a node with fractions of pods, so no plan of whole pods reaches it.
//! How far the best plan of whole pods stays above it shows in the configuration
//! (Gilmore-Gomory) bound, whose columns are the ways one node of one type holds whole pods:
//! `GG=1` of the simulator's `cost-breakdown` example works it out for the pods a plan puts in
//! each zone. On the benchmark mixes (seed 42, us-east-1) that bound is itself 1.14x this one
//! for 1,000 plain pods over the whole catalogue and 1.07x on a typical NodePool (c, m and r
//! families, on-demand), and 1.13x and 1.12x for zone spread at 5,000 and 20,000 pods with the
//! plan's pods per zone. Those ratios are what whole pods cost; only the rest is packing.
//!
//! # Burstable types
//!
//! Burstable types (the plugin marks them: for AWS the `t` families t1, t2, t3, t3a, t4g) sell
//! nominal vCPUs that run at full speed only while credits last. Counted at their nominal cpu
//! they would make the bound buy cpu a sustained workload does not get, so they are left out
//! unless a NodePool asks for them explicitly: an `In` requirement that lists the type's value
//! on its instance type or on a provider label of the type (for AWS its family or category).
//! The bound is then a bound on plans without burstable types; a plan that buys them can come
//! in under it. Types a plugin does not mark are never left out.

use std::collections::HashSet;
use std::sync::Arc;

use good_lp::{Expression, ProblemVariables, SolverModel, Variable, constraint, microlp, variable};

use crate::instance_type::InstanceType;
use crate::instance_type::Offering;
use crate::labels::{LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE, LabelPolicy, WELL_KNOWN_LABELS};
use crate::quantity::Quantity;
use crate::requirements::{AllowUndefined, Operator, Requirements};
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::daemons::{DaemonGroups, DaemonSets};
use crate::scheduler::fit::Fixed;
use crate::scheduler::node::counted;
use crate::scheduler::nodepool::NodePoolSpec;
use crate::scheduler::pod::{Pod, PodId};
use crate::scheduler::pool::template_requirements;
use crate::scheduler::solver::launchable_zones;
use crate::scheduler::{LabelSelector, TopologySpreadConstraint, WhenUnsatisfiable};
use crate::scheduler::{SchedulingInput, SchedulingResults};

/// A resource counts as binding when the optimum's supply of it is within this fraction of
/// the demand: the solver's answers are exact only to about this much.
const BINDING_TOLERANCE: f64 = 1e-6;

/// Solutions below this many nodes of a type are the solver's rounding noise, not a purchase.
const NEGLIGIBLE_NODES: f64 = 1e-9;

/// The optimum of the programme.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CostBound {
    /// Its cost per hour, in the offerings' price unit.
    pub per_hour: f64,
    /// What it buys, in NodePool order then catalogue order. A basic optimum buys at most
    /// one type per resource counted.
    pub nodes: Vec<FractionalNodes>,
    /// The resources it supplies exactly as much of as the pods request: what holds the bound
    /// up. Sorted by name.
    pub binding: Vec<ResourceName>,
}

/// Nodes of one type the optimum buys, a fraction of a node allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct FractionalNodes {
    /// The NodePool.
    pub node_pool: String,
    /// The instance type.
    pub instance_type: Arc<str>,
    /// The zone of the offering priced.
    pub zone: Arc<str>,
    /// Its capacity type.
    pub capacity_type: Arc<str>,
    /// Its price per hour.
    pub price: f64,
    /// How many nodes.
    pub count: f64,
}

/// Why there is no bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    /// No NodePool was given.
    #[error("no NodePool to buy capacity from")]
    NoNodePools,
    /// The NodePools allow no type with an available offering that holds their DaemonSets.
    #[error(
        "NodePools {node_pools} allow no instance type with an available offering that holds \
         their DaemonSets ({burstable} burstable types left out)"
    )]
    NoOfferings {
        /// The NodePools' names, comma-separated.
        node_pools: String,
        /// How many compatible types were left out as burstable.
        burstable: usize,
    },
    /// The pods request a resource that no allowed type has to spare.
    #[error(
        "the pods request {requested} {resource} and no allowed instance type has any to spare"
    )]
    Infeasible {
        /// The resource.
        resource: ResourceName,
        /// How much the pods request in total.
        requested: Quantity,
    },
    /// An offering's price is not a price.
    #[error(
        "instance type {instance_type} of NodePool {node_pool} is priced {price} per hour; a \
         price is finite and not negative"
    )]
    InvalidPrice {
        /// The NodePool.
        node_pool: String,
        /// The instance type.
        instance_type: String,
        /// The price.
        price: f64,
    },
    /// The solver gave no optimum (it should not: a feasible covering programme with
    /// non-negative prices always has one).
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

/// The bound for the pods a plan placed on new NodeClaims: the pods `estimated_cost` pays
/// for.
///
/// Pods left unschedulable are not covered: the plan buys nothing for them, and covering them
/// would compare the plan with capacity for pods it does not place (a pod no type can hold
/// would even make the bound infeasible). Pods placed on existing nodes or in-flight
/// NodeClaims are not covered either, since the plan's cost does not count that capacity.
///
/// With no existing node, zone spread among those pods holds the bound up too (see the module
/// documentation).
pub fn plan_lower_bound(
    input: &SchedulingInput,
    results: &SchedulingResults,
) -> Result<CostBound, BoundError> {
    let placed: HashSet<&PodId> = results
        .new_node_claims
        .iter()
        .flat_map(|claim| &claim.pods)
        .collect();
    let pods: Vec<&Pod> = input
        .pods
        .iter()
        .filter(|pod| placed.contains(&pod.id))
        .collect();
    let shares = if input.existing_nodes.is_empty() {
        zone_shares(&pods, launchable_zones(input))
    } else {
        None
    };
    bound_of(
        pods,
        &input.node_pools,
        &input.daemon_set_pods,
        &input.label_policy,
        shares.as_ref(),
    )
}

/// The cheapest fractional capacity for `pods` from `node_pools`, whose new nodes run the
/// `daemon_set_pods` that tolerate and select them (see the module documentation). No pods
/// cost nothing, whatever is offered.
pub fn lower_bound<'p>(
    pods: impl IntoIterator<Item = &'p Pod>,
    node_pools: &[NodePoolSpec],
    daemon_set_pods: &[Pod],
    label_policy: &LabelPolicy,
) -> Result<CostBound, BoundError> {
    bound_of(pods, node_pools, daemon_set_pods, label_policy, None)
}

/// What every zone must hold of the pods' requests, whatever the plan.
#[derive(Debug, Clone, PartialEq)]
struct ZoneShares {
    /// The zones, each a domain of every spread counted.
    zones: Vec<Arc<str>>,
    /// What each of them holds at least.
    each: ResourceList,
}

/// The share of `pods` every zone of `zones` must hold under their zone spreads (see the
/// module documentation), or `None` when no spread certainly forces one.
fn zone_shares(pods: &[&Pod], zones: Vec<Arc<str>>) -> Option<ZoneShares> {
    let count = i64::try_from(zones.len()).ok()?;
    if count < 2 {
        return None;
    }
    let mut each = ResourceList::new();
    for (namespace, selector, max_skew) in certain_spreads(pods) {
        let selected: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| p.id.namespace() == namespace && selector.matches(&p.labels))
            .collect();
        let spread_by = |p: &Pod| {
            p.topology_spread_constraints.iter().any(|c| {
                certain(c, p)
                    && c.max_skew == max_skew
                    && c.label_selector.as_ref() == Some(selector)
            })
        };
        if !selected.iter().all(|p| spread_by(p)) {
            continue;
        }
        let n = i64::try_from(selected.len()).unwrap_or(i64::MAX);
        let least = n
            .saturating_sub((count - 1).saturating_mul(i64::from(max_skew)))
            .max(0);
        // Ceiling division of a non-negative numerator by a positive count.
        let least = (least + count - 1) / count;
        if least == 0 {
            continue;
        }
        let mut smallest: Option<ResourceList> = None;
        for pod in &selected {
            let requests = counted(&pod.requests);
            smallest = Some(match smallest {
                None => requests,
                Some(so_far) => so_far
                    .iter()
                    .map(|(resource, amount)| {
                        let other = requests.get(&resource);
                        (resource, amount.min(other))
                    })
                    .fold(ResourceList::new(), |list, (r, a)| list.with(r, a)),
            });
        }
        for (resource, amount) in smallest.iter().flat_map(ResourceList::iter) {
            let total = each
                .get(&resource)
                .saturating_add(amount.saturating_mul(least));
            each.set(&resource, total);
        }
    }
    let forced = each.iter().any(|(_, amount)| amount > 0);
    forced.then_some(ZoneShares { zones, each })
}

/// The distinct (namespace, selector, maxSkew) of the zone spreads among `pods` that hold as
/// the module documentation says.
fn certain_spreads<'p>(pods: &[&'p Pod]) -> Vec<(&'p str, &'p LabelSelector, u32)> {
    let mut spreads: Vec<(&str, &LabelSelector, u32)> = Vec::new();
    for pod in pods {
        for constraint in &pod.topology_spread_constraints {
            let Some(selector) = constraint.label_selector.as_ref() else {
                continue;
            };
            let spread = (pod.id.namespace(), selector, constraint.max_skew);
            if certain(constraint, pod) && !spreads.contains(&spread) {
                spreads.push(spread);
            }
        }
    }
    spreads
}

/// Whether `constraint` of `pod` spreads it over every zone with a count the scheduler keeps
/// within maxSkew.
fn certain(constraint: &TopologySpreadConstraint, pod: &Pod) -> bool {
    constraint.topology_key == LABEL_TOPOLOGY_ZONE
        && constraint.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
        && constraint.min_domains.is_none()
        && constraint.match_label_keys.is_empty()
        && constraint.max_skew > 0
        && !pod.node_selector.contains_key(LABEL_TOPOLOGY_ZONE)
        && pod
            .required_node_affinity
            .iter()
            .all(|term| term.get(LABEL_TOPOLOGY_ZONE).is_none())
}

fn bound_of<'p>(
    pods: impl IntoIterator<Item = &'p Pod>,
    node_pools: &[NodePoolSpec],
    daemon_set_pods: &[Pod],
    label_policy: &LabelPolicy,
    shares: Option<&ZoneShares>,
) -> Result<CostBound, BoundError> {
    let mut demand = ResourceList::new();
    for pod in pods {
        demand.saturating_add_assign(&counted(&pod.requests));
    }
    let rows: Vec<(ResourceName, i64)> = demand.iter().filter(|(_, n)| *n > 0).collect();
    if rows.is_empty() {
        return Ok(CostBound::default());
    }
    let columns = columns(
        &rows,
        node_pools,
        daemon_set_pods,
        label_policy,
        shares.is_some(),
    )?;
    for (row, (resource, _)) in rows.iter().enumerate() {
        if !columns.iter().any(|c| c.supply[row] > 0.0) {
            return Err(BoundError::Infeasible {
                resource: resource.clone(),
                requested: demand.quantity(resource),
            });
        }
    }
    solve(&rows, &columns, shares)
}

/// One (NodePool, instance type) the programme may buy.
#[derive(Debug)]
struct Column<'a> {
    node_pool: &'a str,
    instance_type: &'a InstanceType,
    zone: Arc<str>,
    capacity_type: Arc<str>,
    price: f64,
    /// What a node supplies of each row's resource once its DaemonSets run.
    supply: Vec<f64>,
}

/// The programme's columns: one per (NodePool, type) at its cheapest offering, or one per
/// (NodePool, type, zone) at each zone's cheapest when `by_zone`.
fn columns<'a>(
    rows: &[(ResourceName, i64)],
    node_pools: &'a [NodePoolSpec],
    daemon_set_pods: &[Pod],
    label_policy: &LabelPolicy,
    by_zone: bool,
) -> Result<Vec<Column<'a>>, BoundError> {
    if node_pools.is_empty() {
        return Err(BoundError::NoNodePools);
    }
    let allow = AllowUndefined::WellKnownLabels(label_policy);
    let mut columns = Vec::new();
    let mut burstable = 0;
    for spec in node_pools {
        let base = template_requirements(spec);
        let daemons = DaemonSets {
            pods: daemon_set_pods,
            taints: &spec.taints,
            allow,
        };
        let mut groups = DaemonGroups::default();
        let on_template = daemons.on_template(&base);
        for instance_type in spec
            .instance_types
            .iter()
            .filter(|t| t.is_compatible(&base))
        {
            if is_burstable(instance_type) && !asks_for(&base, instance_type) {
                burstable += 1;
                continue;
            }
            let allocatable = instance_type.allocatable();
            let group = groups.group_of(
                daemons.on_type(&on_template, &base, instance_type),
                daemon_set_pods,
            );
            let overhead = &groups.groups()[group as usize].demand;
            if !overhead.fits(allocatable, &Fixed::of(allocatable)) {
                continue;
            }
            let offerings: Vec<&Offering> = if by_zone {
                let mut cheapest: Vec<&Offering> = Vec::new();
                for offering in instance_type.available_offerings(&base) {
                    match cheapest.iter_mut().find(|o| o.zone == offering.zone) {
                        Some(known) if offering.price < known.price => *known = offering,
                        Some(_) => {}
                        None => cheapest.push(offering),
                    }
                }
                cheapest
            } else {
                instance_type.cheapest_offering(&base).into_iter().collect()
            };
            if let Some(offering) = offerings
                .iter()
                .find(|o| !o.price.is_finite() || o.price < 0.0)
            {
                return Err(BoundError::InvalidPrice {
                    node_pool: spec.name.clone(),
                    instance_type: instance_type.name().to_owned(),
                    price: offering.price,
                });
            }
            let supply: Vec<f64> = rows
                .iter()
                .map(|(resource, _)| {
                    allocatable
                        .get(resource)
                        .saturating_sub(overhead.list.get(resource))
                        .max(0) as f64
                })
                .collect();
            if supply.iter().all(|s| *s <= 0.0) {
                continue;
            }
            for offering in offerings {
                columns.push(Column {
                    node_pool: &spec.name,
                    instance_type,
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type.clone(),
                    price: offering.price,
                    supply: supply.clone(),
                });
            }
        }
    }
    if columns.is_empty() {
        let names: Vec<&str> = node_pools.iter().map(|p| p.name.as_str()).collect();
        return Err(BoundError::NoOfferings {
            node_pools: names.join(", "),
            burstable,
        });
    }
    Ok(columns)
}

fn solve(
    rows: &[(ResourceName, i64)],
    columns: &[Column<'_>],
    shares: Option<&ZoneShares>,
) -> Result<CostBound, BoundError> {
    let mut variables = ProblemVariables::new();
    let x: Vec<Variable> = variables.add_vector(variable().min(0.0), columns.len());
    let objective: Expression = columns
        .iter()
        .zip(&x)
        .map(|(column, &x)| column.price * x)
        .sum();
    let mut model = variables.minimise(objective).using(microlp);
    // Each row is divided by its demand: memory counts in bytes (10^12 for a large batch) and
    // pods in units, and a right-hand side of 1 everywhere keeps the simplex well conditioned.
    for (row, (_, demand)) in rows.iter().enumerate() {
        let demand = *demand as f64;
        let covered: Expression = columns
            .iter()
            .zip(&x)
            .filter(|(column, _)| column.supply[row] > 0.0)
            .map(|(column, &x)| (column.supply[row] / demand) * x)
            .sum();
        model = model.with(constraint!(covered >= 1.0));
    }
    for zone in shares.iter().flat_map(|s| &s.zones) {
        for (row, (resource, _)) in rows.iter().enumerate() {
            let least = shares.map_or(0, |s| s.each.get(resource));
            if least <= 0 {
                continue;
            }
            let least = least as f64;
            let covered: Expression = columns
                .iter()
                .zip(&x)
                .filter(|(column, _)| column.zone == *zone && column.supply[row] > 0.0)
                .map(|(column, &x)| (column.supply[row] / least) * x)
                .sum();
            model = model.with(constraint!(covered >= 1.0));
        }
    }
    let solution = model
        .solve()
        .map_err(|error| BoundError::Solver(error.to_string()))?;
    let counts: Vec<f64> = x
        .iter()
        .map(|&x| good_lp::Solution::value(&solution, x).max(0.0))
        .collect();
    let mut bound = CostBound::default();
    let mut supplied = vec![0.0; rows.len()];
    for (column, &count) in columns.iter().zip(&counts) {
        if count < NEGLIGIBLE_NODES {
            continue;
        }
        bound.per_hour += column.price * count;
        for (total, supply) in supplied.iter_mut().zip(&column.supply) {
            *total += supply * count;
        }
        bound.nodes.push(FractionalNodes {
            node_pool: column.node_pool.to_owned(),
            instance_type: column.instance_type.name().into(),
            zone: column.zone.clone(),
            capacity_type: column.capacity_type.clone(),
            price: column.price,
            count,
        });
    }
    bound.binding = rows
        .iter()
        .zip(&supplied)
        .filter(|((_, demand), supplied)| **supplied <= *demand as f64 * (1.0 + BINDING_TOLERANCE))
        .map(|((resource, _), _)| resource.clone())
        .collect();
    Ok(bound)
}

/// Whether the type's cpu is burstable, as its cloud provider says.
pub(super) fn is_burstable(instance_type: &InstanceType) -> bool {
    instance_type.is_cpu_burstable()
}

/// Whether `requirements` name the type explicitly: an `In` that lists its value on its
/// instance type, or on one of the provider's labels that describe the type itself (for AWS
/// its family or category). Core's other well-known labels (zone, capacity type,
/// architecture, ...) say where or how a node runs, not which type it is, and do not count.
pub(super) fn asks_for(requirements: &Requirements, instance_type: &InstanceType) -> bool {
    requirements.iter().any(|wanted| {
        let key = wanted.key();
        let names_types = key == LABEL_INSTANCE_TYPE || !WELL_KNOWN_LABELS.contains(&key);
        names_types
            && wanted.operator() == Operator::In
            && instance_type
                .requirements()
                .get(key)
                .is_some_and(|own| own.values().any(|v| wanted.has(v)))
    })
}
