//! The node lifecycle controller's taints (kube-controller-manager): a Node whose `Ready`
//! condition is `False` gets `node.kubernetes.io/not-ready`, one whose `Ready` is `Unknown`
//! gets `node.kubernetes.io/unreachable`, each with `NoSchedule` (so no scheduler, core's
//! included, places pods there) and `NoExecute` (taint-based eviction); both go once it is
//! Ready again (kubernetes/kubernetes `pkg/controller/nodelifecycle`).
//!
//! Taint-based eviction deletes a pod bound to a Node with such a `NoExecute` taint once the
//! pod's toleration for it runs out: its own `tolerationSeconds`, none when it tolerates the
//! taint without a limit (DaemonSet pods do, as the DaemonSet controller adds that), and
//! [`DEFAULT_TOLERATION`] when it has no toleration for the taint, as the
//! `DefaultTolerationSeconds` admission plugin gives every pod.

use core_svc::cluster::SlimPod;
use std::sync::Arc;
use std::time::Duration;

use core_svc::cluster::{Cluster, ClusterExt, DeleteOptions, InMemoryCluster, Snapshot};
use core_svc::objects::tolerates;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    bound_node, is_daemon_set_pod, is_terminal, is_terminating, name_of, namespace_of, note,
};

/// The taint of a Node whose `Ready` is `False`.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a Node whose `Ready` is `Unknown`.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// How long a pod without its own toleration stays on a NotReady Node.
pub const DEFAULT_TOLERATION: Duration = Duration::from_secs(300);

fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map_or("Unknown", |c| c.status.as_str())
}

/// The condition taint `node` should carry, if any.
fn wanted(node: &Node) -> Option<&'static str> {
    match ready_status(node) {
        "True" => None,
        "False" => Some(NOT_READY),
        _ => Some(UNREACHABLE),
    }
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
}

/// The `NoExecute` condition taint `node` carries, if any.
fn no_execute(node: &Node) -> Option<&Taint> {
    taints(node)
        .iter()
        .find(|t| t.effect == "NoExecute" && (t.key == NOT_READY || t.key == UNREACHABLE))
}

/// How long `pod` tolerates `taint`: `None` for ever.
fn toleration(pod: &SlimPod, taint: &Taint) -> Option<Duration> {
    if is_daemon_set_pod(pod) {
        return None;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.tolerations.as_deref())
        .unwrap_or_default();
    let matching = tolerations.iter().find(|t| {
        tolerates(
            t,
            &taint.key,
            taint.value.as_deref().unwrap_or_default(),
            &taint.effect,
        )
    });
    match matching {
        None => Some(DEFAULT_TOLERATION),
        Some(t) => t
            .toleration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
    }
}

fn added_at(taint: &Taint) -> Option<Timestamp> {
    taint.time_added.as_ref().map(|t| t.0)
}

/// One pass: the condition taints made to match the `Ready` conditions, and the pods whose
/// toleration ran out deleted.
pub async fn step(cluster: &Arc<InMemoryCluster>, snapshot: &Snapshot, now: Timestamp) {
    for node in snapshot.nodes() {
        if node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let want = wanted(node);
        let mut current = node.clone();
        for key in [NOT_READY, UNREACHABLE] {
            for effect in ["NoSchedule", "NoExecute"] {
                let present = taints(&current)
                    .iter()
                    .any(|t| t.key == key && t.effect == effect);
                let result = if want == Some(key) && !present {
                    let taint = Taint {
                        key: key.to_owned(),
                        effect: effect.to_owned(),
                        time_added: (effect == "NoExecute").then_some(Time(now)),
                        value: None,
                    };
                    cluster.add_node_taint(&current, &taint).await
                } else if want != Some(key) && present {
                    cluster.remove_node_taint(&current, key, effect).await
                } else {
                    continue;
                };
                match result {
                    Ok(updated) => current = updated,
                    Err(error) => {
                        let name = name_of(node).to_owned();
                        note::<()>(Err(error), || {
                            format!("node lifecycle: the {key}:{effect} taint of {name}")
                        });
                        break;
                    }
                }
            }
        }
    }
    for (pod, node) in evictable(snapshot) {
        let Some(taint) = no_execute(node) else {
            continue;
        };
        let (Some(since), Some(limit)) = (added_at(taint), toleration(pod, taint)) else {
            continue;
        };
        if elapsed(since, now) < limit {
            continue;
        }
        let namespace = namespace_of(pod).to_owned();
        let name = name_of(pod).to_owned();
        note(
            cluster
                .delete::<Pod>(Some(&namespace), &name, DeleteOptions::default())
                .await,
            || format!("taint eviction: deleting {namespace}/{name}"),
        );
    }
}

/// Pods still running on a Node that carries a `NoExecute` condition taint.
fn evictable(snapshot: &Snapshot) -> Vec<(&SlimPod, &Node)> {
    let tainted: std::collections::BTreeMap<&str, &Node> = snapshot
        .nodes()
        .filter(|node| no_execute(node).is_some())
        .map(|node| (name_of(node), node))
        .collect();
    if tainted.is_empty() {
        return Vec::new();
    }
    snapshot
        .pods()
        .filter(|pod| !is_terminal(pod) && !is_terminating(pod))
        .filter_map(|pod| Some((pod, *tainted.get(bound_node(pod)?)?)))
        .collect()
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

/// When the next pod's toleration runs out, after `now`.
pub fn next_due(snapshot: &Snapshot, now: Timestamp) -> Option<Timestamp> {
    evictable(snapshot)
        .into_iter()
        .filter_map(|(pod, node)| {
            let taint = no_execute(node)?;
            let at = added_at(taint)?.checked_add(toleration(pod, taint)?).ok()?;
            (at > now).then_some(at)
        })
        .min()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use core_svc::cluster::SlimPod as Pod;

    fn pod(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [], "tolerations": tolerations},
        }))
        .unwrap()
    }

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            effect: "NoExecute".to_owned(),
            ..Taint::default()
        }
    }

    #[test]
    fn a_pod_tolerates_a_condition_taint_for_five_minutes_unless_it_says_otherwise() {
        assert_eq!(
            toleration(&pod(json!([])), &taint(NOT_READY)),
            Some(DEFAULT_TOLERATION)
        );
        let own = pod(
            json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]),
        );
        assert_eq!(
            toleration(&own, &taint(NOT_READY)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            toleration(&own, &taint(UNREACHABLE)),
            Some(DEFAULT_TOLERATION)
        );
        let forever = pod(json!([{"operator": "Exists"}]));
        assert_eq!(toleration(&forever, &taint(UNREACHABLE)), None);
    }
}
