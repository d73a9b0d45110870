//! Snapshots and method inputs the unit tests of the disruption modules share.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use serde_json::{Value, json};

use super::MethodInput;
use super::simulate::{SimulationSources, Simulator};
use crate::cloudprovider::fake::instance_type;
use crate::cluster::Snapshot;
use crate::controllers::Settings;
use crate::controllers::provisioning::input::Catalogue;
use crate::controllers::testing;
use crate::disruption::{CandidateSelector, DisruptionClass};

/// The instance type every fixture node runs: 4 CPU (3.9 allocatable), 8 GiB, 10 pods.
pub(crate) const INSTANCE_TYPE: &str = "default-instance-type";

/// The fixtures' instant.
pub(crate) fn now() -> Timestamp {
    testing::at(0)
}

/// A condition `type_=True` since `at`.
pub(crate) fn condition(type_: &str, at: Timestamp) -> Value {
    json!({ "type": type_, "status": "True", "lastTransitionTime": at })
}

/// NodePool `name` (on-demand only); `disruption` merged into its `spec.disruption`.
pub(crate) fn pool(name: &str, disruption: Value) -> NodePool {
    let mut spec = json!({ "template": { "spec": { "requirements": [
            { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
        ] } } });
    let disruption = if disruption.is_null() {
        json!({})
    } else {
        disruption
    };
    spec["disruption"] = testing::merged(
        json!({ "consolidateAfter": "0s", "budgets": [{ "nodes": "100%" }] }),
        disruption,
    );
    testing::node_pool(
        name,
        json!({ "metadata": { "uid": format!("{name}-uid") }, "spec": spec }),
    )
}

/// The catalogue of every fixture NodePool.
pub(crate) fn catalogue() -> Catalogue {
    vec![Arc::new(instance_type(INSTANCE_TYPE, 4, 8, 10, "amd64"))].into()
}

/// An initialized node `node-<suffix>` of NodeClaim `claim-<suffix>` in `pool`, with
/// `conditions` added to its NodeClaim (Launched, Registered and Initialized are there).
pub(crate) fn managed(suffix: &str, pool: &str, conditions: Vec<Value>) -> (NodeClaim, Node) {
    let node_name = format!("node-{suffix}");
    let provider_id = format!("fake:///test-zone-1/i-{suffix}");
    let labels = json!({
        "karpenter.sh/nodepool": pool,
        "node.kubernetes.io/instance-type": INSTANCE_TYPE,
        "topology.kubernetes.io/zone": "test-zone-1",
        "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    });
    let mut all = vec![
        condition("Launched", testing::at(-3600)),
        condition("Registered", testing::at(-3600)),
        condition("Initialized", testing::at(-3600)),
    ];
    all.extend(conditions);
    let allocatable = json!({ "cpu": "3900m", "memory": "8Gi", "pods": "10" });
    let claim = testing::node_claim(
        &format!("claim-{suffix}"),
        json!({
            "metadata": { "labels": labels, "uid": format!("uid-{suffix}") },
            "status": {
                "providerID": provider_id,
                "nodeName": node_name,
                "capacity": { "cpu": "4", "memory": "8Gi", "pods": "10" },
                "allocatable": allocatable,
                "conditions": all,
            },
        }),
    );
    let mut node_labels = labels;
    node_labels["karpenter.sh/initialized"] = json!("true");
    node_labels["kubernetes.io/hostname"] = json!(node_name);
    let node = testing::node(
        &node_name,
        json!({
            "metadata": { "labels": node_labels },
            "spec": { "providerID": provider_id },
            "status": {
                "conditions": [{ "type": "Ready", "status": "True" }],
                "allocatable": allocatable,
            },
        }),
    );
    (claim, node)
}

/// A running pod `default/name` of its own ReplicaSet on `node` (none: pending) asking for
/// `cpu`.
pub(crate) fn pod(name: &str, node: Option<&str>, cpu: &str) -> Pod {
    let mut value = json!({
        "metadata": {
            "uid": format!("uid-{name}"),
            "labels": { "app": name },
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": name, "uid": "rs-uid", "controller": true }],
        },
        "spec": { "containers": [{ "name": "c", "image": "c",
            "resources": { "requests": { "cpu": cpu } } }] },
    });
    match node {
        Some(node) => {
            value["spec"]["nodeName"] = json!(node);
            value["status"] = json!({ "phase": "Running",
                    "conditions": [{ "type": "Ready", "status": "True" }] });
        }
        None => {
            value["status"] = json!({ "phase": "Pending", "conditions": [
                    { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" },
                ] });
        }
    }
    testing::pod(name, value)
}

/// A sorted snapshot of these objects.
pub(crate) fn snapshot(
    pools: Vec<NodePool>,
    managed: Vec<(NodeClaim, Node)>,
    pods: Vec<Pod>,
) -> Snapshot {
    let (node_claims, nodes): (Vec<_>, Vec<_>) = managed.into_iter().unzip();
    let mut snapshot = Snapshot {
        node_pools: crate::cluster::shared(pools),
        node_claims: crate::cluster::shared(node_claims),
        nodes: crate::cluster::shared(nodes),
        pods: crate::cluster::shared(pods),
        ..Snapshot::default()
    };
    snapshot.sort();
    snapshot
}

/// Runs `f` on the method input of `class` over `snapshot` at [`now`], with `budgets`
/// (every NodePool gets the fixture catalogue).
pub(crate) fn with_input<R>(
    snapshot: &Snapshot,
    class: DisruptionClass,
    budgets: &BTreeMap<String, u32>,
    f: impl FnOnce(&MethodInput<'_>) -> R,
) -> R {
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(snapshot, now(), &nominated);
    let candidates = selector.candidates(class);
    let catalogues: HashMap<String, Catalogue> = snapshot
        .node_pools()
        .map(|pool| (pool.metadata.name.clone().unwrap_or_default(), catalogue()))
        .collect();
    let node_pools: Vec<(&NodePool, Catalogue)> = snapshot
        .node_pools()
        .map(|pool| (pool, catalogue()))
        .collect();
    let leaving = BTreeSet::new();
    let label_policy = core_domain::labels::LabelPolicy::core();
    let simulator = Simulator::new(SimulationSources {
        snapshot,
        node_pools: &node_pools,
        catalogues: &catalogues,
        label_policy: &label_policy,
        preference_policy: core_domain::scheduler::PreferencePolicy::Respect,
        leaving: &leaving,
        memo: None,
        now: now(),
    });
    let settings = Settings::default();
    f(&MethodInput {
        snapshot,
        now: now(),
        candidates: &candidates,
        budgets,
        simulator: &simulator,
        catalogues: &catalogues,
        settings: &settings,
    })
}

/// `pools` each allowing `allowed`.
pub(crate) fn budgets(pools: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pools
        .iter()
        .map(|(pool, allowed)| ((*pool).to_owned(), *allowed))
        .collect()
}
