//! A NodeClaim being planned: its requirements (the NodePool's, narrowed by every pod it
//! takes), its requests (DaemonSet overhead plus its pods), and its remaining instance type
//! options with the extremes of their allocatable, so that most pods are accepted or refused
//! without looking at the options one by one.

use std::cell::Cell;
use std::sync::Arc;

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{AllowUndefined, MinValuesError, Operator, Requirement, Requirements};
use crate::scheduler::bits::Bits;
use crate::scheduler::catalog::{Catalog, Cursors, Dimensions, Filtered, Narrowing};
use crate::scheduler::constraints::{HostPort, conflicting_port};
use crate::scheduler::cost::CostCap;
use crate::scheduler::fit::{Demand, Fixed};
use crate::scheduler::plan::Constraints;
use crate::scheduler::preferences::Relaxation;
use crate::scheduler::taints::Toleration;
use crate::scheduler::topology::{AllowedDomains, Broken, Domain, PodTopology, Topology};

/// What a placement needs to know about the pod.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate<'c> {
    pub(super) constraints: &'c Constraints,
    pub(super) topology: PodTopology<'c>,
    pub(super) demand: &'c Demand,
    pub(super) host_ports: &'c [HostPort],
    pub(super) tolerations: &'c [Toleration],
    /// The pod's replica class and relaxation, when a NodeClaim that refuses it for a final
    /// reason ([`Miss::is_final`]) refuses every pod of that class at that relaxation for the
    /// rest of the run.
    pub(super) class: Option<(u32, Relaxation)>,
    /// What its rules on keys other than hostname allow (`Topology::allowed_domains`),
    /// worked out once for every planned NodeClaim tried.
    pub(super) allowed: &'c [AllowedDomains],
}

/// The shared state a NodeClaim consults.
#[derive(Debug, Clone, Copy)]
pub(super) struct Context<'c> {
    pub(super) catalog: &'c Catalog,
    pub(super) dims: &'c Dimensions,
    pub(super) topology: &'c Topology,
    pub(super) allow: AllowUndefined<'c>,
    /// Whether NodeClaims' cost caps hold: false only when nothing but an inefficient add
    /// can place the pod.
    pub(super) cost_aware: bool,
}

/// Why a pod does not fit a NodeClaim (the NodePool-level reasons, taints and requirements
/// against the template, are checked before).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Miss {
    HostPort(HostPort),
    Requirements,
    Resources,
    /// A hostname rule.
    Topology(Broken),
    /// A rule on another key (zone, capacity type, ...).
    Domain(Broken),
    /// Nothing fits once a rule on another key pins the NodeClaim's domain.
    Narrowed,
    MinValues(MinValuesError),
    /// The pod fits, but would leave the NodeClaim none of its efficient options.
    Cost,
    /// The same, once a rule on another key pins the NodeClaim's domain.
    NarrowedCost,
}

impl Miss {
    /// Whether the NodeClaim will refuse the pod, and any pod with the same requests,
    /// constraints and topology groups, for the rest of the run: it only ever gains pods,
    /// demand, host ports and requirements, and loses options. Rules on other keys than
    /// hostname depend on where other pods went, and so do the misses they lead to; hostname
    /// rules are final for pods without hostname affinity (see
    /// `Topology::hostname_refusals_are_final`).
    pub(super) fn is_final(&self) -> bool {
        match self {
            Miss::HostPort(_)
            | Miss::Requirements
            | Miss::Resources
            | Miss::Topology(_)
            | Miss::Cost => true,
            Miss::Domain(_) | Miss::Narrowed | Miss::MinValues(_) | Miss::NarrowedCost => false,
        }
    }

    /// Whether the pod fits but cost-aware packing sent it elsewhere.
    pub(super) fn is_cost(&self) -> bool {
        matches!(self, Miss::Cost | Miss::NarrowedCost)
    }
}

/// The NodeClaim as it would be with the pod: what [`NodeClaimState::commit`] applies.
#[derive(Debug)]
pub(super) struct Trial {
    requirements: Option<Requirements>,
    demand: Demand,
    filtered: Option<Filtered>,
    /// Where the demand stands in the catalogue's orders, when they moved.
    cursors: Option<Cursors>,
    /// The cost cap the NodeClaim would have, when the options change (`Some(None)`: none,
    /// after an add that had to ignore it).
    cap: Option<Option<CostCap>>,
    /// Its cheapest option, when the pod makes it grow out of the one it had.
    cheapest: Option<Cheapest>,
}

impl Trial {
    /// Whether the NodeClaim keeps its cheapest option: taking the pod costs nothing more.
    pub(super) fn is_free(&self) -> bool {
        self.cheapest.is_none()
    }
}

/// A NodeClaim's cheapest option (at the prices of its requirements when it was opened) and
/// that option's allocatable: a pod that fits in what it leaves costs nothing more.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cheapest {
    index: usize,
    /// Where it stands in the NodeClaim's price order: options only ever go, so the next
    /// cheapest is further on and each NodeClaim walks its order once over all its pods.
    position: usize,
    allocatable: Fixed,
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
#[derive(Debug, Clone)]
pub(super) struct NodeClaimState {
    /// The NodePool, as an index into the run's NodePools.
    pub(super) pool: usize,
    /// Its position among the run's NodeClaims, which is also its hostname domain.
    pub(super) index: u32,
    /// The template's requirements narrowed by every pod and topology rule so far.
    pub(super) requirements: Requirements,
    /// The pods' requests (the DaemonSet overhead is each option's, in the catalogue).
    pub(super) demand: Demand,
    /// The instance types (catalogue indices) that still satisfy the requirements and fit.
    pub(super) options: Bits,
    /// Bounds of the options' allocatable: each resource's smallest (or less) and largest.
    smallest: Fixed,
    largest: Fixed,
    cursors: Cursors,
    /// The pods, as indices into the run's pending pods.
    pub(super) pods: Vec<usize>,
    host_ports: Vec<HostPort>,
    /// The efficient options it may still grow into (see `cost.rs`); `None` when cost does
    /// not limit it.
    cap: Option<CostCap>,
    /// The catalogue's types cheapest first, at its requirements when it was opened, and its
    /// cheapest option in that order, for cost-aware packing.
    by_price: Option<Arc<[(u32, f64)]>>,
    cheapest: Option<Cheapest>,
    /// What its NodePool's limits gave it (`PoolState::reserve`).
    pub(super) reserved: Vec<i64>,
    /// Whether the improvement pass replaced it: it is no longer planned.
    pub(super) retired: bool,
    /// The zone its requirements pin, once a pod with a rule on zones asked; forgotten when
    /// they change (see [`Self::pinned_zone`]).
    pinned_zone: Cell<Option<PinnedZone>>,
    /// Its cheapest option at the prices of its requirements now, and that price, once the
    /// improvement pass asked (`State::cheapest`); forgotten when it takes a pod. The pass
    /// asks for the same NodeClaims' prices over and over, and they change only then.
    pub(super) priced: Option<(usize, f64)>,
}

/// The zone a NodeClaim's requirements pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinnedZone {
    /// They allow several zones, or all.
    Unpinned,
    /// One of the run's interned zones.
    Zone(u32),
    /// A zone the run did not intern: checked by name instead.
    Other,
}

impl NodeClaimState {
    /// An empty NodeClaim of `pool` with the template's `requirements` and `options` (whose
    /// allocatable ranges over `smallest..largest`).
    pub(super) fn new(
        pool: usize,
        index: u32,
        requirements: Requirements,
        options: &Filtered,
    ) -> Self {
        NodeClaimState {
            pool,
            index,
            requirements,
            demand: Demand::default(),
            options: options.options.clone(),
            smallest: options.smallest,
            largest: options.largest,
            cursors: Cursors::default(),
            pods: Vec::new(),
            host_ports: Vec::new(),
            cap: None,
            by_price: None,
            cheapest: None,
            reserved: Vec::new(),
            retired: false,
            pinned_zone: Cell::new(None),
            priced: None,
        }
    }

    /// The same NodeClaim with index `index` and only the pod `pod`: for a NodeClaim opened
    /// for a pod just like the one this was opened for.
    pub(super) fn reopened(&self, index: u32, pod: usize) -> Self {
        NodeClaimState {
            index,
            pods: vec![pod],
            ..self.clone()
        }
    }

    /// Limits what the NodeClaim may grow into from now on, and orders its options by
    /// `by_price` (the catalogue's types cheapest first, `PriceTable::order`) to tell a pod
    /// that fits in its cheapest option from one that makes it grow.
    pub(super) fn set_cost(
        &mut self,
        cap: Option<CostCap>,
        by_price: Arc<[(u32, f64)]>,
        catalog: &Catalog,
    ) {
        self.cap = cap;
        self.cheapest = cheapest(&self.options, &by_price, 0, catalog);
        self.by_price = Some(by_price);
    }

    /// Whether a pod requesting `pod` fits in what the NodeClaim's cheapest option leaves:
    /// when no NodeClaim can take a pod that way, the pod goes to one it makes grow.
    pub(super) fn holds_for_free(&self, pod: &Fixed) -> bool {
        self.cheapest
            .is_none_or(|c| self.demand.fixed.plus(pod).fits_in(&c.allocatable))
    }

    /// The run's interned zone the NodeClaim's requirements pin, if they pin one.
    pub(super) fn zone(&self, dims: &Dimensions) -> Option<u32> {
        match self.pinned_zone(dims) {
            PinnedZone::Zone(zone) => Some(zone),
            PinnedZone::Unpinned | PinnedZone::Other => None,
        }
    }

    /// The zone the NodeClaim's requirements pin, worked out on first use after they change.
    fn pinned_zone(&self, dims: &Dimensions) -> PinnedZone {
        if let Some(known) = self.pinned_zone.get() {
            return known;
        }
        let pinned = match self
            .requirements
            .get(LABEL_TOPOLOGY_ZONE)
            .filter(|r| r.operator() == Operator::In && r.len() == 1)
            .and_then(|r| r.values().next())
        {
            None => PinnedZone::Unpinned,
            Some(zone) => dims
                .zones
                .get(zone)
                .map_or(PinnedZone::Other, PinnedZone::Zone),
        };
        self.pinned_zone.set(Some(pinned));
        pinned
    }

    /// Whether requirements pinning `rule`'s key keep it (`None`: they do not pin it): the
    /// NodeClaim's own (`own`) by their interned zone where that is the key, others by name.
    fn keeps_rule(
        &self,
        rule: &AllowedDomains,
        requirements: &Requirements,
        own: bool,
        dims: &Dimensions,
    ) -> Option<bool> {
        if own && let Some(zones) = &rule.zones {
            match self.pinned_zone(dims) {
                PinnedZone::Unpinned => return None,
                PinnedZone::Zone(zone) => return Some(zones.binary_search(&zone).is_ok()),
                PinnedZone::Other => {}
            }
        }
        rule.allows(requirements)
    }

    /// The NodeClaim's hostname domain.
    pub(super) fn host(&self) -> Domain {
        Domain::Claim(self.index)
    }

    /// Whether the pod fits, and how the NodeClaim would look with it.
    pub(super) fn try_add(&self, ctx: &Context<'_>, pod: &Candidate<'_>) -> Result<Trial, Miss> {
        // The four integer comparisons first: with many NodeClaims planned, most trials end
        // here, and they should cost no allocation.
        let fixed = self.demand.fixed.plus(&pod.demand.fixed);
        if !fixed.fits_in(&self.largest) {
            return Err(Miss::Resources);
        }
        let cap = self.cap.as_ref().filter(|_| ctx.cost_aware);
        if cap.is_some_and(|cap| !cap.may_hold(&fixed)) {
            return Err(Miss::Cost);
        }
        if let Some(port) = conflicting_port(&self.host_ports, pod.host_ports) {
            return Err(Miss::HostPort(port));
        }
        // A DaemonSet binding one of the pod's ports rules out the types it runs on.
        let port_free = match ctx.catalog.port_conflicts(&self.options, pod.host_ports) {
            Some((free, port)) if free.is_empty() => return Err(Miss::HostPort(port)),
            conflicts => conflicts,
        };
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
        let domain_rules = ctx.topology.domain_rules(&pod.topology);
        // With many NodeClaims planned, most that get this far refuse the pod on topology or
        // cost; both are checked first where that is cheap and exact, so that only the
        // NodeClaim that takes the pod pays for filtering all its options. A new NodeClaim
        // is left to the full checks, whose first failure names the reason.
        let mut pinned = false;
        // When every rule's key is pinned: the first rule whose pinned value is not allowed.
        let pinned_check = (!self.pods.is_empty() && domain_rules > 0)
            .then(|| {
                let mut broken = None;
                let own = requirements.is_none();
                for rule in pod.allowed {
                    if !self.keeps_rule(rule, current, own, ctx.dims)? {
                        broken = broken.or(Some(rule));
                    }
                }
                Some(broken)
            })
            .flatten();
        if let Some(broken) = pinned_check {
            // Every rule's key is pinned: the rules hold exactly when each pinned value is
            // allowed, and narrowing would change nothing.
            if let Some(rule) = broken {
                return Err(Miss::Domain(rule.broken));
            }
            pinned = true;
        } else if !self.pods.is_empty() && domain_rules == 1 {
            // One rule: if it fails with the options as they are, it fails with fewer.
            let mut narrowed = current.clone();
            let mut offered = Offered::default();
            ctx.topology
                .narrow(&pod.topology, &mut narrowed, &mut |key, value, now| {
                    offered.offers(ctx, &self.options, key, value, now)
                })
                .map_err(Miss::Domain)?;
            // Unchanged: the rule's domain is already pinned, and narrowing again with the
            // filtered options would pin the same.
            pinned = &narrowed == current;
        }
        // The full demand allocates: only a NodeClaim the pod passed the cheap checks of
        // pays for it.
        let demand = self.demand.plus(pod.demand);
        let narrowing = if requirements.is_some() {
            Some(ctx.catalog.narrowing(&self.requirements, current, ctx.dims))
        } else if demand.extended || !demand.fixed.fits_in(&self.smallest) || port_free.is_some() {
            Some(Narrowing::none(current))
        } else {
            None
        };
        if let (Some(cap), Some(narrowing)) = (cap, &narrowing)
            && !ctx.catalog.any_fits(cap.efficient(), narrowing, &demand)
        {
            return Err(Miss::Cost);
        }
        let mut cursors = None;
        let mut filtered = match narrowing {
            Some(_) if requirements.is_none() && !demand.extended && port_free.is_none() => {
                let (grown, moved) =
                    ctx.catalog
                        .grow(&self.options, &self.largest, self.cursors, &demand.fixed);
                cursors = Some(moved);
                Some(grown)
            }
            Some(narrowing) => {
                let from = port_free.as_ref().map_or(&self.options, |(free, _)| free);
                let filtered = ctx.catalog.filter(from, &narrowing, &demand);
                if let Some((_, port)) = port_free
                    && filtered.options.is_empty()
                    && ctx.catalog.any_fits(&self.options, &narrowing, &demand)
                {
                    // Only the types whose DaemonSets bind the port would do.
                    return Err(Miss::HostPort(port));
                }
                Some(filtered)
            }
            None => None,
        };
        if filtered.as_ref().is_some_and(|f| f.options.is_empty()) {
            return Err(if requirements.is_some() {
                Miss::Requirements
            } else {
                Miss::Resources
            });
        }
        if domain_rules > 0 && !pinned {
            let options = filtered.as_ref().map_or(&self.options, |f| &f.options);
            let mut narrowed = current.clone();
            let mut offered = Offered::default();
            ctx.topology
                .narrow(&pod.topology, &mut narrowed, &mut |key, value, now| {
                    offered.offers(ctx, options, key, value, now)
                })
                .map_err(Miss::Domain)?;
            if &narrowed != current {
                let narrowing = ctx.catalog.narrowing(current, &narrowed, ctx.dims);
                let refiltered = ctx.catalog.filter(options, &narrowing, &demand);
                if refiltered.options.is_empty() {
                    return Err(Miss::Narrowed);
                }
                filtered = Some(refiltered);
                requirements = Some(narrowed);
            }
        }
        let cap = match (&self.cap, &filtered) {
            (Some(current), Some(filtered)) => {
                let narrowed = current.narrowed(&filtered.options, ctx.catalog);
                if narrowed.is_none() && cap.is_some() {
                    // The early check passed with these requirements, so only a domain
                    // pinned since can have left no efficient option.
                    return Err(Miss::NarrowedCost);
                }
                Some(narrowed)
            }
            _ => None,
        };
        // Grown out of its cheapest option: the next cheapest, once per such step.
        let cheapest = match (&self.cheapest, &self.by_price, &filtered) {
            (Some(current), Some(by_price), Some(filtered))
                if !filtered.options.contains(current.index) =>
            {
                cheapest(
                    &filtered.options,
                    by_price,
                    current.position + 1,
                    ctx.catalog,
                )
            }
            _ => None,
        };
        let trial = Trial {
            requirements,
            demand,
            filtered,
            cursors,
            cap,
            cheapest,
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
        self.priced = None;
        if let Some(requirements) = trial.requirements {
            self.requirements = requirements;
            self.pinned_zone.set(None);
        }
        self.demand = trial.demand;
        if let Some(cap) = trial.cap {
            self.cap = cap;
        }
        if let Some(cursors) = trial.cursors {
            self.cursors = cursors;
        }
        if let Some(cheapest) = trial.cheapest {
            self.cheapest = Some(cheapest);
        }
        if let Some(filtered) = trial.filtered {
            self.options = filtered.options;
            self.smallest = filtered.smallest;
            self.largest = filtered.largest;
        }
        self.pods.push(pod);
        self.host_ports.extend_from_slice(host_ports);
    }
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

/// The first of `options` in `by_price` from position `from` on: the cheapest of them when
/// every option before `from` is known to be gone.
fn cheapest(
    options: &Bits,
    by_price: &[(u32, f64)],
    from: usize,
    catalog: &Catalog,
) -> Option<Cheapest> {
    let rest = by_price.get(from..)?;
    rest.iter()
        .position(|(i, _)| options.contains(*i as usize))
        .map(|offset| {
            let index = rest[offset].0 as usize;
            Cheapest {
                index,
                position: from + offset,
                allocatable: *catalog.allocatable(index),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(values: &[&str]) -> Requirements {
        let mut requirements = Requirements::new();
        requirements.add(Requirement::in_values(
            LABEL_TOPOLOGY_ZONE,
            values.iter().copied(),
        ));
        requirements
    }

    fn empty_options() -> Filtered {
        Filtered {
            options: Bits::empty(0),
            smallest: Fixed::ZERO,
            largest: Fixed::ZERO,
        }
    }

    #[test]
    fn given_a_claim_whose_zone_was_worked_out_when_a_pod_pins_its_zone_then_it_is_worked_out_again()
     {
        let mut dims = Dimensions::default();
        let a = dims.zones.intern("zone-a");
        dims.zones.intern("zone-b");
        let mut claim = NodeClaimState::new(0, 0, zones(&["zone-a", "zone-b"]), &empty_options());
        assert_eq!(claim.pinned_zone(&dims), PinnedZone::Unpinned);

        let trial = Trial {
            requirements: Some(zones(&["zone-a"])),
            demand: Demand::default(),
            filtered: None,
            cursors: None,
            cap: None,
            cheapest: None,
        };
        claim.commit(trial, 7, &[]);

        assert_eq!(claim.pinned_zone(&dims), PinnedZone::Zone(a));
    }

    #[test]
    fn given_a_claim_pinned_to_a_zone_no_type_offers_when_asked_then_it_is_checked_by_name() {
        let mut dims = Dimensions::default();
        dims.zones.intern("zone-a");
        let claim = NodeClaimState::new(0, 0, zones(&["zone-z"]), &empty_options());
        assert_eq!(claim.pinned_zone(&dims), PinnedZone::Other);
    }
}
