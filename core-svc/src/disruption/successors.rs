//! Evicted pods whose controller has not made their successors yet.
//!
//! A pod evicted from a leaving node is terminating at once, and a terminating pod needs no place
//! (upstream `IsReschedulable`): its ReplicaSet, Job or other controller makes a successor, and
//! the successor is pending until the scheduler places it. Between the two, the pod's demand is
//! in neither: for as long as its controller takes to see the eviction, nothing in the cluster
//! says the capacity is needed. A disruption pass that runs in that window (right after its own
//! drain evicted the pods of an earlier command, say) would let the next candidate's pods take
//! the room the evicted pods' successors need, and delete that candidate without a replacement;
//! seconds later the successors are pending and provisioning launches what the disruption should
//! have. Chaos runs found it (`simulator/scenarios/chaos/drift-delete-during-drain.yaml`).
//!
//! So a disruption simulation also places, as pods waiting for capacity, the terminating pods of
//! nodes leaving or being deleted whose controller has not yet made as many successors as it
//! lost there: per controller (by UID), the terminating pods there minus the controller's live
//! pods created since the earliest of those evictions. StatefulSet pods are not among them:
//! their successor comes only once they are gone, and they count as reschedulable already.

use crate::cluster::SlimPod;
use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::candidates::is_reschedulable;
use super::do_not_disrupt::is_active;
use crate::cluster::Snapshot;
use crate::objects::{
    DEFAULT_POD_GRACE_PERIOD_SECONDS, is_mirror, is_owned_by_daemon_set, is_terminal,
    is_terminating,
};

/// The terminating pods among `pods` (the pods of nodes leaving or being deleted) whose
/// successors their controller has not made yet, in `pods`' order (see the module
/// documentation).
pub fn awaiting_successors<'a>(
    snapshot: &'a Snapshot,
    pods: impl IntoIterator<Item = &'a SlimPod>,
) -> Vec<&'a SlimPod> {
    let pods: Vec<&'a SlimPod> = pods.into_iter().collect();
    // Per controller UID: its terminating pods here (positions in `pods`) and the earliest
    // eviction among them.
    let mut evicted: HashMap<&str, (Vec<usize>, Timestamp)> = HashMap::new();
    for (position, pod) in pods.iter().enumerate() {
        let Some(controller) = recreating_controller(pod) else {
            continue;
        };
        let Some(at) = evicted_at(pod) else {
            continue;
        };
        let entry = evicted.entry(controller).or_insert((Vec::new(), at));
        entry.0.push(position);
        entry.1 = entry.1.min(at);
    }
    if evicted.is_empty() {
        return Vec::new();
    }
    let mut successors: HashMap<&str, usize> = HashMap::new();
    for pod in snapshot.pods().filter(|pod| is_active(pod)) {
        let Some(controller) = controller_uid(pod) else {
            continue;
        };
        let Some((_, since)) = evicted.get(controller) else {
            continue;
        };
        let created = pod.metadata.creation_timestamp.as_ref().map(|time| time.0);
        if created.is_some_and(|created| created >= *since) {
            *successors.entry(controller).or_default() += 1;
        }
    }
    let mut waiting: Vec<usize> = evicted
        .into_iter()
        .flat_map(|(controller, (positions, _))| {
            let made = successors.get(controller).copied().unwrap_or(0);
            let missing = positions.len().saturating_sub(made);
            positions.into_iter().take(missing)
        })
        .collect();
    waiting.sort_unstable();
    waiting
        .into_iter()
        .filter_map(|position| pods.get(position).copied())
        .collect()
}

/// The UID of the pod's controller when the pod is terminating, not finished, and a controller
/// that makes a successor for it owns it (not a DaemonSet, whose pods go with their node; not a
/// Node; not a StatefulSet, whose terminating pods are reschedulable already).
fn recreating_controller(pod: &SlimPod) -> Option<&str> {
    if !is_terminating(pod)
        || is_terminal(pod)
        || is_reschedulable(pod)
        || is_owned_by_daemon_set(pod)
        || is_mirror(pod)
    {
        return None;
    }
    controller_uid(pod)
}

fn controller_uid(pod: &SlimPod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
        .filter(|uid| !uid.is_empty())
}

/// When the pod was evicted: its `deletionTimestamp` is the end of its grace period.
fn evicted_at(pod: &SlimPod) -> Option<Timestamp> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|spec| spec.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_POD_GRACE_PERIOD_SECONDS);
    deadline
        .checked_sub(SignedDuration::from_secs(grace.max(0)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::cluster::Snapshot;
    use serde_json::json;

    fn pod(name: &str, controller: &str, created: &str, deleted: Option<&str>) -> Pod {
        let mut metadata = json!({
            "name": name, "namespace": "default", "uid": name,
            "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": controller,
                                 "uid": controller, "controller": true}],
        });
        if let Some(deleted) = deleted {
            metadata["deletionTimestamp"] = json!(deleted);
            metadata["deletionGracePeriodSeconds"] = json!(30);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": "leaving", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        }))
        .expect("a pod")
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter()
            .map(|pod| pod.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn snapshot(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods: crate::cluster::shared(pods),
            ..Snapshot::default()
        }
    }

    #[test]
    fn evicted_pods_wait_until_their_successors_exist() {
        // Evicted at 01:00:00 (deadline 01:00:30, 30 s of grace).
        let evicted = |name: &str| {
            pod(
                name,
                "rs-a",
                "2026-01-01T00:00:00Z",
                Some("2026-01-01T01:00:30Z"),
            )
        };
        let cluster = snapshot(vec![evicted("a-1"), evicted("a-2")]);
        let terminating: Vec<&Pod> = cluster.pods().collect();
        assert_eq!(
            names(&awaiting_successors(&cluster, terminating)),
            ["a-1", "a-2"],
            "no successor yet: both still need room"
        );

        let cluster = snapshot(vec![
            evicted("a-1"),
            evicted("a-2"),
            pod("a-3", "rs-a", "2026-01-01T01:00:01Z", None),
            // Older than the eviction: not a successor.
            pod("a-0", "rs-a", "2026-01-01T00:00:00Z", None),
        ]);
        let terminating: Vec<&Pod> = cluster.pods().take(2).collect();
        assert_eq!(
            names(&awaiting_successors(&cluster, terminating)).len(),
            1,
            "one successor made: one pod still waits for its own"
        );

        let cluster = snapshot(vec![
            evicted("a-1"),
            evicted("a-2"),
            pod("a-3", "rs-a", "2026-01-01T01:00:00Z", None),
            pod("a-4", "rs-a", "2026-01-01T01:00:02Z", None),
        ]);
        let terminating: Vec<&Pod> = cluster.pods().take(2).collect();
        assert!(awaiting_successors(&cluster, terminating).is_empty());
    }

    #[test]
    fn only_pods_a_controller_recreates_are_counted() {
        let mut daemon = pod(
            "agent",
            "ds",
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T01:00:30Z"),
        );
        if let Some(owner) = daemon
            .metadata
            .owner_references
            .as_mut()
            .and_then(|o| o.first_mut())
        {
            owner.kind = "DaemonSet".into();
        }
        let mut stateful = pod(
            "db-0",
            "sts",
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T01:00:30Z"),
        );
        if let Some(owner) = stateful
            .metadata
            .owner_references
            .as_mut()
            .and_then(|o| o.first_mut())
        {
            owner.kind = "StatefulSet".into();
        }
        let mut bare = pod(
            "bare",
            "none",
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T01:00:30Z"),
        );
        bare.metadata.owner_references = None;
        let running = pod("web", "rs-b", "2026-01-01T00:00:00Z", None);
        let cluster = snapshot(vec![daemon, stateful, bare, running]);
        let pods: Vec<&Pod> = cluster.pods().collect();
        assert!(
            awaiting_successors(&cluster, pods).is_empty(),
            "DaemonSet pods go with their node, StatefulSet pods are reschedulable already, a \
             bare pod comes back from nobody, a running pod is not terminating"
        );
    }
}
