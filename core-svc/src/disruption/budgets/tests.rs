//! The budgets' unit tests: what each NodePool's budgets allow, schedules and fail-closed
//! cases included.

use std::sync::Arc;

use super::*;
use serde_json::{Value, json};

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn budget(value: Value) -> Budget {
    serde_json::from_value(value).unwrap()
}

fn limit(budgets: &[Budget], reason: DisruptionReason, nodes: u32, now: &str) -> Option<u32> {
    budget_limit(budgets, reason, nodes, at(now))
        .unwrap()
        .map(|active| active.limit)
}

#[test]
fn percentages_round_up() {
    let ten = [budget(json!({"nodes": "10%"}))];
    let now = "2025-03-01T12:00:00Z";
    for (nodes, expected) in [(0, 0), (1, 1), (10, 1), (11, 2), (19, 2), (100, 10)] {
        assert_eq!(
            limit(&ten, DisruptionReason::Drifted, nodes, now),
            Some(expected),
            "{nodes} nodes"
        );
    }
    assert_eq!(scaled_nodes("20%", 19), Some(4), "3.8 rounds up");
    assert_eq!(scaled_nodes("0%", 50), Some(0));
    assert_eq!(scaled_nodes("100%", 7), Some(7));
    assert_eq!(
        scaled_nodes("5", 2),
        Some(5),
        "a count is not capped by the node count"
    );
    assert_eq!(scaled_nodes("101%", 2), None);
    assert_eq!(scaled_nodes("ten", 2), None);
    assert_eq!(scaled_nodes("", 2), None);
}

#[test]
fn the_most_restrictive_active_budget_wins_and_reasons_filter() {
    let budgets = [
        budget(json!({"nodes": "5"})),
        budget(json!({"nodes": "50%"})),
        budget(json!({"nodes": "0", "reasons": ["Drifted"]})),
        budget(json!({"nodes": "1", "reasons": ["Empty", "Underutilized"]})),
    ];
    let now = "2025-03-01T12:00:00Z";
    assert_eq!(limit(&budgets, DisruptionReason::Drifted, 4, now), Some(0));
    assert_eq!(limit(&budgets, DisruptionReason::Empty, 4, now), Some(1));
    assert_eq!(
        limit(&budgets, DisruptionReason::Underutilized, 4, now),
        Some(1)
    );
    let only_drift = [budget(json!({"nodes": "0", "reasons": ["Drifted"]}))];
    assert_eq!(
        limit(&only_drift, DisruptionReason::Empty, 4, now),
        None,
        "no budget for the reason: no limit"
    );
    let tie = [
        budget(json!({"nodes": "2"})),
        budget(json!({"nodes": "50%"})),
    ];
    let active = budget_limit(&tie, DisruptionReason::Empty, 4, at(now))
        .unwrap()
        .unwrap();
    assert_eq!(active.index, 0, "ties go to the first");
    assert_eq!(active.budget, "nodes: \"2\"");
}

#[test]
fn a_schedule_is_active_for_its_duration_after_each_hit_in_utc() {
    let budgets = [budget(json!({
        "nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h",
    }))];
    let reason = DisruptionReason::Drifted;
    // Monday 2025-03-03.
    assert_eq!(limit(&budgets, reason, 10, "2025-03-03T08:59:59Z"), None);
    assert_eq!(limit(&budgets, reason, 10, "2025-03-03T09:00:00Z"), Some(0));
    assert_eq!(limit(&budgets, reason, 10, "2025-03-03T16:59:59Z"), Some(0));
    assert_eq!(
        limit(&budgets, reason, 10, "2025-03-03T17:00:00Z"),
        None,
        "the window is [hit, hit + duration)"
    );
    assert_eq!(
        limit(&budgets, reason, 10, "2025-03-01T10:00:00Z"),
        None,
        "Saturday"
    );
    let active = budget_limit(&budgets, reason, 10, at("2025-03-03T12:00:00Z"))
        .unwrap()
        .unwrap();
    assert!(active.scheduled);
    assert_eq!(active.active_until, Some(at("2025-03-03T17:00:00Z")));
    assert_eq!(
        active.budget,
        "nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h"
    );
}

#[test]
fn overlapping_hits_extend_the_window() {
    let hourly = [budget(
        json!({"nodes": "0", "schedule": "0 9-16 * * *", "duration": "90m"}),
    )];
    let active = budget_limit(
        &hourly,
        DisruptionReason::Empty,
        3,
        at("2025-03-03T10:15:00Z"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(active.active_until, Some(at("2025-03-03T17:30:00Z")));
    let always = [budget(
        json!({"nodes": "0", "schedule": "@hourly", "duration": "2h"}),
    )];
    let active = budget_limit(
        &always,
        DisruptionReason::Empty,
        3,
        at("2025-03-03T10:15:00Z"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(active.active_until, None, "no end in sight");
}

#[test]
fn a_schedule_that_never_fires_counts_as_active() {
    let budgets = [budget(
        json!({"nodes": "0", "schedule": "0 0 30 2 *", "duration": "1h"}),
    )];
    assert_eq!(
        limit(&budgets, DisruptionReason::Empty, 3, "2025-03-03T10:15:00Z"),
        Some(0)
    );
}

#[test]
fn an_invalid_budget_fails_closed_for_every_reason() {
    let cases = [
        (json!({"nodes": "ten"}), "nodes \"ten\""),
        (
            json!({"nodes": "1", "schedule": "0 9 * * 7", "duration": "1h"}),
            "schedule",
        ),
        (
            json!({"nodes": "1", "schedule": "@daily"}),
            "needs a duration",
        ),
        (json!({"nodes": "1", "duration": "1h"}), "needs a schedule"),
    ];
    for (bad, message) in cases {
        let budgets = [
            budget(json!({"nodes": "100%", "reasons": ["Drifted"]})),
            budget(bad.clone()),
        ];
        for reason in REASONS {
            let error = budget_limit(&budgets, reason, 10, at("2025-03-03T10:15:00Z")).unwrap_err();
            assert_eq!(error.index, 1, "{bad}");
            assert!(error.to_string().contains(message), "{error}");
        }
    }
    // Even an inactive or unrelated budget with a bad `nodes` stops everything.
    let budgets = [
        budget(json!({"nodes": "5"})),
        budget(
            json!({"nodes": "x", "schedule": "0 0 1 1 *", "duration": "1m", "reasons": ["Empty"]}),
        ),
    ];
    assert!(
        budget_limit(
            &budgets,
            DisruptionReason::Drifted,
            10,
            at("2025-03-03T10:15:00Z")
        )
        .is_err()
    );
}

fn node_pool(budgets: Option<Value>) -> NodePool {
    let mut disruption = json!({ "consolidateAfter": "0s" });
    if let Some(budgets) = budgets {
        disruption["budgets"] = budgets;
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "pool" },
        "spec": {
            "disruption": disruption,
            "template": { "spec": {
                "requirements": [],
                "nodeClassRef": { "group": "g", "kind": "K", "name": "n" },
            } },
        },
    }))
    .unwrap()
}

fn managed(
    name: &str,
    ready: bool,
    initialized: bool,
    extra: Value,
) -> (k8s_openapi::api::core::v1::Node, karpenter_api::NodeClaim) {
    let mut node = json!({
        "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": "pool" } },
        "spec": { "providerID": format!("fake:///{name}") },
        "status": { "conditions": [ { "type": "Ready", "status": if ready { "True" } else { "False" } } ] },
    });
    if initialized {
        node["metadata"]["labels"]["karpenter.sh/initialized"] = json!("true");
    }
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": format!("{name}-claim"), "labels": { "karpenter.sh/nodepool": "pool" } },
        "spec": { "requirements": [], "nodeClassRef": { "group": "g", "kind": "K", "name": "n" } },
        "status": { "providerID": format!("fake:///{name}") },
    });
    if let Some(taints) = extra.get("taints") {
        node["spec"]["taints"] = taints.clone();
    }
    if let Some(conditions) = extra.get("claimConditions") {
        claim["status"]["conditions"] = conditions.clone();
    }
    if let Some(deleted) = extra.get("claimDeleted") {
        claim["metadata"]["deletionTimestamp"] = deleted.clone();
    }
    (
        serde_json::from_value(node).unwrap(),
        serde_json::from_value(claim).unwrap(),
    )
}

fn pool_snapshot(
    budgets: Option<Value>,
    nodes: Vec<(k8s_openapi::api::core::v1::Node, karpenter_api::NodeClaim)>,
) -> Snapshot {
    let mut snapshot = Snapshot {
        node_pools: vec![Arc::new(node_pool(budgets))],
        ..Snapshot::default()
    };
    for (node, claim) in nodes {
        snapshot.nodes.push(Arc::new(node));
        snapshot.node_claims.push(Arc::new(claim));
    }
    snapshot.sort();
    snapshot
}

#[test]
fn nodes_already_disrupting_use_up_the_budget() {
    let terminating = json!([{ "type": "InstanceTerminating", "status": "True", "lastTransitionTime": "2025-03-01T00:00:00Z" }]);
    let nodes = vec![
        managed("a", true, true, json!({})),
        managed("b", false, true, json!({})),
        managed(
            "c",
            true,
            true,
            json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}),
        ),
        managed(
            "d",
            true,
            true,
            json!({"claimDeleted": "2025-03-01T00:00:00Z"}),
        ),
        managed("e", true, false, json!({})),
        managed("f", true, true, json!({"claimConditions": terminating})),
        managed("g", true, true, json!({})),
    ];
    let snapshot = pool_snapshot(Some(json!([{"nodes": "3"}])), nodes);
    let counts = count_nodes(&snapshot);
    let pool = &counts["pool"];
    assert_eq!(
        pool.nodes, 5,
        "uninitialized e and terminating f are not counted"
    );
    assert_eq!(pool.disrupting, vec!["b", "c", "d"]);
    let allowed = allowed_disruptions(
        &snapshot.node_pools[0],
        &snapshot,
        at("2025-03-01T12:00:00Z"),
    )
    .unwrap();
    assert_eq!(
        allowed[&DisruptionReason::Drifted],
        0,
        "3 allowed, 3 already disrupting"
    );
    assert_eq!(allowed.len(), 3);
    let snapshot = pool_snapshot(
        Some(json!([{"nodes": "4"}])),
        vec![
            managed("a", true, true, json!({})),
            managed("b", false, true, json!({})),
        ],
    );
    assert_eq!(
        budget_mapping(
            &snapshot,
            DisruptionReason::Empty,
            at("2025-03-01T12:00:00Z")
        ),
        BTreeMap::from([("pool".to_owned(), 3)])
    );
}

#[test]
fn without_budgets_the_default_is_ten_percent() {
    let nodes = (0..11)
        .map(|i| managed(&format!("n{i}"), true, true, json!({})))
        .collect();
    let snapshot = pool_snapshot(None, nodes);
    assert_eq!(
        snapshot.node_pools[0].spec.disruption.budgets.len(),
        1,
        "serde's default"
    );
    let all = allowances(&snapshot, at("2025-03-01T12:00:00Z"));
    assert_eq!(all["pool"].allowed(DisruptionReason::Underutilized), 2);
    let nodes = (0..11)
        .map(|i| managed(&format!("n{i}"), true, true, json!({})))
        .collect();
    let empty_list = pool_snapshot(Some(json!([])), nodes);
    let all = allowances(&empty_list, at("2025-03-01T12:00:00Z"));
    let allowance = &all["pool"];
    assert_eq!(allowance.allowed(DisruptionReason::Drifted), 2);
    match &allowance.reasons[&DisruptionReason::Drifted].limit {
        Limit::Budget(active) => assert_eq!(active.budget, "nodes: \"10%\" (the default)"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_invalid_budget_is_reported_and_allows_nothing() {
    let snapshot = pool_snapshot(
        Some(
            json!([{"nodes": "100%"}, {"nodes": "1", "schedule": "whenever you like", "duration": "1h"}]),
        ),
        vec![managed("a", true, true, json!({}))],
    );
    let error = allowed_disruptions(
        &snapshot.node_pools[0],
        &snapshot,
        at("2025-03-01T12:00:00Z"),
    )
    .unwrap_err();
    assert_eq!(error.index, 1);
    assert!(
        matches!(error.problem, BudgetProblem::Schedule { .. }),
        "{error}"
    );
    assert_eq!(
        budget_mapping(
            &snapshot,
            DisruptionReason::Drifted,
            at("2025-03-01T12:00:00Z")
        )["pool"],
        0
    );
}

#[test]
fn no_active_budget_means_unlimited() {
    let snapshot = pool_snapshot(
        Some(json!([{"nodes": "0", "schedule": "0 0 1 1 *", "duration": "1h"}])),
        vec![managed("a", true, true, json!({}))],
    );
    let all = allowances(&snapshot, at("2025-03-01T12:00:00Z"));
    assert_eq!(all["pool"].allowed(DisruptionReason::Empty), u32::MAX);
    assert_eq!(
        all["pool"].reasons[&DisruptionReason::Empty].limit,
        Limit::Unlimited
    );
}
