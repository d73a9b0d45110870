//! A standing fleet written straight into an [`InMemoryCluster`]: one NodePool, its launched,
//! registered and initialized NodeClaims with their Ready Nodes, and running pods of many
//! workloads under PodDisruptionBudgets. What `fake-apiserver --fleet-nodes N` serves, so a
//! client (core-svc, a benchmark) can be measured against a cluster of realistic size without
//! creating every object over HTTP.
//!
//! Objects are made for the fake cloud provider (`core_svc::cloudprovider::fake`): the node
//! class is `test.karpenter.sh/v1` `TestNodeClass`, and every node is of [`INSTANCE_TYPE`],
//! which [`instance_types`] describes.

use std::sync::Arc;

use core_domain::instance_type::InstanceType;
use core_svc::cloudprovider::fake::{FAKE_ZONES, instance_type};
use core_svc::cluster::{Cluster, ClusterError, InMemoryCluster};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::{NodeClaim, NodeClassReference, NodePool};
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The instance type of every node of the fleet: 16 vCPU, 64 GiB, 110 pods.
pub const INSTANCE_TYPE: &str = "bench-16x64";

/// The NodePool the fleet belongs to.
pub const NODE_POOL: &str = "default";

/// Pods per workload (each workload has its own PDB, `maxUnavailable: 10%`).
const PODS_PER_WORKLOAD: usize = 200;

/// The instance types the fake cloud provider must offer for the fleet's nodes.
pub fn instance_types() -> Vec<Arc<InstanceType>> {
    vec![Arc::new(instance_type(INSTANCE_TYPE, 16, 64, 110, "amd64"))]
}

/// The size of a fleet.
#[derive(Debug, Clone, Copy)]
pub struct FleetSize {
    /// Nodes (each with its NodeClaim).
    pub nodes: usize,
    /// Running pods per node.
    pub pods_per_node: usize,
}

fn parse<T: DeserializeOwned>(value: Value) -> Result<T, ClusterError> {
    serde_json::from_value(value)
        .map_err(|error| ClusterError::invalid("fleet object", "", "", error.to_string()))
}

fn provider_id(zone: &str, index: usize) -> String {
    format!("fake:///{zone}/i-{index:08x}")
}

fn node_name(index: usize) -> String {
    format!("node-{index:05}")
}

fn condition(type_: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": type_, "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// Writes the fleet into `cluster`.
pub async fn populate(cluster: &InMemoryCluster, size: FleetSize) -> Result<(), ClusterError> {
    let node_class: DynamicObject = parse(json!({
        "apiVersion": "test.karpenter.sh/v1",
        "kind": "TestNodeClass",
        "metadata": {"name": "default"},
    }))?;
    cluster.create_node_class(&node_class).await?;
    // Ready, as the node class controller leaves a class the plugin resolved.
    cluster
        .merge_patch_node_class_status(
            &NodeClassReference {
                group: "test.karpenter.sh".to_owned(),
                kind: "TestNodeClass".to_owned(),
                name: "default".to_owned(),
            },
            &json!({"status": {"conditions": [condition("Ready")]}}),
        )
        .await?;
    let node_pool: NodePool = parse(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": NODE_POOL},
        "spec": {
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "10%"}],
            },
            "template": {"spec": {
                "nodeClassRef": {"group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default"},
                "requirements": [],
            }},
        },
    }))?;
    cluster.create(&node_pool).await?;
    let allocatable = json!({"cpu": "16", "memory": "64Gi", "pods": "110"});
    for index in 0..size.nodes {
        let zone = FAKE_ZONES[index % FAKE_ZONES.len()];
        let name = node_name(index);
        let labels = json!({
            "karpenter.sh/nodepool": NODE_POOL,
            "node.kubernetes.io/instance-type": INSTANCE_TYPE,
            "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "on-demand",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
        });
        let claim: NodeClaim = parse(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": format!("{NODE_POOL}-{index:05}"), "labels": labels,
                         "finalizers": ["karpenter.sh/termination"]},
            "spec": {
                "nodeClassRef": {"group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default"},
                "requirements": [],
            },
        }))?;
        let claim = cluster.create(&claim).await?;
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let conditions: Vec<Value> = ["Launched", "Registered", "Initialized", "Consolidatable"]
            .into_iter()
            .map(condition)
            .collect();
        cluster
            .merge_patch_status::<NodeClaim>(
                None,
                &claim_name,
                &json!({"status": {
                    "providerID": provider_id(zone, index),
                    "nodeName": name,
                    "imageID": "image-1",
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": conditions,
                }}),
            )
            .await?;
        let node: Node = parse(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider_id(zone, index)},
        }))?;
        cluster.create(&node).await?;
        cluster
            .merge_patch_status::<Node>(
                None,
                &name,
                &json!({"status": {
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                }}),
            )
            .await?;
    }
    let pods = size.nodes * size.pods_per_node;
    let workloads = pods.div_ceil(PODS_PER_WORKLOAD);
    for workload in 0..workloads {
        let pdb: PodDisruptionBudget = parse(json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": format!("app-{workload:03}"), "namespace": "default"},
            "spec": {"maxUnavailable": "10%",
                     "selector": {"matchLabels": {"app": format!("app-{workload:03}")}}},
        }))?;
        cluster.create(&pdb).await?;
    }
    for index in 0..pods {
        let workload = index % workloads.max(1);
        let name = format!("app-{workload:03}-{index:06}");
        let pod: Pod = parse(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"app": format!("app-{workload:03}")},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                      "name": format!("app-{workload:03}"),
                                      "uid": format!("rs-{workload:03}"), "controller": true}],
            },
            "spec": {"containers": [{"name": "app", "image": "app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        }))?;
        cluster.create(&pod).await?;
        cluster.bind_pod("default", &name, &node_name(index % size.nodes.max(1)))?;
        cluster.set_pod_ready("default", &name, true)?;
    }
    Ok(())
}
