//! What the reflectors drop from an object before caching it, as upstream's manager does with
//! controller-runtime's cache transforms: core holds every Pod and Node of the cluster for
//! its whole life, and most of what the API server sends about them (containers' commands,
//! environment and probes, volumes, container statuses, a node's image list) is never read.
//!
//! A Pod is cached as a [`SlimPod`], which has only the fields core reads. A Node is cached
//! as a Node, less the fields of its status no part of core reads; every other kind less its
//! `managedFields`. Core never replaces a Pod or a Node (it writes them with merge patches,
//! evictions and deletes), so what the cache lacks is never written back. Whoever starts
//! reading another field of a Node adds it here.

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::Resource;

use crate::cluster::SlimPod;

/// Drops an object's `managedFields`: core never reads them, they are often as large as the
/// rest of the object, and an update without them leaves the server's as they are (upstream:
/// kubernetes-sigs/karpenter `pkg/operator/operator.go`, `cache.TransformStripManagedFields`).
pub(super) fn managed_fields<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// A Pod as core reads it: see [`SlimPod`].
pub(super) fn pod(pod: k8s_openapi::api::core::v1::Pod) -> SlimPod {
    SlimPod::from(pod)
}

/// A Node as core reads it: metadata (but `managedFields`), its whole spec, and its status's
/// capacity, allocatable and conditions (not its images, addresses, volumes or system info).
pub(super) fn node(node: Node) -> Node {
    let mut node = managed_fields(node);
    shrink(&mut node.metadata.owner_references);
    shrink(&mut node.metadata.finalizers);
    if let Some(spec) = &mut node.spec {
        shrink(&mut spec.taints);
    }
    if let Some(status) = &mut node.status {
        let mut conditions = status.conditions.take();
        shrink(&mut conditions);
        *status = NodeStatus {
            capacity: status.capacity.take(),
            allocatable: status.allocatable.take(),
            conditions,
            ..NodeStatus::default()
        };
    }
    node
}

/// Cuts a list to its length: serde grows a vector to four elements at least.
fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::provisioning::convert;
    use crate::objects::is_node_ready;
    use serde_json::json;

    #[test]
    fn given_a_slimmed_node_then_core_reads_the_same_as_from_the_full_one() {
        let full: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": "node-a", "labels": { "karpenter.sh/nodepool": "default" },
                          "managedFields": [{ "manager": "kubelet", "operation": "Update" }] },
            "spec": { "providerID": "fake:///z1/i-1",
                      "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }] },
            "status": {
                "capacity": { "cpu": "4", "memory": "16Gi", "pods": "110" },
                "allocatable": { "cpu": "3900m", "memory": "15Gi", "pods": "110" },
                "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady" }],
                "addresses": [{ "type": "InternalIP", "address": "192.168.0.3" }],
                "images": [{ "names": ["registry.example/app:1.2.3"], "sizeBytes": 123_456_789 }],
                "nodeInfo": { "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://2.0",
                              "kernelVersion": "6.1", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                              "machineID": "m", "operatingSystem": "linux", "osImage": "AL2023", "systemUUID": "u" },
            },
        }))
        .expect("a valid node");
        let slimmed = node(full.clone());

        assert_eq!(
            format!("{:?}", convert::node(&slimmed, None)),
            format!("{:?}", convert::node(&full, None))
        );
        assert_eq!(is_node_ready(&slimmed), is_node_ready(&full));
        assert_eq!(slimmed.spec, full.spec);
        assert_eq!(slimmed.metadata.labels, full.metadata.labels);
        let status = slimmed.status.unwrap_or_default();
        assert_eq!(status.capacity, full.status.and_then(|s| s.capacity));
        assert_eq!((status.images, status.node_info), (None, None));
    }

    #[test]
    fn given_an_object_with_managed_fields_then_the_cache_keeps_everything_else() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
        }))
        .unwrap_or_default();
        let annotations = pod.metadata.annotations.clone();
        assert!(pod.metadata.managed_fields.is_some());
        let pod = managed_fields(pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.annotations, annotations);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-0"));
    }
}
