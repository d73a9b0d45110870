//! The contract every [`Cluster`] keeps, as async test functions over any implementation:
//! [`InMemoryCluster`](super::InMemoryCluster) runs them in core-svc's unit tests, and
//! [`KubeCluster`](super::KubeCluster) over HTTP against the fake API server in
//! `integration-tests` (`tests/kube_cluster.rs`). Each case names its objects after itself, so
//! cases share a cluster without seeing each other.
//!
//! Reads that must see another party's change (the API server deleting an evicted pod) use
//! [`Cluster::get`], which is fresh on every implementation; a [`Cluster::snapshot`] is only
//! required to show the caller's own writes at once.

#![allow(
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed call is a failed contract"
)]

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::NodePool;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Cluster, ClusterError, ClusterExt as _, DeleteOptions, Preconditions};

fn object<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

fn node_pool(name: &str) -> NodePool {
    object(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "default"},
            "requirements": [],
        }}},
    }))
}

/// Runs every case.
pub async fn run_all<C: Cluster>(cluster: &C) {
    create_read_and_optimistic_patches(cluster).await;
    status_is_a_subresource(cluster).await;
    names_and_absence(cluster).await;
    invalid_objects_name_the_field(cluster).await;
    finalizers_hold_deletion(cluster).await;
    eviction_honours_budgets(cluster).await;
    unknown_node_class_kinds_read_as_absent(cluster).await;
}

/// A node class of a kind nobody serves does not exist: `None`, not an error.
pub async fn unknown_node_class_kinds_read_as_absent<C: Cluster>(cluster: &C) {
    let reference = karpenter_api::NodeClassReference {
        group: "nobody.example".to_owned(),
        kind: "NoNodeClass".to_owned(),
        name: "default".to_owned(),
    };
    let read = cluster.get_node_class(&reference).await;
    assert!(matches!(read, Ok(None)), "{read:?}");
}

/// Create answers the stored object; a merge patch carrying a stale resourceVersion
/// conflicts, one without applies; the caller's own writes show in its next snapshot; the
/// revision moves on every write.
pub async fn create_read_and_optimistic_patches<C: Cluster>(cluster: &C) {
    let before = cluster.revision();
    let created = cluster
        .create(&node_pool("contract-patches"))
        .await
        .expect("create");
    assert_ne!(cluster.revision(), before, "a create moves the revision");
    let first_version = created.metadata.resource_version.clone();
    assert!(
        first_version.is_some(),
        "a created object has a resourceVersion"
    );
    assert!(created.metadata.uid.is_some(), "a created object has a uid");
    assert_eq!(created.metadata.generation, Some(1));

    let read: NodePool = cluster
        .get(None, "contract-patches")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(read.metadata.resource_version, first_version);

    let labelled: NodePool = cluster
        .merge_patch(
            None,
            "contract-patches",
            &json!({"metadata": {"labels": {"team": "a"}, "resourceVersion": first_version}}),
        )
        .await
        .expect("a patch at the current version applies");
    assert_ne!(labelled.metadata.resource_version, first_version);

    let stale = cluster
        .merge_patch::<NodePool>(
            None,
            "contract-patches",
            &json!({"metadata": {"labels": {"team": "b"}, "resourceVersion": first_version}}),
        )
        .await;
    assert!(
        matches!(stale, Err(ClusterError::Conflict { .. })),
        "a patch at a stale version conflicts: {stale:?}"
    );

    let unguarded: NodePool = cluster
        .merge_patch(
            None,
            "contract-patches",
            &json!({"metadata": {"labels": {"team": "c"}}}),
        )
        .await
        .expect("a patch without a version applies");
    let snapshot = cluster.snapshot().await.expect("snapshot");
    let seen = snapshot
        .node_pool("contract-patches")
        .expect("the caller's own create shows in its snapshot");
    assert_eq!(
        seen.metadata.resource_version, unguarded.metadata.resource_version,
        "the snapshot shows the caller's last write"
    );
    assert_eq!(
        seen.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get("team"))
            .map(String::as_str),
        Some("c")
    );
}

/// A write of the object leaves its status alone; a status write leaves the rest alone.
pub async fn status_is_a_subresource<C: Cluster>(cluster: &C) {
    cluster
        .create(&node_pool("contract-status"))
        .await
        .expect("create");
    let with_status: NodePool = cluster
        .merge_patch_status(
            None,
            "contract-status",
            &json!({"status": {"nodes": 3}, "metadata": {"labels": {"ignored": "yes"}}}),
        )
        .await
        .expect("status patch");
    assert_eq!(with_status.status.as_ref().and_then(|s| s.nodes), Some(3));
    assert!(
        with_status
            .metadata
            .labels
            .as_ref()
            .is_none_or(|labels| !labels.contains_key("ignored")),
        "a status write changes nothing but the status"
    );
    let relabelled: NodePool = cluster
        .merge_patch(
            None,
            "contract-status",
            &json!({"metadata": {"labels": {"kept": "yes"}}, "status": {"nodes": 9}}),
        )
        .await
        .expect("patch");
    assert_eq!(
        relabelled.status.as_ref().and_then(|s| s.nodes),
        Some(3),
        "a write of the object leaves the status alone"
    );
}

/// A taken name is AlreadyExists; a missing object is `None` to get and NotFound to a patch.
pub async fn names_and_absence<C: Cluster>(cluster: &C) {
    cluster
        .create(&node_pool("contract-names"))
        .await
        .expect("create");
    let again = cluster.create(&node_pool("contract-names")).await;
    assert!(
        matches!(again, Err(ClusterError::AlreadyExists { .. })),
        "{again:?}"
    );
    let missing: Option<NodePool> = cluster
        .get(None, "contract-missing")
        .await
        .expect("get of a missing object");
    assert!(missing.is_none());
    let patch = cluster
        .merge_patch::<NodePool>(
            None,
            "contract-missing",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert!(
        patch.as_ref().is_err_and(ClusterError::is_not_found),
        "{patch:?}"
    );
}

/// An invalid NodePool is refused with the field at fault.
pub async fn invalid_objects_name_the_field<C: Cluster>(cluster: &C) {
    let mut invalid = node_pool("contract-invalid");
    invalid.spec.template.spec.requirements = object(json!([
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}
    ]));
    let refused = cluster.create(&invalid).await;
    let Err(ClusterError::Invalid { causes, .. }) = refused else {
        panic!("an invalid NodePool is refused: {refused:?}");
    };
    assert!(
        causes
            .iter()
            .any(|cause| cause.field.contains("requirements")),
        "{causes:?}"
    );
}

/// An object with a finalizer stays, marked deleted, until the finalizer goes.
pub async fn finalizers_hold_deletion<C: Cluster>(cluster: &C) {
    let node: Node = object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "contract-finalizer", "finalizers": ["karpenter.sh/termination"]},
    }));
    cluster.create(&node).await.expect("create");
    cluster
        .delete::<Node>(None, "contract-finalizer", DeleteOptions::default())
        .await
        .expect("delete");
    let deleting: Node = cluster
        .get(None, "contract-finalizer")
        .await
        .expect("get")
        .expect("held by its finalizer");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    cluster
        .remove_finalizer(&deleting, "karpenter.sh/termination")
        .await
        .expect("remove the finalizer");
    let gone: Option<Node> = cluster.get(None, "contract-finalizer").await.expect("get");
    assert!(gone.is_none(), "the last finalizer's removal deletes it");
    // Deleting what is gone is not an error to the caller who wanted it gone... but the
    // API answers NotFound, which the port passes on.
    let again = cluster
        .delete::<Node>(None, "contract-finalizer", DeleteOptions::default())
        .await;
    assert!(
        again.is_ok() || again.as_ref().is_err_and(ClusterError::is_not_found),
        "{again:?}"
    );
}

/// An eviction a PodDisruptionBudget forbids is TooManyRequests and leaves the pod; once the
/// budget allows it, the pod is deleted gracefully. A UID precondition that does not match
/// refuses the eviction.
pub async fn eviction_honours_budgets<C: Cluster>(cluster: &C) {
    let pod: Pod = object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "contract-evict", "namespace": "contract", "labels": {"app": "contract-evict"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "some-node", "containers": [{"name": "c", "image": "i"}]},
    }));
    let created = cluster.create(&pod).await.expect("create pod");
    let uid = created.metadata.uid.clone().expect("a uid");
    cluster
        .merge_patch_status::<Pod>(
            Some("contract"),
            "contract-evict",
            &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .await
        .expect("pod status");
    let pdb: PodDisruptionBudget = object(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "contract-evict", "namespace": "contract"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "contract-evict"}}},
    }));
    cluster.create(&pdb).await.expect("create pdb");

    let blocked = cluster
        .evict(
            "contract",
            "contract-evict",
            &Preconditions::uid(uid.clone()),
        )
        .await;
    assert!(
        matches!(blocked, Err(ClusterError::TooManyRequests { .. })),
        "the budget forbids it: {blocked:?}"
    );
    let still: Option<Pod> = cluster
        .get(Some("contract"), "contract-evict")
        .await
        .expect("get");
    assert!(
        still.is_some_and(|pod| pod.metadata.deletion_timestamp.is_none()),
        "a refused eviction leaves the pod"
    );

    cluster
        .delete::<PodDisruptionBudget>(Some("contract"), "contract-evict", DeleteOptions::default())
        .await
        .expect("delete pdb");
    let wrong_uid = cluster
        .evict(
            "contract",
            "contract-evict",
            &Preconditions::uid("not-the-uid"),
        )
        .await;
    assert!(
        matches!(wrong_uid, Err(ClusterError::Conflict { .. })),
        "the UID precondition reaches the API server: {wrong_uid:?}"
    );
    cluster
        .evict("contract", "contract-evict", &Preconditions::uid(uid))
        .await
        .expect("no budget: evicted");
    let evicted: Pod = cluster
        .get(Some("contract"), "contract-evict")
        .await
        .expect("get")
        .expect("a bound pod terminates gracefully");
    assert!(evicted.metadata.deletion_timestamp.is_some());
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::FakeClock;
    use crate::cluster::InMemoryCluster;
    use crate::controllers::testing::at;

    #[tokio::test]
    async fn the_in_memory_cluster_keeps_the_contract() {
        let cluster = InMemoryCluster::new(Arc::new(FakeClock::new(at(0))), 1);
        run_all(&cluster).await;
    }
}
