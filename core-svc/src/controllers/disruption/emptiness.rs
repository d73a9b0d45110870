//! Emptiness (upstream kubernetes-sigs/karpenter `pkg/controllers/disruption/emptiness.go`):
//! delete nodes whose pods need no new place.
//!
//! A candidate (graceful class) qualifies when it is empty ([`Candidate::is_empty`]: no
//! reschedulable pod of positive eviction cost), its NodePool is not static and has a
//! `consolidateAfter` other than `Never`, and its NodeClaim is `Consolidatable=True` (the
//! `consolidateAfter` has passed since its pods last changed). Every consolidation policy
//! allows it. The method makes one delete command of all of them, as many of each NodePool as
//! its budget allows, the dearest first (upstream's savings ratio, price over a rescheduling
//! cost of 1 for an empty node), ties by name.
//!
//! The command waits [`VALIDATION_DELAY`](super::VALIDATION_DELAY), then [`validate`] keeps
//! the candidates that still qualify, within the budgets of that moment: none left still
//! qualifying is churn, none left within budget is a budget rejection, and a subset may go.

use std::collections::{BTreeMap, HashMap};

use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use karpenter_api::nodeclaim::CONDITION_CONSOLIDATABLE;
use karpenter_api::{DisruptionReason, condition};

use super::{Command, Method, MethodInput, MethodOutcome, Rejected, RejectionKind};
use crate::controllers::provisioning::input::Catalogue;
use crate::disruption::Candidate;

/// The emptiness method.
#[derive(Debug, Clone, Copy, Default)]
pub struct Emptiness;

/// Whether emptiness may delete `candidate` (see the module documentation).
pub fn qualifies(candidate: &Candidate<'_>) -> bool {
    let pool = candidate.node_pool;
    candidate.is_empty()
        && !pool.is_static()
        && !pool.spec.disruption.consolidate_after.is_never()
        && candidate
            .node_claim
            .status
            .as_ref()
            .is_some_and(|status| condition::is_true(&status.conditions, CONDITION_CONSOLIDATABLE))
}

fn label<'a>(candidate: &Candidate<'a>, key: &str) -> Option<&'a str> {
    let from = |labels: Option<&'a BTreeMap<String, String>>| {
        labels
            .and_then(|labels| labels.get(key))
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    };
    from(candidate.node.metadata.labels.as_ref())
        .or_else(|| from(candidate.node_claim.metadata.labels.as_ref()))
}

/// What the node costs per hour: its instance type's cheapest offering in its zone and
/// capacity type, from its NodePool's catalogue; 0 when unknown.
pub fn node_price(candidate: &Candidate<'_>, catalogues: &HashMap<String, Catalogue>) -> f64 {
    let (Some(instance_type), Some(catalogue)) = (
        label(candidate, LABEL_INSTANCE_TYPE),
        catalogues.get(candidate.node_pool_name()),
    ) else {
        return 0.0;
    };
    let zone = label(candidate, LABEL_TOPOLOGY_ZONE);
    let capacity_type = label(candidate, LABEL_CAPACITY_TYPE);
    catalogue
        .iter()
        .find(|it| it.name() == instance_type)
        .into_iter()
        .flat_map(|it| it.offerings())
        .filter(|offering| zone.is_none_or(|zone| &*offering.zone == zone))
        .filter(|offering| {
            capacity_type.is_none_or(|capacity_type| &*offering.capacity_type == capacity_type)
        })
        .map(|offering| offering.price)
        .min_by(f64::total_cmp)
        .unwrap_or(0.0)
}

/// The candidates that qualify, dearest first, ties by node name.
pub fn ordered<'c, 'a>(
    candidates: &'c [Candidate<'a>],
    catalogues: &HashMap<String, Catalogue>,
) -> Vec<&'c Candidate<'a>> {
    let mut priced: Vec<(f64, &Candidate<'a>)> = candidates
        .iter()
        .filter(|candidate| qualifies(candidate))
        .map(|candidate| (node_price(candidate, catalogues), candidate))
        .collect();
    priced.sort_by(|(price_a, a), (price_b, b)| {
        price_b.total_cmp(price_a).then_with(|| a.name.cmp(b.name))
    });
    priced.into_iter().map(|(_, candidate)| candidate).collect()
}

/// Takes from `candidates`, in order, those whose NodePool still has budget, spending it.
pub fn within_budgets<'c, 'a>(
    candidates: impl IntoIterator<Item = &'c Candidate<'a>>,
    budgets: &BTreeMap<String, u32>,
) -> Vec<&'c Candidate<'a>>
where
    'a: 'c,
{
    let mut left = budgets.clone();
    candidates
        .into_iter()
        .filter(|candidate| match left.get_mut(candidate.node_pool_name()) {
            Some(allowed) if *allowed > 0 => {
                *allowed -= 1;
                true
            }
            _ => false,
        })
        .collect()
}

impl Method for Emptiness {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Empty
    }

    fn name(&self) -> &'static str {
        "emptiness"
    }

    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
        let chosen = within_budgets(ordered(input.candidates, input.catalogues), input.budgets);
        let commands = if chosen.is_empty() {
            Vec::new()
        } else {
            vec![Command::new(
                DisruptionReason::Empty,
                chosen
                    .iter()
                    .map(|candidate| candidate.node_claim_name().to_owned())
                    .collect(),
                Vec::new(),
                input.now,
            )]
        };
        MethodOutcome {
            commands,
            observations: Vec::new(),
            needs_validation: true,
        }
    }

    fn validate(&self, command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
        validate(command, input)
    }
}

/// Keeps the command's candidates that still qualify, within the budgets of `input` (see the
/// module documentation).
pub fn validate(command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
    let still: Vec<&Candidate<'_>> = ordered(input.candidates, input.catalogues)
        .into_iter()
        .filter(|candidate| {
            let name = candidate.node_claim.metadata.name.as_deref();
            command.candidates.iter().any(|c| Some(c.as_str()) == name)
        })
        .collect();
    if still.is_empty() {
        return Err(Rejected {
            kind: RejectionKind::Churn,
            message: format!(
                "none of {} is still an empty, consolidatable candidate",
                command.candidates.join(", ")
            ),
        });
    }
    let allowed = within_budgets(still, input.budgets);
    if allowed.is_empty() {
        return Err(Rejected {
            kind: RejectionKind::Budget,
            message: format!(
                "the disruption budgets allow none of {} now",
                command.candidates.join(", ")
            ),
        });
    }
    Ok(Command::new(
        DisruptionReason::Empty,
        allowed
            .iter()
            .map(|candidate| candidate.node_claim_name().to_owned())
            .collect(),
        Vec::new(),
        command.decided_at,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::cluster::Snapshot;
    use crate::controllers::disruption::fixtures::{
        budgets, condition, managed, now, pod, pool, snapshot, with_input,
    };
    use crate::controllers::testing;
    use crate::disruption::DisruptionClass;

    fn consolidatable() -> Value {
        condition("Consolidatable", testing::at(-60))
    }

    fn run<R>(
        snapshot: &Snapshot,
        budgets: &BTreeMap<String, u32>,
        f: impl FnOnce(&MethodInput<'_>) -> R,
    ) -> R {
        with_input(snapshot, DisruptionClass::Graceful, budgets, f)
    }

    #[test]
    fn only_empty_consolidatable_nodes_of_nodepools_that_consolidate_qualify() {
        let never = pool("never", json!({ "consolidateAfter": "Never" }));
        let snapshot = snapshot(
            vec![pool("default", Value::Null), never],
            vec![
                managed("empty", "default", vec![consolidatable()]),
                managed("busy", "default", vec![consolidatable()]),
                managed("fresh", "default", vec![]),
                managed("never", "never", vec![consolidatable()]),
            ],
            vec![pod("web", Some("node-busy"), "1")],
        );
        let qualified: Vec<String> = run(&snapshot, &budgets(&[]), |input| {
            input
                .candidates
                .iter()
                .filter(|c| qualifies(c))
                .map(|c| c.name.to_owned())
                .collect()
        });
        assert_eq!(qualified, ["node-empty"]);
    }

    #[test]
    fn one_delete_command_takes_every_empty_node_each_nodepool_allows_and_asks_for_validation() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null), pool("b", Value::Null)],
            vec![
                managed("a1", "a", vec![consolidatable()]),
                managed("a2", "a", vec![consolidatable()]),
                managed("a3", "a", vec![consolidatable()]),
                managed("b1", "b", vec![consolidatable()]),
            ],
            vec![],
        );

        let outcome = run(&snapshot, &budgets(&[("a", 2), ("b", 1)]), |input| {
            Emptiness.compute(input)
        });

        assert!(outcome.needs_validation);
        assert_eq!(outcome.commands.len(), 1);
        let command = &outcome.commands[0];
        assert_eq!(command.reason, DisruptionReason::Empty);
        assert_eq!(command.candidates, ["claim-a1", "claim-a2", "claim-b1"]);
        assert!(command.replacements.is_empty());
    }

    #[test]
    fn no_budget_no_command() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null)],
            vec![managed("a1", "a", vec![consolidatable()])],
            vec![],
        );
        let outcome = run(&snapshot, &budgets(&[("a", 0)]), |input| {
            Emptiness.compute(input)
        });
        assert!(outcome.commands.is_empty());
    }

    #[test]
    fn the_dearest_nodes_go_first_when_the_budget_cannot_take_them_all() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null)],
            vec![
                managed("cheap", "a", vec![consolidatable()]),
                managed("dear", "a", vec![consolidatable()]),
            ],
            vec![],
        );
        // Both run the same type; the spot one is cheaper (70 %).
        let mut snapshot = snapshot;
        for node in snapshot.nodes.iter_mut().map(Arc::make_mut) {
            if node.metadata.name.as_deref() == Some("node-cheap") {
                node.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("karpenter.sh/capacity-type".to_owned(), "spot".to_owned());
            }
        }
        let chosen = run(&snapshot, &budgets(&[("a", 1)]), |input| {
            Emptiness.compute(input).commands[0].candidates.clone()
        });
        assert_eq!(chosen, ["claim-dear"]);
    }

    #[test]
    fn validation_keeps_the_candidates_still_empty_within_budget() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null)],
            vec![
                managed("a1", "a", vec![consolidatable()]),
                managed("a2", "a", vec![consolidatable()]),
                managed("a3", "a", vec![consolidatable()]),
            ],
            vec![pod("arrived", Some("node-a2"), "1")],
        );
        let command = Command::new(
            DisruptionReason::Empty,
            vec!["claim-a1".into(), "claim-a2".into(), "claim-a3".into()],
            Vec::new(),
            now(),
        );

        let validated = run(&snapshot, &budgets(&[("a", 1)]), |input| {
            validate(&command, input)
        });

        let validated = validated.unwrap();
        assert_eq!(validated.candidates.len(), 1, "the budget now allows one");
        assert_ne!(validated.candidates[0], "claim-a2", "no longer empty");
        assert_eq!(validated.decided_at, now());
    }

    #[test]
    fn validation_rejects_churn_and_budget() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null)],
            vec![managed("a1", "a", vec![consolidatable()])],
            vec![pod("arrived", Some("node-a1"), "1")],
        );
        let busy = Command::new(
            DisruptionReason::Empty,
            vec!["claim-a1".into()],
            vec![],
            now(),
        );
        let churn = run(&snapshot, &budgets(&[("a", 1)]), |input| {
            validate(&busy, input)
        });
        assert_eq!(churn.unwrap_err().kind, RejectionKind::Churn);

        let snapshot = super::super::fixtures::snapshot(
            vec![pool("a", Value::Null)],
            vec![managed("a1", "a", vec![consolidatable()])],
            vec![],
        );
        let budget = run(&snapshot, &budgets(&[("a", 0)]), |input| {
            validate(&busy, input)
        });
        assert_eq!(budget.unwrap_err().kind, RejectionKind::Budget);
    }

    #[test]
    fn within_budgets_spends_each_nodepools_allowance_in_order() {
        let snapshot = snapshot(
            vec![pool("a", Value::Null), pool("b", Value::Null)],
            vec![
                managed("a1", "a", vec![]),
                managed("a2", "a", vec![]),
                managed("b1", "b", vec![]),
            ],
            vec![],
        );
        let taken: Vec<String> = run(&snapshot, &budgets(&[("a", 1)]), |input| {
            within_budgets(input.candidates.iter(), input.budgets)
                .iter()
                .map(|c| c.name.to_owned())
                .collect()
        });
        assert_eq!(taken, ["node-a1"], "b has no budget entry: none");
    }
}
