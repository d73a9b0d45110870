//! The disruption controller's unit tests: passes over an in-memory cluster and the pure
//! decisions of the pass, quiet polls and blocked reports.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::fixtures::{condition, managed, now, pod, pool, snapshot};
use super::orchestration::{ANNOTATION_COMMAND, candidate_patch};
use super::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::DisruptionReason;

use super::blocked::{blocking_pod, dedup_key, worth_reporting};
use super::drift::Drift;
use super::orchestration::InFlight;
use super::quiet::{Quiet, still_quiet};
use crate::cluster::Snapshot;
use crate::controllers::Settings;
use crate::controllers::testing;
use crate::disruption::{
    Blocked, BlockedReason, CandidateSelector, Explanation, Observation, Observed,
};

/// A method that answers `commands` and one observation, counting its calls.
struct Scripted {
    reason: DisruptionReason,
    commands: Vec<Command>,
    calls: AtomicUsize,
}

impl Scripted {
    fn new(reason: DisruptionReason, candidates: &[&str]) -> Self {
        let commands = if candidates.is_empty() {
            Vec::new()
        } else {
            vec![Command::new(
                reason,
                candidates.iter().map(|c| (*c).to_owned()).collect(),
                Vec::new(),
                now(),
            )]
        };
        Self {
            reason,
            commands,
            calls: AtomicUsize::new(0),
        }
    }
}

impl Method for Scripted {
    fn reason(&self) -> DisruptionReason {
        self.reason
    }
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        MethodOutcome {
            commands: self.commands.clone(),
            observations: vec![Observation {
                node: format!("seen-by-{:?}", self.reason),
                at: input.now,
                what: Observed::Other {
                    reason: "looked".into(),
                },
            }],
            needs_validation: false,
        }
    }
}

/// One pass's decision by `methods` on `snapshot`, with `in_flight` and what earlier attempts
/// `observed`; nothing nominated, default options and settings, no catalogue.
fn decide_on(
    snapshot: &Snapshot,
    in_flight: &[InFlight],
    observed: &[Observation],
    methods: &[Box<dyn Method>],
) -> PassDecision {
    let inputs = PassInputs {
        snapshot,
        now: now(),
        node_pools: &[],
        catalogues: &HashMap::new(),
        in_flight,
        nominated: &BTreeSet::new(),
        observations: observed,
        options: &DisruptionOptions::default(),
        settings: &Settings::default(),
        memo: None,
    };
    decide(inputs, methods)
}

#[test]
fn commands_sort_their_candidates_and_say_what_they_do() {
    let delete = Command::new(
        DisruptionReason::Empty,
        vec!["b".into(), "a".into(), "b".into()],
        Vec::new(),
        now(),
    );
    assert_eq!(delete.candidates, ["a", "b"]);
    assert_eq!(delete.decision(), Decision::Delete);
    assert_eq!(delete.decision().as_str(), "delete");
    let nothing = Command::new(DisruptionReason::Empty, vec![], vec![], now());
    assert_eq!(nothing.decision(), Decision::NoOp);
}

#[test]
fn the_first_method_with_a_command_ends_the_pass() {
    let snapshot = snapshot(vec![pool("default", Value::Null)], vec![], vec![]);
    let methods: Vec<Box<dyn Method>> = vec![
        Box::new(Scripted::new(DisruptionReason::Empty, &[])),
        Box::new(Scripted::new(DisruptionReason::Drifted, &["claim-x"])),
        Box::new(Scripted::new(DisruptionReason::Underutilized, &["claim-y"])),
    ];

    let decision = decide_on(&snapshot, &[], &[], &methods);

    let (index, outcome) = decision.acted.unwrap();
    assert_eq!(index, 1);
    assert_eq!(outcome.commands[0].candidates, ["claim-x"]);
    let seen: Vec<&str> = decision
        .observations
        .iter()
        .map(|o| o.node.as_str())
        .collect();
    assert_eq!(
        seen,
        ["seen-by-Empty", "seen-by-Drifted"],
        "the third never ran"
    );
    assert_eq!(
        decision.allowed["default"][&DisruptionReason::Drifted],
        0,
        "no nodes"
    );
}

/// Three nodes of `default` (budget 2), the first in a command in flight, untainted.
fn busy_world() -> (Snapshot, Vec<InFlight>) {
    let budget = json!({ "budgets": [{ "nodes": "2" }] });
    let command = Command::new(
        DisruptionReason::Drifted,
        vec!["claim-a".into()],
        Vec::new(),
        now(),
    );
    let (a, node_a) = managed("a", "default", vec![condition("Drifted", testing::at(-60))]);
    let patch = candidate_patch(&command, now());
    let a = testing::patched(&a, json!({ "metadata": patch["metadata"].clone() }));
    assert!(
        a.metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(ANNOTATION_COMMAND)
    );
    let snapshot = snapshot(
        vec![pool("default", budget)],
        vec![
            (a, node_a),
            managed("b", "default", vec![condition("Drifted", testing::at(-30))]),
            managed("c", "default", vec![]),
        ],
        vec![pod("on-b", Some("node-b"), "1")],
    );
    let in_flight = orchestration::in_flight(&snapshot);
    assert_eq!(in_flight.len(), 1);
    (snapshot, in_flight)
}

#[test]
fn candidates_of_commands_in_flight_use_budget_before_they_are_tainted() {
    let (snapshot, in_flight) = busy_world();
    let budgets = budgets_in_flight(&snapshot, now(), &in_flight);
    assert_eq!(budgets[&DisruptionReason::Drifted]["default"], 1);
    let none = budgets_in_flight(&snapshot, now(), &[]);
    assert_eq!(none[&DisruptionReason::Drifted]["default"], 2);
    assert_eq!(
        leaving_nodes(&snapshot, &in_flight),
        BTreeSet::from(["node-a".to_owned()])
    );
}

#[test]
fn candidates_of_commands_in_flight_are_no_candidates_again() {
    let (snapshot, in_flight) = busy_world();
    let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
    let decision = decide_on(&snapshot, &in_flight, &[], &methods);
    let (_, outcome) = decision.acted.unwrap();
    assert_eq!(
        outcome.commands[0].candidates,
        ["claim-b"],
        "claim-a is in flight"
    );
}

#[test]
fn a_failed_replacement_holds_its_node_back_for_the_retry_delay() {
    let snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![managed(
            "a",
            "default",
            vec![condition("Drifted", testing::at(-60))],
        )],
        vec![],
    );
    let failed = |seconds_ago: i64| Observation {
        node: "node-a".into(),
        at: testing::at(-seconds_ago),
        what: Observed::ReplacementFailed {
            reason: "no capacity".into(),
        },
    };
    let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
    for (ago, expect_command) in [(30, false), (60, true)] {
        let decision = decide_on(&snapshot, &[], &[failed(ago)], &methods);
        assert_eq!(
            decision.acted.is_some(),
            expect_command,
            "{ago}s after the failure"
        );
    }
}

#[test]
fn due_nodes_are_drifted_or_consolidatable_and_not_being_handled() {
    let (mut snapshot, in_flight) = busy_world();
    let (d, node_d) = managed("d", "default", vec![condition("Consolidatable", now())]);
    let (e, node_e) = managed("e", "default", vec![condition("Drifted", now())]);
    let mut e = e;
    e.metadata.deletion_timestamp = Some(Time(now()));
    snapshot.node_claims.extend([d, e].map(Arc::new));
    snapshot.nodes.extend([node_d, node_e].map(Arc::new));
    snapshot.sort();

    let due = due_nodes(&snapshot, &in_flight, &BTreeSet::new());
    assert_eq!(
        due,
        [
            (
                "node-b".to_owned(),
                "claim-b".to_owned(),
                Some(DisruptionReason::Drifted)
            ),
            ("node-d".to_owned(), "claim-d".to_owned(), None),
        ]
    );
    let acted = BTreeSet::from(["claim-b".to_owned()]);
    assert_eq!(due_nodes(&snapshot, &in_flight, &acted).len(), 1);
}

#[test]
fn a_node_held_by_the_budget_of_commands_in_flight_is_explained_by_that_budget() {
    let budget = json!({ "budgets": [{ "nodes": "1" }] });
    let command = Command::new(
        DisruptionReason::Drifted,
        vec!["claim-a".into()],
        vec![],
        now(),
    );
    let (a, node_a) = managed("a", "default", vec![condition("Drifted", testing::at(-60))]);
    let patch = candidate_patch(&command, now());
    let a = testing::patched(&a, json!({ "metadata": patch["metadata"].clone() }));
    let snapshot = snapshot(
        vec![pool("default", budget)],
        vec![
            (a, node_a),
            managed("b", "default", vec![condition("Drifted", testing::at(-30))]),
        ],
        vec![],
    );
    let in_flight = orchestration::in_flight(&snapshot);
    let due = due_nodes(&snapshot, &in_flight, &BTreeSet::new());

    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let explained = explain_due(&selector, &in_flight, due, &[], DEFAULT_REPLACEMENT_RETRY);

    assert_eq!(explained.len(), 1);
    assert_eq!(explained[0].node, "node-b");
    assert_eq!(explained[0].node_pool, "default");
    assert!(
        matches!(
            explained[0].explanation.reason,
            BlockedReason::Budget { .. }
        ),
        "{:?}",
        explained[0].explanation
    );
    assert!(explained[0].explanation.message.contains("node-a"));
    assert!(worth_reporting(&explained[0].explanation.reason));
}

#[test]
fn a_repeated_observation_is_the_same_news() {
    let observed = |at: Timestamp| Explanation {
        node: "n".into(),
        disruption: DisruptionReason::Drifted,
        reason: BlockedReason::Observed(Observation {
            node: "n".into(),
            at,
            what: Observed::Other { reason: "x".into() },
        }),
        message: format!("at {at}: x"),
    };
    assert_eq!(
        dedup_key(&observed(now())),
        dedup_key(&observed(testing::at(60)))
    );
    assert!(!worth_reporting(&BlockedReason::NotConsolidatableYet {
        node_pool: "p".into(),
        consolidate_after: "1m".into(),
        eligible_at: None,
    }));
    assert!(!worth_reporting(&BlockedReason::Candidate(
        Blocked::AlreadyDisrupting(crate::disruption::Disrupting::Tainted)
    )));
    let pod_block = BlockedReason::Candidate(Blocked::DoNotDisruptPod {
        pod: "default/batch".into(),
        annotation: crate::disruption::DoNotDisrupt::Always,
    });
    assert!(worth_reporting(&pod_block));
    assert_eq!(blocking_pod(&pod_block), Some("default/batch"));
}

fn drain_timed_out(seconds_ago: i64) -> Observation {
    Observation {
        node: "node-a".into(),
        at: testing::at(-seconds_ago),
        what: Observed::Other {
            reason: format!(
                "{}: NodeClaim claim-a was not drained within 1m: pod default/web is held by PodDisruptionBudget default/web-pdb",
                orchestration::DRAIN_TIMED_OUT
            ),
        },
    }
}

#[test]
fn a_drain_timeout_holds_its_node_back_for_the_retry_delay() {
    let snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![managed(
            "a",
            "default",
            vec![condition("Drifted", testing::at(-600))],
        )],
        vec![],
    );
    let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
    for (ago, expect_command) in [(59, false), (60, true)] {
        let decision = decide_on(&snapshot, &[], &[drain_timed_out(ago)], &methods);
        assert_eq!(
            decision.acted.is_some(),
            expect_command,
            "{ago}s after the timeout"
        );
    }
}

#[test]
fn a_recent_drain_timeout_explains_its_node_before_what_else_holds_it() {
    let protected = testing::patched(
        &pod("web", Some("node-a"), "1"),
        json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
    );
    let snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![managed(
            "a",
            "default",
            vec![condition("Drifted", testing::at(-600))],
        )],
        vec![protected],
    );
    let due = due_nodes(&snapshot, &[], &BTreeSet::new());
    let explain = |observation: Observation| {
        let nominated = BTreeSet::new();
        let selector = CandidateSelector::new(&snapshot, now(), &nominated);
        let explained = explain_due(
            &selector,
            &[],
            due.clone(),
            &[observation],
            DEFAULT_REPLACEMENT_RETRY,
        );
        assert_eq!(explained.len(), 1);
        explained[0].explanation.clone()
    };

    let recent = explain(drain_timed_out(30));
    assert!(
        matches!(recent.reason, BlockedReason::Observed(_)),
        "{recent:?}"
    );
    assert_eq!(recent.disruption, DisruptionReason::Drifted);
    assert!(
        recent.message.contains("drain timed out")
            && recent.message.contains("default/web-pdb")
            && recent.message.contains("not disrupted again before"),
        "{}",
        recent.message
    );
    assert!(worth_reporting(&recent.reason));

    let old = explain(drain_timed_out(60));
    assert!(
        matches!(
            old.reason,
            BlockedReason::Candidate(Blocked::DoNotDisruptPod { .. })
        ),
        "once retried, the node explains as any other: {old:?}"
    );
}

fn quiet_fleet(pool_disruption: Value, pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Snapshot {
    snapshot(
        vec![pool("default", pool_disruption)],
        vec![managed("a", "default", vec![])],
        pods,
    )
}

const RETRY: Duration = Duration::from_secs(60);

#[test]
fn with_nothing_that_moves_with_time_a_quiet_pass_stays_quiet_for_ever() {
    let snapshot = quiet_fleet(Value::Null, vec![pod("web", Some("node-a"), "1")]);
    assert_eq!(
        quiet_until(&snapshot, now(), &[], &[], None, RETRY),
        Some(Timestamp::MAX)
    );
}

#[test]
fn a_budget_with_a_schedule_makes_no_pass_skippable() {
    let snapshot = quiet_fleet(
        json!({ "budgets": [{ "nodes": "0", "schedule": "0 11 * * *", "duration": "2h" }] }),
        vec![],
    );
    assert_eq!(quiet_until(&snapshot, now(), &[], &[], None, RETRY), None);
}

#[test]
fn the_earliest_time_threshold_ends_the_quiet() {
    let mut protected = pod("batch", Some("node-a"), "1");
    protected.metadata.creation_timestamp = Some(Time(testing::at(-5)));
    protected.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_owned(),
        "95s".to_owned(),
    )]));
    let snapshot = quiet_fleet(Value::Null, vec![protected]);
    let fresh = Some(testing::at(180));
    // The pod's protection ends 95 s after it started.
    assert_eq!(
        quiet_until(&snapshot, now(), &[], &[], fresh, RETRY),
        Some(testing::at(90))
    );
    // A DisruptionBlocked 20 s ago: explained again once the minimum spacing is over.
    assert_eq!(
        quiet_until(&snapshot, now(), &[], &[testing::at(-20)], fresh, RETRY),
        Some(testing::at(40))
    );
    // One 100 s ago, explained since: its repeat is due 5 minutes after it.
    assert_eq!(
        quiet_until(
            &Snapshot::default(),
            now(),
            &[],
            &[testing::at(-100)],
            fresh,
            RETRY
        ),
        Some(testing::at(180))
    );
    assert_eq!(
        quiet_until(
            &Snapshot::default(),
            now(),
            &[],
            &[testing::at(-100)],
            None,
            RETRY
        ),
        Some(testing::at(200))
    );
    // A failed replacement 30 s ago holds its node back until the retry delay is over.
    let failed = Observation {
        node: "node-a".into(),
        at: testing::at(-30),
        what: Observed::ReplacementFailed {
            reason: "no capacity".into(),
        },
    };
    assert_eq!(
        quiet_until(&Snapshot::default(), now(), &[failed], &[], fresh, RETRY),
        Some(testing::at(30))
    );
}

#[test]
fn a_quiet_pass_is_skipped_only_on_the_same_revision_and_nominations_before_its_end() {
    let quiet = Quiet {
        revision: 7,
        nominations: 2,
        until: testing::at(60),
    };
    let seen = |revision, nominations, at| Quiet {
        revision,
        nominations,
        until: testing::at(at),
    };
    assert!(still_quiet(quiet, seen(7, 2, 50)));
    assert!(!still_quiet(quiet, seen(7, 2, 60)), "the threshold passes");
    assert!(!still_quiet(quiet, seen(8, 2, 10)), "the cluster changed");
    assert!(!still_quiet(quiet, seen(7, 3, 10)), "a node was nominated");
}
