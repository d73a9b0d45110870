//! A NodeClaim being planned: its requirements (the NodePool's, narrowed by every pod it
//! takes), its requests (DaemonSet overhead plus its pods), and its remaining instance type
//! options with the extremes of their allocatable, so that most pods are accepted or refused
//! without looking at the options one by one.

use std::sync::Arc;

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{AllowUndefined, MinValuesError, Operator, Requirement, Requirements};
use crate::scheduler::bits::Bits;
use crate::scheduler::catalog::{Catalog, Dimensions, Filtered, Narrowing};
use crate::scheduler::constraints::HostPort;
use crate::scheduler::fit::{Demand, Fixed};
use crate::scheduler::plan::Constraints;
use crate::scheduler::taints::Toleration;
use crate::scheduler::topology::{Domain, PodTopology, Topology, Violation};

/// What a placement needs to know about the pod.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate<'c> {
    pub(super) constraints: &'c Constraints,
    pub(super) topology: PodTopology<'c>,
    pub(super) demand: &'c Demand,
    pub(super) host_ports: &'c [HostPort],
    pub(super) tolerations: &'c [Toleration],
}

/// The shared state a NodeClaim consults.
#[derive(Debug, Clone, Copy)]
pub(super) struct Context<'c> {
    pub(super) catalog: &'c Catalog,
    pub(super) dims: &'c Dimensions,
    pub(super) topology: &'c Topology,
    pub(super) allow: AllowUndefined<'c>,
}

/// Why a pod does not fit a NodeClaim (the NodePool-level reasons, taints and requirements
/// against the template, are checked before).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Miss {
    HostPort(HostPort),
    Requirements,
    Resources,
    Topology(Violation),
    MinValues(MinValuesError),
}

/// The NodeClaim as it would be with the pod: what [`NodeClaimState::commit`] applies.
#[derive(Debug)]
pub(super) struct Trial {
    requirements: Option<Requirements>,
    demand: Demand,
    filtered: Option<Filtered>,
}

impl Trial {
    /// The requirements the NodeClaim would have.
    pub(super) fn requirements<'t>(&'t self, claim: &'t NodeClaimState) -> &'t Requirements {
        self.requirements.as_ref().unwrap_or(&claim.requirements)
    }

    /// The options the NodeClaim would have.
    pub(super) fn options<'t>(&'t self, claim: &'t NodeClaimState) -> &'t Bits {
        self.filtered
            .as_ref()
            .map_or(&claim.options, |f| &f.options)
    }
}

/// A NodeClaim planned in this run.
#[derive(Debug)]
pub(super) struct NodeClaimState {
    /// The NodePool, as an index into the run's NodePools.
    pub(super) pool: usize,
    /// Its position among the run's NodeClaims, which is also its hostname domain.
    pub(super) index: u32,
    /// The template's requirements narrowed by every pod and topology rule so far.
    pub(super) requirements: Requirements,
    /// DaemonSet overhead plus the pods' requests.
    pub(super) demand: Demand,
    /// The instance types (catalogue indices) that still satisfy the requirements and fit.
    pub(super) options: Bits,
    smallest: Fixed,
    largest: Fixed,
    /// The pods, as indices into the run's pending pods.
    pub(super) pods: Vec<usize>,
    host_ports: Vec<HostPort>,
}

impl NodeClaimState {
    /// An empty NodeClaim of `pool` with the template's `requirements`, the DaemonSet
    /// overhead as `demand` and `options` (whose allocatable ranges over `smallest..largest`).
    pub(super) fn new(
        pool: usize,
        index: u32,
        requirements: Requirements,
        demand: Demand,
        options: &Filtered,
        daemon_ports: &[HostPort],
    ) -> Self {
        NodeClaimState {
            pool,
            index,
            requirements,
            demand,
            options: options.options.clone(),
            smallest: options.smallest,
            largest: options.largest,
            pods: Vec::new(),
            host_ports: daemon_ports.to_vec(),
        }
    }

    /// The NodeClaim's hostname domain.
    pub(super) fn host(&self) -> Domain {
        Domain::Claim(self.index)
    }

    /// Whether the pod fits, and how the NodeClaim would look with it.
    pub(super) fn try_add(&self, ctx: &Context<'_>, pod: &Candidate<'_>) -> Result<Trial, Miss> {
        if let Some(port) = conflicting_port(&self.host_ports, pod.host_ports) {
            return Err(Miss::HostPort(port));
        }
        let demand = self.demand.plus(pod.demand);
        if !demand.fixed.fits_in(&self.largest) {
            return Err(Miss::Resources);
        }
        ctx.topology
            .check_hostname(&pod.topology, self.host())
            .map_err(Miss::Topology)?;
        let mut requirements = None;
        let wanted = &pod.constraints.requirements;
        if !wanted.is_empty() {
            if !self.requirements.is_compatible(wanted, ctx.allow) {
                return Err(Miss::Requirements);
            }
            let mut merged = self.requirements.clone();
            merged.add_all(wanted);
            if merged != self.requirements {
                requirements = Some(merged);
            }
        }
        let current = requirements.as_ref().unwrap_or(&self.requirements);
        let mut filtered = if requirements.is_some() {
            let narrowing = ctx.catalog.narrowing(&self.requirements, current, ctx.dims);
            Some(ctx.catalog.filter(&self.options, &narrowing, &demand))
        } else if demand.extended || !demand.fixed.fits_in(&self.smallest) {
            Some(
                ctx.catalog
                    .filter(&self.options, &Narrowing::none(current), &demand),
            )
        } else {
            None
        };
        if filtered.as_ref().is_some_and(|f| f.options.is_empty()) {
            return Err(if requirements.is_some() {
                Miss::Requirements
            } else {
                Miss::Resources
            });
        }
        if ctx.topology.has_domain_rules(&pod.topology) {
            let options = filtered.as_ref().map_or(&self.options, |f| &f.options);
            let mut narrowed = current.clone();
            let mut offered = Offered::default();
            ctx.topology
                .narrow(&pod.topology, &mut narrowed, &mut |key, value, now| {
                    offered.offers(ctx, options, key, value, now)
                })
                .map_err(Miss::Topology)?;
            if &narrowed != current {
                let narrowing = ctx.catalog.narrowing(current, &narrowed, ctx.dims);
                let refiltered = ctx.catalog.filter(options, &narrowing, &demand);
                if refiltered.options.is_empty() {
                    return Err(Miss::Resources);
                }
                filtered = Some(refiltered);
                requirements = Some(narrowed);
            }
        }
        let trial = Trial {
            requirements,
            demand,
            filtered,
        };
        let final_requirements = trial.requirements(self);
        if final_requirements.has_min_values() {
            let options = trial.options(self);
            final_requirements
                .satisfies_min_values(
                    options
                        .iter()
                        .map(|i| ctx.catalog.instance_type(i).requirements()),
                )
                .map_err(Miss::MinValues)?;
        }
        Ok(trial)
    }

    /// Takes the pod `pod` as `trial` describes.
    pub(super) fn commit(&mut self, trial: Trial, pod: usize, host_ports: &[HostPort]) {
        if let Some(requirements) = trial.requirements {
            self.requirements = requirements;
        }
        self.demand = trial.demand;
        if let Some(filtered) = trial.filtered {
            self.options = filtered.options;
            self.smallest = filtered.smallest;
            self.largest = filtered.largest;
        }
        self.pods.push(pod);
        self.host_ports.extend_from_slice(host_ports);
    }
}

/// The first of `wanted` that conflicts with a port in `taken`.
pub(super) fn conflicting_port(taken: &[HostPort], wanted: &[HostPort]) -> Option<HostPort> {
    wanted
        .iter()
        .find(|w| taken.iter().any(|t| t.conflicts_with(w)))
        .copied()
}

/// The zones and capacity types a NodeClaim's options offer, computed once per trial when a
/// topology rule has to pick one.
#[derive(Debug, Default)]
struct Offered {
    for_requirements: Option<(Option<Requirement>, Option<Requirement>)>,
    zones: Vec<Arc<str>>,
    capacity_types: Vec<Arc<str>>,
}

impl Offered {
    fn offers(
        &mut self,
        ctx: &Context<'_>,
        options: &Bits,
        key: &str,
        value: &str,
        requirements: &Requirements,
    ) -> bool {
        if key != LABEL_TOPOLOGY_ZONE && key != LABEL_CAPACITY_TYPE {
            return true;
        }
        if let Some(current) = requirements.get(key)
            && current.operator() == Operator::In
            && current.len() == 1
        {
            // Already pinned: the options were filtered for exactly this value.
            return current.has(value);
        }
        let signature = (
            requirements.get(LABEL_TOPOLOGY_ZONE).cloned(),
            requirements.get(LABEL_CAPACITY_TYPE).cloned(),
        );
        if self.for_requirements.as_ref() != Some(&signature) {
            let (zones, capacity_types) = ctx.catalog.offered(
                options.iter().map(|i| u32::try_from(i).unwrap_or(u32::MAX)),
                requirements,
                ctx.dims,
            );
            self.zones = zones;
            self.capacity_types = capacity_types;
            self.for_requirements = Some(signature);
        }
        let offered = if key == LABEL_TOPOLOGY_ZONE {
            &self.zones
        } else {
            &self.capacity_types
        };
        offered.binary_search_by(|v| (**v).cmp(value)).is_ok()
    }
}
