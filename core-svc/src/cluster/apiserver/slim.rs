//! What the reflectors drop from an object before caching it, as upstream's manager does with
//! controller-runtime's cache transforms: core holds every Pod and Node of the cluster for
//! its whole life, and most of what the API server sends about them (containers' commands,
//! environment and probes, volumes, container statuses, a node's image list) is never read.
//!
//! Only Pods and Nodes are slimmed, and only of fields no part of core reads: the scheduler's
//! conversion (`controllers::provisioning::convert`), provisioning's selection, disruption,
//! drain, PDBs, `do-not-disrupt` and `core-svc explain`. The tests check that a slimmed pod
//! and node convert to the same domain objects as the full ones. Core never replaces a Pod or
//! a Node (it writes them with merge patches, evictions and deletes), so what the cache lacks
//! is never written back. Whoever starts reading another field of these kinds adds it here.

use k8s_openapi::api::core::v1::{Container, ContainerPort, Node, NodeStatus, Pod, PodStatus};
use kube::Resource;

/// Drops an object's `managedFields`: core never reads them, they are often as large as the
/// rest of the object, and an update without them leaves the server's as they are (upstream:
/// kubernetes-sigs/karpenter `pkg/operator/operator.go`, `cache.TransformStripManagedFields`).
pub(super) fn managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A Pod as core reads it: its metadata (but `managedFields`), its spec but volumes, image
/// pull secrets, host aliases, DNS and security settings, ephemeral containers, and of each
/// container what requests resources or ports on the host; its status's phase, start time,
/// nominated node, and the conditions read (`Ready`, and `PodScheduled` unless it is `True`:
/// only a pod the scheduler could not place is looked at for it).
///
/// Lists are also cut to their length: serde grows a vector to four elements at least, which
/// for a pod's owner reference and conditions is more than the rest of its metadata.
pub(super) fn pod(pod: &mut Pod) {
    managed_fields(pod);
    shrink_metadata_lists(pod);
    if let Some(spec) = &mut pod.spec {
        for container in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            slim_container(container);
        }
        spec.containers.shrink_to_fit();
        shrink(&mut spec.init_containers);
        shrink(&mut spec.tolerations);
        shrink(&mut spec.topology_spread_constraints);
        spec.volumes = None;
        spec.ephemeral_containers = None;
        spec.image_pull_secrets = None;
        spec.host_aliases = None;
        spec.dns_config = None;
        spec.security_context = None;
        spec.readiness_gates = None;
    }
    if let Some(status) = &mut pod.status {
        let mut conditions = status.conditions.take();
        if let Some(conditions) = &mut conditions {
            conditions.retain(|condition| match condition.type_.as_str() {
                "Ready" => true,
                "PodScheduled" => condition.status != "True",
                _ => false,
            });
            conditions.shrink_to_fit();
        }
        *status = PodStatus {
            phase: status.phase.take(),
            conditions,
            start_time: status.start_time.take(),
            nominated_node_name: status.nominated_node_name.take(),
            ..PodStatus::default()
        };
    }
}

/// A container as the scheduler reads it: its name, resources, restart policy (a sidecar's
/// `Always`) and the ports it takes on the host (a port without `hostPort` takes none).
fn slim_container(container: &mut Container) {
    let ports: Vec<ContainerPort> = container
        .ports
        .take()
        .into_iter()
        .flatten()
        .filter(|port| port.host_port.is_some_and(|host| host != 0))
        .collect();
    *container = Container {
        name: std::mem::take(&mut container.name),
        resources: container.resources.take(),
        restart_policy: container.restart_policy.take(),
        ports: (!ports.is_empty()).then_some(ports),
        ..Container::default()
    };
}

/// A Node as core reads it: metadata (but `managedFields`), its whole spec, and its status's
/// capacity, allocatable and conditions (not its images, addresses, volumes or system info).
pub(super) fn node(node: &mut Node) {
    managed_fields(node);
    shrink_metadata_lists(node);
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
}

fn shrink_metadata_lists<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    shrink(&mut meta.owner_references);
    shrink(&mut meta.finalizers);
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::drain::plan as drain;
    use crate::controllers::provisioning::{convert, selection};
    use crate::disruption::do_not_disrupt;
    use crate::objects;
    use crate::objects::is_node_ready;
    use core_domain::labels::LabelPolicy;
    use jiff::Timestamp;
    use serde_json::json;

    /// A pod as a real workload's looks, with every field the scheduler converts and much
    /// that nothing in core reads.
    fn full_pod() -> Pod {
        let probe = json!({ "httpGet": { "path": "/healthz", "port": 8080 }, "periodSeconds": 5 });
        let container = |name: &str, cpu: &str| {
            json!({
                "name": name, "image": format!("registry.example/{name}:1.2.3"),
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/app"], "args": ["--verbose", "--port=8080"], "workingDir": "/srv",
                "env": [{ "name": "MODE", "value": "production" },
                        { "name": "POD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }],
                "envFrom": [{ "configMapRef": { "name": "settings" } }],
                "resources": { "requests": { "cpu": cpu, "memory": "1Gi" }, "limits": { "memory": "2Gi" } },
                "ports": [{ "containerPort": 8080, "hostPort": 18080, "protocol": "TCP" },
                          { "containerPort": 9090, "name": "metrics" }],
                "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
                "livenessProbe": probe, "readinessProbe": probe, "startupProbe": probe,
                "lifecycle": { "preStop": { "exec": { "command": ["sleep", "5"] } } },
                "securityContext": { "runAsNonRoot": true, "readOnlyRootFilesystem": true },
                "terminationMessagePath": "/dev/termination-log",
            })
        };
        let mut sidecar = container("proxy", "100m");
        sidecar["restartPolicy"] = json!("Always");
        let value = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "uid-1",
                "labels": { "app": "web" },
                "annotations": { "karpenter.sh/do-not-disrupt": "10m" },
                "creationTimestamp": "2025-01-01T00:00:10Z",
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                      "uid": "rs-1", "controller": true }],
                "managedFields": [{ "manager": "kubectl", "operation": "Apply",
                                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": {} } }],
            },
            "spec": {
                "nodeName": "node-a",
                "priority": 1000, "priorityClassName": "high",
                "terminationGracePeriodSeconds": 45,
                "containers": [container("app", "500m"), container("log", "250m")],
                "initContainers": [container("init", "2"), sidecar],
                "overhead": { "cpu": "50m" },
                "nodeSelector": { "team": "shop" },
                "affinity": {
                    "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
                        { "matchExpressions": [{ "key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"] }] },
                    ]}},
                    "podAntiAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": [
                        { "topologyKey": "kubernetes.io/hostname", "labelSelector": { "matchLabels": { "app": "web" } } },
                    ]},
                },
                "tolerations": [{ "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule" }],
                "topologySpreadConstraints": [
                    { "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": { "matchLabels": { "app": "web" } } },
                ],
                "volumes": [{ "name": "data", "emptyDir": {} }],
                "imagePullSecrets": [{ "name": "registry" }],
                "securityContext": { "fsGroup": 2000 },
            },
            "status": {
                "phase": "Running",
                "startTime": "2025-01-01T00:00:20Z",
                "nominatedNodeName": "node-b",
                "conditions": [{ "type": "Initialized", "status": "True" },
                               { "type": "Ready", "status": "True" },
                               { "type": "ContainersReady", "status": "True" },
                               { "type": "PodScheduled", "status": "True" }],
                "podIP": "10.0.0.7", "podIPs": [{ "ip": "10.0.0.7" }], "hostIP": "192.168.0.3",
                "qosClass": "Burstable",
                "containerStatuses": [{ "name": "app", "image": "registry.example/app:1.2.3",
                    "imageID": "sha256:abc", "ready": true, "restartCount": 0, "started": true,
                    "state": { "running": { "startedAt": "2025-01-01T00:00:21Z" } } }],
            },
        });
        serde_json::from_value(value).expect("a valid pod")
    }

    #[test]
    fn given_a_slimmed_pod_then_core_reads_the_same_as_from_the_full_one() {
        let full = full_pod();
        let mut slimmed = full.clone();
        pod(&mut slimmed);

        let converted = convert::pod(&full).expect("the full pod converts");
        assert!(!converted.host_ports.is_empty());
        assert_eq!(convert::pod(&slimmed), Ok(converted));
        assert_eq!(
            convert::check_restricted_labels(&slimmed, &LabelPolicy::default()),
            convert::check_restricted_labels(&full, &LabelPolicy::default()),
        );
        let now = Timestamp::from_second(1_735_689_700).expect("a valid time");
        for (name, read) in [
            (
                "provisionable",
                selection::is_provisionable as fn(&Pod) -> bool,
            ),
            ("reschedulable", selection::is_reschedulable),
            ("terminal", selection::is_terminal),
            ("daemon set pod", selection::is_daemon_set_pod),
            ("critical", objects::is_critical),
            ("mirror", objects::is_mirror),
            ("tolerates disrupted", objects::tolerates_disrupted_taint),
        ] {
            assert_eq!(read(&slimmed), read(&full), "{name}");
        }
        assert_eq!(
            drain::is_evictable(&slimmed, now),
            drain::is_evictable(&full, now)
        );
        assert_eq!(
            objects::pod_grace_period_seconds(&slimmed),
            objects::pod_grace_period_seconds(&full)
        );
        assert_eq!(
            do_not_disrupt::evaluate(&slimmed, now),
            do_not_disrupt::evaluate(&full, now)
        );
        assert_eq!(
            do_not_disrupt::pod_started(&slimmed),
            do_not_disrupt::pod_started(&full)
        );
        assert_eq!(
            slimmed.metadata.owner_references,
            full.metadata.owner_references
        );
        assert_eq!(slimmed.metadata.annotations, full.metadata.annotations);

        // What was dropped is what makes real pods large.
        assert_eq!(slimmed.metadata.managed_fields, None);
        let spec = slimmed.spec.unwrap_or_default();
        assert_eq!(spec.volumes, None);
        assert!(spec.containers.iter().all(|c| c.env.is_none()
            && c.command.is_none()
            && c.liveness_probe.is_none()
            && c.volume_mounts.is_none()));
        let status = slimmed.status.unwrap_or_default();
        assert_eq!(status.container_statuses, None);
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["Ready"]);
        assert_eq!(status.pod_ips, None);
    }

    #[test]
    fn given_a_pending_pod_then_the_slimmed_one_is_still_provisionable() {
        let mut full = full_pod();
        if let Some(spec) = &mut full.spec {
            spec.node_name = None;
        }
        full.status = serde_json::from_value(json!({
            "phase": "Pending",
            "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": "0/3 nodes are available" }],
        }))
        .expect("a valid status");
        let mut slimmed = full.clone();
        pod(&mut slimmed);
        assert!(selection::is_provisionable(&full));
        assert!(selection::is_provisionable(&slimmed));
        assert_eq!(slimmed.status, full.status);
    }

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
        let mut slimmed = full.clone();
        node(&mut slimmed);

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
        let mut pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
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
        managed_fields(&mut pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.annotations, annotations);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-0"));
    }
}
