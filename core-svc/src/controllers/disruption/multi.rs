//! Multi-node consolidation (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/multinodeconsolidation.go`): remove as many nodes as possible at once, replacing them by at most one cheaper node.
//!
//! 1. The consolidation candidates ([`consolidation_candidates`]), highest savings ratio first,
//!    are filtered by budget in that order, each taken one counting against its NodePool's
//!    allowance, and the first [`MAX_CANDIDATES`] kept.
//! 2. A binary search over the prefix length in `[2, len]` ([`largest_prefix`]) finds the
//!    longest prefix that consolidates: a prefix that does moves the search up, one that does
//!    not moves it down. A replacement must also pass [`filter_out_same_instance_type`]: if
//!    one of the candidates' instance types is among its options, it must be cheaper than the
//!    cheapest candidate of that type, otherwise deleting the others and keeping that node
//!    disrupts less for the same saving.
//! 3. The command found waits [`VALIDATION_DELAY`](super::VALIDATION_DELAY) and is validated
//!    ([`super::validation`]).
//!
//! Upstream bounds the search by a one-minute timeout; here a deterministic work limit
//! ([`WORK_LIMIT`], in units proportional to the simulations' cost) does, so that a pass decides the same on every machine
//! and in the simulator: once a probe would exceed it, the longest prefix found so far is the
//! answer. The first probe always runs.

use karpenter_api::DisruptionReason;

use super::consolidation::{
    Consolidation, ConsolidationCandidate, ConsolidationOptions, compute_consolidation,
    consolidation_candidates, keep_cheaper,
};
use super::{Command, Method, MethodInput, MethodOutcome, Rejected, validation};
use core_domain::scheduler::PlannedNodeClaim;

/// The most candidates one multi-node command considers (upstream: 100).
pub const MAX_CANDIDATES: usize = 100;

/// How much simulation one multi-node pass may do, in work units: a simulation costs one unit
/// per node of the cluster (the scheduler's set-up, which dominates) plus one per pod and node
/// it moves. About 10 µs a unit on the benchmark machine: 40,000 units keep the search under
/// half a second; on 1,000 nodes of 20 pods the whole search (7 probes of ~2,000 units) fits,
/// on 5,000 nodes about six probes do.
pub const WORK_LIMIT: usize = 40_000;

/// Multi-node consolidation.
#[derive(Debug, Clone)]
pub struct MultiNodeConsolidation {
    options: ConsolidationOptions,
    work_limit: usize,
}

impl Default for MultiNodeConsolidation {
    fn default() -> Self {
        Self::new(ConsolidationOptions::default())
    }
}

impl MultiNodeConsolidation {
    /// Multi-node consolidation with `options` and the default [`WORK_LIMIT`].
    pub fn new(options: ConsolidationOptions) -> Self {
        Self {
            options,
            work_limit: WORK_LIMIT,
        }
    }

    /// The same with another work limit (in the units of [`WORK_LIMIT`]).
    pub fn with_work_limit(mut self, work_limit: usize) -> Self {
        self.work_limit = work_limit;
        self
    }
}

impl Method for MultiNodeConsolidation {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Underutilized
    }

    fn name(&self) -> &'static str {
        "multi"
    }

    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
        let (candidates, observations) =
            consolidation_candidates(input.candidates, input.catalogues, input.now);
        let chosen = within_budgets(&candidates, input);
        // Building the simulation is only worth it with something to simulate.
        let cluster = if chosen.len() < 2 {
            0
        } else {
            input.simulator.existing_nodes()
        };
        let cumulative: Vec<usize> = chosen
            .iter()
            .scan(0, |total, candidate| {
                *total += candidate.pods() + 1;
                Some(*total)
            })
            .collect();
        let cost = |len: usize| cluster + cumulative.get(len.wrapping_sub(1)).copied().unwrap_or(0);
        let command = largest_prefix(chosen.len(), self.work_limit, cost, |len| {
            let prefix = &chosen[..len];
            consolidate_prefix(input, prefix, self.options)
        });
        MethodOutcome {
            commands: command.into_iter().collect(),
            observations,
            needs_validation: true,
        }
    }

    fn validate(&self, command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
        validation::validate(command, input)
    }
}

/// The candidates, in order, that their NodePools' budgets let go together, at most
/// [`MAX_CANDIDATES`].
fn within_budgets<'x, 'c, 'a>(
    candidates: &'x [ConsolidationCandidate<'c, 'a>],
    input: &MethodInput<'_>,
) -> Vec<&'x ConsolidationCandidate<'c, 'a>> {
    let mut budgets = input.budgets.clone();
    let mut chosen = Vec::new();
    for candidate in candidates {
        if chosen.len() == MAX_CANDIDATES {
            break;
        }
        match budgets.get_mut(candidate.node_pool()) {
            Some(allowed) if *allowed > 0 => {
                *allowed -= 1;
                chosen.push(candidate);
            }
            _ => {}
        }
    }
    chosen
}

/// The command consolidating `prefix`, if it consolidates (a delete, or a replacement that
/// survives [`filter_out_same_instance_type`]).
fn consolidate_prefix(
    input: &MethodInput<'_>,
    prefix: &[&ConsolidationCandidate<'_, '_>],
    options: ConsolidationOptions,
) -> Option<Command> {
    let consolidation = match compute_consolidation(input.simulator, prefix, options) {
        Consolidation::Replace(mut replacement) => {
            if !filter_out_same_instance_type(&mut replacement, prefix) {
                return None;
            }
            Consolidation::Replace(replacement)
        }
        other => other,
    };
    consolidation.command(prefix, input.now)
}

/// Upstream `filterOutSameInstanceType`: when the replacement may be of an instance type some
/// candidates have, only options cheaper than the cheapest such candidate are kept. Answers
/// whether any option is left (and minValues still hold).
pub fn filter_out_same_instance_type(
    replacement: &mut PlannedNodeClaim,
    candidates: &[&ConsolidationCandidate<'_, '_>],
) -> bool {
    let max_price = replacement
        .instance_types
        .iter()
        .flat_map(|option| {
            candidates
                .iter()
                .filter(move |candidate| candidate.instance_type.name() == option.name())
                .map(|candidate| candidate.price)
        })
        .min_by(f64::total_cmp);
    if let Some(max_price) = max_price
        && keep_cheaper(replacement, max_price).is_err()
    {
        return false;
    }
    !replacement.instance_types.is_empty()
}

/// The longest prefix length in `[2, len]` for which `consolidate` answers a command, found by
/// binary search as upstream (`firstNConsolidationOption`), with the command. `cost(n)` is the
/// work of simulating a prefix of `n`; a probe that would take the work past `work_limit` is
/// not made (the first always is), and the best found so far is the answer.
pub fn largest_prefix<T>(
    len: usize,
    work_limit: usize,
    cost: impl Fn(usize) -> usize,
    mut consolidate: impl FnMut(usize) -> Option<T>,
) -> Option<T> {
    if len < 2 {
        return None;
    }
    // Indices of the last candidate of the prefix, as upstream: prefix = [0, mid].
    let (mut low, mut high) = (1, len - 1);
    let mut best = None;
    let mut spent = 0usize;
    let mut probes = 0usize;
    while low <= high {
        let mid = low + (high - low) / 2;
        let work = cost(mid + 1);
        if probes > 0 && spent.saturating_add(work) > work_limit {
            tracing::debug!(
                spent,
                work,
                work_limit,
                "multi-node consolidation stopped at its work limit"
            );
            break;
        }
        spent = spent.saturating_add(work);
        probes += 1;
        match consolidate(mid + 1) {
            Some(found) => {
                best = Some(found);
                low = mid + 1;
            }
            None => high = mid - 1,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn search(len: usize, consolidates_up_to: usize) -> (Option<usize>, Vec<usize>) {
        let probed = RefCell::new(Vec::new());
        let found = largest_prefix(
            len,
            usize::MAX,
            |_| 1,
            |n| {
                probed.borrow_mut().push(n);
                (n <= consolidates_up_to).then_some(n)
            },
        );
        (found, probed.into_inner())
    }

    #[test]
    fn the_search_finds_the_largest_prefix_that_consolidates() {
        for len in 2..=40 {
            for up_to in 0..=len {
                let (found, _) = search(len, up_to);
                let expected = (up_to >= 2).then_some(up_to);
                assert_eq!(found, expected, "len {len}, consolidates up to {up_to}");
            }
        }
    }

    #[test]
    fn the_search_takes_logarithmically_many_probes() {
        let (found, probed) = search(100, 37);
        assert_eq!(found, Some(37));
        assert!(probed.len() <= 7, "{probed:?}");
        assert_eq!(probed[0], 51, "the first probe is the middle prefix");
    }

    #[test]
    fn fewer_than_two_candidates_are_single_node_consolidations_business() {
        assert_eq!(search(1, 1), (None, vec![]));
        assert_eq!(search(0, 0), (None, vec![]));
    }

    #[test]
    fn the_work_limit_stops_the_search_with_the_best_prefix_so_far() {
        let probed = RefCell::new(Vec::new());
        // Each node costs 10; the limit allows the first probe (51 nodes: 510) and one of 26.
        let found = largest_prefix(
            100,
            800,
            |n| n * 10,
            |n| {
                probed.borrow_mut().push(n);
                (n <= 30).then_some(n)
            },
        );
        assert_eq!(probed.into_inner(), [51, 26]);
        assert_eq!(found, Some(26));
    }

    #[test]
    fn the_first_probe_runs_whatever_the_limit() {
        let found = largest_prefix(4, 0, |n| n, Some);
        assert_eq!(found, Some(3));
    }
}
