//! Which of the zones a zone spread allows its pod goes to.
//!
//! # Why
//!
//! A spread of `n` pods over `Z` zones with a `maxSkew` of 1 puts `n / Z` of them in every
//! zone whatever the scheduler does; only the `n mod Z` left over may go to any zones, one
//! each. Upstream takes the least loaded zone and, among equally loaded ones, whichever the
//! pod fits first, so the pods left over land in the dearest zone as often as in the
//! cheapest. Zones are not priced alike: spot prices differ by zone, and a zone without the
//! newer families buys older, dearer types for the same pods. On the us-east-1 catalogue,
//! what a zone spread's pods cost in us-east-1e is nearly twice what they cost in us-east-1a.
//!
//! # What
//!
//! When cost-aware packing places a pod whose zone spreads allow several zones, it first
//! keeps to the cheapest of them for pods like it: those where its requests cost, on the
//! type that holds them for least (fractions of a node allowed, as `PoolCost::least_cost`
//! weighs them), within [`CHEAPER`] of the least, in the first NodePool (by weight) that may
//! take it. It goes to a planned NodeClaim of those zones or a new one of that NodePool;
//! only when neither takes it is it placed as before, in any zone its rules allow. Every
//! spread holds either way (each zone it goes to is one its rule allows), and existing
//! nodes, whose room is paid for, are tried first as before.
//!
//! Each round of a spread then fills the cheaper zones first, so the pods left over go
//! there. The lower bound (`super::bound`) holds every zone to `n / Z` pods only, so what
//! this saves is what the bound already allowed for.
//!
//! Measured with `scheduler-report` (seed 42, us-east-1), zone spread at 1k/5k/20k/50k pods:
//! on the whole catalogue from 22.83/94.20/319.65/825.87 to 22.78/93.54/316.41/820.59 an
//! hour (no pod left over in us-east-1e, where 8 of 1k and 48 of 5k were); on the typical
//! NodePool (on-demand, so only the types a zone offers differ) from
//! 78.27/318.54/1078.42/2824.81 to 78.06/319.80/1077.01/2792.43, the one dearer case being
//! how its large nodes happened to fill. No other mix has a zone spread, and none changed.
//! Solve instructions for zone spread at 5k and 20k pods grew by 6 % and 3 %, mostly from
//! the different plans the improvement pass then works on.

use std::sync::Arc;

use crate::labels::LABEL_TOPOLOGY_ZONE;
use crate::requirements::Requirement;
use crate::scheduler::nodeclaim::Candidate;
use crate::scheduler::plan::PodPlan;
use crate::scheduler::preferences::Relaxation;
use crate::scheduler::solver::State;
use crate::scheduler::topology::AllowedDomains;

/// Zones where pods like the one placed cost no more than this times what they cost in the
/// cheapest allowed zone count as cheaper: prices within it are the same for this purpose.
/// On the benchmarks, where zones differ by the families they offer, 1.0, 1.03 and 1.1 gave
/// the same plans.
const CHEAPER: f64 = 1.01;

impl State<'_> {
    /// The first NodePool that may take the pod and, when its zone rules (`allowed`) allow
    /// several zones of which some are dearer for pods like it there, the cheaper of them
    /// (see the module documentation), interned. `None` when there is no choice to make.
    pub(super) fn cheaper_zones(
        &mut self,
        plan: &PodPlan<'_>,
        relaxation: Relaxation,
        candidate: &Candidate<'_>,
        allowed: &[AllowedDomains],
    ) -> Option<(usize, Vec<u32>)> {
        if !self.cost_aware || !allowed.iter().any(|a| a.spread && a.zones.is_some()) {
            return None;
        }
        // The zones every rule on zones allows (their affinity and anti-affinity too).
        let mut rules = allowed.iter().filter_map(|a| a.zones.as_deref());
        let first = rules.next()?;
        let zones: Vec<u32> = first
            .iter()
            .copied()
            .filter(|zone| rules.clone().all(|rule| rule.binary_search(zone).is_ok()))
            .collect();
        if zones.len() < 2 {
            return None;
        }
        let pool = (0..self.pools.len()).find(|&pool| self.may_take(pool, candidate))?;
        let costs = self.zone_costs(pool, plan, relaxation, candidate);
        let cost = |zone: u32| costs.get(zone as usize).copied().unwrap_or(f64::INFINITY);
        let least = zones.iter().map(|&z| cost(z)).fold(f64::INFINITY, f64::min);
        if !least.is_finite() {
            return None;
        }
        let cheaper: Vec<u32> = zones
            .iter()
            .copied()
            .filter(|&zone| cost(zone) <= least * CHEAPER)
            .collect();
        (cheaper.len() < zones.len()).then_some((pool, cheaper))
    }

    /// What the pod's requests cost in each interned zone on NodePool `pool`'s type that
    /// holds them for least, fractions of a node allowed (`PoolCost::least_cost`); infinite
    /// where no type is offered. The same for every pod of its class at its relaxation:
    /// worked out once.
    fn zone_costs(
        &mut self,
        pool: usize,
        plan: &PodPlan<'_>,
        relaxation: Relaxation,
        candidate: &Candidate<'_>,
    ) -> Arc<[f64]> {
        let key = (pool, plan.class, relaxation);
        if let Some(costs) = self.zone_costs.get(&key) {
            return costs.clone();
        }
        let state = &mut self.pools[pool];
        let mut wanted = state.base.clone();
        wanted.add_all(&candidate.constraints.requirements);
        let costs: Arc<[f64]> = self
            .dims
            .zones
            .values()
            .iter()
            .map(|zone| {
                let mut requirements = wanted.clone();
                requirements.add(Requirement::in_values(LABEL_TOPOLOGY_ZONE, [&**zone]));
                state.least_cost(&requirements, &self.dims, &candidate.demand.fixed, false)
            })
            .collect();
        self.zone_costs.insert(key, costs.clone());
        costs
    }
}
