//! The Deployment and DaemonSet controllers.
//!
//! Deployments live here, not in the cluster (core never reads them): each keeps `replicas`
//! live pods of its current template, with generated names, owned by a ReplicaSet named after
//! the template's hash as the real controller does (PodDisruptionBudgets count such pods). A
//! pod evicted or deleted is replaced on the next step. A changed template rolls: new pods up
//! to 25% above the replicas, old pods removed while at most 25% are unavailable.
//!
//! DaemonSets live in the cluster (the provisioner reads them): one pod per Node whose labels
//! and taints the template accepts, created bound to it, with the tolerations the real
//! controller adds.

use core_svc::cluster::SlimPod;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use core_domain::scheduler::{TaintEffect, Toleration};
use core_svc::cluster::{Cluster, DeleteOptions, InMemoryCluster, Snapshot};
use core_svc::controllers::provisioning::convert;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use serde_json::{Value, json};

use super::{bound_node, is_pod_ready, is_terminal, is_terminating, name_of, namespace_of, note};

/// Kubernetes' alphabet for generated suffixes: no vowels, no look-alikes.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The Deployments, by namespace and name.
#[derive(Debug, Default)]
pub struct Deployments {
    all: BTreeMap<(String, String), Deployment>,
    /// Deleted, kept with no replicas until their pods are gone (the garbage collector's
    /// cascading deletion).
    deleting: BTreeSet<(String, String)>,
}

fn key_of(deployment: &Deployment) -> (String, String) {
    (
        deployment
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        deployment.metadata.name.clone().unwrap_or_default(),
    )
}

/// The hash of a pod template, in the alphabet Kubernetes uses for its `pod-template-hash`
/// (FNV-1a: stable across platforms and runs).
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let hash = core_domain::hash::fnv1a_64(text.as_bytes());
    (0..10)
        .map(|i| {
            let index = (hash >> (i * 6)) as usize % ALPHABET.len();
            char::from(ALPHABET[index])
        })
        .collect()
}

/// The UID of the ReplicaSet a Deployment's pods of one template belong to; the prefix
/// without the hash finds every pod of the Deployment (`/` cannot appear in names).
fn owner_uid(namespace: &str, name: &str, hash: &str) -> String {
    format!("sim-replicaset/{namespace}/{name}/{hash}")
}

fn owned_by(pod: &SlimPod, uid_prefix: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid.starts_with(uid_prefix))
}

/// [`owned_by`] the Deployment `namespace/name` (`owner_uid(namespace, name, "")` as the
/// prefix), without spelling the prefix out: the PDB check asks it of every pod a budget
/// covers, for every Deployment.
fn owned_by_deployment(pod: &SlimPod, namespace: &str, name: &str) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true)
            && owner
                .uid
                .strip_prefix("sim-replicaset/")
                .and_then(|rest| rest.strip_prefix(namespace))
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.strip_prefix(name))
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

fn label<'a>(pod: &'a SlimPod, key: &str) -> Option<&'a str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}

/// The order pods are removed in when there are too many: unbound, then not ready, then the
/// newest, as the ReplicaSet controller ranks them.
fn removal_order(a: &&SlimPod, b: &&SlimPod) -> std::cmp::Ordering {
    let rank = |pod: &SlimPod| (bound_node(pod).is_some(), is_pod_ready(pod));
    rank(a).cmp(&rank(b)).then_with(|| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
            .then_with(|| name_of(*b).cmp(name_of(*a)))
    })
}

impl Deployments {
    /// Creates or replaces a Deployment.
    pub fn apply(&mut self, deployment: Deployment) {
        let key = key_of(&deployment);
        self.deleting.remove(&key);
        self.all.insert(key, deployment);
    }

    /// Sets a Deployment's replicas; false when there is no such Deployment.
    pub fn scale(&mut self, namespace: &str, name: &str, replicas: i32) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        match self.all.get_mut(&key) {
            Some(deployment) if !self.deleting.contains(&key) => {
                deployment
                    .spec
                    .get_or_insert_with(Default::default)
                    .replicas = Some(replicas);
                true
            }
            _ => false,
        }
    }

    /// Deletes a Deployment; the next steps delete its pods.
    pub fn delete(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        match self.all.get_mut(&key) {
            Some(deployment) => {
                deployment
                    .spec
                    .get_or_insert_with(Default::default)
                    .replicas = Some(0);
                self.deleting.insert(key);
                true
            }
            None => false,
        }
    }

    /// The Deployment that owns `pod` (`Deployment namespace/name`) and its replicas.
    pub fn owner_of(&self, pod: &SlimPod) -> Option<(String, i32)> {
        self.all.iter().find_map(|((namespace, name), deployment)| {
            owned_by_deployment(pod, namespace, name).then(|| {
                let replicas = deployment
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.replicas)
                    .unwrap_or(1);
                (format!("Deployment {namespace}/{name}"), replicas)
            })
        })
    }

    /// One step of the Deployment controller.
    pub async fn reconcile(&mut self, cluster: &Arc<InMemoryCluster>, snapshot: &Snapshot) {
        let mut gone = Vec::new();
        for (key, deployment) in &self.all {
            let (namespace, name) = key;
            let pods_left = reconcile_one(cluster, snapshot, namespace, name, deployment).await;
            if self.deleting.contains(key) && pods_left == 0 {
                gone.push(key.clone());
            }
        }
        for key in gone {
            self.deleting.remove(&key);
            self.all.remove(&key);
        }
    }
}

/// Reconciles one Deployment; answers how many of its pods exist.
async fn reconcile_one(
    cluster: &Arc<InMemoryCluster>,
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    deployment: &Deployment,
) -> usize {
    let Some(spec) = &deployment.spec else {
        return 0;
    };
    let replicas = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let hash = template_hash(&spec.template);
    let prefix = owner_uid(namespace, name, "");
    let owned: Vec<&SlimPod> = snapshot
        .pods()
        .filter(|pod| namespace_of(pod) == namespace && owned_by(pod, &prefix))
        .collect();
    let live: Vec<&SlimPod> = owned
        .iter()
        .copied()
        .filter(|pod| !is_terminating(pod) && !is_terminal(pod))
        .collect();
    let (mut current, mut old): (Vec<&SlimPod>, Vec<&SlimPod>) = live
        .iter()
        .copied()
        .partition(|pod| label(pod, "pod-template-hash") == Some(hash.as_str()));
    let surge = if replicas == 0 {
        0
    } else {
        replicas.div_ceil(4)
    };
    let max_unavailable = replicas / 4;

    let missing = replicas.saturating_sub(current.len());
    let room = (replicas + surge).saturating_sub(live.len());
    let create = if old.is_empty() {
        missing
    } else {
        missing.min(room)
    };
    for _ in 0..create {
        let pod = pod_from_template(namespace, name, &hash, &spec.template);
        note(cluster.create(&pod).await, || {
            format!("deployment controller: creating a pod of {namespace}/{name}")
        });
    }

    let mut delete: Vec<&SlimPod> = Vec::new();
    if current.len() > replicas {
        current.sort_by(removal_order);
        delete.extend(current.iter().take(current.len() - replicas));
    }
    if !old.is_empty() {
        old.sort_by(removal_order);
        let ready = live.iter().filter(|pod| is_pod_ready(pod)).count();
        let mut allowed = ready.saturating_sub(replicas.saturating_sub(max_unavailable));
        for pod in &old {
            if !is_pod_ready(pod) || replicas == 0 {
                delete.push(pod);
            } else if allowed > 0 {
                allowed -= 1;
                delete.push(pod);
            }
        }
    }
    for pod in delete {
        let pod_name = name_of(pod);
        note(
            cluster
                .delete::<Pod>(Some(namespace), pod_name, DeleteOptions::default())
                .await,
            || format!("deployment controller: deleting {namespace}/{pod_name}"),
        );
    }
    owned.len()
}

fn pod_from_template(namespace: &str, name: &str, hash: &str, template: &PodTemplateSpec) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert("pod-template-hash".to_owned(), hash.to_owned());
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-{hash}-"),
            "namespace": namespace,
            "labels": labels,
            "annotations": meta.annotations.unwrap_or_default(),
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": format!("{name}-{hash}"),
                "uid": owner_uid(namespace, name, hash),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": template.spec.clone().unwrap_or_default(),
    });
    // Built from a checked template, field by field as a Pod has them.
    serde_json::from_value(pod).unwrap_or_default()
}

/// The tolerations the DaemonSet controller adds to every pod it makes.
fn daemon_set_tolerations() -> Vec<Value> {
    let no_execute = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
    let no_schedule = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoSchedule"});
    vec![
        no_execute("node.kubernetes.io/not-ready"),
        no_execute("node.kubernetes.io/unreachable"),
        no_schedule("node.kubernetes.io/disk-pressure"),
        no_schedule("node.kubernetes.io/memory-pressure"),
        no_schedule("node.kubernetes.io/pid-pressure"),
        no_schedule("node.kubernetes.io/unschedulable"),
    ]
}

fn extra_tolerations() -> Vec<Toleration> {
    [
        ("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
        ("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
        ("node.kubernetes.io/disk-pressure", TaintEffect::NoSchedule),
        (
            "node.kubernetes.io/memory-pressure",
            TaintEffect::NoSchedule,
        ),
        ("node.kubernetes.io/pid-pressure", TaintEffect::NoSchedule),
        ("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule),
    ]
    .into_iter()
    .map(|(key, effect)| Toleration::exists(key, Some(effect)))
    .collect()
}

/// Whether the DaemonSet would run a pod on `node`: its node selector and required node
/// affinity match the Node's labels, and it tolerates every NoSchedule and NoExecute taint.
fn runs_on(daemon_set: &DaemonSet, node: &Node) -> bool {
    let Ok(mut pod) = convert::daemon_set_pod(daemon_set) else {
        return false;
    };
    let Ok(existing) = convert::node(node, None) else {
        return false;
    };
    pod.tolerations.extend(extra_tolerations());
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selected = pod
        .node_selector
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value));
    let affine = pod.required_node_affinity.is_empty()
        || pod
            .required_node_affinity
            .iter()
            .any(|term| term.matches_labels(labels.iter()).is_ok());
    let tolerated = existing
        .taints
        .iter()
        .filter(|taint| taint.effect != TaintEffect::PreferNoSchedule)
        .all(|taint| pod.tolerations.iter().any(|t| t.tolerates(taint)));
    selected && affine && tolerated
}

/// One step of the DaemonSet controller.
pub async fn daemon_sets(cluster: &Arc<InMemoryCluster>, snapshot: &Snapshot) {
    for daemon_set in &snapshot.daemon_sets {
        if daemon_set.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = daemon_set.metadata.uid.clone().unwrap_or_default();
        let namespace = daemon_set
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default");
        let ds_name = name_of(daemon_set.as_ref());
        let served: Vec<&str> = snapshot
            .pods()
            .filter(|pod| {
                !is_terminating(pod)
                    && pod
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|owner| owner.uid == uid)
            })
            .filter_map(bound_node)
            .collect();
        for node in snapshot.nodes() {
            let node_name = name_of(node);
            if node.metadata.deletion_timestamp.is_some()
                || served.contains(&node_name)
                || !runs_on(daemon_set, node)
            {
                continue;
            }
            let Some(pod) = daemon_pod(daemon_set, &uid, node_name) else {
                continue;
            };
            note(cluster.create(&pod).await, || {
                format!(
                    "daemonset controller: creating the {namespace}/{ds_name} pod of {node_name}"
                )
            });
        }
    }
}

fn daemon_pod(daemon_set: &DaemonSet, uid: &str, node_name: &str) -> Option<Pod> {
    let spec = daemon_set.spec.as_ref()?;
    let meta = spec.template.metadata.clone().unwrap_or_default();
    let mut pod_spec = serde_json::to_value(spec.template.spec.clone().unwrap_or_default()).ok()?;
    let name = name_of(daemon_set);
    if let Value::Object(map) = &mut pod_spec {
        map.insert("nodeName".to_owned(), Value::String(node_name.to_owned()));
        let tolerations = map
            .entry("tolerations")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = tolerations {
            list.extend(daemon_set_tolerations());
        }
    }
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": daemon_set.metadata.namespace.as_deref().unwrap_or("default"),
            "labels": meta.labels.unwrap_or_default(),
            "annotations": meta.annotations.unwrap_or_default(),
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": name,
                "uid": uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": pod_spec,
    });
    serde_json::from_value(pod).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_svc::cluster::SlimPod as Pod;

    #[test]
    fn template_hashes_are_stable_and_tell_templates_apart() {
        let a: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}))
                .unwrap();
        let b: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "a", "image": "y"}]}}))
                .unwrap();
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
        assert!(template_hash(&a).bytes().all(|c| ALPHABET.contains(&c)));
    }

    #[test]
    fn owned_by_deployment_is_owned_by_its_uid_prefix() {
        let pod = |uid: &str, controller: bool| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid,
                 "controller": controller}
            ]}}))
            .unwrap()
        };
        let pods = [
            pod(&owner_uid("default", "web", "abc"), true),
            pod(&owner_uid("default", "web", "abc"), false),
            pod(&owner_uid("default", "web-2", "abc"), true),
            pod(&owner_uid("other", "web", "abc"), true),
            pod("sim-replicaset/default/web", true),
            pod("something-else", true),
        ];
        for pod in &pods {
            for (namespace, name) in [("default", "web"), ("default", "web-2"), ("other", "web")] {
                assert_eq!(
                    owned_by_deployment(pod, namespace, name),
                    owned_by(pod, &owner_uid(namespace, name, "")),
                    "{namespace}/{name} of {:?}",
                    pod.metadata.owner_references
                );
            }
        }
        assert!(owned_by_deployment(&pods[0], "default", "web"));
    }
}
