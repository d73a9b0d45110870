//! What the core-svc integration tests share: the in-memory ports a controller runs on (the
//! in-memory cluster, the fake cloud provider, a fake clock and recorded events), and the
//! smallest valid objects, which each test dresses (by a JSON patch) with what it looks at.

#![allow(
    dead_code,
    reason = "every test crate compiles this module and each uses a part of it"
)]

use std::sync::Arc;

use core_svc::apis::{NodeClaim, NodePool};
use core_svc::clock::FakeClock;
use core_svc::cloudprovider::FakeCloudProvider;
use core_svc::cluster::InMemoryCluster;
use core_svc::controllers::{Context, Settings};
use core_svc::events::MemoryEvents;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The in-memory cluster's seed: generated names and UIDs repeat from run to run.
const SEED: u64 = 7;

/// When the fake clock starts.
pub(crate) fn start() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

/// The ports a controller runs on, all in memory and on one fake clock.
pub(crate) struct Harness {
    pub(crate) cluster: Arc<InMemoryCluster>,
    pub(crate) cloud: Arc<FakeCloudProvider>,
    pub(crate) clock: FakeClock,
    pub(crate) events: Arc<MemoryEvents>,
}

impl Harness {
    /// An empty cluster and a fake cloud serving `TestNodeClass`, at [`start`].
    pub(crate) fn new() -> Self {
        Self::with_cloud(FakeCloudProvider::new())
    }

    /// An empty cluster and `cloud`, at [`start`].
    pub(crate) fn with_cloud(cloud: FakeCloudProvider) -> Self {
        let clock = FakeClock::new(start());
        Self {
            cluster: Arc::new(InMemoryCluster::new(Arc::new(clock.clone()), SEED)),
            cloud: Arc::new(cloud),
            clock,
            events: Arc::new(MemoryEvents::new()),
        }
    }

    /// A controller context over these ports, with the default settings.
    pub(crate) fn context(&self) -> Context<InMemoryCluster, FakeCloudProvider> {
        Context {
            cluster: Arc::clone(&self.cluster),
            cloud: Arc::clone(&self.cloud),
            clock: Arc::new(self.clock.clone()),
            events: self.events.clone(),
            settings: Settings::default(),
        }
    }
}

/// A fixture written as JSON, typed.
pub(crate) fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// Merges `patch` into `target`: objects key by key and recursively; anything else, `null`
/// included, replaces what was there.
fn merge(target: &mut Value, patch: Value) {
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
pub(crate) fn merged(mut base: Value, patch: Value) -> Value {
    merge(&mut base, patch);
    base
}

/// The reference to the `default` TestNodeClass, as JSON.
fn node_class_ref() -> Value {
    json!({ "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default" })
}

/// A TestNodeClass `name`; `patch` merged in.
pub(crate) fn test_node_class(name: &str, patch: Value) -> DynamicObject {
    from_json(merged(
        json!({
            "apiVersion": "test.karpenter.sh/v1",
            "kind": "TestNodeClass",
            "metadata": { "name": name },
        }),
        patch,
    ))
}

/// A NodeClaim `name` of the `default` TestNodeClass with no requirements; `patch` merged in.
pub(crate) fn node_claim(name: &str, patch: Value) -> NodeClaim {
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
pub(crate) fn node_pool(name: &str, patch: Value) -> NodePool {
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

/// A Node `name`; `patch` merged in.
pub(crate) fn node(name: &str, patch: Value) -> Node {
    from_json(merged(
        json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } }),
        patch,
    ))
}

/// A pod `namespace/name` of the ReplicaSet `replica_set`, labelled `app: <replica_set>`,
/// running one `nginx` container; `patch` merged in.
pub(crate) fn replica_set_pod(namespace: &str, name: &str, replica_set: &str, patch: Value) -> Pod {
    from_json(merged(
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": namespace,
                "name": name,
                "labels": { "app": replica_set },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                    "uid": "00000000-0000-4000-8000-000000000001", "controller": true,
                }],
            },
            "spec": { "containers": [{ "name": "app", "image": "nginx" }] },
        }),
        patch,
    ))
}

/// A PodDisruptionBudget `namespace/name` with `spec`.
pub(crate) fn pdb(namespace: &str, name: &str, spec: Value) -> PodDisruptionBudget {
    from_json(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "namespace": namespace, "name": name },
        "spec": spec,
    }))
}
