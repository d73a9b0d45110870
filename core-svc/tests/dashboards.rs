//! The Grafana dashboards in `deploy/components/monitoring/dashboards/` query only metrics
//! core-svc exports: every `karpenter_*` name in a panel's query or a template variable's is a
//! sample name of the registry `core-svc run` serves at `:8080/metrics` (a counter's `_total`,
//! a histogram's `_bucket`, `_sum` and `_count`). A renamed metric fails here, not on an
//! operator's empty panel.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use core_svc::cloudprovider::{CallMetrics, Rpc};
use core_svc::events::{Event, EventType, Events as _, MemoryEvents, ObjectRef, Reason};
use core_svc::metrics::{ClusterState, MeteredEvents, Metrics};
use serde_json::Value;

fn dashboards() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/components/monitoring/dashboards");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every sample name the registry can serve, from its `# TYPE` lines. A family shows only
/// once it has a series, so every one gets one first: an event of every reason (each field
/// set, NodeClaims as the object), the gauges, a plugin call.
fn exported() -> BTreeSet<String> {
    let calls = Arc::new(CallMetrics::new());
    calls.record_attempt(Rpc::Create, tonic::Code::Unavailable);
    calls.observe_call(Rpc::Create, std::time::Duration::from_millis(20));
    let metrics = Arc::new(Metrics::new(Some(calls)));
    let events = MeteredEvents::new(MemoryEvents::new(), Arc::clone(&metrics));
    let fields: std::collections::BTreeMap<String, String> =
        ["nodePool", "reason", "decision", "disruptionReason"]
            .into_iter()
            .map(|key| (key.to_owned(), "x".to_owned()))
            .collect();
    for reason in Reason::ALL {
        events.record(Event {
            time: jiff::Timestamp::UNIX_EPOCH,
            object: ObjectRef::cluster_scoped("NodeClaim", "x"),
            type_: EventType::Normal,
            reason: *reason,
            message: String::new(),
            fields: fields.clone(),
        });
    }
    metrics.set_allowed_disruptions("x", "Drifted", 1);
    let mut state = ClusterState::default();
    state.node_claims.insert(("x".to_owned(), "Pending"), 1);
    state.usage.insert(("x".to_owned(), "cpu".to_owned()), 1.0);
    state.limits.insert(("x".to_owned(), "cpu".to_owned()), 1.0);
    metrics.set_cluster_state(&state);
    let text = metrics.encode().expect("the exposition");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("# TYPE NAME KIND");
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// The `karpenter_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("karpenter_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..len].to_owned());
        }
        rest = &tail[len..];
    }
    names
}

/// Every query of a dashboard: the panels' targets and the template variables'.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().expect("a target's expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            out.push(query.to_owned());
        }
    }
    out
}

#[test]
fn every_dashboard_queries_only_exported_metrics() {
    let exported = exported();
    assert!(
        exported.contains("karpenter_cloudprovider_duration_seconds_bucket"),
        "{exported:?}"
    );
    let dashboards = dashboards();
    assert_eq!(dashboards.len(), 3, "capacity, disruption, provider");
    for (name, dashboard) in &dashboards {
        let queries = queries(dashboard);
        assert!(!queries.is_empty(), "{name}: no query");
        for query in queries {
            let names = metric_names(&query);
            assert!(
                !names.is_empty(),
                "{name}: {query:?} names no karpenter metric"
            );
            for metric in names {
                assert!(
                    exported.contains(&metric),
                    "{name}: {metric} is not exported (query {query:?}); exported: {exported:?}"
                );
            }
        }
    }
}

#[test]
fn every_dashboard_is_a_grafana_dashboard_with_unique_panel_ids() {
    let mut uids = BTreeSet::new();
    for (name, dashboard) in dashboards() {
        let uid = dashboard["uid"].as_str().expect("a uid");
        assert!(uids.insert(uid.to_owned()), "{name}: uid {uid} twice");
        assert!(dashboard["title"].is_string(), "{name}");
        assert!(dashboard["schemaVersion"].is_u64(), "{name}");
        let mut ids = BTreeSet::new();
        for panel in dashboard["panels"].as_array().expect("panels") {
            let id = panel["id"].as_u64().expect("a panel id");
            assert!(ids.insert(id), "{name}: panel id {id} twice");
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{name}: panels use the dashboard's data source variable"
            );
        }
    }
}

#[test]
fn metric_names_are_found_whole() {
    assert_eq!(
        metric_names("sum by (le) (rate(karpenter_a_bucket{x=\"y\"}[5m])) / xkarpenter_b"),
        BTreeSet::from(["karpenter_a_bucket".to_owned()])
    );
}
