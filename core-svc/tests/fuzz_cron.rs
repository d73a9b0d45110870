//! Fuzzing disruption budgets: the cron parser (`disruption::cron::CronSchedule`) and its next
//! hit, and whole budgets (`nodes`, `schedule`, `duration`) as the CRD's rules and core's
//! budget arithmetic read them. Properties: no panic; the search for the next hit ends, on a
//! whole minute after the instant asked about; a refused schedule names the cron field (or
//! says the schedule as a whole is wrong); an invalid budget is named by its index; and a
//! `nodes` the CRD admits is one core can scale.
//!
//! It replays `tests/fuzz-corpus/cron/` first. `FUZZ_CASES=100000 cargo test -p core-svc
//! --test fuzz_cron` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use core_svc::apis::{Budget, DisruptionReason, LabelPolicy, NodePool};
use core_svc::disruption::budgets::{budget_limit, scaled_nodes};
use core_svc::disruption::cron::{CronError, CronSchedule};
use jiff::{SignedDuration, Timestamp};
use karpenter_api::testing::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

fn instants() -> Vec<Timestamp> {
    [
        "2026-01-01T00:00:00Z",
        "2028-02-29T23:59:59.999Z",
        "1970-01-01T00:00:00Z",
        "9999-12-01T00:00:00Z",
        "-009999-02-01T00:00:00Z",
    ]
    .iter()
    .map(|t| t.parse().expect("an instant"))
    .chain([Timestamp::MIN, Timestamp::MAX])
    .collect()
}

fn check_schedule(text: &str, at: &[Timestamp]) {
    match CronSchedule::parse(text) {
        Err(error) => {
            let shown = error.to_string();
            match &error {
                CronError::Field { field, problem, .. } => {
                    assert!(FIELDS.contains(field), "{shown}");
                    assert!(shown.starts_with(field), "{shown}");
                    assert!(!problem.is_empty(), "{shown}");
                }
                CronError::Empty => assert!(shown.contains("schedule"), "{shown}"),
                CronError::Descriptor(_) => assert!(shown.contains("descriptor"), "{shown}"),
                CronError::FieldCount(_) => assert!(shown.contains("fields"), "{shown}"),
            }
        }
        Ok(schedule) => {
            for &after in at {
                if let Some(hit) = schedule.next_after(after) {
                    assert!(hit > after, "{text:?}: {hit} is not after {after}");
                    assert_eq!(hit.as_second() % 60, 0, "{text:?}: {hit}");
                    assert_eq!(hit.subsec_nanosecond(), 0, "{text:?}: {hit}");
                    // Upstream gives up after five years; a hit is never further than that.
                    let limit = after.checked_add(SignedDuration::from_hours(6 * 366 * 24));
                    assert!(limit.is_err() || hit <= limit.unwrap(), "{text:?}: {hit}");
                }
            }
        }
    }
}

fn corpus() -> Vec<String> {
    fuzz::corpus_text(&fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), "cron"))
        .into_iter()
        .map(|(_, text)| text.trim_end_matches('\n').to_owned())
        .collect()
}

/// Cron-shaped text: fields from numbers, names, ranges, steps and lists.
fn cron_text() -> impl Strategy<Value = String> {
    let atom = proptest::sample::select(
        &[
            "*",
            "?",
            "0",
            "1",
            "5",
            "7",
            "12",
            "23",
            "29",
            "30",
            "31",
            "59",
            "60",
            "-1",
            "sun",
            "SAT",
            "mon",
            "jan",
            "DEC",
            "feb",
            "x",
            "",
            "9999999999",
            "4294967296",
            "L",
            "W",
            "#",
            "@daily",
        ][..],
    );
    let range = (
        atom.clone(),
        proptest::option::of(atom.clone()),
        proptest::option::of(atom),
    )
        .prop_map(|(a, b, step)| {
            let mut s = a.to_owned();
            if let Some(b) = b {
                s.push('-');
                s.push_str(b);
            }
            if let Some(step) = step {
                s.push('/');
                s.push_str(step);
            }
            s
        });
    let field = proptest::collection::vec(range, 1..3).prop_map(|parts| parts.join(","));
    prop_oneof![
        4 => proptest::collection::vec(field, 4..7).prop_map(|fields| fields.join(" ")),
        1 => fuzz::interesting_string(),
        1 => fuzz::mutated_text(corpus()),
    ]
}

#[test]
fn fuzz_cron() {
    let at = instants();
    for text in corpus() {
        check_schedule(&text, &at);
    }
    let mut runner = TestRunner::new(fuzz::config(600, file!()));
    runner
        .run(
            &(cron_text(), proptest::collection::vec(any::<i64>(), 1..3)),
            |(text, seconds)| {
                let mut at = vec![at[0]];
                at.extend(
                    seconds
                        .iter()
                        .filter_map(|s| Timestamp::from_second(s % 253_402_300_799).ok()),
                );
                check_schedule(&text, &at);
                Ok(())
            },
        )
        .unwrap();
}

fn budget() -> impl Strategy<Value = serde_json::Value> {
    let nodes = prop_oneof![
        proptest::sample::select(
            &[
                "10%",
                "0",
                "100%",
                "101%",
                "5",
                "0%",
                "007%",
                "1000000000000"
            ][..]
        )
        .prop_map(str::to_owned),
        fuzz::interesting_string(),
    ];
    let duration = prop_oneof![
        proptest::sample::select(&["1h", "8h", "30m", "0s", "1h30m", "10s", "-1h", "2562047h"][..])
            .prop_map(str::to_owned),
        fuzz::interesting_string(),
    ];
    (
        proptest::option::of(nodes),
        proptest::option::of(cron_text()),
        proptest::option::of(duration),
        proptest::option::of(proptest::collection::vec(
            proptest::sample::select(&["Drifted", "Empty", "Underutilized"][..]),
            0..3,
        )),
    )
        .prop_map(|(nodes, schedule, duration, reasons)| {
            let mut budget = serde_json::Map::new();
            if let Some(nodes) = nodes {
                budget.insert("nodes".into(), nodes.into());
            }
            if let Some(schedule) = schedule {
                budget.insert("schedule".into(), schedule.into());
            }
            if let Some(duration) = duration {
                budget.insert("duration".into(), duration.into());
            }
            if let Some(reasons) = reasons {
                budget.insert("reasons".into(), reasons.into());
            }
            serde_json::Value::Object(budget)
        })
}

fn check_budgets(budgets: Vec<Budget>, nodes: u32, now: Timestamp) {
    let mut pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }}}
    }))
    .expect("the NodePool reads");
    pool.spec.disruption.budgets = budgets.clone();
    let crd_errors = pool
        .validate(&LabelPolicy::core())
        .err()
        .unwrap_or_default();
    for error in &crd_errors {
        assert!(
            error.path.as_str().starts_with("spec.disruption.budgets"),
            "{error}"
        );
    }
    for (i, budget) in budgets.iter().enumerate() {
        // What the CRD admits as `nodes`, core can scale.
        let nodes_path = format!("spec.disruption.budgets[{i}].nodes");
        if !crd_errors.iter().any(|e| e.path.as_str() == nodes_path) {
            assert!(
                scaled_nodes(&budget.nodes, nodes).is_some(),
                "the CRD admits nodes {:?}, which core cannot scale",
                budget.nodes
            );
        }
    }
    for reason in [
        DisruptionReason::Drifted,
        DisruptionReason::Empty,
        DisruptionReason::Underutilized,
    ] {
        if let Err(error) = budget_limit(&budgets, reason, nodes, now) {
            assert!(error.index < budgets.len(), "{error}");
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("disruption budget #{} (", error.index)),
                "{error}"
            );
        }
    }
}

#[test]
fn fuzz_budgets() {
    let mut runner = TestRunner::new(fuzz::config(400, file!()));
    runner
        .run(
            &(
                proptest::collection::vec(budget(), 0..4),
                prop_oneof![0u32..20, Just(u32::MAX)],
                0usize..7,
            ),
            |(budgets, nodes, instant)| {
                let budgets: Vec<Budget> = budgets
                    .into_iter()
                    .filter_map(|b| serde_json::from_value(b).ok())
                    .collect();
                check_budgets(budgets, nodes, instants()[instant]);
                Ok(())
            },
        )
        .unwrap();
}
