//! Criterion benchmarks of one disruption pass's decision (candidates, budgets, every method in
//! order, the scheduling simulations): the pure part of a pass, without the reads and writes.
//! Target: 1,000 nodes / 20,000 pods under 1 s; 5,000 nodes / 100,000 pods under
//! 5 s. Run:
//!
//! ```text
//! cargo bench -p core-svc --bench disruption
//! ```
//!
//! Three cases per size, every node running 20 pods:
//!
//! - `drift`: 5 % of the nodes drifted, the nodes packed so that their pods fit nowhere else:
//!   emptiness finds nothing, drift simulates the oldest and replaces it;
//! - `consolidate`: nothing drifted, every node consolidatable with room for one more pod:
//!   multi-node consolidation finds nodes whose pods spread over the others;
//! - `no-op`: nothing drifted, every node consolidatable but packed so that nothing moves:
//!   every method runs to its end, the worst pass;
//! - `no-op-spread`: the same, every pod spreading over zones with its app's other pods (a
//!   constraint that makes every node count in every simulation).
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "criterion's macros generate undocumented items; a benchmark's setup may panic; \
              each case prints what it decided, so its time is read against the right work"
)]

use std::collections::{BTreeSet, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use core_svc::apis::{NodeClaim, NodePool};
use core_svc::cloudprovider::fake::instance_type;
use core_svc::cluster::{SlimPod, Snapshot};
use core_svc::controllers::Settings;
use core_svc::controllers::disruption::{DisruptionOptions, PassInputs, decide, default_methods};
use core_svc::controllers::provisioning::input::Catalogue;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

const PODS_PER_NODE: usize = 20;
const INSTANCE_TYPE: &str = "bench-16x64";

fn now() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn node_class_ref() -> Value {
    json!({ "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default" })
}

/// `nodes` nodes of 16 CPU running 20 pods each; `drifted` of them drifted; each pod asks for
/// `pod_cpu` millicores and, with `spread`, spreads over zones with the other pods of its app.
fn snapshot(nodes: usize, drifted: usize, pod_cpu: u32, spread: bool) -> Snapshot {
    let start = now()
        .checked_sub(jiff::SignedDuration::from_hours(24))
        .unwrap();
    let pool: NodePool = from_json(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "default", "uid": "pool-uid" },
        "spec": {
            "disruption": { "consolidateAfter": "0s", "budgets": [{ "nodes": "10%" }] },
            "template": { "spec": {
                "nodeClassRef": node_class_ref(),
                "requirements": [
                    { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
                ],
            } },
        },
    }));
    let mut snapshot = Snapshot {
        node_pools: vec![Arc::new(pool)],
        ..Snapshot::default()
    };
    for i in 0..nodes {
        let claim_name = format!("default-{i:05}");
        let node_name = format!("node-{i:05}");
        let provider_id = format!("fake:///test-zone-{}/i-{i:08}", i % 3 + 1);
        let zone = format!("test-zone-{}", i % 3 + 1);
        let labels = json!({
            "karpenter.sh/nodepool": "default",
            "node.kubernetes.io/instance-type": INSTANCE_TYPE,
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "on-demand",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        });
        let condition =
            |type_: &str| json!({ "type": type_, "status": "True", "lastTransitionTime": start });
        let mut conditions = vec![
            condition("Launched"),
            condition("Registered"),
            condition("Initialized"),
            condition("Consolidatable"),
        ];
        if i < drifted {
            conditions.push(json!({ "type": "Drifted", "status": "True", "reason": "NodeClassDrift",
                "lastTransitionTime": start.checked_add(jiff::SignedDuration::from_secs(i as i64)).unwrap() }));
        }
        let allocatable = json!({ "cpu": "15900m", "memory": "63Gi", "pods": "110" });
        snapshot.node_claims.push(Arc::new(from_json::<NodeClaim>(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": claim_name, "labels": labels, "creationTimestamp": start },
            "spec": { "nodeClassRef": node_class_ref(), "requirements": [
                { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE] },
            ] },
            "status": {
                "providerID": provider_id,
                "nodeName": node_name,
                "capacity": { "cpu": "16", "memory": "64Gi", "pods": "110" },
                "allocatable": allocatable,
                "conditions": conditions,
            },
        }))));
        let mut node_labels = labels.clone();
        node_labels["karpenter.sh/initialized"] = json!("true");
        node_labels["kubernetes.io/hostname"] = json!(node_name);
        snapshot.nodes.push(Arc::new(from_json::<Node>(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": node_name, "labels": node_labels },
            "spec": { "providerID": provider_id },
            "status": {
                "conditions": [{ "type": "Ready", "status": "True" }],
                "allocatable": allocatable,
            },
        }))));
        for p in 0..PODS_PER_NODE {
            let app = format!("app-{}", (i * PODS_PER_NODE + p) % 500);
            snapshot.pods.push(Arc::new(SlimPod::from(from_json::<Pod>(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "namespace": "default",
                    "name": format!("{app}-{i:05}-{p:02}"),
                    "uid": format!("uid-{i}-{p}"),
                    "labels": { "app": app },
                    "creationTimestamp": start,
                    "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": app, "uid": "rs-uid", "controller": true }],
                },
                "spec": {
                    "nodeName": node_name,
                    "containers": [{ "name": "app", "image": "app",
                        "resources": { "requests": { "cpu": format!("{pod_cpu}m"), "memory": "1Gi" } } }],
                    "topologySpreadConstraints": if spread { json!([{
                        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": { "matchLabels": { "app": app } },
                    }]) } else { json!([]) },
                },
                "status": {
                    "phase": "Running",
                    "startTime": start,
                    "conditions": [{ "type": "Ready", "status": "True" }],
                },
            })))));
        }
    }
    snapshot.sort();
    snapshot
}

fn catalogue() -> Catalogue {
    vec![
        Arc::new(instance_type(INSTANCE_TYPE, 16, 64, 110, "amd64")),
        Arc::new(instance_type("bench-8x32", 8, 32, 110, "amd64")),
        Arc::new(instance_type("bench-4x16", 4, 16, 110, "amd64")),
        Arc::new(instance_type("bench-32x128", 32, 128, 110, "amd64")),
    ]
    .into()
}

fn pass(c: &mut Criterion) {
    let settings = Settings::default();
    let options = DisruptionOptions {
        require_ready_node_class: false,
        ..DisruptionOptions::default()
    };
    let methods = default_methods(options.consolidation);
    let catalogue = catalogue();
    let mut group = c.benchmark_group("disruption_pass");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    for nodes in [1_000, 5_000] {
        // 20 pods of 790m leave 100m free on a node (15.9 CPU allocatable): nothing moves;
        // 20 of 750m leave 900m: each node can take one more.
        for (case, drifted, pod_cpu, spread) in [
            ("drift", nodes / 20, 790, false),
            ("consolidate", 0, 750, false),
            ("no-op", 0, 790, false),
            ("no-op-spread", 0, 790, true),
        ] {
            let snapshot = snapshot(nodes, drifted, pod_cpu, spread);
            let pool: &NodePool = &snapshot.node_pools[0];
            let node_pools = vec![(pool, catalogue.clone())];
            let catalogues: HashMap<String, Catalogue> =
                HashMap::from([("default".to_owned(), catalogue.clone())]);
            let nominated = BTreeSet::new();
            let inputs = PassInputs {
                snapshot: &snapshot,
                now: now(),
                node_pools: &node_pools,
                catalogues: &catalogues,
                in_flight: &[],
                nominated: &nominated,
                observations: &[],
                options: &options,
                settings: &settings,
                memo: None,
            };
            let decided = decide(inputs, &methods);
            eprintln!(
                "{case} {nodes} nodes / {} pods: method {:?} decided (candidates, replacements) {:?}",
                snapshot.pods.len(),
                decided
                    .acted
                    .as_ref()
                    .map(|(index, _)| methods[*index].name()),
                decided.acted.as_ref().map(|(_, outcome)| outcome
                    .commands
                    .iter()
                    .map(|command| (command.candidates.len(), command.replacements.len()))
                    .collect::<Vec<_>>()),
            );
            group.bench_with_input(
                BenchmarkId::new(case, format!("{nodes}n-{}p", snapshot.pods.len())),
                &inputs,
                |b, inputs| b.iter(|| decide(black_box(*inputs), &methods)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, pass);
criterion_main!(benches);
