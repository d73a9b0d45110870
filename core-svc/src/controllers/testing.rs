//! Fixtures core-svc's tests share, its unit tests and (through the `testing` feature) its
//! integration tests: times as offsets from one instant, the node class kind of the tests'
//! provider, JSON merging, and the smallest valid objects, which each test dresses (by a JSON
//! patch) with what it looks at.

#![allow(
    clippy::unwrap_used,
    reason = "test fixtures: a fixture that does not parse is a failed test, with its location"
)]

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use kube::core::DynamicObject;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::cloudprovider::{CloudInstance, InstanceState, NodeClassKind};
use crate::cluster::Snapshot;

/// `seconds` after a fixed instant (2023-11-14T22:13:20Z), so tests read as offsets.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

/// The node class kinds the tests' provider serves: `test.karpenter.sh/v1` `TestNodeClass`.
pub fn kinds() -> Vec<NodeClassKind> {
    vec![NodeClassKind {
        group: "test.karpenter.sh".into(),
        version: "v1".into(),
        kind: "TestNodeClass".into(),
    }]
}

/// The reference to the `default` TestNodeClass, as JSON.
fn node_class_ref() -> Value {
    json!({ "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default" })
}

/// A fixture written as JSON, typed.
pub fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Merges `patch` into `target`: objects key by key and recursively; anything else, `null`
/// included, replaces what was there.
pub fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

/// `base` with `patch` merged in.
pub fn merged(mut base: Value, patch: Value) -> Value {
    merge(&mut base, patch);
    base
}

/// `object` with `patch` merged into its JSON.
pub fn patched<T: Serialize + DeserializeOwned>(object: &T, patch: Value) -> T {
    from_json(merged(serde_json::to_value(object).unwrap(), patch))
}

/// A NodeClaim `name` of the `default` TestNodeClass with no requirements; `patch` merged in.
pub fn node_claim(name: &str, patch: Value) -> NodeClaim {
    from_json(merged(
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": name },
            "spec": { "nodeClassRef": node_class_ref(), "requirements": [] },
        }),
        patch,
    ))
}

/// A NodePool `name` whose template takes the `default` TestNodeClass with no requirements;
/// `patch` merged in.
pub fn node_pool(name: &str, patch: Value) -> NodePool {
    from_json(merged(
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": { "name": name },
            "spec": { "template": { "spec": {
                "nodeClassRef": node_class_ref(),
                "requirements": [],
            } } },
        }),
        patch,
    ))
}

/// A TestNodeClass `name`; `patch` merged in.
pub fn node_class(name: &str, patch: Value) -> DynamicObject {
    from_json(merged(
        json!({
            "apiVersion": "test.karpenter.sh/v1",
            "kind": "TestNodeClass",
            "metadata": { "name": name },
        }),
        patch,
    ))
}

/// A Node `name`; `patch` merged in.
pub fn node(name: &str, patch: Value) -> Node {
    from_json(merged(
        json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } }),
        patch,
    ))
}

/// A Pod `default/name` without containers; `patch` merged in.
pub fn pod(name: &str, patch: Value) -> Pod {
    from_json(merged(
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "namespace": "default", "name": name },
            "spec": { "containers": [] },
        }),
        patch,
    ))
}

/// A pending Pod `default/name` with UID `uid-NAME` that the kube-scheduler marked
/// `PodScheduled=False, Unschedulable`; `patch` merged in.
pub fn unschedulable_pod(name: &str, patch: Value) -> Pod {
    pod(
        name,
        merged(
            json!({
                "metadata": { "uid": format!("uid-{name}") },
                "status": { "phase": "Pending", "conditions": [
                    { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" },
                ]},
            }),
            patch,
        ),
    )
}

/// A running instance of the cloud as `provider_id`, launched for the NodeClaim `node_claim`
/// (none: not Karpenter's), with no creation time, capacity or labels.
pub fn running_instance(node_claim: Option<&str>, provider_id: &str) -> CloudInstance {
    CloudInstance {
        node_claim_name: node_claim.map(str::to_owned),
        provider_id: provider_id.to_owned(),
        image_id: None,
        labels: std::collections::BTreeMap::new(),
        capacity: Default::default(),
        allocatable: Default::default(),
        creation_time: None,
        deletion_time: None,
        state: InstanceState::Running,
    }
}

/// Owned copies of a snapshot's shared objects, for assertions that keep them.
pub fn owned<T: Clone>(shared: &[std::sync::Arc<T>]) -> Vec<T> {
    shared.iter().map(|object| T::clone(object)).collect()
}

/// A snapshot of `node_claims` and `nodes`, sorted as the cluster hands snapshots out.
pub fn snapshot(node_claims: Vec<NodeClaim>, nodes: Vec<Node>) -> Snapshot {
    let mut snapshot = Snapshot {
        node_claims: crate::cluster::shared(node_claims),
        nodes: crate::cluster::shared(nodes),
        ..Snapshot::default()
    };
    snapshot.sort();
    snapshot
}
