//! A NodePool during a run: its template requirements, its catalogue (with the DaemonSet
//! overhead each of its types carries) and what its limits still allow (upstream's
//! `remainingResources`, reduced by the largest option of every NodeClaim it plans).

use std::sync::Arc;

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{AllowUndefined, Operator, Requirement, Requirements};
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::bits::Bits;
use crate::scheduler::catalog::{Catalog, Dimensions, Filtered, Narrowing};
use crate::scheduler::cost::PoolCost;
use crate::scheduler::daemons::DaemonSets;
use crate::scheduler::fit::{Demand, Fixed};
use crate::scheduler::ids::ContentMap;
use crate::scheduler::nodepool::NodePoolSpec;
use crate::scheduler::pod::Pod;

/// What is left of one limit.
#[derive(Debug, Clone)]
pub(super) struct Remaining {
    /// The limited resource.
    pub(super) resource: ResourceName,
    /// What is left: the limit less usage, less the largest option of each NodeClaim planned.
    pub(super) left: i64,
    /// The limit itself, for messages.
    pub(super) limit: i64,
}

/// A NodePool during a run.
#[derive(Debug)]
pub(super) struct PoolState<'a> {
    pub(super) spec: &'a NodePoolSpec,
    /// The template's requirements, labels and `karpenter.sh/nodepool` included.
    pub(super) base: Requirements,
    pub(super) catalog: Catalog,
    /// Every type of the catalogue.
    pub(super) all: Filtered,
    /// The types the limits still allow.
    pub(super) within: Filtered,
    pub(super) remaining: Vec<Remaining>,
    /// Changes whenever what the NodePool can launch changes (its limits are consumed), so
    /// that refusals remembered for an earlier generation are not reused.
    pub(super) generation: u64,
    /// Its types as cost-aware packing weighs them.
    pub(super) cost: PoolCost,
    /// Where new NodeClaims start, by their first pod's requirements and requests, for
    /// `openings_generation`: see [`Self::opening`].
    openings: ContentMap<(Requirements, ResourceList), Option<Opening>>,
    openings_generation: u64,
}

/// Where a new NodeClaim starts, before its first pod's topology rules narrow it: the
/// template's requirements with the pod's, and the types within the limits that satisfy
/// them and hold the pod.
#[derive(Debug, Clone)]
pub(super) struct Opening {
    pub(super) requirements: Requirements,
    pub(super) options: Filtered,
}

impl<'a> PoolState<'a> {
    /// Prepares `spec` for a run.
    pub(super) fn new(
        spec: &'a NodePoolSpec,
        dims: &Dimensions,
        daemon_set_pods: &[Pod],
        allow: AllowUndefined<'_>,
    ) -> Self {
        let base = template_requirements(spec);
        let daemons = DaemonSets {
            pods: daemon_set_pods,
            taints: &spec.taints,
            allow,
        };
        let catalog = Catalog::new(&spec.instance_types, &base, dims, &daemons);
        let all = catalog.filter(
            &Bits::full(catalog.len()),
            &Narrowing::none(&base),
            &Demand::default(),
        );
        let remaining: Vec<Remaining> = spec
            .limits
            .iter()
            .map(|(resource, limit)| Remaining {
                resource: resource.clone(),
                left: limit.saturating_sub(spec.usage.get(resource)),
                limit,
            })
            .collect();
        let cost = PoolCost::new(&catalog, &base);
        let mut pool = PoolState {
            spec,
            base,
            within: all.clone(),
            all,
            catalog,
            remaining,
            generation: 0,
            cost,
            openings: ContentMap::default(),
            openings_generation: 0,
        };
        pool.refresh_within();
        pool
    }

    /// Where a new NodeClaim for a pod with `wanted` requirements and `demand` starts, or
    /// `None` when no type within the limits would hold it (the NodeClaim's own trial then
    /// says why). Filtering the whole catalogue is most of what opening a NodeClaim costs,
    /// and replicas open many NodeClaims alike; what the limits allow changes with the
    /// generation, which clears what was remembered.
    pub(super) fn opening(
        &mut self,
        wanted: &Requirements,
        demand: &Demand,
        dims: &Dimensions,
    ) -> Option<&Opening> {
        if self.openings_generation != self.generation {
            self.openings.clear();
            self.openings_generation = self.generation;
        }
        let key = (wanted.clone(), demand.list.clone());
        let (catalog, base, within) = (&self.catalog, &self.base, &self.within);
        self.openings
            .entry(key)
            .or_insert_with(|| {
                let mut requirements = base.clone();
                requirements.add_all(wanted);
                let narrowing = catalog.narrowing(base, &requirements, dims);
                let options = catalog.filter(&within.options, &narrowing, demand);
                drop(narrowing);
                (!options.options.is_empty()).then_some(Opening {
                    requirements,
                    options,
                })
            })
            .as_ref()
    }

    /// Recomputes the types the limits allow.
    fn refresh_within(&mut self) {
        if self.remaining.is_empty() {
            return;
        }
        let left: Vec<(ResourceName, i64)> = self
            .remaining
            .iter()
            .map(|r| (r.resource.clone(), r.left))
            .collect();
        self.within = self.catalog.filter(
            &self.catalog.within(&left),
            &Narrowing::none(&self.base),
            &Demand::default(),
        );
    }

    /// Accounts for a NodeClaim with `options` (upstream `subtractMax`): the largest of them
    /// may be launched, so that much is no longer available. Returns what it took of each
    /// limit, for [`Self::release`].
    pub(super) fn reserve(&mut self, options: &Bits) -> Vec<i64> {
        if self.remaining.is_empty() {
            return Vec::new();
        }
        let mut taken = Vec::with_capacity(self.remaining.len());
        for remaining in &mut self.remaining {
            let largest = self.catalog.largest_capacity(options, &remaining.resource);
            let before = remaining.left;
            remaining.left = remaining.left.saturating_sub(largest);
            taken.push(before - remaining.left);
        }
        self.generation += 1;
        self.refresh_within();
        taken
    }

    /// What the limits still allow, to [`Self::restore`] after trying something.
    pub(super) fn snapshot(&self) -> (Vec<Remaining>, Filtered) {
        (self.remaining.clone(), self.within.clone())
    }

    /// Puts back what [`Self::snapshot`] saved. The generation moves on rather than back, so
    /// that nothing remembered while trying is taken for what the limits allow now.
    pub(super) fn restore(&mut self, (remaining, within): (Vec<Remaining>, Filtered)) {
        self.remaining = remaining;
        self.within = within;
        self.generation += 1;
    }

    /// Gives back what [`Self::reserve`] took for a NodeClaim that is no longer planned.
    pub(super) fn release(&mut self, taken: &[i64]) {
        if taken.is_empty() {
            return;
        }
        for (remaining, taken) in self.remaining.iter_mut().zip(taken) {
            remaining.left = remaining.left.saturating_add(*taken);
        }
        self.generation += 1;
        self.refresh_within();
    }

    /// The limit that keeps every type of `candidates` out: the first that excludes them all,
    /// else the first that excludes any.
    pub(super) fn limiting(&self, candidates: &Bits) -> Option<&Remaining> {
        let excludes = |r: &Remaining, i: usize| self.catalog.capacity(i, &r.resource) > r.left;
        self.remaining
            .iter()
            .find(|r| candidates.iter().all(|i| excludes(r, i)))
            .or_else(|| {
                self.remaining
                    .iter()
                    .find(|r| candidates.iter().any(|i| excludes(r, i)))
            })
    }

    /// What pods requesting `whole` cost on the type of this NodePool that holds them for
    /// least at `requirements`' prices, fractions of a node allowed, burstable types left out
    /// as cost caps leave them out; only among the types that cannot hold them all on one
    /// node when `smaller` (`PoolCost::least_cost`).
    pub(super) fn least_cost(
        &mut self,
        requirements: &Requirements,
        dims: &Dimensions,
        whole: &Fixed,
        smaller: bool,
    ) -> f64 {
        let prices = self.catalog.prices(requirements, dims);
        let undominated = self.cost.undominated(&prices);
        self.cost.least_cost(&undominated, whole, smaller)
    }

    /// The values of `key` that nodes of this NodePool can have: the zones and capacity types
    /// of its available offerings, or the values its types or its template allow.
    pub(super) fn domain_values(&self, key: &str, dims: &Dimensions) -> Vec<Arc<str>> {
        let indices = self
            .all
            .options
            .iter()
            .map(|i| u32::try_from(i).unwrap_or(u32::MAX));
        if key == LABEL_TOPOLOGY_ZONE || key == LABEL_CAPACITY_TYPE {
            let (zones, capacity_types) = self.catalog.offered(indices, &self.base, dims);
            return if key == LABEL_TOPOLOGY_ZONE {
                zones
            } else {
                capacity_types
            };
        }
        let template = self.base.get(key);
        let mut values: Vec<Arc<str>> = Vec::new();
        for index in self.all.options.iter() {
            let own = self.catalog.instance_type(index).requirements().get(key);
            let source = own.or(template);
            if let Some(requirement) = source
                && requirement.operator() == Operator::In
            {
                values.extend(
                    requirement
                        .values()
                        .filter(|v| template.is_none_or(|t| t.has(v)))
                        .map(Arc::from),
                );
            }
        }
        values.sort();
        values.dedup();
        values
    }
}

/// What every new node of `spec` satisfies: the template's requirements and labels, and
/// `karpenter.sh/nodepool`.
pub(super) fn template_requirements(spec: &NodePoolSpec) -> Requirements {
    let mut base = spec.requirements.clone();
    base.add_all(&Requirements::from_labels(&spec.labels));
    base.add(Requirement::in_values(LABEL_NODEPOOL, [spec.name.as_str()]));
    base
}
