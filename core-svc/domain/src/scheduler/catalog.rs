//! A NodePool's instance types as the scheduler's hot path reads them: the types compatible
//! with the NodePool, each with what its allocatable leaves for pods once the DaemonSets that
//! run on it are placed (see [`super::daemons`]), as four integers, and its available
//! offerings as interned (zone, capacity type, price) triples. A planned NodeClaim's options are a
//! [`Bits`] over this table; narrowing them re-checks only what changed.
//!
//! # Why the interning
//!
//! Zones and capacity types are what topology and pod requirements narrow most, and every
//! type has a dozen offerings. Checking `Offering::is_compatible` for each costs a
//! requirements intersection; with the values interned, a NodeClaim's allowed zones and
//! capacity types become two boolean vectors computed once per narrowing, and an offering
//! check is two lookups. Offerings that carry further keys (zone ID, reservation ID) fall back
//! to the exact check only when the NodeClaim constrains one of those keys.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{Operator, Requirements};
use crate::resources::ResourceName;
use crate::resources::{ResourceList, fits};
use crate::scheduler::bits::{Bits, ones};
use crate::scheduler::constraints::{HostPort, conflicting_port};
use crate::scheduler::daemons::{DaemonGroup, DaemonGroups, DaemonSets};
pub(super) use crate::scheduler::dimensions::{Dimensions, ValueIndex};
use crate::scheduler::fit::{Demand, Fixed};
use crate::scheduler::ids::ContentMap;
use crate::scheduler::nodepool::NODES;

/// Which interned zones and capacity types a NodeClaim's requirements allow.
type AllowedOfferings = (Vec<bool>, Vec<bool>);

/// How a type's own requirement on zone or capacity type is checked.
#[derive(Debug, Clone, Copy)]
enum KeyValues {
    /// The type does not constrain the key.
    Unconstrained,
    /// The type allows these interned values (`listed[start..end]`).
    In { start: u32, end: u32 },
    /// The type allows the interned values of these bits, all below 64: checked against the
    /// allowed ones with one `and`, which filtering every type for every new NodeClaim of a
    /// zone spread does hundreds of thousands of times.
    Bits(u64),
    /// Any other form (`NotIn`, bounds): checked with the requirement itself.
    Exact,
}

/// An available offering, interned.
#[derive(Debug, Clone, Copy)]
struct CompactOffering {
    zone: u32,
    capacity_type: u32,
    price: f64,
    /// Index into the type's `offerings()`.
    index: u32,
    /// Whether the offering has requirements beyond zone and capacity type.
    extra: bool,
}

#[derive(Debug)]
struct Entry {
    instance_type: Arc<InstanceType>,
    name: Arc<str>,
    /// The type's allocatable less its DaemonSets' requests: what pods have on it. Negative
    /// where the DaemonSets alone do not fit, so that nothing does.
    allocatable: Fixed,
    /// Its DaemonSet group (an index into `Catalog::daemons`).
    daemons: u32,
    offerings: (u32, u32),
    /// The (zone, capacity type) pairs of its available offerings, one bit each (see
    /// [`OfferedPairs`]); none when the run has too many pairs.
    offered: u64,
    zones: KeyValues,
    capacity_types: KeyValues,
}

/// How a run's (zone, capacity type) pairs map to the bits of a `u64`, when it has at most 64
/// of them: the pair's bit is `zone * capacity types + capacity type`. Whether a type has an
/// offering that allowed zones and capacity types accept is then one `and` of two masks
/// rather than a walk of its offerings, which filtering every type for every new NodeClaim
/// of a zone spread does hundreds of thousands of times.
#[derive(Debug, Clone, Copy)]
struct OfferedPairs {
    capacity_types: usize,
}

impl OfferedPairs {
    fn of(dims: &Dimensions) -> Option<Self> {
        let capacity_types = dims.capacity_types.len();
        (dims.zones.len() * capacity_types <= 64).then_some(OfferedPairs { capacity_types })
    }

    /// The bit of the pair, when both are known.
    fn bit(self, zone: u32, capacity_type: u32) -> u64 {
        let (zone, capacity_type) = (zone as usize, capacity_type as usize);
        if capacity_type >= self.capacity_types {
            return 0;
        }
        zone.checked_mul(self.capacity_types)
            .and_then(|first| u32::try_from(first + capacity_type).ok())
            .and_then(|bit| 1u64.checked_shl(bit))
            .unwrap_or(0)
    }

    /// The bits of every pair the allowed zones and capacity types (one bit each, as
    /// [`first_bits`] gives them: a run whose pairs fit has fewer than 64 of either) make.
    fn allowed(self, zones: u64, capacity_types: u64) -> u64 {
        let mut mask = 0;
        for zone in ones(zones) {
            for capacity_type in ones(capacity_types) {
                mask |= self.bit(zone, capacity_type);
            }
        }
        mask
    }
}

/// What changed between two versions of a NodeClaim's requirements, and so what its options
/// must be re-checked against.
#[derive(Debug)]
pub(super) struct Narrowing<'a> {
    requirements: &'a Requirements,
    /// Changed requirements on keys other than zone and capacity type.
    other_keys: Requirements,
    /// Allowed zones and capacity types, when zone, capacity type or offering keys changed.
    dimensions: Option<AllowedOfferings>,
    /// The first 64 of `dimensions`' zones and capacity types, one bit each, for
    /// [`KeyValues::Bits`].
    dimension_bits: (u64, u64),
    /// Whether the requirements constrain an offering key beyond zone and capacity type.
    exact_offerings: bool,
    /// The bits of the (zone, capacity type) pairs `dimensions` allows, when the run's pairs
    /// fit a mask (see [`OfferedPairs`]).
    offered: Option<u64>,
}

impl<'a> Narrowing<'a> {
    /// Only resources changed.
    pub(super) fn none(requirements: &'a Requirements) -> Self {
        Narrowing {
            requirements,
            other_keys: Requirements::new(),
            dimensions: None,
            dimension_bits: (0, 0),
            exact_offerings: false,
            offered: None,
        }
    }
}

/// Options after a narrowing, with the per-resource extremes of their allocatable.
#[derive(Debug, Clone)]
pub(super) struct Filtered {
    /// The remaining options.
    pub(super) options: Bits,
    /// The smallest allocatable of each resource among them.
    pub(super) smallest: Fixed,
    /// The largest allocatable of each resource among them.
    pub(super) largest: Fixed,
}

/// A NodePool's instance types compatible with its requirements.
#[derive(Debug)]
pub(super) struct Catalog {
    entries: Vec<Entry>,
    /// The DaemonSet groups of the types, by id.
    daemons: Vec<DaemonGroup>,
    /// Whether a group binds host ports.
    daemon_ports: bool,
    offerings: Vec<CompactOffering>,
    listed: Vec<u32>,
    /// Offering requirement keys beyond zone and capacity type, sorted.
    extra_offering_keys: Vec<Arc<str>>,
    /// The types' prices for each (allowed zones, allowed capacity types).
    price_tables: ContentMap<AllowedOfferings, PriceTable>,
    /// For each of the four resources, the types in ascending order of their allocatable of
    /// it (then by index): see [`Catalog::grow`].
    by_amount: [Vec<u32>; 4],
    /// How the entries' `offered` bits are laid out, when the run's pairs fit them.
    pairs: Option<OfferedPairs>,
    /// By bit of a (zone, capacity type) pair, the types with an available offering of it.
    offering: Vec<Bits>,
}

/// Each type's cheapest price at some requirements, two ways, and the table's number when the
/// catalogue keeps it: two tables with the same number are the same, so what is worked out
/// from one can be kept.
#[derive(Debug, Clone)]
pub(super) struct PriceTable {
    pub(super) id: Option<u32>,
    /// By catalogue index, infinite for a type without an offering the requirements accept.
    pub(super) prices: Arc<[f64]>,
    /// The types with such an offering and its price, cheapest first (then by name, as
    /// [`crate::instance_type::order_by_price`]).
    pub(super) order: Arc<[(u32, f64)]>,
}

/// Where a NodeClaim's demand stands in each of the catalogue's orders by amount: every type
/// before a position has less of that resource than the NodeClaim requests, so it is no
/// longer an option (see [`Catalog::grow`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Cursors([u32; 4]);

impl Catalog {
    /// The types of `types` compatible with `base` (the NodePool's requirements), in order,
    /// each with the overhead of the `daemons` that would run on it.
    pub(super) fn new(
        types: &[Arc<InstanceType>],
        base: &Requirements,
        dims: &Dimensions,
        daemons: &DaemonSets<'_>,
    ) -> Self {
        let mut groups = DaemonGroups::default();
        let on_template = daemons.on_template(base);
        let mut catalog = Catalog {
            entries: Vec::new(),
            daemons: Vec::new(),
            daemon_ports: false,
            offerings: Vec::new(),
            listed: Vec::new(),
            extra_offering_keys: Vec::new(),
            price_tables: ContentMap::default(),
            by_amount: Default::default(),
            pairs: OfferedPairs::of(dims),
            offering: Vec::new(),
        };
        for instance_type in types.iter().filter(|t| t.is_compatible(base)) {
            let start = catalog.offerings.len();
            for (index, offering) in instance_type.offerings().iter().enumerate() {
                if !offering.available {
                    continue;
                }
                let extra = offering
                    .requirements
                    .keys()
                    .filter(|k| *k != LABEL_TOPOLOGY_ZONE && *k != LABEL_CAPACITY_TYPE)
                    .inspect(|k| {
                        if !catalog.extra_offering_keys.iter().any(|e| &**e == *k) {
                            catalog.extra_offering_keys.push((*k).into());
                        }
                    })
                    .count()
                    > 0;
                catalog.offerings.push(CompactOffering {
                    zone: dims.zones.get(&offering.zone).unwrap_or(u32::MAX),
                    capacity_type: dims
                        .capacity_types
                        .get(&offering.capacity_type)
                        .unwrap_or(u32::MAX),
                    price: offering.price,
                    index: to_u32(index),
                    extra,
                });
            }
            let offerings = (to_u32(start), to_u32(catalog.offerings.len()));
            let offered = catalog.pairs.map_or(0, |pairs| {
                catalog.offerings[start..]
                    .iter()
                    .fold(0, |mask, o| mask | pairs.bit(o.zone, o.capacity_type))
            });
            let zones = catalog.key_values(instance_type, LABEL_TOPOLOGY_ZONE, &dims.zones);
            let capacity_types =
                catalog.key_values(instance_type, LABEL_CAPACITY_TYPE, &dims.capacity_types);
            let group = groups.group_of(
                daemons.on_type(&on_template, base, instance_type),
                daemons.pods,
            );
            let overhead = &groups.groups()[group as usize].demand.fixed;
            catalog.entries.push(Entry {
                instance_type: instance_type.clone(),
                name: instance_type.name().into(),
                allocatable: Fixed::of(instance_type.allocatable()).less(overhead),
                daemons: group,
                offerings,
                offered,
                zones,
                capacity_types,
            });
        }
        if catalog.pairs.is_some() {
            catalog.offering = vec![Bits::empty(catalog.entries.len()); 64];
            for (index, entry) in catalog.entries.iter().enumerate() {
                for (bit, types) in catalog.offering.iter_mut().enumerate() {
                    if entry.offered & (1 << bit) != 0 {
                        types.insert(index);
                    }
                }
            }
        }
        catalog.extra_offering_keys.sort();
        catalog.daemons = groups.into_groups();
        catalog.daemon_ports = catalog.daemons.iter().any(|g| !g.ports.is_empty());
        for (resource, order) in catalog.by_amount.iter_mut().enumerate() {
            let entries = &catalog.entries;
            *order = (0..entries.len()).map(to_u32).collect();
            order.sort_by_key(|&i| (entries[i as usize].allocatable.amounts()[resource], i));
        }
        catalog
    }

    fn key_values(
        &mut self,
        instance_type: &InstanceType,
        key: &str,
        index: &ValueIndex,
    ) -> KeyValues {
        match instance_type.requirements().get(key) {
            None => KeyValues::Unconstrained,
            Some(requirement) if requirement.operator() == Operator::In => {
                let start = to_u32(self.listed.len());
                self.listed
                    .extend(requirement.values().filter_map(|v| index.get(v)));
                let listed = &self.listed[start as usize..];
                if listed.iter().all(|&v| v < 64) {
                    let bits = listed.iter().fold(0, |bits, &v| bits | 1u64 << v);
                    self.listed.truncate(start as usize);
                    return KeyValues::Bits(bits);
                }
                KeyValues::In {
                    start,
                    end: to_u32(self.listed.len()),
                }
            }
            Some(_) => KeyValues::Exact,
        }
    }

    /// The number of types.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The instance type at `index`.
    pub(super) fn instance_type(&self, index: usize) -> &Arc<InstanceType> {
        &self.entries[index].instance_type
    }

    /// What the type at `index` has for pods (its allocatable less its DaemonSets'
    /// requests), as four integers.
    pub(super) fn allocatable(&self, index: usize) -> &Fixed {
        &self.entries[index].allocatable
    }

    /// The DaemonSets that run on the type at `index`.
    pub(super) fn daemons(&self, index: usize) -> &DaemonGroup {
        &self.daemons[self.entries[index].daemons as usize]
    }

    /// The DaemonSet overhead a node launched as any of `options` carries at least: the
    /// smallest of each resource over their groups (what the NodeClaim requests beyond its
    /// pods, as upstream's `addDaemonRequests`), as `of` reads a group's.
    pub(super) fn least_overhead(
        &self,
        options: impl IntoIterator<Item = usize>,
        of: impl Fn(&DaemonGroup) -> &ResourceList,
    ) -> ResourceList {
        if let [only] = self.daemons.as_slice() {
            return of(only).clone();
        }
        let mut seen = vec![false; self.daemons.len()];
        let mut least: Option<ResourceList> = None;
        for index in options {
            let group = self.entries[index].daemons as usize;
            if std::mem::replace(&mut seen[group], true) {
                continue;
            }
            let list = of(&self.daemons[group]);
            least = Some(match least {
                None => list.clone(),
                Some(least) => least.min_per_resource(list),
            });
        }
        least.unwrap_or_default()
    }

    /// When the DaemonSets of some of `options` bind a host port of `wanted`: the options
    /// left without them, and the first such port. `None` when there are none (always, for a
    /// pod binding no port).
    pub(super) fn port_conflicts(
        &self,
        options: &Bits,
        wanted: &[HostPort],
    ) -> Option<(Bits, HostPort)> {
        if wanted.is_empty() || !self.daemon_ports {
            return None;
        }
        let mut free = options.clone();
        let mut first = None;
        for index in options.iter() {
            if let Some(port) = conflicting_port(&self.daemons(index).ports, wanted) {
                free.remove(index);
                first.get_or_insert(port);
            }
        }
        first.map(|port| (free, port))
    }

    /// Each type's cheapest available offering that `requirements` accept: what a NodeClaim
    /// with these requirements pays if it launches as that type (the price
    /// `PlannedNodeClaim::cheapest_price` reads). Cached by the zones and capacity types the
    /// requirements allow, unless they constrain other offering keys.
    pub(super) fn prices(&mut self, requirements: &Requirements, dims: &Dimensions) -> PriceTable {
        let zones = dims.zones.allowed(requirements.get(LABEL_TOPOLOGY_ZONE));
        let capacity_types = dims
            .capacity_types
            .allowed(requirements.get(LABEL_CAPACITY_TYPE));
        let exact = self.constrains_offering_keys(requirements);
        let compute = |catalog: &Catalog, zones: &[bool], capacity_types: &[bool], id| {
            let mut priced: Vec<(u32, f64)> = (0..catalog.entries.len())
                .filter_map(|i| {
                    let entry = &catalog.entries[i];
                    let price = catalog
                        .available(entry, zones, capacity_types, requirements, exact)
                        .map(|o| o.price)
                        .min_by(f64::total_cmp)?;
                    Some((to_u32(i), price))
                })
                .collect();
            catalog.sort_by_price(&mut priced);
            let mut prices = vec![f64::INFINITY; catalog.entries.len()];
            for &(index, price) in &priced {
                prices[index as usize] = price;
            }
            PriceTable {
                id,
                prices: prices.into(),
                order: priced.into(),
            }
        };
        if exact {
            // Offering keys beyond zone and capacity type make the answer depend on more than
            // the two interned allowances: not cached.
            return compute(self, &zones, &capacity_types, None);
        }
        let key = (zones, capacity_types);
        if let Some(table) = self.price_tables.get(&key) {
            return table.clone();
        }
        let id = Some(to_u32(self.price_tables.len()));
        let table = compute(self, &key.0, &key.1, id);
        self.price_tables.insert(key, table.clone());
        table
    }

    /// The name of the type at `index`, shared.
    pub(super) fn name(&self, index: usize) -> &Arc<str> {
        &self.entries[index].name
    }

    /// What must be re-checked when a NodeClaim's requirements go from `before` to `after`
    /// (which only ever narrow).
    pub(super) fn narrowing<'a>(
        &self,
        before: &Requirements,
        after: &'a Requirements,
        dims: &Dimensions,
    ) -> Narrowing<'a> {
        let mut other_keys = Requirements::new();
        let mut offerings_changed = false;
        for requirement in after.iter() {
            if before.get(requirement.key()) == Some(requirement) {
                continue;
            }
            let key = requirement.key();
            if key == LABEL_TOPOLOGY_ZONE || key == LABEL_CAPACITY_TYPE {
                offerings_changed = true;
            } else {
                if self.is_offering_key(key) {
                    offerings_changed = true;
                }
                other_keys.add(requirement.clone());
            }
        }
        let dimensions = offerings_changed.then(|| {
            (
                dims.zones.allowed(after.get(LABEL_TOPOLOGY_ZONE)),
                dims.capacity_types.allowed(after.get(LABEL_CAPACITY_TYPE)),
            )
        });
        let dimension_bits = dimensions
            .as_ref()
            .map(|(zones, capacity_types)| (first_bits(zones), first_bits(capacity_types)));
        let offered = self
            .pairs
            .zip(dimension_bits)
            .map(|(pairs, (zones, capacity_types))| pairs.allowed(zones, capacity_types));
        let dimension_bits = dimension_bits.unwrap_or((0, 0));
        Narrowing {
            requirements: after,
            other_keys,
            dimensions,
            dimension_bits,
            offered,
            exact_offerings: self.constrains_offering_keys(after),
        }
    }

    fn is_offering_key(&self, key: &str) -> bool {
        self.extra_offering_keys.iter().any(|k| &**k == key)
    }

    fn constrains_offering_keys(&self, requirements: &Requirements) -> bool {
        self.extra_offering_keys
            .iter()
            .any(|k| requirements.contains_key(k))
    }

    /// The options of `from` that still satisfy `narrowing` and fit `demand`.
    pub(super) fn filter(
        &self,
        from: &Bits,
        narrowing: &Narrowing<'_>,
        demand: &Demand,
    ) -> Filtered {
        // Only the types with an offering the narrowing accepts can pass: the others are
        // dropped a word at a time.
        let offered = match narrowing.offered {
            Some(allowed) if !narrowing.exact_offerings && !self.offering.is_empty() => {
                let mut offered = Bits::empty(self.entries.len());
                for (bit, types) in self.offering.iter().enumerate() {
                    if allowed & (1 << bit) != 0 {
                        offered.union_with(types);
                    }
                }
                Some(from.and(&offered))
            }
            _ => None,
        };
        let from = offered.as_ref().unwrap_or(from);
        let mut options = from.clone();
        let mut smallest = Fixed::MAX;
        let mut largest = Fixed::ZERO;
        for index in from.iter() {
            let entry = &self.entries[index];
            if self.keeps(entry, narrowing, demand) {
                smallest = smallest.min(&entry.allocatable);
                largest = largest.max(&entry.allocatable);
            } else {
                options.remove(index);
            }
        }
        Filtered {
            options,
            smallest,
            largest,
        }
    }

    /// Whether any option of `from` still satisfies `narrowing` and fits `demand`: what
    /// [`Self::filter`] would keep is not empty, found without building it.
    pub(super) fn any_fits(&self, from: &Bits, narrowing: &Narrowing<'_>, demand: &Demand) -> bool {
        from.iter()
            .any(|index| self.keeps(&self.entries[index], narrowing, demand))
    }

    /// Whether the type `entry` fits `demand` and satisfies `narrowing`: what filtering keeps.
    fn keeps(&self, entry: &Entry, narrowing: &Narrowing<'_>, demand: &Demand) -> bool {
        self.fits(entry, demand) && self.satisfies(entry, narrowing)
    }

    /// [`Self::filter`] for a NodeClaim whose requirements did not change and whose demand
    /// grew to `demand` (no extended resource): the options of `from` that still fit. Only
    /// the types the demand passed since `cursors` are looked at, so a NodeClaim pays for
    /// each type once over all its pods rather than once per pod. `largest` is `from`'s.
    ///
    /// The result's bounds are loose where exact ones would cost a scan of the options:
    /// `smallest` is each resource's amount at the new cursor (the options before it are
    /// gone, the others may be too), and `largest` stays `from`'s unless nothing is left. A
    /// demand within the one fits every option, and a demand beyond the other fits none,
    /// which is all [`super::nodeclaim`] asks of them.
    pub(super) fn grow(
        &self,
        from: &Bits,
        largest: &Fixed,
        cursors: Cursors,
        demand: &Fixed,
    ) -> (Filtered, Cursors) {
        let mut options = from.clone();
        let mut next = cursors;
        let mut smallest = Fixed::MAX;
        let wanted = demand.amounts();
        let mut lows = [i64::MAX; 4];
        for (resource, order) in self.by_amount.iter().enumerate() {
            let mut position = next.0[resource] as usize;
            while let Some(&index) = order.get(position) {
                let amounts = self.entries[index as usize].allocatable.amounts();
                if amounts[resource] >= wanted[resource] {
                    lows[resource] = amounts[resource];
                    break;
                }
                options.remove(index as usize);
                position += 1;
            }
            next.0[resource] = to_u32(position);
        }
        if !options.is_empty() {
            smallest = Fixed::from_amounts(lows);
        }
        let largest = if options.is_empty() {
            Fixed::ZERO
        } else {
            *largest
        };
        (
            Filtered {
                options,
                smallest,
                largest,
            },
            next,
        )
    }

    /// Whether `demand` fits beside the type's DaemonSets. The full lists are compared only
    /// when an extended resource is involved.
    fn fits(&self, entry: &Entry, demand: &Demand) -> bool {
        if !demand.fixed.fits_in(&entry.allocatable) {
            return false;
        }
        if !demand.extended {
            return true;
        }
        let overhead = &self.daemons[entry.daemons as usize].demand.list;
        let total = demand.list.saturating_add(overhead);
        fits(&total, entry.instance_type.allocatable()).is_ok()
    }

    fn satisfies(&self, entry: &Entry, narrowing: &Narrowing<'_>) -> bool {
        if !narrowing.other_keys.is_empty()
            && !narrowing
                .other_keys
                .is_intersecting(entry.instance_type.requirements())
        {
            return false;
        }
        let Some((zones, capacity_types)) = &narrowing.dimensions else {
            return true;
        };
        let requirements = narrowing.requirements;
        let offered = || match narrowing.offered {
            // Only zone and capacity type decide which offerings are accepted.
            Some(allowed) if !narrowing.exact_offerings => entry.offered & allowed != 0,
            _ => self
                .available(
                    entry,
                    zones,
                    capacity_types,
                    requirements,
                    narrowing.exact_offerings,
                )
                .next()
                .is_some(),
        };
        let (zone_bits, capacity_type_bits) = narrowing.dimension_bits;
        self.key_allows(
            entry,
            entry.zones,
            (zones, zone_bits),
            requirements,
            LABEL_TOPOLOGY_ZONE,
        ) && self.key_allows(
            entry,
            entry.capacity_types,
            (capacity_types, capacity_type_bits),
            requirements,
            LABEL_CAPACITY_TYPE,
        ) && offered()
    }

    fn key_allows(
        &self,
        entry: &Entry,
        values: KeyValues,
        (allowed, allowed_bits): (&[bool], u64),
        requirements: &Requirements,
        key: &str,
    ) -> bool {
        match values {
            KeyValues::Unconstrained => true,
            KeyValues::Bits(bits) => bits & allowed_bits != 0,
            KeyValues::In { start, end } => self.listed[start as usize..end as usize]
                .iter()
                .any(|&v| allowed.get(v as usize).copied().unwrap_or(false)),
            KeyValues::Exact => match (
                entry.instance_type.requirements().get(key),
                requirements.get(key),
            ) {
                (Some(own), Some(wanted)) => own.intersects(wanted),
                _ => true,
            },
        }
    }

    /// The available offerings of `entry` that `requirements` (as interned allowances) accept.
    fn available<'a>(
        &'a self,
        entry: &'a Entry,
        zones: &'a [bool],
        capacity_types: &'a [bool],
        requirements: &'a Requirements,
        exact: bool,
    ) -> impl Iterator<Item = &'a CompactOffering> + 'a {
        let (start, end) = entry.offerings;
        let allowed =
            |allowed: &[bool], index: u32| allowed.get(index as usize).copied().unwrap_or(false);
        self.offerings[start as usize..end as usize]
            .iter()
            .filter(move |o| {
                allowed(zones, o.zone)
                    && allowed(capacity_types, o.capacity_type)
                    && (!exact
                        || !o.extra
                        || entry.instance_type.offerings()[o.index as usize]
                            .is_compatible(requirements))
            })
    }

    /// The options, cheapest first (by their cheapest offering `requirements` accept, then by
    /// name, as [`crate::instance_type::order_by_price`]), leaving out any without such an
    /// offering.
    pub(super) fn by_price(
        &mut self,
        options: &Bits,
        requirements: &Requirements,
        dims: &Dimensions,
    ) -> Vec<u32> {
        self.prices(requirements, dims)
            .order
            .iter()
            .filter(|(i, _)| options.contains(*i as usize))
            .map(|(i, _)| *i)
            .collect()
    }

    fn sort_by_price(&self, priced: &mut [(u32, f64)]) {
        priced.sort_by(|(a, pa), (b, pb)| {
            pa.total_cmp(pb).then_with(|| {
                self.entries[*a as usize]
                    .name
                    .cmp(&self.entries[*b as usize].name)
            })
        });
    }

    /// The zones and capacity types of the available offerings of `options` that
    /// `requirements` accept, as sorted values.
    pub(super) fn offered(
        &self,
        options: impl IntoIterator<Item = u32>,
        requirements: &Requirements,
        dims: &Dimensions,
    ) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        let zones = dims.zones.allowed(requirements.get(LABEL_TOPOLOGY_ZONE));
        let capacity_types = dims
            .capacity_types
            .allowed(requirements.get(LABEL_CAPACITY_TYPE));
        let exact = self.constrains_offering_keys(requirements);
        let mut offered_zones = vec![false; zones.len()];
        let mut offered_capacity_types = vec![false; capacity_types.len()];
        // Once every allowed zone and capacity type is offered, the rest of the options can
        // only offer them again: with many NodeClaims opened, this is most of the saving.
        let mut missing =
            zones.iter().filter(|z| **z).count() + capacity_types.iter().filter(|c| **c).count();
        for index in options {
            let entry = &self.entries[index as usize];
            for offering in self.available(entry, &zones, &capacity_types, requirements, exact) {
                for seen in [
                    &mut offered_zones[offering.zone as usize],
                    &mut offered_capacity_types[offering.capacity_type as usize],
                ] {
                    if !*seen {
                        *seen = true;
                        missing = missing.saturating_sub(1);
                    }
                }
            }
            if missing == 0 {
                break;
            }
        }
        let values = |offered: Vec<bool>, index: &ValueIndex| {
            let mut values: Vec<Arc<str>> = offered
                .iter()
                .enumerate()
                .filter(|(_, on)| **on)
                .map(|(i, _)| index.value(to_u32(i)).clone())
                .collect();
            values.sort();
            values
        };
        (
            values(offered_zones, &dims.zones),
            values(offered_capacity_types, &dims.capacity_types),
        )
    }

    /// The capacity of `resource` of the type at `index` (a node counts one under [`NODES`]).
    pub(super) fn capacity(&self, index: usize, resource: &ResourceName) -> i64 {
        if resource.as_str() == NODES {
            1
        } else {
            self.entries[index].instance_type.capacity().get(resource)
        }
    }

    /// The largest capacity of `resource` among `options`: what a NodeClaim may add to its
    /// NodePool's usage.
    pub(super) fn largest_capacity(&self, options: &Bits, resource: &ResourceName) -> i64 {
        options
            .iter()
            .map(|i| self.capacity(i, resource))
            .max()
            .unwrap_or(0)
    }

    /// The types whose capacity fits `remaining` for every limited resource (upstream
    /// `filterByRemainingResources`).
    pub(super) fn within(&self, remaining: &[(ResourceName, i64)]) -> Bits {
        let mut within = Bits::empty(self.len());
        for i in 0..self.entries.len() {
            if remaining
                .iter()
                .all(|(resource, left)| self.capacity(i, resource) <= *left)
            {
                within.insert(i);
            }
        }
        within
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The first 64 of `allowed`, one bit each.
fn first_bits(allowed: &[bool]) -> u64 {
    allowed
        .iter()
        .take(64)
        .enumerate()
        .filter(|(_, allowed)| **allowed)
        .fold(0, |bits, (index, _)| bits | 1u64 << index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::order_by_price;
    use crate::requirements::Requirement;
    use crate::resources::fits;
    use crate::scheduler::testing::{TypeSpec, resources};

    fn types() -> Vec<Arc<InstanceType>> {
        vec![
            TypeSpec::new("c5.large", 2, 4, 0.10)
                .zones(&["zone-a", "zone-b"])
                .build(),
            TypeSpec::new("c5.xlarge", 4, 8, 0.20)
                .capacity_types(&["on-demand", "spot"])
                .build(),
            TypeSpec::new("m5.xlarge", 4, 16, 0.15)
                .zones(&["zone-c"])
                .build(),
            TypeSpec::new("r5.xlarge", 4, 32, 0.30)
                .capacity_types(&["spot"])
                .zones(&["zone-b", "zone-c"])
                .build(),
            TypeSpec::new("g5.xlarge", 4, 16, 1.00)
                .extended("nvidia.com/gpu", 1)
                .build(),
        ]
    }

    fn requirements(pairs: &[(&str, &[&str])]) -> Requirements {
        pairs
            .iter()
            .map(|(key, values)| Requirement::in_values(key, values.iter()))
            .collect()
    }

    fn names(catalog: &Catalog, indices: impl IntoIterator<Item = usize>) -> Vec<String> {
        indices
            .into_iter()
            .map(|i| catalog.name(i).to_string())
            .collect()
    }

    #[test]
    fn given_narrowed_requirements_when_filtering_then_the_result_equals_the_exact_checks() {
        let types = types();
        let mut dims = Dimensions::default();
        dims.add_types(&types);
        let base = Requirements::new();
        let catalog = Catalog::new(&types, &base, &dims, &DaemonSets::none());
        let all = Bits::full(catalog.len());
        let cases: [&[(&str, &[&str])]; 6] = [
            &[],
            &[(LABEL_TOPOLOGY_ZONE, &["zone-a"])],
            &[(LABEL_CAPACITY_TYPE, &["spot"])],
            &[
                (LABEL_CAPACITY_TYPE, &["spot"]),
                (LABEL_TOPOLOGY_ZONE, &["zone-c"]),
            ],
            &[("karpenter.k8s.aws/instance-family", &["m5", "r5"])],
            &[(LABEL_TOPOLOGY_ZONE, &["zone-z"])],
        ];
        let demands = [
            resources(1000, 1),
            resources(3000, 10),
            resources(1000, 1).with("nvidia.com/gpu", 1),
        ];
        for case in cases {
            let wanted = requirements(case);
            for demand in &demands {
                let narrowing = catalog.narrowing(&base, &wanted, &dims);
                let filtered = catalog.filter(&all, &narrowing, &Demand::new(demand.clone()));
                let exact: Vec<String> = types
                    .iter()
                    .filter(|t| t.is_compatible(&wanted) && fits(demand, t.allocatable()).is_ok())
                    .map(|t| t.name().to_owned())
                    .collect();
                assert_eq!(
                    names(&catalog, filtered.options.iter()),
                    exact,
                    "{wanted} {demand}"
                );
            }
        }
    }

    /// Filters by each zone of `probes` in a run of `count` zones (of two capacity types each,
    /// on one extra type), and checks the result against the exact checks.
    fn assert_zone_filters_exact(count: usize, probes: &[&str]) {
        let zones: Vec<&'static str> = (0..count)
            .map(|z| &*Box::leak(format!("zone-{z}").into_boxed_str()))
            .collect();
        let mut types = types();
        types.push(
            TypeSpec::new("m5.large", 2, 8, 0.10)
                .zones(&zones)
                .capacity_types(&["on-demand", "spot"])
                .build(),
        );
        let mut dims = Dimensions::default();
        dims.add_types(&types);
        assert!(OfferedPairs::of(&dims).is_none());
        let base = Requirements::new();
        let catalog = Catalog::new(&types, &base, &dims, &DaemonSets::none());
        let all = Bits::full(catalog.len());
        let demand = Demand::new(resources(1000, 1));
        for &zone in probes {
            let wanted = requirements(&[(LABEL_TOPOLOGY_ZONE, &[zone])]);
            let narrowing = catalog.narrowing(&base, &wanted, &dims);
            let filtered = catalog.filter(&all, &narrowing, &demand);
            let exact: Vec<String> = types
                .iter()
                .filter(|t| t.is_compatible(&wanted))
                .map(|t| t.name().to_owned())
                .collect();
            assert_eq!(names(&catalog, filtered.options.iter()), exact, "{zone}");
        }
    }

    #[test]
    fn given_more_zone_and_capacity_type_pairs_than_a_mask_holds_when_filtering_then_the_result_is_the_same()
     {
        // 40 zones of two capacity types: 80 pairs, past the 64 bits of `OfferedPairs`.
        assert_zone_filters_exact(40, &["zone-a", "zone-c", "zone-39"]);
    }

    #[test]
    fn given_more_zones_than_a_mask_holds_when_filtering_then_types_listing_them_are_checked_by_list()
     {
        // 70 zones: a type listing zones past the 64th has its zones checked one by one
        // (`KeyValues::In`), the others by mask (`KeyValues::Bits`).
        assert_zone_filters_exact(70, &["zone-a", "zone-c", "zone-3", "zone-69"]);
    }

    #[test]
    fn given_options_when_ordered_by_price_then_the_order_equals_order_by_price() {
        let types = types();
        let mut dims = Dimensions::default();
        dims.add_types(&types);
        let mut catalog = Catalog::new(&types, &Requirements::new(), &dims, &DaemonSets::none());
        let all = Bits::full(catalog.len());
        for case in [
            requirements(&[]),
            requirements(&[(LABEL_CAPACITY_TYPE, &["spot"])]),
            requirements(&[(LABEL_TOPOLOGY_ZONE, &["zone-b", "zone-c"])]),
        ] {
            let mut expected: Vec<Arc<InstanceType>> = types
                .iter()
                .filter(|t| t.is_compatible(&case))
                .cloned()
                .collect();
            order_by_price(&mut expected, &case);
            let ordered = catalog.by_price(&all, &case, &dims);
            let ordered = names(&catalog, ordered.into_iter().map(|i| i as usize));
            let expected: Vec<&str> = expected.iter().map(|t| t.name()).collect();
            assert_eq!(ordered, expected, "{case}");
        }
    }

    #[test]
    fn given_a_template_when_building_the_catalogue_then_only_compatible_types_are_kept() {
        let types = types();
        let mut dims = Dimensions::default();
        dims.add_types(&types);
        let spot = requirements(&[(LABEL_CAPACITY_TYPE, &["spot"])]);
        let catalog = Catalog::new(&types, &spot, &dims, &DaemonSets::none());
        assert_eq!(
            names(&catalog, 0..catalog.len()),
            ["c5.xlarge", "r5.xlarge"]
        );
        let (zones, capacity_types) = catalog.offered([0, 1], &spot, &dims);
        assert_eq!(
            zones.iter().map(|z| &**z).collect::<Vec<_>>(),
            ["zone-a", "zone-b", "zone-c"]
        );
        assert_eq!(
            capacity_types.iter().map(|c| &**c).collect::<Vec<_>>(),
            ["spot"]
        );
    }

    #[test]
    fn given_limits_when_filtering_by_remaining_then_types_larger_than_what_is_left_are_out() {
        let types = types();
        let mut dims = Dimensions::default();
        dims.add_types(&types);
        let catalog = Catalog::new(&types, &Requirements::new(), &dims, &DaemonSets::none());
        let within = catalog.within(&[(ResourceName::CPU, 3000)]);
        assert_eq!(names(&catalog, within.iter()), ["c5.large"]);
        let nodes = catalog.within(&[(ResourceName::new(NODES), 0)]);
        assert!(nodes.is_empty());
        assert_eq!(
            catalog.largest_capacity(&Bits::full(catalog.len()), &ResourceName::CPU),
            4000
        );
    }
}
