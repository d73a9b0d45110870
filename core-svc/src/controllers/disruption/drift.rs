//! Drift (upstream kubernetes-sigs/karpenter `pkg/controllers/disruption/drift.go`): replace
//! nodes whose NodeClaim is `Drifted=True`.
//!
//! The candidates (eventual class: a NodeClaim with `terminationGracePeriod` goes despite
//! blocking pods) whose NodeClaim is drifted and whose NodePool is not static are taken empty
//! ones first, then oldest drift first (the `Drifted` condition's `lastTransitionTime`), ties by
//! node name ([`order`]):
//!
//! 1. the empty ones, as many of each NodePool as its budget allows, make one delete command:
//!    their pods need no new place, so nothing is launched;
//! 2. otherwise the first non-empty one whose NodePool has budget left and whose pods all find
//!    a place in the simulation ([`Simulator::simulate`](super::simulate::Simulator::simulate))
//!    makes one command, replaced by the simulation's new NodeClaims (several are allowed); a
//!    candidate whose pods would not all schedule is passed over with an observation naming
//!    them and why, and the next is tried.
//!
//! No validation delay: drift is not a cost decision that a few seconds could change. One
//! command per pass, so non-empty drifted nodes roll one at a time per pass; the budgets bound
//! how many are in flight.

use std::cmp::Ordering;

use jiff::Timestamp;
use karpenter_api::nodeclaim::CONDITION_DRIFTED;
use karpenter_api::{ConditionStatus, DisruptionReason, condition};

use super::emptiness::within_budgets;
use super::{Command, Method, MethodInput, MethodOutcome};
use crate::disruption::{Candidate, Observation, Observed};

/// The drift method.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drift;

/// When the candidate's NodeClaim became drifted; `None` when it is not `Drifted=True`.
pub fn drifted_since(candidate: &Candidate<'_>) -> Option<Timestamp> {
    candidate
        .node_claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, CONDITION_DRIFTED))
        .filter(|drifted| drifted.status == ConditionStatus::True)
        .map(|drifted| drifted.last_transition_time.0)
}

/// Whether drift replaces `candidate`: drifted, of a NodePool that is not static.
pub fn qualifies(candidate: &Candidate<'_>) -> bool {
    drifted_since(candidate).is_some() && !candidate.node_pool.is_static()
}

/// Drift's order: empty first, then oldest drift, then node name.
pub fn order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    (!a.is_empty())
        .cmp(&!b.is_empty())
        .then_with(|| drifted_since(a).cmp(&drifted_since(b)))
        .then_with(|| a.name.cmp(b.name))
}

impl Method for Drift {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Drifted
    }

    fn name(&self) -> &'static str {
        "drift"
    }

    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
        let mut drifted: Vec<&Candidate<'_>> = input
            .candidates
            .iter()
            .filter(|candidate| qualifies(candidate))
            .collect();
        drifted.sort_by(|a, b| order(a, b));
        let mut outcome = MethodOutcome::default();

        let empty = within_budgets(
            drifted
                .iter()
                .copied()
                .filter(|candidate| candidate.is_empty()),
            input.budgets,
        );
        if !empty.is_empty() {
            outcome.commands.push(Command::new(
                DisruptionReason::Drifted,
                empty
                    .iter()
                    .map(|candidate| candidate.node_claim_name().to_owned())
                    .collect(),
                Vec::new(),
                input.now,
            ));
            return outcome;
        }

        for candidate in drifted.iter().filter(|candidate| !candidate.is_empty()) {
            let allowed = input
                .budgets
                .get(candidate.node_pool_name())
                .copied()
                .unwrap_or(0);
            if allowed == 0 {
                continue;
            }
            let simulation = input.simulator.simulate(&[candidate.name]);
            if !simulation.all_scheduled {
                tracing::debug!(node = candidate.name, unschedulable = ?simulation.unschedulable, "drifted node's pods would not all schedule");
                outcome.observations.push(Observation {
                    node: candidate.name.to_owned(),
                    at: input.now,
                    what: Observed::PodsWouldNotSchedule {
                        pods: simulation.unschedulable_pods(),
                        reason: simulation.first_reason().to_owned(),
                    },
                });
                continue;
            }
            outcome.commands.push(Command::new(
                DisruptionReason::Drifted,
                vec![candidate.node_claim_name().to_owned()],
                simulation.new_node_claims,
                input.now,
            ));
            break;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::controllers::disruption::fixtures::{
        budgets, condition, managed, now, pod, pool, snapshot, with_input,
    };
    use crate::controllers::testing;
    use crate::disruption::DisruptionClass;

    fn drifted_at(seconds: i64) -> Value {
        condition("Drifted", testing::at(seconds))
    }

    fn compute(
        snapshot: &crate::cluster::Snapshot,
        budgets: &BTreeMap<String, u32>,
    ) -> MethodOutcome {
        with_input(snapshot, DisruptionClass::Eventual, budgets, |input| {
            Drift.compute(input)
        })
    }

    #[test]
    fn empty_candidates_go_first_then_the_oldest_drift_then_by_name() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![
                managed("a", "default", vec![drifted_at(-10)]),
                managed("b", "default", vec![drifted_at(-20)]),
                managed("c", "default", vec![drifted_at(-5)]),
                managed("d", "default", vec![drifted_at(-20)]),
            ],
            vec![
                pod("on-a", Some("node-a"), "1"),
                pod("on-b", Some("node-b"), "1"),
                pod("on-d", Some("node-d"), "1"),
            ],
        );
        let order: Vec<String> = with_input(
            &snapshot,
            DisruptionClass::Eventual,
            &budgets(&[]),
            |input| {
                let mut candidates: Vec<&Candidate<'_>> = input.candidates.iter().collect();
                candidates.sort_by(|a, b| order(a, b));
                candidates.iter().map(|c| c.name.to_owned()).collect()
            },
        );
        assert_eq!(order, ["node-c", "node-b", "node-d", "node-a"]);
    }

    #[test]
    fn empty_drifted_nodes_are_deleted_in_one_command_within_the_budget() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![
                managed("a", "default", vec![drifted_at(-30)]),
                managed("b", "default", vec![drifted_at(-20)]),
                managed("c", "default", vec![drifted_at(-10)]),
                managed("d", "default", vec![drifted_at(-40)]),
            ],
            vec![pod("busy", Some("node-d"), "1")],
        );

        let outcome = compute(&snapshot, &budgets(&[("default", 2)]));

        assert_eq!(outcome.commands.len(), 1);
        let command = &outcome.commands[0];
        assert_eq!(
            command.candidates,
            ["claim-a", "claim-b"],
            "oldest empty ones, 2 of them"
        );
        assert!(command.replacements.is_empty());
        assert_eq!(command.decision(), super::super::Decision::Delete);
        assert!(!outcome.needs_validation);
    }

    #[test]
    fn a_drifted_node_whose_pods_fit_nowhere_else_is_replaced_by_the_simulations_nodeclaims() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![
                managed("a", "default", vec![drifted_at(-30)]),
                managed("b", "default", vec![]),
            ],
            vec![
                pod("big-a", Some("node-a"), "3"),
                pod("big-b", Some("node-b"), "3"),
            ],
        );

        let outcome = compute(&snapshot, &budgets(&[("default", 1)]));

        assert_eq!(outcome.commands.len(), 1);
        let command = &outcome.commands[0];
        assert_eq!(command.reason, DisruptionReason::Drifted);
        assert_eq!(command.candidates, ["claim-a"]);
        assert_eq!(command.replacements.len(), 1);
        assert_eq!(command.replacements[0].node_pool, "default");
        assert_eq!(command.decided_at, now());
    }

    #[test]
    fn a_drifted_node_whose_pods_fit_on_the_others_is_deleted_without_replacement() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![
                managed("a", "default", vec![drifted_at(-30)]),
                managed("b", "default", vec![]),
            ],
            vec![pod("small", Some("node-a"), "1")],
        );

        let outcome = compute(&snapshot, &budgets(&[("default", 1)]));

        assert_eq!(outcome.commands[0].candidates, ["claim-a"]);
        assert!(outcome.commands[0].replacements.is_empty());
    }

    #[test]
    fn a_candidate_whose_pods_would_not_schedule_is_observed_and_the_next_is_tried() {
        // NodePool "tight" may launch nothing more; "default" may.
        let tight = testing::patched(
            &pool("tight", Value::Null),
            json!({ "spec": { "limits": { "cpu": "0" } } }),
        );
        let snapshot = snapshot(
            vec![pool("default", Value::Null), tight],
            vec![
                managed("a", "tight", vec![drifted_at(-30)]),
                managed("b", "default", vec![drifted_at(-10)]),
            ],
            vec![
                // Only a "tight" node takes it.
                testing::patched(
                    &pod("picky", Some("node-a"), "3"),
                    json!({ "spec": { "nodeSelector": { "karpenter.sh/nodepool": "tight" } } }),
                ),
                pod("plain", Some("node-b"), "3"),
            ],
        );

        let outcome = compute(&snapshot, &budgets(&[("default", 1), ("tight", 1)]));

        assert_eq!(outcome.commands.len(), 1);
        assert_eq!(outcome.commands[0].candidates, ["claim-b"]);
        assert_eq!(outcome.observations.len(), 1);
        let observation = &outcome.observations[0];
        assert_eq!(observation.node, "node-a");
        match &observation.what {
            Observed::PodsWouldNotSchedule { pods, reason } => {
                assert_eq!(pods, &["default/picky"]);
                assert!(!reason.is_empty());
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn nodes_of_a_nodepool_without_budget_or_not_drifted_are_left_alone() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null), pool("other", Value::Null)],
            vec![
                managed("a", "default", vec![drifted_at(-30)]),
                managed("b", "other", vec![]),
            ],
            vec![
                pod("on-a", Some("node-a"), "3"),
                pod("on-b", Some("node-b"), "3"),
            ],
        );

        let outcome = compute(&snapshot, &budgets(&[("default", 0), ("other", 5)]));

        assert!(outcome.commands.is_empty());
        assert!(
            outcome.observations.is_empty(),
            "budgets are explained elsewhere"
        );
    }

    #[test]
    fn static_nodepools_are_not_drift_candidates() {
        let fixed = testing::patched(
            &pool("fixed", Value::Null),
            json!({ "spec": { "replicas": 1 } }),
        );
        let snapshot = snapshot(
            vec![fixed],
            vec![managed("a", "fixed", vec![drifted_at(-30)])],
            vec![],
        );

        let outcome = compute(&snapshot, &budgets(&[("fixed", 5)]));

        assert!(outcome.commands.is_empty());
    }
}
