//! Cost-aware packing: how far a planned NodeClaim may grow before adding pods to it costs
//! more than opening another.
//!
//! # Why
//!
//! First-fit decreasing puts every pod into the emptiest planned NodeClaim that can still
//! hold it, whatever that does to its options. A NodeClaim keeps growing until only the very
//! largest types can hold it, and those are rarely priced like the rest: a thousand plain pods
//! end on three giant nodes at fifteen times what covering their requests could cost
//! ([`super::bound`]). Upstream packs the same way and leaves the difference to
//! consolidation; deciding it here means launching the right capacity the first time.
//!
//! # The model
//!
//! A NodeClaim is opened for a pod. Each of its options is weighed by what it costs per pod
//! like that one it could hold: its price (at the NodeClaim's requirements: its zone, spot if
//! allowed) over how many such pods its allocatable, less the DaemonSets that run on it, holds
//! (fractions allowed, the fewest over the resources the pod requests). The NodeClaim keeps
//! as *efficient* the options within [`SLACK`] of the best of them. The pods that follow are
//! mostly of the same deployment or of similar size (placement goes largest first), so the
//! first pod's shape stands for theirs.
//!
//! The reference is the NodeClaim's own first options, not the whole catalogue, so that a
//! NodeClaim whose first pod needs a GPU, a zone, an architecture or a giant type is compared
//! with what such pods can have. An add that would leave none of the efficient options is
//! refused and the pod goes to another NodeClaim or a new one; when nothing else can take it
//! (the NodePool's limits leave no room for a new NodeClaim) the add is accepted after all,
//! so cost never makes a pod unschedulable. The options themselves are untouched: a
//! NodeClaim still launches as the cheapest type that holds its pods, and CreateFleet still
//! chooses among all of them.
//!
//! Burstable types are never the reference, as they are not in the bound (see
//! [`super::bound`]): their nominal cpu is not what a sustained workload gets. They stay
//! options like any other.

use std::sync::Arc;

use crate::requirements::Requirements;
use crate::scheduler::bits::Bits;
use crate::scheduler::bound::{asks_for, is_burstable};
use crate::scheduler::catalog::{Catalog, PriceTable};
use crate::scheduler::fit::Fixed;
use crate::scheduler::ids::IdMap;

/// How much worse than the best of its first options a NodeClaim's cheapest way to hold its
/// pods may get before a pod is sent elsewhere: options within this factor of the best cost
/// ratio are efficient.
///
/// Measured with `scheduler-report` (seed 42, us-east-1): 1.10 let zone-spread NodeClaims
/// grow into types 10 % dearer per pod in their zone, 1.24x the bound at 1k and 5k pods; 1.03
/// brings those to 1.21x and 1.20x (1.18x and 1.16x at 20k and 50k) and leaves the other
/// mixes as they were, for about 5 % more solve instructions on a 20k zone spread.
///
/// 1.02 rather than 1.03: a pod of 1 cpu to 2 GiB fills a c6a.48xlarge on memory (its
/// allocatable has 1.81 GiB a cpu) and an m6a.48xlarge on cpu, 2.4 % dearer per pod. Within
/// the slack, NodeClaims of such pods grow into the m type and leave half its memory idle,
/// memory the bound's optimum prices at about a tenth of the node; below it they stay c types
/// and the memory-heavy pods get r types of their own. On-demand c, m and r (`--pool
/// typical`), plain: 5k, 20k and 50k pods from 1.11x, 1.11x and 1.12x to 1.09x, 1.10x and
/// 1.09x (1k from 1.09x to 1.11x). 1.01 measured the same as 1.02 on every case that moved.
pub(super) const SLACK: f64 = 1.02;

/// [`SLACK`] for a NodeClaim opened for a pod with a topology spread or anti-affinity of its
/// own, which keeps 1.03 for two reasons. A hostname rule sends the deployment's pods to
/// different nodes, so the pods that follow the first are of other deployments and shapes:
/// a NodeClaim of them mixes cpu-heavy and memory-heavy pods, and an m type that holds the
/// mix is worth growing into (at 1.02 the typical NodePool's hostname mixes at 20k and 50k
/// pods went from 1.10x and 1.14x to 1.16x and 1.19x). A zone spread gains from 1.02 at most
/// sizes (typical 1k from 1.19x to 1.13x) but loses at others (typical 5k from 1.10x to
/// 1.15x), and opens 8 % more NodeClaims for 9 % more solve instructions at 20k pods, which
/// its time budget has no room for.
pub(super) const RULED_SLACK: f64 = 1.03;

/// What a NodeClaim's cap is worked out from: its price table's number, its first pod's
/// requests, its options, and whether the slack is [`RULED_SLACK`].
type CapKey = (u32, [i64; 4], Bits, bool);

/// A NodePool's types as cost-aware packing weighs them.
#[derive(Debug)]
pub(super) struct PoolCost {
    /// What a node of each catalogue type has for pods once its DaemonSets run; `None` for a
    /// type that is never a reference (burstable, or unable to hold the DaemonSets).
    supply: Vec<Option<Fixed>>,
    /// The caps worked out so far, by (price table, first pod's requests, options, whether
    /// the slack is [`RULED_SLACK`]) and how the improvement pass reweighs them: the
    /// NodeClaims opened for the pods of one deployment in one zone, or by one refill, all
    /// start alike, and weighing every option is most of what opening a NodeClaim costs.
    known: IdMap<(CapKey, Option<Reweigh>), Option<CostCap>>,
    /// The undominated types of each price table worked out so far (see
    /// [`Self::undominated`]), by its number.
    undominated: IdMap<u32, Arc<[(u32, f64)]>>,
}

impl PoolCost {
    /// The types of `catalog`, of a NodePool with template `base`.
    pub(super) fn new(catalog: &Catalog, base: &Requirements) -> Self {
        let supply = (0..catalog.len())
            .map(|i| {
                let instance_type = catalog.instance_type(i);
                if is_burstable(instance_type) && !asks_for(base, instance_type) {
                    return None;
                }
                let allocatable = catalog.allocatable(i);
                Fixed::ZERO.fits_in(allocatable).then_some(*allocatable)
            })
            .collect();
        PoolCost {
            supply,
            known: IdMap::default(),
            undominated: IdMap::default(),
        }
    }

    /// What a node of catalogue type `index` has for pods, when the type may be a reference
    /// (not burstable, and it holds its DaemonSets).
    pub(super) fn supply(&self, index: usize) -> Option<&Fixed> {
        self.supply.get(index)?.as_ref()
    }

    /// The types of `prices` that may be weighed (see [`Self::supply`]) with their prices,
    /// less those dominated by a type with no more of any resource at no higher price for
    /// each unit of every one. Whatever pods ask for, the dominating type holds them on as
    /// many nodes or fewer (fractions allowed) for no more, and if the dominated type cannot
    /// hold them all on one node, neither can it: the least cost over these types is the
    /// least over all of them, with or without that condition (`State::estimate`).
    pub(super) fn undominated(&mut self, prices: &PriceTable) -> Arc<[(u32, f64)]> {
        if let Some(known) = prices.id.and_then(|id| self.undominated.get(&id)) {
            return known.clone();
        }
        let weighed: Vec<(u32, f64, [i64; 4])> = prices
            .order
            .iter()
            .filter_map(|&(i, price)| Some((i, price, self.supply(i as usize)?.amounts())))
            .collect();
        let dominates = |(_, p, s): &(u32, f64, [i64; 4]), (_, q, t): &(u32, f64, [i64; 4])| {
            s.iter()
                .zip(t)
                .all(|(s, t)| s <= t && p * *t as f64 <= q * *s as f64)
        };
        let kept: Arc<[(u32, f64)]> = weighed
            .iter()
            .enumerate()
            .filter(|&(k, this)| {
                // Of two that dominate each other (the same type twice), the first is kept.
                !weighed.iter().enumerate().any(|(j, other)| {
                    j != k && dominates(other, this) && (j < k || !dominates(this, other))
                })
            })
            .map(|(_, &(i, price, _))| (i, price))
            .collect();
        if let Some(id) = prices.id {
            self.undominated.insert(id, kept.clone());
        }
        kept
    }

    /// What pods requesting `whole` cost on the type of `types` (catalogue index, price) that
    /// holds them for least, fractions of a node allowed, among those that may be weighed;
    /// only among the types that cannot hold them all on one node when `smaller`. Infinite
    /// when none can.
    pub(super) fn least_cost(&self, types: &[(u32, f64)], whole: &Fixed, smaller: bool) -> f64 {
        let whole = whole.amounts();
        types
            .iter()
            .filter_map(|&(i, price)| {
                let supply = self.supply(i as usize)?.amounts();
                let nodes = whole
                    .iter()
                    .zip(supply)
                    .filter(|(wanted, _)| **wanted > 0)
                    .map(|(wanted, has)| *wanted as f64 / has.max(1) as f64)
                    .fold(0.0, f64::max);
                (!smaller || nodes > 1.0).then_some(price * nodes)
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// The efficient options of a NodeClaim just opened with `options` for a pod requesting
    /// `first`, at `prices` (at the NodeClaim's requirements), weighed by `first` or, while
    /// the improvement pass places pods again, as `how` says; `None` when none of them can be
    /// weighed. `ruled` when the pod has a topology spread or anti-affinity of its own (see
    /// [`RULED_SLACK`]).
    pub(super) fn cap(
        &mut self,
        options: &Bits,
        prices: &PriceTable,
        first: &Fixed,
        ruled: bool,
        how: Option<Reweigh>,
        catalog: &Catalog,
    ) -> Option<CostCap> {
        let slack = if ruled { RULED_SLACK } else { SLACK };
        let weigh = |cost: &Self| {
            let (by, smaller_than) = match &how {
                None => (first, None),
                Some(Reweigh::Split(whole)) => (first, Some(whole)),
                Some(Reweigh::Mix(whole)) => (whole, None),
            };
            cost.weigh(options, &prices.prices, by, slack, smaller_than, catalog)
        };
        let Some(id) = prices.id else {
            return weigh(self);
        };
        let key = ((id, first.amounts(), options.clone(), ruled), how);
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        let cap = weigh(self);
        self.known.insert(key, cap.clone());
        cap
    }

    fn weigh(
        &self,
        options: &Bits,
        prices: &[f64],
        first: &Fixed,
        slack: f64,
        smaller_than: Option<&Fixed>,
        catalog: &Catalog,
    ) -> Option<CostCap> {
        let per_pod = |i: usize| {
            let supply = self.supply.get(i)?.as_ref()?;
            if smaller_than.is_some_and(|whole| whole.fits_in(supply)) {
                return None;
            }
            let price = prices.get(i).copied().filter(|p| p.is_finite())?;
            Some(price / copies(supply, first)?)
        };
        let best = options.iter().filter_map(per_pod).min_by(f64::total_cmp)?;
        let mut efficient = Bits::empty(catalog.len());
        for i in options.iter() {
            if per_pod(i).is_some_and(|price| price <= best * slack) {
                efficient.insert(i);
            }
        }
        Some(CostCap::of(efficient, catalog))
    }
}

/// How the improvement pass weighs the caps of the NodeClaims it opens, instead of by their
/// first pod's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Reweigh {
    /// Splitting NodeClaims whose pods request this together: only the options that cannot
    /// hold all of them on one node are weighed, by the first pod's requests, so that the
    /// pods go to smaller nodes of the types that suit them best.
    Split(Fixed),
    /// Mixing NodeClaims whose pods request this together: options are weighed by what
    /// holding all of them costs, so that the NodeClaims grow into the types that suit
    /// their pods together (pods of 1 cpu to 2 GiB and of 1 cpu to 8 GiB together suit a
    /// type of 1 cpu to 4 GiB, where each alone leaves some of its node idle).
    Mix(Fixed),
}

/// How many pods requesting `pod` a node with `supply` holds, fractions allowed: the fewest
/// over the resources the pod requests. `None` when it requests nothing.
fn copies(supply: &Fixed, pod: &Fixed) -> Option<f64> {
    supply
        .amounts()
        .iter()
        .zip(pod.amounts())
        .filter(|(_, wanted)| *wanted > 0)
        .map(|(has, wanted)| *has as f64 / wanted as f64)
        .min_by(f64::total_cmp)
        .filter(|copies| *copies > 0.0)
}

/// What a planned NodeClaim may still grow into: its efficient options that remain.
#[derive(Debug, Clone)]
pub(super) struct CostCap {
    /// The efficient options that still hold the NodeClaim's pods; never empty.
    efficient: Arc<Bits>,
    /// The largest allocatable of each resource among them: a demand that exceeds it is
    /// refused without looking at the options.
    largest: Fixed,
}

impl CostCap {
    fn of(efficient: Bits, catalog: &Catalog) -> Self {
        let largest = efficient.iter().fold(Fixed::ZERO, |largest, i| {
            largest.max(catalog.allocatable(i))
        });
        CostCap {
            efficient: Arc::new(efficient),
            largest,
        }
    }

    /// The efficient options.
    pub(super) fn efficient(&self) -> &Bits {
        &self.efficient
    }

    /// Whether a NodeClaim whose pods request `demand` may still be efficient.
    pub(super) fn may_hold(&self, demand: &Fixed) -> bool {
        demand.fits_in(&self.largest)
    }

    /// The cap once the NodeClaim's options are `options`, or `None` when none of them is
    /// efficient any more: the add that leaves them is refused.
    pub(super) fn narrowed(&self, options: &Bits, catalog: &Catalog) -> Option<CostCap> {
        if !options.intersects(&self.efficient) {
            return None;
        }
        let remaining = options.and(&self.efficient);
        if remaining == *self.efficient {
            return Some(self.clone());
        }
        Some(CostCap::of(remaining, catalog))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    use crate::scheduler::daemons::DaemonSets;
    use crate::scheduler::dimensions::Dimensions;
    use crate::scheduler::testing::TypeSpec;

    proptest! {
        #[test]
        fn the_least_cost_over_the_undominated_types_is_the_least_over_all_of_them(
            types in prop::collection::vec((1i64..64, 1i64..512, 1u32..400, 1i64..250), 1..40),
            wanted in (0i64..200_000, 0i64..2_000, 0i64..300),
        ) {
            let types: Vec<_> = types
                .iter()
                .enumerate()
                .map(|(i, &(cpu, memory, cents, pods))| {
                    TypeSpec::new(&format!("t{i}.large"), cpu, memory, f64::from(cents) / 100.0)
                        .pods(pods)
                        .build()
                })
                .collect();
            let mut dims = Dimensions::default();
            dims.add_types(&types);
            let base = Requirements::new();
            let mut catalog = Catalog::new(&types, &base, &dims, &DaemonSets::none());
            let mut cost = PoolCost::new(&catalog, &base);
            let prices = catalog.prices(&base, &dims);
            let undominated = cost.undominated(&prices);
            let (cpu, gib, pods) = wanted;
            let whole = Fixed::from_amounts([cpu, gib << 30, 0, pods]);
            for smaller in [false, true] {
                let all = cost.least_cost(&prices.order, &whole, smaller);
                let kept = cost.least_cost(&undominated, &whole, smaller);
                prop_assert!(
                    all == kept || (all - kept).abs() <= 1e-9 * all.abs(),
                    "{all} over all, {kept} over {} undominated (smaller: {smaller})",
                    undominated.len()
                );
            }
        }
    }
}
