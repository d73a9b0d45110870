//! What the core-svc integration tests share: the in-memory ports a controller runs on (the
//! in-memory cluster, the fake cloud provider, a fake clock and recorded events), and the
//! smallest valid objects, which each test dresses (by a JSON patch) with what it looks at
//! (core-svc's own fixtures, `core_svc::controllers::testing`, with a few for end-to-end runs).

#![allow(
    dead_code,
    unused_imports,
    reason = "every test crate compiles this module and each uses a part of it"
)]

use std::sync::Arc;

use core_svc::apis::NodeClaim;
use core_svc::clock::FakeClock;
use core_svc::cloudprovider::FakeCloudProvider;
use core_svc::cluster::{Cluster as _, InMemoryCluster};
use core_svc::controllers::{Context, Settings};
use core_svc::events::MemoryEvents;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

pub(crate) use core_svc::controllers::testing::{
    from_json, merged, node, node_claim, node_class, node_pool, owned, pod, running_instance,
};

/// The reference to the `default` EC2NodeClass, as JSON, for the tests whose objects name the
/// AWS provider's node class rather than the fake provider's.
pub(crate) fn ec2_node_class_ref() -> Value {
    json!({ "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" })
}

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

// ---- Stand-ins for the kubelet and the kube-scheduler, for tests that run controllers end
// to end. ----------------------------------------------------------------------------------

/// A CPU quantity (`500m`, `2`) in millicores.
pub(crate) fn milli(quantity: &str) -> i64 {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse().unwrap(),
        None => quantity.parse::<i64>().unwrap() * 1000,
    }
}

/// What a pod's first container requests in CPU, in millicores (0 when nothing).
pub(crate) fn milli_cpu(pod: &core_svc::cluster::SlimPod) -> i64 {
    pod.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"))
        .map_or(0, |q| milli(&q.0))
}

/// A Node's allocatable CPU, in millicores (0 when unknown).
pub(crate) fn node_milli_cpu(node: &Node) -> i64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get("cpu"))
        .map_or(0, |q| milli(&q.0))
}

/// Whether a Node is `Ready=True`.
pub(crate) use core_svc::objects::is_node_ready;

/// The kubelet reporting a Node Ready with `allocatable`.
pub(crate) async fn set_node_ready(cluster: &InMemoryCluster, node: &str, allocatable: &Value) {
    cluster
        .merge_patch_status::<Node>(
            None,
            node,
            &json!({ "status": {
                "conditions": [{ "type": "Ready", "status": "True" }],
                "allocatable": allocatable,
            } }),
        )
        .await
        .unwrap();
}

/// The kubelet of each launched NodeClaim that has no Node yet (and is not being deleted):
/// joins `node-<claim>` with its provider ID and the unregistered taint, Ready at once with
/// the allocatable `allocatable` says for the NodeClaim.
pub(crate) async fn join_launched_nodes(
    cluster: &InMemoryCluster,
    allocatable: impl Fn(&NodeClaim) -> Value,
) {
    let snapshot = cluster.snapshot().await.unwrap();
    for claim in &snapshot.node_claims {
        let Some(status) = &claim.status else {
            continue;
        };
        if status.provider_id.is_empty() || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let joined = snapshot.nodes.iter().any(|node| {
            node.spec
                .as_ref()
                .and_then(|spec| spec.provider_id.as_deref())
                == Some(status.provider_id.as_str())
        });
        if joined {
            continue;
        }
        let name = format!("node-{}", claim.metadata.name.as_deref().unwrap());
        let joining = self::node(
            &name,
            json!({
                "metadata": { "labels": { "kubernetes.io/hostname": name } },
                "spec": {
                    "providerID": status.provider_id,
                    "taints": [{ "key": "karpenter.sh/unregistered", "effect": "NoExecute" }],
                },
            }),
        );
        cluster.create(&joining).await.unwrap();
        set_node_ready(cluster, &name, &allocatable(claim)).await;
    }
}

/// The kube-scheduler: binds each pending pod (not being deleted) to the first node by name
/// that is Ready, untainted, not being deleted and has CPU room (its allocatable CPU), and
/// makes the pod Ready.
pub(crate) async fn schedule_pending(cluster: &InMemoryCluster) {
    let snapshot = cluster.snapshot().await.unwrap();
    let mut used: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for pod in &snapshot.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *used.entry(node).or_default() += milli_cpu(pod);
        }
    }
    for pod in &snapshot.pods {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
            || pod.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let request = milli_cpu(pod);
        let target = snapshot.nodes.iter().find(|node| {
            let name = node.metadata.name.as_deref().unwrap();
            let untainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(Vec::is_empty);
            untainted
                && node.metadata.deletion_timestamp.is_none()
                && is_node_ready(node)
                && used.get(name).copied().unwrap_or(0) + request <= node_milli_cpu(node)
        });
        if let Some(node) = target {
            let node = node.metadata.name.clone().unwrap();
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap();
            cluster.bind_pod(namespace, name, &node).unwrap();
            cluster.set_pod_ready(namespace, name, true).unwrap();
            *used.entry(node).or_default() += request;
        }
    }
}
