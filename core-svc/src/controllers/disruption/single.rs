//! Single-node consolidation (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/singlenodeconsolidation.go`): the first candidate that can be deleted, or replaced by one cheaper node.
//!
//! The consolidation candidates ([`consolidation_candidates`], highest savings ratio first) are
//! interleaved round-robin across NodePools, NodePools by name, so one large NodePool does not
//! starve the others. Each candidate whose NodePool's budget allows one more disruption is
//! simulated alone ([`compute_consolidation`]); the first that consolidates is the command, to
//! be validated ([`super::validation`]); every one that does not gets an observation saying
//! why, for its explanation.
//!
//! Upstream bounds a pass by a three-minute timeout and tries the NodePools it did not reach
//! first on the next pass. Here a deterministic work limit ([`WORK_LIMIT`], proportional to
//! the simulations' cost) bounds it, and the candidates a pass tried in vain go after the others on the following
//! passes until every candidate has had its turn (a "round"): with one large NodePool,
//! upstream's NodePool rotation would retry the same first nodes on every pass and never reach
//! the rest. That memory is a hint only: lost on a restart, the next pass starts a new round.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use karpenter_api::DisruptionReason;

use super::consolidation::{
    Consolidation, ConsolidationCandidate, ConsolidationOptions, compute_consolidation,
    consolidation_candidates,
};
use super::{Command, Method, MethodInput, MethodOutcome, Rejected, validation};

/// How much simulation one single-node pass may do, in the units of
/// [`multi::WORK_LIMIT`](super::multi::WORK_LIMIT): a simulation costs one per node of the
/// cluster plus one per pod moved, plus one. About 30 candidates of a 1,000-node cluster
/// (a quarter of a second), five of a 5,000-node one.
pub const WORK_LIMIT: usize = 30_000;

/// Single-node consolidation.
#[derive(Debug)]
pub struct SingleNodeConsolidation {
    options: ConsolidationOptions,
    work_limit: usize,
    /// NodeClaims tried in vain in the current round.
    tried: Mutex<BTreeSet<String>>,
}

impl Default for SingleNodeConsolidation {
    fn default() -> Self {
        Self::new(ConsolidationOptions::default())
    }
}

impl SingleNodeConsolidation {
    /// Single-node consolidation with `options` and the default [`WORK_LIMIT`].
    pub fn new(options: ConsolidationOptions) -> Self {
        Self {
            options,
            work_limit: WORK_LIMIT,
            tried: Mutex::new(BTreeSet::new()),
        }
    }

    /// The same with another work limit (in the units of [`WORK_LIMIT`]).
    pub fn with_work_limit(mut self, work_limit: usize) -> Self {
        self.work_limit = work_limit;
        self
    }

    fn tried(&self) -> MutexGuard<'_, BTreeSet<String>> {
        // A set of names is coherent whatever a panicking holder did.
        self.tried.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The NodeClaims that go last on the next pass, after a pass over `ordered` (the names of
/// the candidates not tried in the current round, `fresh` of them, then those that were) that
/// left `tried` (the round's memory before it) and decided `pass`.
pub fn next_tried(
    tried: &BTreeSet<String>,
    ordered: &[&str],
    fresh: usize,
    pass: &SinglePass,
) -> BTreeSet<String> {
    if pass.command.is_some() || !pass.exhausted {
        // A command found, or every candidate had its turn: a new round starts.
        return BTreeSet::new();
    }
    if pass.reached > fresh {
        // Every candidate of the round had its turn and the pass went on into the next round:
        // only what it tried in that one counts.
        let next_round: BTreeSet<&str> = ordered.iter().skip(fresh).copied().collect();
        return pass
            .tried
            .iter()
            .filter(|name| next_round.contains(name.as_str()))
            .cloned()
            .collect();
    }
    tried.iter().chain(&pass.tried).cloned().collect()
}

/// `candidates` (sorted) interleaved across NodePools: the first of each NodePool (by name),
/// then the second of each, and so on.
pub fn round_robin<'x, 'c, 'a>(
    candidates: &'x [ConsolidationCandidate<'c, 'a>],
) -> Vec<&'x ConsolidationCandidate<'c, 'a>> {
    let mut by_pool: BTreeMap<&str, Vec<&ConsolidationCandidate<'c, 'a>>> = BTreeMap::new();
    for candidate in candidates {
        by_pool
            .entry(candidate.node_pool())
            .or_default()
            .push(candidate);
    }
    let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
    let mut interleaved = Vec::with_capacity(candidates.len());
    for index in 0..longest {
        for pool in by_pool.values() {
            if let Some(candidate) = pool.get(index) {
                interleaved.push(*candidate);
            }
        }
    }
    interleaved
}

/// What one single-node pass decided.
#[derive(Debug, Clone, Default)]
pub struct SinglePass {
    /// The command, if a candidate consolidates.
    pub command: Option<Command>,
    /// Why the candidates tried did not.
    pub observations: Vec<crate::disruption::Observation>,
    /// The NodeClaims tried in vain.
    pub tried: Vec<String>,
    /// Whether the work limit ended the pass before every candidate had its turn.
    pub exhausted: bool,
    /// How many of the candidates had their turn (tried, or passed over for their budget).
    pub reached: usize,
}

/// Tries `ordered` candidates one at a time (see the module documentation).
pub fn first_consolidation(
    input: &MethodInput<'_>,
    ordered: &[&ConsolidationCandidate<'_, '_>],
    options: ConsolidationOptions,
    work_limit: usize,
) -> SinglePass {
    let mut pass = SinglePass::default();
    let mut spent = 0usize;
    let mut cluster = None;
    for (index, candidate) in ordered.iter().enumerate() {
        pass.reached = index;
        let allowed = input
            .budgets
            .get(candidate.node_pool())
            .copied()
            .unwrap_or(0);
        if allowed == 0 {
            continue;
        }
        // Asked only now: it builds the simulation, pointless without a candidate.
        let cluster = *cluster.get_or_insert_with(|| input.simulator.existing_nodes());
        let work = cluster + candidate.pods() + 1;
        if spent > 0 && spent.saturating_add(work) > work_limit {
            pass.exhausted = true;
            break;
        }
        spent = spent.saturating_add(work);
        match compute_consolidation(input.simulator, &[candidate], options) {
            Consolidation::NoOp(why) => {
                pass.observations
                    .push(why.observation(candidate.node(), input.now));
                pass.tried.push(candidate.node_claim().to_owned());
            }
            decided => {
                pass.command = decided.command(&[candidate], input.now);
                pass.reached = index + 1;
                return pass;
            }
        }
    }
    if !pass.exhausted {
        pass.reached = ordered.len();
    }
    pass
}

impl Method for SingleNodeConsolidation {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Underutilized
    }

    fn name(&self) -> &'static str {
        "single"
    }

    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
        let (candidates, mut observations) =
            consolidation_candidates(input.candidates, input.catalogues, input.now);
        let interleaved = round_robin(&candidates);
        let mut tried = self.tried();
        let (fresh, retried): (Vec<_>, Vec<_>) = interleaved
            .into_iter()
            .partition(|candidate| !tried.contains(candidate.node_claim()));
        let fresh_count = fresh.len();
        let ordered: Vec<_> = fresh.into_iter().chain(retried).collect();
        let pass = first_consolidation(input, &ordered, self.options, self.work_limit);
        if pass.exhausted {
            tracing::debug!(
                tried = pass.tried.len(),
                "single-node consolidation stopped at its work limit; the others go first next time"
            );
        }
        let names: Vec<&str> = ordered
            .iter()
            .map(|candidate| candidate.node_claim())
            .collect();
        *tried = next_tried(&tried, &names, fresh_count, &pass);
        observations.extend(pass.observations);
        MethodOutcome {
            commands: pass.command.into_iter().collect(),
            observations,
            needs_validation: true,
        }
    }

    fn validate(&self, command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
        validation::validate(command, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::disruption::consolidation::tests::with_candidates_in;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn pass(tried: &[&str], reached: usize, exhausted: bool) -> SinglePass {
        SinglePass {
            tried: tried.iter().map(|name| (*name).to_owned()).collect(),
            reached,
            exhausted,
            ..SinglePass::default()
        }
    }

    #[test]
    fn candidates_alternate_between_node_pools_in_name_order() {
        let specs = [
            ("b-pool", "on-demand", 5.0),
            ("b-pool", "on-demand", 4.0),
            ("a-pool", "on-demand", 3.0),
            ("b-pool", "on-demand", 2.0),
            ("a-pool", "on-demand", 1.0),
        ];
        with_candidates_in(&specs, |candidates| {
            let owned: Vec<ConsolidationCandidate<'_, '_>> =
                candidates.iter().map(|c| (*c).clone()).collect();
            let order: Vec<&str> = round_robin(&owned).iter().map(|c| c.node()).collect();
            assert_eq!(order, ["n2", "n0", "n4", "n1", "n3"]);
        });
    }

    #[test]
    fn a_pass_that_finishes_or_decides_starts_a_new_round() {
        let tried = set(&["a"]);
        assert!(
            next_tried(
                &tried,
                &["b", "c", "a"],
                2,
                &pass(&["b", "c", "a"], 3, false)
            )
            .is_empty()
        );
        let mut decided = pass(&["b"], 2, false);
        decided.command = Some(Command::new(
            karpenter_api::DisruptionReason::Underutilized,
            vec!["c".into()],
            vec![],
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(next_tried(&tried, &["b", "c", "a"], 2, &decided).is_empty());
    }

    #[test]
    fn an_exhausted_pass_sends_what_it_tried_to_the_back() {
        let tried = set(&["a"]);
        let next = next_tried(&tried, &["b", "c", "d", "a"], 3, &pass(&["b"], 1, true));
        assert_eq!(next, set(&["a", "b"]));
    }

    #[test]
    fn a_pass_running_into_the_next_round_remembers_only_that_round() {
        let tried = set(&["a", "b"]);
        // c was fresh; the pass went on to a (the next round) before the limit.
        let next = next_tried(&tried, &["c", "a", "b"], 1, &pass(&["c", "a"], 2, true));
        assert_eq!(next, set(&["a"]));
    }
}
