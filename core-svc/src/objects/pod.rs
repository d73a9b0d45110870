//! [`SlimPod`]: a Pod as core caches and reads it.
//!
//! Core holds every Pod of the cluster for its whole life, and k8s-openapi's `Pod` is large
//! however little of it is filled: its struct is about 2.2 kB and each `Container` another
//! 2.1 kB, every optional field reserved inline. At 20,000 pods that alone is some 86 MB,
//! more than everything else core caches. A `SlimPod` has the same shape (`metadata`,
//! `spec`, `status`, the same field names and field types) but only the fields some part of
//! core reads: the scheduler's conversion (`controllers::provisioning::convert`),
//! provisioning's selection, disruption, drain, PDBs, `do-not-disrupt`, `core-svc explain`,
//! and the simulator's stand-ins for the kubelet and kube-scheduler. A pod and a container
//! take about a quarter of the room.
//!
//! Snapshots hold pods this way whichever [`Cluster`](crate::cluster::Cluster) they come from: the
//! kube adapter converts each Pod as its watch delivers it, and the in-memory cluster keeps a
//! slim copy beside each Pod it stores. Core never writes a `SlimPod` back (it writes pods
//! with merge patches, evictions and deletes), so what it lacks is never lost. Whoever starts
//! reading another field of a Pod adds it here; the compiler points at every reader.
//!
//! A `SlimPod` also reads straight from a Pod's JSON, ignoring the fields it lacks (test
//! fixtures write pods that way); that keeps every condition and port, which converting a
//! `Pod` does not.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Pod, PodCondition, PodSpec, PodStatus,
    ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

/// A Pod as core reads it; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlimPod {
    /// The metadata, but `managedFields`.
    pub metadata: ObjectMeta,
    /// What core reads of the spec.
    pub spec: Option<SlimPodSpec>,
    /// What core reads of the status.
    pub status: Option<SlimPodStatus>,
}

/// The fields of a `PodSpec` core reads, as k8s-openapi types them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlimPodSpec {
    /// `nodeName`: the node it is bound to.
    pub node_name: Option<String>,
    /// `containers`, each as [`SlimContainer`].
    pub containers: Vec<SlimContainer>,
    /// `initContainers`, each as [`SlimContainer`] (a sidecar is one with `restartPolicy:
    /// Always`).
    pub init_containers: Option<Vec<SlimContainer>>,
    /// `overhead`: the runtime class's resources.
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// `nodeSelector`.
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `affinity`.
    pub affinity: Option<Affinity>,
    /// `tolerations`.
    pub tolerations: Option<Vec<Toleration>>,
    /// `topologySpreadConstraints`.
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// `priority`, as admission resolved it from the priority class.
    pub priority: Option<i32>,
    /// `priorityClassName`.
    pub priority_class_name: Option<String>,
    /// `terminationGracePeriodSeconds`.
    pub termination_grace_period_seconds: Option<i64>,
    /// `schedulerName`: which scheduler binds the pod.
    pub scheduler_name: Option<String>,
}

/// A container as the scheduler reads it: its name, resources, restart policy (a sidecar's
/// `Always`) and the ports it takes on the host (a port without `hostPort` takes none, and is
/// not kept).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlimContainer {
    /// `name`.
    pub name: String,
    /// `resources`.
    pub resources: Option<ResourceRequirements>,
    /// `restartPolicy` (init containers: `Always` makes a sidecar).
    pub restart_policy: Option<String>,
    /// `ports` that name a `hostPort`; `None` when there are none.
    pub ports: Option<Vec<ContainerPort>>,
}

/// The fields of a `PodStatus` core reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlimPodStatus {
    /// `phase`.
    pub phase: Option<String>,
    /// `conditions`: `Ready`, and `PodScheduled` unless it is `True` (only a pod the scheduler
    /// could not place is looked at for it).
    pub conditions: Option<Vec<PodCondition>>,
    /// `startTime`.
    pub start_time: Option<Time>,
    /// `nominatedNodeName`.
    pub nominated_node_name: Option<String>,
}

impl From<Pod> for SlimPod {
    fn from(pod: Pod) -> Self {
        let mut metadata = pod.metadata;
        metadata.managed_fields = None;
        shrink(&mut metadata.owner_references);
        shrink(&mut metadata.finalizers);
        SlimPod {
            metadata,
            spec: pod.spec.map(SlimPodSpec::from),
            status: pod.status.map(SlimPodStatus::from),
        }
    }
}

impl From<&Pod> for SlimPod {
    fn from(pod: &Pod) -> Self {
        SlimPod::from(pod.clone())
    }
}

impl From<PodSpec> for SlimPodSpec {
    fn from(spec: PodSpec) -> Self {
        let mut tolerations = spec.tolerations;
        shrink(&mut tolerations);
        let mut spreads = spec.topology_spread_constraints;
        shrink(&mut spreads);
        SlimPodSpec {
            node_name: spec.node_name,
            containers: spec
                .containers
                .into_iter()
                .map(SlimContainer::from)
                .collect(),
            init_containers: spec
                .init_containers
                .map(|list| list.into_iter().map(SlimContainer::from).collect()),
            overhead: spec.overhead,
            node_selector: spec.node_selector,
            affinity: spec.affinity,
            tolerations,
            topology_spread_constraints: spreads,
            priority: spec.priority,
            priority_class_name: spec.priority_class_name,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            scheduler_name: spec.scheduler_name,
        }
    }
}

impl From<Container> for SlimContainer {
    fn from(container: Container) -> Self {
        let ports: Vec<ContainerPort> = container
            .ports
            .into_iter()
            .flatten()
            .filter(|port| port.host_port.is_some_and(|host| host != 0))
            .collect();
        SlimContainer {
            name: container.name,
            resources: container.resources,
            restart_policy: container.restart_policy,
            ports: (!ports.is_empty()).then_some(ports),
        }
    }
}

impl From<PodStatus> for SlimPodStatus {
    fn from(status: PodStatus) -> Self {
        let conditions = status.conditions.map(|mut conditions| {
            conditions.retain(|condition| match condition.type_.as_str() {
                "Ready" => true,
                "PodScheduled" => condition.status != "True",
                _ => false,
            });
            conditions.shrink_to_fit();
            conditions
        });
        SlimPodStatus {
            phase: status.phase,
            conditions,
            start_time: status.start_time,
            nominated_node_name: status.nominated_node_name,
        }
    }
}

/// Cuts a list to its length: serde grows a vector to four elements at least, which for a
/// pod's owner reference and conditions is more than the rest of its metadata.
fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(list) = list {
        list.shrink_to_fit();
    }
}

/// A `SlimPod` is a Pod to everything generic over kube's objects (the sort key, the stores).
impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::drain::plan as drain;
    use crate::controllers::provisioning::{convert, selection};
    use crate::disruption::do_not_disrupt;
    use crate::objects;
    use core_domain::labels::LabelPolicy;
    use jiff::Timestamp;
    use serde_json::{Value, json};

    /// A pod as a real workload's looks, with every field the scheduler converts and much
    /// that nothing in core reads.
    fn full_pod() -> Value {
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
        value
    }

    /// The pod `value` describes, read whole (every field a `SlimPod` has, nothing dropped)
    /// and converted from a k8s-openapi `Pod` as the reflector converts it.
    fn read_whole_and_converted(value: Value) -> (SlimPod, SlimPod) {
        let whole: SlimPod = serde_json::from_value(value.clone()).expect("a valid pod");
        let pod: Pod = serde_json::from_value(value).expect("a valid pod");
        (whole, SlimPod::from(pod))
    }

    #[test]
    fn given_a_converted_pod_then_core_reads_the_same_as_from_the_whole_one() {
        let (full, slimmed) = read_whole_and_converted(full_pod());

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
                selection::is_provisionable as fn(&SlimPod) -> bool,
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

        // What conversion drops beyond the fields a SlimPod lacks.
        assert_eq!(slimmed.metadata.managed_fields, None);
        let ports = |pod: &SlimPod| {
            pod.spec
                .iter()
                .flat_map(|spec| &spec.containers)
                .flat_map(|container| container.ports.iter().flatten())
                .count()
        };
        assert_eq!(
            (ports(&full), ports(&slimmed)),
            (4, 2),
            "only host ports are kept"
        );
        let kept: Vec<&str> = slimmed
            .status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten())
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["Ready"]);
    }

    #[test]
    fn given_a_pending_pod_then_the_converted_one_is_still_provisionable() {
        let mut value = full_pod();
        value["spec"]["nodeName"] = Value::Null;
        value["status"] = json!({
            "phase": "Pending",
            "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": "0/3 nodes are available" }],
        });
        let (full, slimmed) = read_whole_and_converted(value);
        assert!(selection::is_provisionable(&full));
        assert!(selection::is_provisionable(&slimmed));
        assert_eq!(slimmed.status, full.status);
    }

    /// What the type is for: a cached pod and container a fraction of k8s-openapi's.
    #[test]
    fn given_the_types_then_a_slim_pod_and_container_are_a_fraction_of_the_full_ones() {
        use std::mem::size_of;
        assert!(size_of::<SlimPod>() * 2 < size_of::<Pod>());
        assert!(size_of::<SlimContainer>() * 8 < size_of::<Container>());
    }
}
