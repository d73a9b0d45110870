//! The improvement pass: after every pod is placed, the planned NodeClaims that waste the
//! most are emptied a few at a time and their pods placed again onto new NodeClaims of the
//! same NodePool, by the same rules as the first placement; the change is kept only when the
//! new NodeClaims cost less than the ones they replace. A split (one NodeClaim into cheaper
//! ones), a merge (several small ones into one) and a mix (NodeClaims of pods of different
//! shapes into NodeClaims that hold both) are all such a change.
//!
//! # Splits
//!
//! A cost cap weighs a type by its price per pod when full, so the last NodeClaim of a
//! deployment (or of a zone's share of it) grows into the type that is cheapest when full
//! and launches as the cheapest type holding what it got, half-full or of a dearer family:
//! 99 pods of 1 core to 8 GiB on an r6i.metal at 2.45 an hour where seven r6g.4xlarge hold
//! them for 1.91. Refilled by the same rules, it comes out the same. So after the batches,
//! every NodeClaim of more than one pod that smaller nodes could hold for less (by the
//! estimate of `State::split_estimate`), those leaving the most of their price idle first,
//! is emptied alone and its pods placed again under caps weighed over only the options that
//! cannot hold all of them on one node (`Reweigh::Split`), kept when cheaper. Splits
//! have their own budget: each pod may be moved once by them.
//!
//! Measured with `scheduler-report` (seed 42, us-east-1), from and to this many times the
//! bound at 1k/5k/20k/50k pods: plain 1.18/1.16/1.14/1.14 to 1.16/1.15/1.14/1.14; zone
//! spread 1.21/1.20/1.18/1.16 to 1.16/1.18/1.16/1.16; hostname spread and anti-affinity
//! 1.22/1.25/1.29/1.25 to 1.20/1.19/1.16/1.18. On the typical NodePool: plain
//! 1.11/1.09/1.10/1.09 to 1.10/1.09/1.09/1.09, zone spread 1.19/1.10/1.13/1.12 to
//! 1.10/1.10/1.12/1.12, hostname rules 1.44/1.32/1.10/1.14 to 1.20/1.17/1.08/1.11. No case
//! got dearer; solve time grew by 15-30 % (hostname spread at 20k pods the most: the
//! NodeClaims of a hostname rule mix every deployment, and many of them split). Without the
//! estimate's filter, the same plans took up to half as long again for plain pods, whose
//! small full nodes never split.
//!
//! # Mixes
//!
//! A cost cap weighs types by the NodeClaim's first pod, and placement goes largest first,
//! so a NodeClaim fills with pods of one shape: pods of 1 core to 2 GiB fill an m type's cpu
//! and leave half its memory idle, while pods of 1 core to 8 GiB get an r type of their own,
//! dearer for what it holds than an m type. Two of the first with one of the second ask for
//! 1 core to 4 GiB, which fills the m type. Refilling either NodeClaim alone gives it back.
//!
//! So, last, a NodeClaim that leaves memory idle ([`LOPSIDED`]: its cheapest option's cpu is
//! used by that share more than its memory) is a partner for a NodeClaim of the same zone
//! whose pods ask for [`DIFFERENT`] times as much memory per core or more, and the other way
//! round for idle cpu. The leaders, those whose pods ask most of what the partners leave
//! idle first, each look at the [`MIX_LOOKS`] partners leaving the most idle, and take the
//! first one to [`MIX_PARTNERS`] of them that one type holds together for the least by the
//! estimate of `State::estimate`, when that is less than they cost now. They are emptied
//! together and their pods placed again interleaved, each NodeClaim's pods in their order,
//! so that every NodeClaim opened gets its share of each, under caps weighed by all of them
//! together (`Reweigh::Mix`); kept when cheaper, as every change is. A side stops after
//! [`MIX_FAILURES`] mixes in a row that did not save, and mixes move each pod once at most.
//!
//! What a split or a mix opens is often worth splitting or mixing again (a mix leaves a
//! half-full NodeClaim of what did not fit, a split a node whose pods another NodeClaim
//! complements), so splits then mixes run in up to [`ROUNDS`] rounds, each over the
//! NodeClaims the round before opened, until one keeps nothing.
//!
//! Measured with `scheduler-report` (seed 42, us-east-1), this many times the bound at
//! 1k/5k/20k/50k pods before mixes and after mixes and rounds: on the typical NodePool, zone
//! spread 1.101/1.103/1.121/1.118 to 1.096/1.085/1.080/1.092 (its m types half idle on
//! memory now share their nodes with the r types' pods); on the whole catalogue, plain
//! 1.160/1.146/1.142/1.142 to 1.149/1.144/1.141/1.141, zone spread 1.165/1.181/1.165/1.161
//! to 1.161/1.159/1.160/1.161, hostname rules 1.203/1.192/1.161/1.178 to
//! 1.191/1.175/1.147/1.148; the typical NodePool's plain and hostname cases the same or up
//! to 0.7 % cheaper. No case got dearer.
//! Together with the filtering and caching they came with, solve instructions went from
//! 0.16/0.57/2.31/1.05 billion (plain 5k and 20k, zone and hostname spread 20k) to
//! 0.14/0.51/2.01/1.05.
//!
//! A NodeClaim much larger than its partners, such as a giant r node of 179 pods of 1 core
//! to 8 GiB beside m nodes each leaving nearly half their memory idle, finds no mix among
//! [`MIX_PARTNERS`] of them: they cannot take in enough of its pods. So after every
//! NodePool's rounds, every NodeClaim that costs more than its first [`MIX_PARTNERS`]
//! partners together leads once more, with up to [`MIX_MORE_PARTNERS`] of them. This runs
//! last and keeps only what saves, so it makes no plan dearer. Measured the same way: zone
//! spread on the whole catalogue at 20k and 50k pods from 1.160/1.161 to 1.149/1.149 times
//! the bound, the typical NodePool's plain and zone spread cases at 20k and 50k pods up to
//! 0.06 % cheaper, nothing else changed; solve instructions +2 % (plain 5k), -1 % (zone
//! spread 20k) and +6 % (hostname spread 20k, which keeps nothing from it: finding the
//! leaders is the cost). Each NodeClaim's price is then remembered until it takes a pod
//! (`NodeClaimState::priced`) rather than looked up again for every pass over the
//! NodeClaims: solve instructions -5 % (hostname spread 20k), -8 % (plain 5k) and -2 % (zone
//! spread 20k), no plan changed.
//!
//! # Whole zones
//!
//! Some zones' pods suit one type only all together. In us-east-1e, which offers only older
//! families, pods of 1 core to 2 GiB are cheapest on a c type that fills on memory with a
//! sixth of its cpu idle, and pods of 1 core to 8 GiB on an r type that they fill; an m type
//! holds neither alone as cheaply, but several shapes together fill it on both. No two
//! NodeClaims mix into it (the c type's idle cpu is no use to pods asking for more memory,
//! and the r type leaves nothing idle), so the mixes above cannot find it. So after the
//! rounds, the NodeClaims pinned to each zone are mixed all together, as one mix, where
//! they hold at most [`WHOLE`] pods and the estimate of `State::estimate` says one type
//! holds them for less; kept when cheaper, as every change is.
//!
//! Measured with `scheduler-report` (seed 42, us-east-1): zone spread on the whole
//! catalogue at 1k and 5k pods from 22.78 and 93.54 an hour (1.159x and 1.151x the bound)
//! to 22.60 and 92.91 (1.150x and 1.143x): us-east-1e 3 % cheaper at 1k, us-east-1d and
//! us-east-1f at 5k. At 20k and 50k pods a zone has more than [`WHOLE`] pods, and no other
//! case has NodeClaims pinned to zones, so nothing else changed. Solve instructions for
//! zone spread at 1k and 5k pods grew by 7 % and 10 %; without the estimate's filter every
//! zone was refilled, most for nothing, and they grew by 16 % and 21 %.
//!
//! # What may move
//!
//! A pod moves only where that cannot break a rule that another pod kept when it was placed:
//!
//! - a pod selected by an affinity (of any key) stays, since the pod that joined it relies on
//!   it being where it is; so does a pod with a hostname affinity of its own, and one counted
//!   by a hostname spread that counts only some nodes (its node filter);
//! - a pod keeps its domain for every key other than hostname that a rule it is involved in
//!   names (its zone, say): the NodeClaims it is placed on again are given its NodeClaim's
//!   requirement on that key, so the counts of those rules do not change;
//! - its hostname counts move with it, and placing it again checks its hostname rules and
//!   the anti-affinity of the pods already on the NodeClaim as the first placement does.
//!
//! A NodeClaim is emptied only when all its pods may move. The pods are placed again from
//! their full preferences, relaxing as the first placement does; when one cannot be placed,
//! or the result does not cost less, everything is put back as it was.
//!
//! # How much
//!
//! The pass is bounded by work, not time, so that it stays a pure function of its input: it
//! moves at most one pod in [`BUDGET_DIVISOR`] of those the run placed on new NodeClaims in
//! batches, beyond refilling a NodePool of at most [`WHOLE`] pods whole, splits and mixes
//! each move at most as many pods as were placed, and whole zones move each pod once at
//! most.

use std::collections::BTreeMap;

use crate::labels::LABEL_TOPOLOGY_ZONE;
use crate::requirements::{Requirement, Requirements};
use crate::scheduler::PreferencePolicy;
use crate::scheduler::cost::Reweigh;
use crate::scheduler::fit::Fixed;
use crate::scheduler::nodeclaim::Candidate;
use crate::scheduler::plan::PodPlan;
use crate::scheduler::preferences::Relaxation;
use crate::scheduler::queue::placement_order;
use crate::scheduler::solver::{Solver, State};
use crate::scheduler::topology::{GroupId, PodTopology, Topology};

/// How many NodeClaims are emptied and refilled together.
const BATCH: usize = 8;

/// The pass moves at most one pod in this many of those placed on new NodeClaims, beyond
/// the whole refill of a NodePool with few pods.
const BUDGET_DIVISOR: usize = 4;

/// A NodePool with at most this many pods on new NodeClaims is refilled whole, and so is
/// a zone's share of them (see the module documentation).
const WHOLE: usize = 1000;

/// NodeClaims whose most used resource uses less than this share of their cheapest option
/// are the ones worth emptying.
const HALF: f64 = 0.5;

/// A planned NodeClaim the improvement pass may mix.
struct Mixable {
    /// Its index among the planned NodeClaims.
    index: usize,
    /// Its requirement on the zone: only NodeClaims of one zone mix.
    zone: Option<Requirement>,
    /// What it costs an hour.
    price: f64,
    /// How much more of its cheapest option's cpu it uses than of its memory (shares):
    /// positive when it leaves memory idle, negative when cpu.
    lopsided: f64,
    /// What its pods request: memory (bytes) per cpu (millis).
    memory_per_cpu: f64,
}

/// How the improvement pass places pods again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refill {
    /// Upstream's first-fit, no cost caps: merges.
    FirstFit,
    /// With cost caps, as the first placement.
    Capped,
    /// With cost caps weighed over the options that cannot hold every moved pod on one node
    /// (`Reweigh::Split`): splits.
    Split,
    /// With cost caps weighed by every moved pod together (`Reweigh::Mix`), the pods of the
    /// emptied NodeClaims interleaved: mixes.
    Mix,
}

/// A NodeClaim whose cheapest option leaves at least this share more of one of cpu and
/// memory idle than of the other is lopsided: a partner for NodeClaims whose pods ask for
/// more of what it leaves idle.
const LOPSIDED: f64 = 0.15;

/// A mix empties its leading NodeClaim and at most this many partners.
const MIX_PARTNERS: usize = 3;

/// The last mixes let a NodeClaim mix with this many partners at most.
const MIX_MORE_PARTNERS: usize = 8;

/// How many NodeClaims lopsided the other way a mix looks at for partners, those with the
/// most idle first.
const MIX_LOOKS: usize = 8;

/// Pods of two NodeClaims are of different enough shapes to mix when one requests this many
/// times as much memory per cpu as the other.
const DIFFERENT: f64 = 1.5;

/// Splits and mixes run at most this many rounds, each over what the one before opened.
const ROUNDS: usize = 3;

/// A side of the mixes stops after this many refills in a row that did not save.
const MIX_FAILURES: usize = 8;

/// A change must save at least this much per hour: prices are floating point.
const SAVING: f64 = 1e-9;

impl Solver<'_> {
    /// Improves the planned NodeClaims as the module documentation says.
    pub(super) fn improve(&mut self, policy: PreferencePolicy) {
        if !self.state.cost_aware || self.state.claims.is_empty() {
            return;
        }
        let mut rank = vec![0; self.plans.len()];
        for (position, pod) in placement_order(&self.plans).into_iter().enumerate() {
            rank[pod] = position;
        }
        let movable: Vec<bool> = self.plans.iter().map(|p| self.state.movable(p)).collect();
        let mut by_pool: Vec<Vec<u32>> = vec![Vec::new(); self.state.pools.len()];
        let mut placed = 0;
        for (index, claim) in self.state.claims.iter().enumerate() {
            placed += claim.pods.len();
            if self.state.refillable(index, claim.pool, &movable) {
                by_pool[claim.pool].push(u32::try_from(index).unwrap_or(u32::MAX));
            }
        }
        let mut budget = placed / BUDGET_DIVISOR;
        // Splits move each NodeClaim alone and are filtered by an estimate: each pod once.
        let mut split_budget = placed;
        // Mixes too, by the estimate of `State::estimate`.
        let mut mix_budget = placed;
        for (pool, claims) in by_pool.into_iter().enumerate() {
            let pods: usize = claims
                .iter()
                .map(|&i| self.state.claims[i as usize].pods.len())
                .sum();
            if pods == 0 {
                continue;
            }
            // Few enough pods: upstream's packing of all of them, whole, which the caps
            // may have beaten or not. Then no plan of these pods costs more than upstream's.
            if !(pods <= WHOLE && self.refill(pool, &claims, &rank, policy, Refill::FirstFit)) {
                self.batches(pool, &claims, &rank, policy, &mut budget);
            }
            // What a split or a mix opens may split or mix again: a few rounds, each over
            // what the one before opened.
            let mut since = 0;
            for _ in 0..ROUNDS {
                let opened = self.state.claims.len();
                let kept = self.split(pool, since, &movable, &rank, policy, &mut split_budget)
                    + self.mix(
                        pool,
                        since,
                        &movable,
                        &rank,
                        policy,
                        MIX_PARTNERS,
                        &mut mix_budget,
                    );
                if kept == 0 {
                    break;
                }
                since = opened;
            }
        }
        // Then each zone whole, where it has few enough pods (see the module documentation).
        for pool in 0..self.state.pools.len() {
            self.zones(pool, &movable, &rank, policy);
        }
        // Last, after every NodePool's rounds so that it takes no budget they could use:
        // NodeClaims too large for MIX_PARTNERS partners to complement (see the module
        // documentation).
        for pool in 0..self.state.pools.len() {
            self.mix(
                pool,
                0,
                &movable,
                &rank,
                policy,
                MIX_MORE_PARTNERS,
                &mut mix_budget,
            );
        }
    }

    /// Empties the most wasteful NodeClaims `claims` of NodePool `pool` a batch at a time and
    /// places their pods again, first-fit then capped, while `budget` allows.
    fn batches(
        &mut self,
        pool: usize,
        claims: &[u32],
        rank: &[usize],
        policy: PreferencePolicy,
        budget: &mut usize,
    ) {
        let mut wasteful: Vec<(f64, u32)> = claims
            .iter()
            .filter_map(|&index| {
                let (price, used) = self.state.usage(index as usize)?;
                (used < HALF).then_some((price * (1.0 - used), index))
            })
            .collect();
        wasteful.sort_by(|(a, i), (b, j)| b.total_cmp(a).then(i.cmp(j)));
        for batch in wasteful.chunks(BATCH) {
            let indices: Vec<u32> = batch.iter().map(|(_, index)| *index).collect();
            let pods: usize = indices
                .iter()
                .map(|&i| self.state.claims[i as usize].pods.len())
                .sum();
            if pods > *budget {
                break;
            }
            *budget -= pods;
            // Upstream's packing first: where the caps split pods that one larger node
            // holds for less, it merges them back; then the caps again, which may split
            // what was merged.
            let _ = self.refill(pool, &indices, rank, policy, Refill::FirstFit)
                || self.refill(pool, &indices, rank, policy, Refill::Capped);
        }
    }

    /// Splits the planned NodeClaims of NodePool `pool` from index `since` on one at a time,
    /// those that leave the most of their cheapest option's price idle first, while `budget`
    /// allows (see the module documentation). Returns how many splits it kept.
    fn split(
        &mut self,
        pool: usize,
        since: usize,
        movable: &[bool],
        rank: &[usize],
        policy: PreferencePolicy,
        budget: &mut usize,
    ) -> usize {
        let candidates: Vec<u32> = (since..self.state.claims.len())
            .filter(|&index| {
                // One pod cannot be split.
                self.state.refillable(index, pool, movable)
                    && self.state.claims[index].pods.len() > 1
            })
            .filter_map(|index| u32::try_from(index).ok())
            .collect();
        let mut idle: Vec<(f64, u32)> = candidates
            .into_iter()
            .filter_map(|index| {
                let (price, used) = self.state.usage(index as usize)?;
                // Only where smaller nodes could hold its pods for less.
                (self.state.split_estimate(index as usize) < price - SAVING)
                    .then_some((price * (1.0 - used), index))
            })
            .collect();
        idle.sort_by(|(a, i), (b, j)| b.total_cmp(a).then(i.cmp(j)));
        let mut kept = 0;
        for (_, index) in idle {
            let pods = self.state.claims[index as usize].pods.len();
            if pods > *budget {
                break;
            }
            *budget -= pods;
            kept += usize::from(self.refill(pool, &[index], rank, policy, Refill::Split));
        }
        kept
    }

    /// Mixes the planned NodeClaims of NodePool `pool` that leave one of cpu and memory idle
    /// with NodeClaims whose pods request more of it for each of the other, where an estimate
    /// says one type holds them together for less, while `budget` allows (see the module
    /// documentation); only NodeClaims from index `since` on lead, each with at most `limit`
    /// partners. Returns how many mixes it kept.
    #[expect(clippy::too_many_arguments, reason = "the pass's state, passed down")]
    fn mix(
        &mut self,
        pool: usize,
        since: usize,
        movable: &[bool],
        rank: &[usize],
        policy: PreferencePolicy,
        limit: usize,
        budget: &mut usize,
    ) -> usize {
        let mut claims = Vec::new();
        for index in 0..self.state.claims.len() {
            if !self.state.refillable(index, pool, movable) {
                continue;
            }
            let claim = &self.state.claims[index];
            let zone = claim.requirements.get(LABEL_TOPOLOGY_ZONE).cloned();
            let demand = claim.demand.fixed;
            let Some((price, [cpu, memory, ..])) = self.state.shares(index) else {
                continue;
            };
            if demand.cpu_millis() <= 0 {
                continue;
            }
            claims.push(Mixable {
                index,
                zone,
                price,
                lopsided: cpu - memory,
                memory_per_cpu: demand.memory_bytes() as f64 / demand.cpu_millis() as f64,
            });
        }
        [true, false]
            .into_iter()
            .map(|idle_memory| {
                self.mix_side(
                    pool,
                    &claims,
                    since,
                    idle_memory,
                    rank,
                    policy,
                    limit,
                    budget,
                )
            })
            .sum()
    }

    /// [`Self::mix`] for the NodeClaims that leave memory idle (`idle_memory`) or cpu.
    #[expect(clippy::too_many_arguments, reason = "the pass's state, passed down")]
    fn mix_side(
        &mut self,
        pool: usize,
        claims: &[Mixable],
        since: usize,
        idle_memory: bool,
        rank: &[usize],
        policy: PreferencePolicy,
        limit: usize,
        budget: &mut usize,
    ) -> usize {
        // How lopsided a NodeClaim idle on cpu is, is negative: flipped, most idle first.
        let sign = if idle_memory { 1.0 } else { -1.0 };
        let idle = |c: &Mixable| sign * c.lopsided * c.price;
        let mut partners: Vec<&Mixable> = claims
            .iter()
            .filter(|c| sign * c.lopsided >= LOPSIDED)
            .collect();
        partners.sort_by(|a, b| idle(b).total_cmp(&idle(a)).then(a.index.cmp(&b.index)));
        let mut leaders: Vec<&Mixable> = claims
            .iter()
            .filter(|c| c.index >= since && sign * c.lopsided < LOPSIDED)
            .collect();
        // Those whose pods request the most of what the partners leave idle first.
        leaders.sort_by(|a, b| {
            let most = if idle_memory {
                b.memory_per_cpu.total_cmp(&a.memory_per_cpu)
            } else {
                a.memory_per_cpu.total_cmp(&b.memory_per_cpu)
            };
            most.then(a.index.cmp(&b.index))
        });
        // How much more memory per core a leader's pods must ask for than a partner's (or
        // less, when partners leave cpu idle).
        let different = |leader: &Mixable, partner: &Mixable| {
            let ratio = leader.memory_per_cpu / partner.memory_per_cpu;
            if idle_memory {
                ratio >= DIFFERENT
            } else {
                ratio * DIFFERENT <= 1.0
            }
        };
        let mut failures = 0;
        let mut kept = 0;
        for leader in leaders {
            if failures >= MIX_FAILURES {
                break;
            }
            if self.state.claims[leader.index].retired {
                continue;
            }
            let looks: Vec<&Mixable> = partners
                .iter()
                .filter(|p| {
                    !self.state.claims[p.index].retired
                        && p.zone == leader.zone
                        && different(leader, p)
                })
                .take(MIX_LOOKS.max(limit))
                .copied()
                .collect();
            if looks.is_empty() {
                continue;
            }
            // With more partners allowed than the usual mixes, only a leader that costs more
            // than the usual number of partners together: the others had their mixes.
            let usual: f64 = looks.iter().take(MIX_PARTNERS).map(|p| p.price).sum();
            if limit > MIX_PARTNERS && leader.price <= usual {
                continue;
            }
            let Some(chosen) =
                self.state
                    .best_mix(leader.index, looks.iter().map(|p| p.index), limit)
            else {
                continue;
            };
            let mut indices = vec![leader.index];
            indices.extend(looks[..chosen].iter().map(|p| p.index));
            let pods: usize = indices
                .iter()
                .map(|&i| self.state.claims[i].pods.len())
                .sum();
            if pods > *budget {
                break;
            }
            *budget -= pods;
            let indices: Vec<u32> = indices
                .iter()
                .filter_map(|&i| u32::try_from(i).ok())
                .collect();
            if self.refill(pool, &indices, rank, policy, Refill::Mix) {
                kept += 1;
                failures = 0;
            } else {
                failures += 1;
            }
        }
        kept
    }

    /// Mixes the planned NodeClaims of NodePool `pool` pinned to one zone, each zone's
    /// together, where they hold at most [`WHOLE`] pods (see the module documentation).
    fn zones(&mut self, pool: usize, movable: &[bool], rank: &[usize], policy: PreferencePolicy) {
        let mut by_zone: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for index in 0..self.state.claims.len() {
            if !self.state.refillable(index, pool, movable) {
                continue;
            }
            if let Some(zone) = self.state.claims[index].zone(&self.state.dims) {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                by_zone.entry(zone).or_default().push(index);
            }
        }
        for indices in by_zone.into_values() {
            let pods: usize = indices
                .iter()
                .map(|&i| self.state.claims[i as usize].pods.len())
                .sum();
            if indices.len() < 2 || pods > WHOLE {
                continue;
            }
            // Only where one type could hold them all for less, by the estimate of
            // `State::estimate`: most zones are already as good as their types allow.
            let whole = self.state.demand_of(&indices);
            let now: f64 = indices.iter().map(|&i| self.state.price(i as usize)).sum();
            if self.state.estimate(indices[0] as usize, &whole, false) < now - SAVING {
                self.refill(pool, &indices, rank, policy, Refill::Mix);
            }
        }
    }

    /// Empties the NodeClaims `indices` of NodePool `pool` and places their pods again on new
    /// NodeClaims, keeping the change if it costs less. Returns whether it did.
    fn refill(
        &mut self,
        pool: usize,
        indices: &[u32],
        rank: &[usize],
        policy: PreferencePolicy,
        how: Refill,
    ) -> bool {
        let plans = &self.plans;
        let state = &mut self.state;
        let before: f64 = indices.iter().map(|&i| state.price(i as usize)).sum();
        if !before.is_finite() {
            return false;
        }
        // Set for the refill only: every way out below restores both.
        let cost_aware = std::mem::replace(&mut state.cost_aware, how != Refill::FirstFit);
        state.reweigh = match how {
            Refill::Split => Some(Reweigh::Split(state.demand_of(indices))),
            Refill::Mix => Some(Reweigh::Mix(state.demand_of(indices))),
            Refill::FirstFit | Refill::Capped => None,
        };
        let limits = state.pools[pool].snapshot();
        // (pod, where it must stay, its place among its NodeClaim's pods as a share of them).
        let mut moving: Vec<(usize, Requirements, f64)> = Vec::new();
        for &index in indices {
            let claim = &state.claims[index as usize];
            let mut pods = claim.pods.clone();
            pods.sort_by_key(|&pod| rank[pod]);
            let count = pods.len() as f64;
            for (position, pod) in pods.into_iter().enumerate() {
                let pins = state.pins(&plans[pod], &claim.requirements);
                moving.push((pod, pins, (position as f64 + 0.5) / count));
            }
        }
        if how == Refill::Mix {
            // Interleaved, so that every NodeClaim opened gets its share of each.
            moving.sort_by(|(a, _, x), (b, _, y)| x.total_cmp(y).then(rank[*a].cmp(&rank[*b])));
        } else {
            moving.sort_by_key(|(pod, _, _)| rank[*pod]);
        }
        for &index in indices {
            state.take_out(index as usize, plans);
        }
        let first_new = state.claims.len();
        let placed = moving.iter().all(|(pod, pins, _)| {
            state.place_again(*pod, &plans[*pod], pins, pool, first_new, policy)
        });
        state.cost_aware = cost_aware;
        state.reweigh = None;
        let after: f64 = (first_new..state.claims.len())
            .map(|i| state.price(i))
            .sum();
        if placed && after < before - SAVING {
            return true;
        }
        for index in first_new..state.claims.len() {
            state.take_out(index, plans);
        }
        state.claims.truncate(first_new);
        for &index in indices {
            state.put_in(index as usize, plans);
        }
        state.pools[pool].restore(limits);
        false
    }
}

impl State<'_> {
    /// Whether the improvement pass may move the pod (see the module documentation).
    fn movable(&self, plan: &PodPlan<'_>) -> bool {
        let topology = &self.topology;
        !plan.selected_by.iter().any(|&g| {
            topology.is_affinity(g) || (topology.is_hostname(g) && topology.has_node_filter(g))
        }) && !plan
            .every_owned()
            .any(|g| topology.is_hostname(g) && topology.is_affinity(g))
    }

    /// Whether the planned NodeClaim `index` is of NodePool `pool`, still planned, and holds
    /// only pods that may move (`movable`, by pod): whether the pass may empty it.
    fn refillable(&self, index: usize, pool: usize, movable: &[bool]) -> bool {
        let claim = &self.claims[index];
        claim.pool == pool && !claim.retired && claim.pods.iter().all(|&pod| movable[pod])
    }

    /// The requirements of the pod's NodeClaim (`requirements`) on every key other than
    /// hostname that a rule the pod is involved in names: where it must stay.
    fn pins(&self, plan: &PodPlan<'_>, requirements: &Requirements) -> Requirements {
        let topology = &self.topology;
        let keys = plan
            .every_owned()
            .chain(plan.selected_by.iter().copied())
            .filter(|&g| !topology.is_hostname(g))
            .map(|g| topology.key(g))
            .chain(
                plan.inverse_owned
                    .iter()
                    .chain(&plan.inverse_selecting)
                    .filter(|&&g| !topology.inverse_is_hostname(g))
                    .map(|&g| topology.inverse_key(g)),
            );
        let mut pins = Requirements::new();
        for key in keys {
            if let Some(requirement) = requirements.get(key) {
                pins.add(requirement.clone());
            }
        }
        pins
    }

    /// What the planned NodeClaim `index` costs an hour if it launches as its cheapest
    /// option (as `PlannedNodeClaim::cheapest_price` reads it).
    pub(super) fn price(&mut self, index: usize) -> f64 {
        self.cheapest(index)
            .map_or(f64::INFINITY, |(_, price)| price)
    }

    /// The cheapest option of the planned NodeClaim `index` and its price.
    fn cheapest(&mut self, index: usize) -> Option<(usize, f64)> {
        let claim = &self.claims[index];
        if claim.priced.is_some() {
            return claim.priced;
        }
        let pool = &mut self.pools[claim.pool];
        let priced = pool
            .catalog
            .prices(&claim.requirements, &self.dims)
            .order
            .iter()
            .find(|(i, _)| claim.options.contains(*i as usize))
            .map(|&(i, price)| (i as usize, price));
        self.claims[index].priced = priced;
        priced
    }

    /// The price of the planned NodeClaim `index` and how much of its cheapest option its
    /// most used resource uses (a share).
    fn usage(&mut self, index: usize) -> Option<(f64, f64)> {
        let (price, shares) = self.shares(index)?;
        Some((price, shares.into_iter().fold(0.0, f64::max)))
    }

    /// The price of the planned NodeClaim `index` and how much of each resource of its
    /// cheapest option its pods use (shares, at most 1; 0 of a resource the option has none
    /// of), in [`Fixed`]'s order: cpu, memory, ephemeral storage, pods.
    fn shares(&mut self, index: usize) -> Option<(f64, [f64; 4])> {
        let (cheapest, price) = self.cheapest(index)?;
        let claim = &self.claims[index];
        let has = self.pools[claim.pool]
            .catalog
            .allocatable(cheapest)
            .amounts();
        let wants = claim.demand.fixed.amounts();
        let shares = std::array::from_fn(|r| {
            if has[r] > 0 {
                (wants[r] as f64 / has[r] as f64).min(1.0)
            } else {
                0.0
            }
        });
        Some((price, shares))
    }

    /// What the pods of the planned NodeClaim `index` would cost on the type that holds them
    /// for least among those that cannot hold them all on one node, fractions of a node
    /// allowed, burstable types left out as cost caps leave them out: about the least its
    /// split can cost. Not a bound (nodes of several types can hold a mix for less than any
    /// one type), but one that skips, without placing their pods again, the NodeClaims whose
    /// split cannot gain: most are small nodes already full on one resource.
    fn split_estimate(&mut self, index: usize) -> f64 {
        let whole = self.claims[index].demand.fixed;
        self.estimate(index, &whole, true)
    }

    /// Of the NodeClaims `partners`, how many of the first `limit` (one at least) to mix with
    /// the planned NodeClaim `leader` so that the estimate of what the mix costs (see
    /// [`Self::estimate`]) saves the most on what they cost now; `None` when no mix saves.
    fn best_mix(
        &mut self,
        leader: usize,
        partners: impl Iterator<Item = usize>,
        limit: usize,
    ) -> Option<usize> {
        let mut whole = self.claims[leader].demand.fixed;
        let mut now = self.price(leader);
        let mut best = None;
        let mut most = SAVING;
        for (count, partner) in partners.take(limit).enumerate() {
            whole = whole.plus(&self.claims[partner].demand.fixed);
            now += self.price(partner);
            let saving = now - self.estimate(leader, &whole, false);
            if saving > most {
                most = saving;
                best = Some(count + 1);
            }
        }
        best
    }

    /// What pods requesting `whole` would cost on the type that holds them for least at the
    /// planned NodeClaim `index`'s requirements, fractions of a node allowed, burstable types
    /// left out as cost caps leave them out; only among the types that cannot hold them all
    /// on one node when `smaller`.
    fn estimate(&mut self, index: usize, whole: &Fixed, smaller: bool) -> f64 {
        let claim = &self.claims[index];
        self.pools[claim.pool].least_cost(&claim.requirements, &self.dims, whole, smaller)
    }

    /// What the pods of the planned NodeClaims `indices` request together.
    fn demand_of(&self, indices: &[u32]) -> Fixed {
        indices.iter().fold(Fixed::ZERO, |whole, &i| {
            whole.plus(&self.claims[i as usize].demand.fixed)
        })
    }

    /// Takes the planned NodeClaim `index` out of the plan, its pods with it.
    fn take_out(&mut self, index: usize, plans: &[PodPlan<'_>]) {
        let claim = &mut self.claims[index];
        let host = claim.host();
        for &pod in &claim.pods {
            let plan = &plans[pod];
            self.topology
                .unrecord_hostname(&plan.selected_by, &plan.inverse_owned, host);
        }
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        self.claim_order.remove(&(claim.pods.len(), index));
        self.pools[claim.pool].release(&claim.reserved);
        claim.retired = true;
    }

    /// Puts back a planned NodeClaim [`Self::take_out`] took out (its NodePool's limits are
    /// restored by the caller).
    fn put_in(&mut self, index: usize, plans: &[PodPlan<'_>]) {
        let claim = &mut self.claims[index];
        let host = claim.host();
        for &pod in &claim.pods {
            let plan = &plans[pod];
            self.topology
                .record_hostname(&plan.selected_by, &plan.inverse_owned, host);
        }
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        self.claim_order.insert((claim.pods.len(), index));
        claim.retired = false;
    }

    /// Places the pod again, on a planned NodeClaim of NodePool `pool` from `first_new` on or
    /// a new one, within `pins`, relaxing its preferences as its first placement did.
    fn place_again(
        &mut self,
        pod: usize,
        plan: &PodPlan<'_>,
        pins: &Requirements,
        pool: usize,
        first_new: usize,
        policy: PreferencePolicy,
    ) -> bool {
        let from = u32::try_from(first_new).unwrap_or(u32::MAX);
        let selected_by = hostname(&self.topology, &plan.selected_by, false);
        let inverse_selecting = hostname(&self.topology, &plan.inverse_selecting, true);
        let inverse_owned = hostname(&self.topology, &plan.inverse_owned, true);
        let mut relaxation = match policy {
            PreferencePolicy::Respect => Relaxation::default(),
            PreferencePolicy::Ignore => Relaxation::ignoring_preferences(&plan.relaxable),
        };
        loop {
            let mut constraints = plan.constraints(&relaxation);
            if constraints.requirements.is_compatible(pins, self.allow) {
                constraints.requirements.add_all(pins);
                // Rules on other keys hold: the pod keeps its domains of their keys.
                let owned = hostname(&self.topology, &constraints.owned, false);
                let candidate = Candidate {
                    constraints: &constraints,
                    topology: PodTopology {
                        owned: &owned,
                        selected_by: &selected_by,
                        inverse_selecting: &inverse_selecting,
                        inverse_owned: &inverse_owned,
                        strict: &constraints.strict,
                        cheaper_zones: None,
                    },
                    demand: &plan.demand,
                    host_ports: &plan.pod.host_ports,
                    tolerations: &plan.pod.tolerations,
                    class: None,
                    allowed: &[],
                };
                if self
                    .add_to_claim(pod, &candidate, Some(pool), from, self.cost_aware)
                    .is_ok()
                    || self.launch(pool, pod, plan, &candidate).is_ok()
                {
                    return true;
                }
            }
            match relaxation.next(&plan.relaxable) {
                Some(next) => relaxation = next,
                None => return false,
            }
        }
    }
}

/// The hostname groups of `groups` (inverse groups when `inverse`).
fn hostname(topology: &Topology, groups: &[GroupId], inverse: bool) -> Vec<GroupId> {
    groups
        .iter()
        .copied()
        .filter(|&g| {
            if inverse {
                topology.inverse_is_hostname(g)
            } else {
                topology.is_hostname(g)
            }
        })
        .collect()
}
