//! What a dumped object keeps on its way into a scenario: what scheduling and the adopted
//! fleet need, and nothing sensitive. Containers keep an allowlist of fields (no `env`,
//! `envFrom`, `args`, `command`, probes or lifecycle hooks, which carry secrets and commands);
//! Secret, ConfigMap and projected volumes go, and every mount; `imagePullSecrets`,
//! EC2NodeClass `userData`, kubectl's `last-applied-configuration` annotation (a copy of
//! everything, secrets included), `managedFields` and the server's bookkeeping go everywhere.

use serde_json::{Map, Value};

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields a container keeps: what the scheduler and the kubelet stand-in read.
const CONTAINER_FIELDS: [&str; 5] = ["name", "image", "resources", "ports", "restartPolicy"];

/// Pod spec fields dropped: credentials, and addresses of the real network.
const POD_SPEC_DROPPED: [&str; 3] = ["imagePullSecrets", "hostAliases", "ephemeralContainers"];

/// Volume sources that carry or expose secrets and configuration.
const SENSITIVE_VOLUMES: [&str; 3] = ["secret", "configMap", "projected"];

/// The server's bookkeeping, and what the simulated API server sets itself.
const METADATA_DROPPED: [&str; 7] = [
    "managedFields",
    "uid",
    "resourceVersion",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// `metadata` of any object: bookkeeping and the last-applied annotation dropped.
pub(super) fn metadata(object: &mut Value) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for key in METADATA_DROPPED {
        metadata.remove(key);
    }
    metadata.remove("generateName");
    let empty = match metadata.get_mut("annotations") {
        Some(Value::Object(annotations)) => {
            annotations.remove(LAST_APPLIED);
            annotations.is_empty()
        }
        _ => false,
    };
    if empty {
        metadata.remove("annotations");
    }
}

/// A pod spec (a Pod's, or a template's): containers to their allowlist, sensitive volumes
/// and their mounts gone.
pub(super) fn pod_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    for key in POD_SPEC_DROPPED {
        spec.remove(key);
    }
    // Containers keep no `volumeMounts`, so the mounts of the volumes dropped go with them.
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        volumes.retain(|volume| {
            !SENSITIVE_VOLUMES
                .iter()
                .any(|source| volume.get(source).is_some())
        });
        if volumes.is_empty() {
            spec.remove("volumes");
        }
    }
    for list in ["initContainers", "containers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for container in containers {
                self::container(container);
            }
        }
    }
}

fn container(container: &mut Value) {
    let Some(fields) = container.as_object_mut() else {
        return;
    };
    fields.retain(|key, _| CONTAINER_FIELDS.contains(&key.as_str()));
    // A container port's `hostIP` is an address of the real network; the port is what
    // scheduling needs.
    if let Some(Value::Array(ports)) = fields.get_mut("ports") {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.remove("hostIP");
        }
    }
}

/// A pod's status to what the simulator reads: its phase.
pub(super) fn pod_status(pod: &mut Value) {
    let phase = pod.pointer("/status/phase").cloned();
    if let Some(fields) = pod.as_object_mut() {
        match phase {
            Some(phase) => {
                let mut status = Map::new();
                status.insert("phase".to_owned(), phase);
                fields.insert("status".to_owned(), Value::Object(status));
            }
            None => {
                fields.remove("status");
            }
        }
    }
}

/// A workload's pod template (`spec.template`): its metadata and spec.
pub(super) fn template(object: &mut Value) {
    if let Some(template) = object.pointer_mut("/spec/template") {
        metadata(template);
        if let Some(spec) = template.get_mut("spec") {
            pod_spec(spec);
        }
    }
}

/// A Node's spec and status to what the simulator reads: the provider ID, taints and
/// schedulability; capacity, allocatable and conditions (no addresses, images or system
/// information).
pub(super) fn node(node: &mut Value) {
    if let Some(Value::Object(spec)) = node.get_mut("spec") {
        spec.retain(|key, _| matches!(key.as_str(), "providerID" | "taints" | "unschedulable"));
    }
    if let Some(Value::Object(status)) = node.get_mut("status") {
        status.retain(|key, _| matches!(key.as_str(), "capacity" | "allocatable" | "conditions"));
    }
}

/// Removes `key` at the top level of `object`.
pub(super) fn remove(object: &mut Value, key: &str) {
    if let Some(fields) = object.as_object_mut() {
        fields.remove(key);
    }
}
