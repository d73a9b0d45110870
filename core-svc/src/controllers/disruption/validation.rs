//! The re-check of a consolidation command before it starts (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/validation.go`). A command decided at `T` is held and, on the first pass at
//! `T + 15 s` or later, [`validate`]d against a fresh snapshot; it starts only if nothing it
//! relied on changed, otherwise it is abandoned with the kind of change:
//!
//! 1. **churn**: every candidate must still be a consolidation candidate (still a disruption
//!    candidate of the graceful class, not empty, still `Consolidatable`, its labels and
//!    instance type still known) and its pods must not have changed since `T`: no
//!    `lastPodEventTime` after `T`, and not a NodeClaim recreated under the same name;
//! 2. **budget**: its NodePool's budget must still allow all of the command's candidates;
//! 3. **scheduling**: simulating their removal again must give the same shape: every pod
//!    placed, no new node when the command replaces nothing, exactly one when it replaces, and
//!    the command's instance types a subset of the new simulation's options (the simulation
//!    does no price filtering, so its options are a superset of anything still sensible).
//!
//! Differences from upstream: a candidate nominated for pending pods meanwhile is no longer a
//! candidate at all here, so it is churn, where upstream calls it a budget failure; a pod event
//! on a candidate after the decision is churn (upstream re-simulates and may go ahead): the
//! node was not idle, and the next pass decides again on the new state. The pod events come
//! from the `Consolidatable` controller, whose write deduplication window (10 s) is shorter
//! than the validation delay, so an event before the check is on the NodeClaim by then.

use std::collections::{BTreeMap, BTreeSet};

use super::consolidation::{ConsolidationCandidate, consolidation_candidates, option_names};
use super::{Command, MethodInput, Rejected, RejectionKind};

fn rejected(kind: RejectionKind, message: String) -> Rejected {
    Rejected { kind, message }
}

/// Whether `command` may start now (see the module documentation); `Ok` carries it unchanged.
pub fn validate(command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
    let (candidates, _) = consolidation_candidates(input.candidates, input.catalogues, input.now);
    let current = still_candidates(command, &candidates)?;
    within_budgets(command, &current, input)?;
    same_simulation(command, &current, input)?;
    Ok(command.clone())
}

/// The command's candidates as they are now, or churn.
fn still_candidates<'x, 'c, 'a>(
    command: &Command,
    candidates: &'x [ConsolidationCandidate<'c, 'a>],
) -> Result<Vec<&'x ConsolidationCandidate<'c, 'a>>, Rejected> {
    if command.candidates.is_empty() {
        return Err(rejected(RejectionKind::Churn, "no candidates".to_owned()));
    }
    let mut current = Vec::with_capacity(command.candidates.len());
    for name in &command.candidates {
        let Some(candidate) = candidates
            .iter()
            .find(|candidate| candidate.node_claim() == name)
        else {
            return Err(rejected(
                RejectionKind::Churn,
                format!("NodeClaim {name} is no longer a consolidation candidate"),
            ));
        };
        let claim = candidate.candidate.node_claim;
        let recreated = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|created| created.0 > command.decided_at);
        if recreated {
            return Err(rejected(
                RejectionKind::Churn,
                format!("NodeClaim {name} was recreated since the decision"),
            ));
        }
        let pod_event = claim
            .status
            .as_ref()
            .and_then(|status| status.last_pod_event_time.as_ref())
            .map(|time| time.0)
            .filter(|time| *time > command.decided_at);
        if let Some(time) = pod_event {
            return Err(rejected(
                RejectionKind::Churn,
                format!(
                    "the pods of NodeClaim {name} changed at {} after the decision",
                    crate::disruption::explain::utc(time)
                ),
            ));
        }
        current.push(candidate);
    }
    Ok(current)
}

fn within_budgets(
    command: &Command,
    current: &[&ConsolidationCandidate<'_, '_>],
    input: &MethodInput<'_>,
) -> Result<(), Rejected> {
    let mut wanted: BTreeMap<&str, u32> = BTreeMap::new();
    for candidate in current {
        *wanted.entry(candidate.node_pool()).or_default() += 1;
    }
    for (pool, count) in wanted {
        let allowed = input.budgets.get(pool).copied().unwrap_or(0);
        if allowed < count {
            return Err(rejected(
                RejectionKind::Budget,
                format!(
                    "the disruption budget of NodePool {pool} allows {allowed} more node(s), the \
                     command needs {count} (candidates {})",
                    command.candidates.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn same_simulation(
    command: &Command,
    current: &[&ConsolidationCandidate<'_, '_>],
    input: &MethodInput<'_>,
) -> Result<(), Rejected> {
    let nodes: Vec<&str> = current.iter().map(|candidate| candidate.node()).collect();
    let simulation = input.simulator.simulate_consolidation(&nodes);
    let scheduling = |message: String| Err(rejected(RejectionKind::Scheduling, message));
    if !simulation.all_scheduled {
        return scheduling(format!(
            "{} pod(s) would no longer schedule elsewhere: {}",
            simulation.unschedulable.len(),
            simulation.first_reason()
        ));
    }
    match (
        command.replacements.as_slice(),
        simulation.new_node_claims.as_slice(),
    ) {
        ([], []) => Ok(()),
        ([], found) => scheduling(format!(
            "the pods would now need {} new node(s), the command deletes only",
            found.len()
        )),
        ([_], []) => scheduling(
            "the pods now fit without a replacement: a better consolidation exists".to_owned(),
        ),
        ([expected], [found]) => {
            let offered: BTreeSet<&str> = option_names(found).into_iter().collect();
            let missing: Vec<&str> = option_names(expected)
                .into_iter()
                .filter(|name| !offered.contains(name))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                scheduling(format!(
                    "the replacement could no longer be of instance type(s) {}",
                    missing.join(", ")
                ))
            }
        }
        (_, found) => scheduling(format!("the pods would now need {} new nodes", found.len())),
    }
}
