//! Chaos: a fixed set of seeds (a longer search is `simulate --chaos SEED --runs N`, see
//! simulator/README.md), every regression scenario the search has found, and the checks
//! themselves: a broken invariant is reported, and shrunk to what it needs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::Path;

use serde_json::json;
use simulator::chaos::{self, generate};
use simulator::engine::{self, Quiet};
use simulator::scenario;

/// The seeds CI runs, split over a few tests so the test threads share them out.
const SEEDS: [&[u64]; 4] = [&[0, 1, 2], &[3, 4, 5], &[6, 7, 8], &[9, 10, 11]];

fn assert_seeds_hold(seeds: &[u64]) {
    for &seed in seeds {
        let document = generate::scenario(seed);
        let violations = chaos::check(&document).expect("the run completes");
        assert!(
            violations.is_empty(),
            "chaos seed {seed} broke invariants (reproduce: simulate --chaos {seed}):\n{}",
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn chaos_seeds_0_to_2_hold_every_invariant() {
    assert_seeds_hold(SEEDS[0]);
}

#[test]
fn chaos_seeds_3_to_5_hold_every_invariant() {
    assert_seeds_hold(SEEDS[1]);
}

#[test]
fn chaos_seeds_6_to_8_hold_every_invariant() {
    assert_seeds_hold(SEEDS[2]);
}

#[test]
fn chaos_seeds_9_to_11_hold_every_invariant() {
    assert_seeds_hold(SEEDS[3]);
}

#[test]
fn every_regression_scenario_holds_every_invariant() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/chaos");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("simulator/scenarios/chaos exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no regression scenario in {}",
        dir.display()
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let scenario =
            scenario::parse(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let (_, violations) = engine::run_checked_blocking(scenario, &mut Quiet).unwrap();
        assert!(
            violations.is_empty(),
            "{} broke invariants:\n{}",
            path.display(),
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A scenario no autoscaler can satisfy: a pod bigger than any instance type, among others.
fn impossible() -> serde_json::Value {
    let mut document = generate::scenario(3);
    let objects = document["objects"].as_array_mut().unwrap();
    objects.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "giant", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "giant"}},
            "template": {"metadata": {"labels": {"app": "giant"}}, "spec": {"containers": [
                {"name": "giant", "image": "registry.invalid/giant",
                 "resources": {"requests": {"cpu": "500"}}}]}}},
    }));
    document
}

#[test]
fn a_pod_that_never_runs_is_reported_and_the_failure_shrinks_to_what_it_needs() {
    let document = impossible();
    let violations = chaos::check(&document).unwrap();
    let never_ran: Vec<_> = violations
        .iter()
        .filter(|v| v.invariant == "pod-never-ran")
        .collect();
    assert_eq!(never_ran.len(), 1, "{violations:?}");
    assert!(
        never_ran[0].message.contains("default/giant-"),
        "{}",
        never_ran[0]
    );

    let shrunk = chaos::shrink(&document, "pod-never-ran", 40);
    let events = shrunk["events"].as_array().map_or(0, Vec::len);
    assert_eq!(
        events,
        0,
        "no fault is needed:\n{}",
        chaos::to_yaml(&shrunk)
    );
    let deployments: Vec<&str> = shrunk["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(deployments, ["giant"], "{}", chaos::to_yaml(&shrunk));
    // What is written out runs again as any scenario does, and still fails.
    let again =
        chaos::check(&serde_json::from_str(&serde_json::to_string(&shrunk).unwrap()).unwrap())
            .unwrap();
    assert!(again.iter().any(|v| v.invariant == "pod-never-ran"));
}

#[test]
fn a_slow_plugin_during_a_scale_up_leaks_nothing() {
    // Every Create of the first ten minutes launches an instance whose answer core never
    // gets: garbage collection must take each one back, and the pods must still run.
    let mut document = generate::scenario(5);
    document["events"] = json!([
        {"at": "0s", "slowPlugin": {"for": "10m"}},
        {"at": "1m", "scale": {"kind": "Deployment", "namespace": "default", "name": "app-0", "replicas": 20}},
    ]);
    let scenario = scenario::parse(&chaos::to_yaml(&document)).unwrap();
    let (report, violations) = engine::run_checked_blocking(scenario, &mut Quiet).unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(report.stats.orphaned_instances, 0);
    let launched_late = report
        .final_state
        .instances
        .iter()
        .filter(|i| i.state == "terminated")
        .count();
    assert!(
        launched_late > 0,
        "the slow plugin launched instances core never heard of"
    );
    assert!(
        report.events_of("PluginUnavailable").next().is_some(),
        "the slow spell is on the timeline"
    );
}

#[test]
fn nodes_deleted_by_hand_and_nodes_that_never_join_are_replaced() {
    let mut document = generate::scenario(5);
    document["events"] = json!([
        {"at": "0s", "cloud": {"registrationFailures": 1}},
        {"at": "30m", "deleteNodes": {"nodePool": "alpha", "count": 1}},
    ]);
    let scenario = scenario::parse(&chaos::to_yaml(&document)).unwrap();
    let (report, violations) = engine::run_checked_blocking(scenario, &mut Quiet).unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    assert!(
        report
            .events_of("NodeClaimDeleted")
            .any(|e| e.field("reason") == Some("RegistrationTimeout")),
        "the NodeClaim that never registered was deleted at its timeout"
    );
    assert!(report.events_of("NodeDeleted").next().is_some());
}
