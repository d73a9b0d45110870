//! A stand-in for kube-controller-manager's Deployment controller and the garbage collector,
//! in the manner of [`super::kwok`]: driven in process, one [`step`] at a time, writing Pods to
//! the in-memory cluster and Deployment status to the server's store.
//!
//! - Each Deployment keeps `spec.replicas` active Pods (not being deleted, not finished) made
//!   from its template: the template's labels plus `pod-template-hash`, its annotations and
//!   spec, `generateName: <deployment>-`, and a controller `ownerReference` to the Deployment
//!   (a real cluster puts a ReplicaSet in between; nothing here needs one). A pod deleted or
//!   evicted is replaced at once, as the ReplicaSet controller does (it does not wait for the
//!   old pod to finish terminating); surplus pods go, the unbound, then the not Ready, then
//!   the newest first.
//! - A changed template rolls out without ever going below `spec.replicas` Ready pods: pods of
//!   the new template are created up to `spec.replicas` at once (a surge of 100%), pods of an
//!   older template are deleted when not Ready, or when there are more Ready pods than
//!   `spec.replicas`.
//! - The status says what the last step saw: `replicas` (active pods), `updatedReplicas` (of
//!   the current template), `readyReplicas`, `availableReplicas` (Ready pods: `minReadySeconds`
//!   is not modelled), `unavailableReplicas`, `observedGeneration`, and the `Available` and
//!   `Progressing` conditions.
//! - Garbage collection: a pod whose controlling Deployment is gone is deleted (kubectl
//!   deletes with background propagation).

use core_svc::cluster::SlimPod;
use core_svc::objects::is_pod_ready;
use std::collections::BTreeSet;

use core_svc::cluster::{Cluster, DeleteOptions};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::FakeApiServer;
use super::apps::{POD_TEMPLATE_HASH, template_hash};
use super::store::PlainCall;

const API_VERSION: &str = "apps/v1";
const KIND: &str = "Deployment";

/// What one Deployment needs this step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// How many pods to create from the template.
    pub(crate) create: usize,
    /// Pods to delete: (namespace, name).
    pub(crate) delete: Vec<(String, String)>,
    /// The status the Deployment should have.
    pub(crate) status: Value,
}

fn is_active(pod: &SlimPod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn is_bound(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// The uid of the Deployment that controls `pod`, if one does.
fn controlling_deployment(pod: &SlimPod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| {
            owner.controller == Some(true) && owner.api_version == API_VERSION && owner.kind == KIND
        })
        .map(|owner| owner.uid.as_str())
}

fn key_of(pod: &SlimPod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `maxUnavailable` of a rolling update as a number of pods (rounded down, as Kubernetes
/// does); 0 for any other strategy.
fn max_unavailable(deployment: &Value, desired: usize) -> usize {
    match deployment.pointer("/spec/strategy/rollingUpdate/maxUnavailable") {
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        Some(Value::String(percent)) => percent
            .strip_suffix('%')
            .and_then(|p| p.parse::<usize>().ok())
            .map_or(0, |p| desired * p / 100),
        _ => 0,
    }
}

/// A condition, keeping the times of `previous` when its status and reason are the same.
fn condition(
    previous: &Value,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let same = previous
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .filter(|c| {
            c.get("status").and_then(Value::as_str) == Some(status)
                && c.get("reason").and_then(Value::as_str) == Some(reason)
        });
    let time = |field: &str| {
        same.and_then(|c| c.get(field))
            .cloned()
            .unwrap_or_else(|| Value::String(now.to_owned()))
    };
    json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastUpdateTime": time("lastUpdateTime"), "lastTransitionTime": time("lastTransitionTime"),
    })
}

/// What `deployment` (JSON) needs, given every pod it controls; `now` dates new conditions.
pub(crate) fn plan(deployment: &Value, pods: &[&SlimPod], now: &str) -> Plan {
    let desired = deployment
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1);
    let hash = template_hash(deployment.pointer("/spec/template").unwrap_or(&Value::Null));
    let active: Vec<&SlimPod> = pods.iter().copied().filter(|p| is_active(p)).collect();
    let is_current = |pod: &&SlimPod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(POD_TEMPLATE_HASH))
            == Some(&hash)
    };
    let (mut current, old): (Vec<&SlimPod>, Vec<&SlimPod>) =
        active.iter().copied().partition(is_current);
    let mut delete = Vec::new();
    let create = desired.saturating_sub(current.len());
    if current.len() > desired {
        // The cheapest to lose first: unbound, not Ready, newest (names break ties).
        current.sort_by_key(|pod| {
            (
                is_bound(pod),
                is_pod_ready(pod),
                std::cmp::Reverse(pod.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                pod.metadata.name.clone(),
            )
        });
        delete.extend(current.drain(..current.len() - desired).map(key_of));
    }
    let ready_current = current.iter().filter(|p| is_pod_ready(p)).count();
    let ready_old = old.iter().filter(|p| is_pod_ready(p)).count();
    let mut old_ready_removable = (ready_current + ready_old).saturating_sub(desired);
    for pod in &old {
        if !is_pod_ready(pod) {
            delete.push(key_of(pod));
        } else if old_ready_removable > 0 {
            old_ready_removable -= 1;
            delete.push(key_of(pod));
        }
    }

    let previous = deployment.get("status").cloned().unwrap_or(Value::Null);
    let ready = active.iter().filter(|p| is_pod_ready(p)).count();
    let available = ready;
    let minimum = desired.saturating_sub(max_unavailable(deployment, desired));
    let available_condition = if available >= minimum {
        condition(
            &previous,
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    } else {
        condition(
            &previous,
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    };
    let progressed = current.len() == desired && old.is_empty() && available >= desired;
    let progressing_condition = if progressed {
        condition(
            &previous,
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            "Deployment has successfully progressed.",
            now,
        )
    } else {
        condition(
            &previous,
            "Progressing",
            true,
            "ReplicaSetUpdated",
            "Deployment is progressing.",
            now,
        )
    };
    let status = json!({
        "observedGeneration": deployment.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": active.len(),
        "updatedReplicas": current.len(),
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": desired.saturating_sub(available),
        "conditions": [available_condition, progressing_condition],
    });
    Plan {
        create,
        delete,
        status,
    }
}

/// A pod of `deployment`'s current template, named by the API server from `<deployment>-`.
fn pod_for(deployment: &Value) -> Result<Pod, serde_json::Error> {
    let template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(
            POD_TEMPLATE_HASH.to_owned(),
            Value::String(template_hash(&template)),
        );
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", text(deployment, "/metadata/name")),
            "namespace": text(deployment, "/metadata/namespace"),
            "labels": labels,
            "annotations": template.pointer("/metadata/annotations").cloned().unwrap_or(Value::Null),
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": KIND,
                "name": text(deployment, "/metadata/name"),
                "uid": text(deployment, "/metadata/uid"),
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template.get("spec").cloned().unwrap_or(Value::Null),
    }))
}

/// One round of the stand-in; returns whether anything was written.
pub async fn step(server: &FakeApiServer) -> bool {
    let state = &server.state;
    let cluster = server.cluster();
    let Some(index) = state
        .resources
        .iter()
        .position(|r| r.group == "apps" && r.kind == KIND)
    else {
        return false;
    };
    let (deployments, _) = state.list(index, None).await;
    let Ok(snapshot) = cluster.snapshot().await else {
        return false;
    };
    let before = cluster.revision();
    let mut wrote_status = false;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for deployment in &deployments {
        let uid = text(deployment, "/metadata/uid");
        let namespace = text(deployment, "/metadata/namespace");
        let name = text(deployment, "/metadata/name");
        let owned: Vec<&SlimPod> = snapshot
            .pods()
            .filter(|pod| controlling_deployment(pod) == Some(uid))
            .collect();
        let plan = plan(deployment, &owned, &now);
        for _ in 0..plan.create {
            match pod_for(deployment) {
                Ok(pod) => {
                    if let Err(error) = cluster.create(&pod).await {
                        tracing::debug!(%error, deployment = %name, "workloads: creating a pod");
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, deployment = %name, "workloads: the template is not a pod");
                    break;
                }
            }
        }
        for (pod_namespace, pod) in &plan.delete {
            if let Err(error) = cluster
                .delete::<Pod>(Some(pod_namespace), pod, DeleteOptions::default())
                .await
            {
                tracing::debug!(%error, %pod, "workloads: deleting a pod");
            }
        }
        let mut next = deployment.clone();
        if let Some(object) = next.as_object_mut() {
            object.insert("status".to_owned(), plan.status);
        }
        match state.plain_call(index, Some(namespace), name, PlainCall::ReplaceStatus(next)) {
            Ok(Some(written)) => {
                wrote_status |= written.pointer("/metadata/resourceVersion")
                    != deployment.pointer("/metadata/resourceVersion");
            }
            Ok(None) => {}
            // Changed meanwhile (a conflict) or deleted: the next step sees the new version.
            Err(error) => tracing::debug!(%error, deployment = %name, "workloads: status"),
        }
    }
    // The garbage collector: pods whose controlling Deployment is gone.
    let uids: BTreeSet<&str> = deployments
        .iter()
        .map(|d| text(d, "/metadata/uid"))
        .collect();
    for pod in snapshot.pods().filter(|pod| {
        pod.metadata.deletion_timestamp.is_none()
            && controlling_deployment(pod).is_some_and(|uid| !uids.contains(uid))
    }) {
        let (namespace, name) = key_of(pod);
        if let Err(error) = cluster
            .delete::<Pod>(Some(&namespace), &name, DeleteOptions::default())
            .await
        {
            tracing::debug!(%error, pod = %name, "workloads: collecting a pod");
        }
    }
    let changed = cluster.revision() != before;
    if changed {
        server.sync().await;
    }
    changed || wrote_status
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_svc::cluster::SlimPod as Pod;

    const NOW: &str = "2025-01-01T00:00:00Z";

    fn deployment(replicas: u64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "d-1", "generation": 2},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                    "spec": {"containers": [{"name": "web", "image": image}]},
                },
            },
        })
    }

    /// A pod of `deployment`'s template (`image` decides which), `bound` to a node or not,
    /// `ready` or not, created at second `created`.
    fn pod(name: &str, of: &Value, bound: bool, ready: bool, created: u32) -> Pod {
        let mut pod = pod_for(of).unwrap();
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                format!("2025-01-01T00:00:{created:02}Z").parse().unwrap(),
            ));
        let mut value = serde_json::to_value(&pod).unwrap();
        if bound {
            value["spec"]["nodeName"] = json!("node-a");
        }
        if ready {
            value["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        }
        serde_json::from_value(value).unwrap()
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.delete.iter().map(|(_, name)| name.as_str()).collect()
    }

    #[test]
    fn pods_come_from_the_template_with_its_hash_and_an_owner() {
        let web = deployment(3, "nginx:1");
        let pod = pod_for(&web).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(
            labels[POD_TEMPLATE_HASH],
            template_hash(&web["spec"]["template"])
        );
        assert_eq!(pod.metadata.annotations.clone().unwrap()["a"], "b");
        assert_eq!(controlling_deployment(&SlimPod::from(&pod)), Some("d-1"));
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some("nginx:1")
        );
    }

    #[test]
    fn missing_pods_are_created_and_terminating_ones_do_not_count() {
        let web = deployment(3, "nginx:1");
        assert_eq!(plan(&web, &[], NOW).create, 3);
        let a = pod("web-a", &web, true, true, 1);
        let mut leaving = pod("web-b", &web, true, true, 2);
        leaving.metadata.deletion_timestamp = a.metadata.creation_timestamp.clone();
        let plan = plan(&web, &[&a, &leaving], NOW);
        assert_eq!(plan.create, 2, "an evicted pod is replaced at once");
        assert!(plan.delete.is_empty());
        assert_eq!(plan.status["replicas"], 1);
        assert_eq!(plan.status["readyReplicas"], 1);
        assert_eq!(plan.status["unavailableReplicas"], 2);
        assert_eq!(plan.status["observedGeneration"], 2);
    }

    #[test]
    fn surplus_pods_go_unbound_then_not_ready_then_newest_first() {
        let web = deployment(1, "nginx:1");
        let old_ready = pod("web-a", &web, true, true, 1);
        let new_ready = pod("web-b", &web, true, true, 5);
        let not_ready = pod("web-c", &web, true, false, 0);
        let unbound = pod("web-d", &web, false, false, 0);
        let plan = plan(&web, &[&old_ready, &new_ready, &not_ready, &unbound], NOW);
        assert_eq!(plan.create, 0);
        assert_eq!(names(&plan), ["web-d", "web-c", "web-b"]);
    }

    #[test]
    fn a_new_template_rolls_out_without_losing_ready_pods() {
        let v1 = deployment(2, "nginx:1");
        let v2 = deployment(2, "nginx:2");
        let a = pod("web-a", &v1, true, true, 1);
        let b = pod("web-b", &v1, true, true, 2);
        let started = plan(&v2, &[&a, &b], NOW);
        assert_eq!(started.create, 2, "the new template's pods first");
        assert!(
            started.delete.is_empty(),
            "no Ready pod goes before a new one is Ready"
        );
        assert_eq!(started.status["updatedReplicas"], 0);
        let c = pod("web-c", &v2, true, true, 3);
        let d = pod("web-d", &v2, true, false, 4);
        let half = plan(&v2, &[&a, &b, &c, &d], NOW);
        assert_eq!(half.create, 0);
        assert_eq!(
            names(&half),
            ["web-a"],
            "one new pod Ready: one old pod may go"
        );
        let d = pod("web-d", &v2, true, true, 4);
        let done = plan(&v2, &[&b, &c, &d], NOW);
        assert_eq!(names(&done), ["web-b"]);
        assert_eq!(done.status["updatedReplicas"], 2);
    }

    #[test]
    fn conditions_keep_their_times_until_they_change() {
        let mut web = deployment(1, "nginx:1");
        let a = pod("web-a", &web, true, true, 1);
        let first = plan(&web, &[&a], NOW);
        assert_eq!(first.status["conditions"][0]["type"], "Available");
        assert_eq!(first.status["conditions"][0]["status"], "True");
        assert_eq!(
            first.status["conditions"][1]["reason"],
            "NewReplicaSetAvailable"
        );
        web["status"] = first.status.clone();
        let later = plan(&web, &[&a], "2025-01-01T00:10:00Z");
        assert_eq!(
            later.status, first.status,
            "nothing changed: the same status"
        );
        let down = plan(&web, &[], "2025-01-01T00:10:00Z");
        assert_eq!(down.status["conditions"][0]["status"], "False");
        assert_eq!(
            down.status["conditions"][0]["lastTransitionTime"],
            "2025-01-01T00:10:00Z"
        );
    }
}
