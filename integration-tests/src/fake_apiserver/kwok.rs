//! Stand-ins for what a real cluster runs besides the API server, in the manner of KWOK: a
//! kubelet per launched NodeClaim and a kube-scheduler. They write to the in-memory cluster
//! directly (the in-process front door) and publish through [`FakeApiServer::sync`].
//!
//! - **kubelet**: a NodeClaim with a `providerID` gets, `registration_delay` after the stand-in
//!   first sees it, a Ready Node named after the NodeClaim, with its labels, taints, startup
//!   taints and `karpenter.sh/unregistered:NoExecute` (which core removes on registration),
//!   and its capacity and allocatable. Pods bound to a Node run and turn Ready; a deleted pod
//!   stops at once; a pod whose Node is gone is deleted (the pod garbage collector).
//! - **kube-scheduler**: a pending pod is bound to the first Ready Node (by name) whose
//!   allocatable cpu and memory still fit its requests, whose labels match its `nodeSelector`,
//!   and whose NoSchedule/NoExecute taints it tolerates.

use core_svc::cluster::SlimPod;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use core_domain::quantity::Quantity;
use core_svc::cluster::{Cluster, DeleteOptions, InMemoryCluster, Snapshot};
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use serde_json::json;
use tokio::time::Instant;

use super::FakeApiServer;

/// The taint a Node joins with until core registers it.
const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// The stand-ins' memory: when each NodeClaim's instance was first seen.
#[derive(Debug, Default)]
pub struct Kwok {
    registration_delay: Duration,
    first_seen: HashMap<String, Instant>,
}

impl Kwok {
    /// Nodes register `registration_delay` after their NodeClaim has a provider ID.
    pub fn new(registration_delay: Duration) -> Self {
        Self {
            registration_delay,
            first_seen: HashMap::new(),
        }
    }

    /// One round of every stand-in; returns whether anything was written.
    pub async fn step(&mut self, server: &FakeApiServer) -> bool {
        let cluster = server.cluster();
        let Ok(snapshot) = cluster.snapshot().await else {
            return false;
        };
        let before = cluster.revision();
        self.register_nodes(cluster, &snapshot).await;
        run_pods(cluster, &snapshot).await;
        schedule(cluster, &snapshot).await;
        let changed = cluster.revision() != before;
        if changed {
            server.sync().await;
        }
        changed
    }

    async fn register_nodes(&mut self, cluster: &InMemoryCluster, snapshot: &Snapshot) {
        for claim in snapshot.node_claims() {
            let Some(status) = claim.status.as_ref().filter(|s| !s.provider_id.is_empty()) else {
                continue;
            };
            let Some(name) = claim.metadata.name.clone() else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some()
                || snapshot.nodes().any(|node| {
                    node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                        == Some(status.provider_id.as_str())
                })
            {
                continue;
            }
            let seen = *self
                .first_seen
                .entry(name.clone())
                .or_insert_with(Instant::now);
            if seen.elapsed() < self.registration_delay || snapshot.node(&name).is_some() {
                continue;
            }
            let mut taints: Vec<Taint> = claim.spec.taints.clone();
            taints.extend(claim.spec.startup_taints.iter().cloned());
            taints.push(Taint {
                key: UNREGISTERED_TAINT.to_owned(),
                effect: "NoExecute".to_owned(),
                ..Taint::default()
            });
            let mut labels = claim.metadata.labels.clone().unwrap_or_default();
            labels.insert("kubernetes.io/hostname".to_owned(), name.clone());
            let node: Result<Node, _> = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": status.provider_id, "taints": taints},
                "status": {
                    "capacity": status.capacity,
                    "allocatable": status.allocatable,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }));
            if let Ok(node) = node
                && let Err(error) = cluster.create(&node).await
            {
                tracing::debug!(%error, node = %name, "kubelet: registering");
            }
        }
    }
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

fn bound(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

fn names(pod: &SlimPod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

async fn run_pods(cluster: &InMemoryCluster, snapshot: &Snapshot) {
    for pod in snapshot.pods() {
        let Some(node) = bound(pod) else { continue };
        let (namespace, name) = names(pod);
        let result = if snapshot.node(node).is_none() {
            cluster
                .delete::<Pod>(Some(namespace), name, DeleteOptions::grace_period(0))
                .await
        } else if pod.metadata.deletion_timestamp.is_some() {
            cluster.finish_pod_termination(namespace, name)
        } else if !pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        {
            cluster.set_pod_ready(namespace, name, true).map(drop)
        } else {
            Ok(())
        };
        if let Err(error) = result {
            tracing::debug!(%error, pod = %name, "kubelet: pod");
        }
    }
}

/// Milli-units of a quantity, 0 when absent or unreadable.
fn milli(quantity: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    quantity
        .and_then(|q| q.0.parse::<Quantity>().ok())
        .map_or(0, Quantity::millis)
}

fn requests(pod: &SlimPod) -> (i128, i128) {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    containers.iter().fold((0, 0), |(cpu, memory), container| {
        let requests = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        (
            cpu + milli(requests.and_then(|r| r.get("cpu"))),
            memory + milli(requests.and_then(|r| r.get("memory"))),
        )
    })
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let key = t.key.as_deref().unwrap_or_default();
        let effect_matches = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_matches =
            key.is_empty() && t.operator.as_deref() == Some("Exists") || key == taint.key;
        let value_matches = t.operator.as_deref() == Some("Exists")
            || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default();
        effect_matches && key_matches && value_matches
    })
}

async fn schedule(cluster: &InMemoryCluster, snapshot: &Snapshot) {
    // What each node has left.
    let mut free: BTreeMap<&str, (i128, i128)> = BTreeMap::new();
    for node in snapshot
        .nodes()
        .filter(|n| is_ready(n) && n.metadata.deletion_timestamp.is_none())
    {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        free.insert(
            node.metadata.name.as_deref().unwrap_or_default(),
            (
                milli(allocatable.and_then(|a| a.get("cpu"))),
                milli(allocatable.and_then(|a| a.get("memory"))),
            ),
        );
    }
    for pod in snapshot.pods() {
        if let Some(node) = bound(pod)
            && let Some(left) = free.get_mut(node)
        {
            let (cpu, memory) = requests(pod);
            left.0 -= cpu;
            left.1 -= memory;
        }
    }
    for pod in snapshot
        .pods()
        .filter(|p| bound(p).is_none() && p.metadata.deletion_timestamp.is_none())
    {
        let (cpu, memory) = requests(pod);
        let spec = pod.spec.as_ref();
        let selector = spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default();
        let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
        let fits = snapshot.nodes().find(|node| {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            free.get(name)
                .is_some_and(|(c, m)| *c >= cpu && *m >= memory)
                && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                && taints
                    .iter()
                    .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                    .all(|t| tolerates(&tolerations, t))
        });
        let (namespace, name) = names(pod);
        let Some(node) = fits.and_then(|n| n.metadata.name.as_deref()) else {
            mark_unschedulable(cluster, pod, namespace, name).await;
            continue;
        };
        match cluster.bind_pod(namespace, name, node) {
            Ok(_) => {
                if let Some(left) = free.get_mut(node) {
                    left.0 -= cpu;
                    left.1 -= memory;
                }
            }
            Err(error) => tracing::debug!(%error, pod = %name, "scheduler: binding"),
        }
    }
}

/// What kube-scheduler reports for a pod no node fits, and what the provisioner waits for.
async fn mark_unschedulable(cluster: &InMemoryCluster, pod: &SlimPod, namespace: &str, name: &str) {
    let already = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
        });
    if already {
        return;
    }
    let patch = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/0 nodes are available: no node fits the pod",
        "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }]}});
    if let Err(error) = cluster
        .merge_patch_status::<Pod>(Some(namespace), name, &patch)
        .await
    {
        tracing::debug!(%error, pod = %name, "scheduler: marking unschedulable");
    }
}
