//! The drain's decisions, as pure functions of a node's pods, the time and the NodeClaim's
//! termination deadline (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/node/termination/terminator` and `pkg/utils/pod`):
//!
//! - which pods the drain waits for ([`is_waiting_eviction`]): not terminal, not tolerating the
//!   `karpenter.sh/disrupted:NoSchedule` taint, not stuck terminating (more than a minute past
//!   their deletion deadline), not mirror pods;
//! - in which order they go ([`Tier`]): non-critical pods, then non-critical DaemonSet pods, then
//!   critical ones, then critical DaemonSet pods, each tier only once the previous one is gone;
//! - which of them may be evicted now ([`is_evictable`]): not already terminating and without an
//!   active `karpenter.sh/do-not-disrupt` (`"true"`, or a duration not yet elapsed since the pod
//!   started, read as disruption reads it: [`do_not_disrupt::evaluate`]); those are waited for,
//!   never evicted, and an invalid value is ignored;
//! - which must be deleted now because the terminationGracePeriod deadline would otherwise cut
//!   their own grace period short ([`force_delete_grace_period`]), do-not-disrupt or not.

use crate::cluster::SlimPod;
use jiff::{SignedDuration, Timestamp};

use crate::disruption::do_not_disrupt;
use crate::objects::{
    is_critical, is_mirror, is_owned_by_daemon_set, is_stuck_terminating, is_terminal,
    is_terminating, pod_grace_period_seconds, tolerates_disrupted_taint,
};

/// The drain's tiers, in the order they are drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Pods neither critical nor of a DaemonSet: the workloads.
    NonCritical,
    /// DaemonSet pods that are not critical.
    NonCriticalDaemonSet,
    /// Critical pods not of a DaemonSet.
    Critical,
    /// Critical DaemonSet pods (CNI, log shippers...): last, as the node needs them to the end.
    CriticalDaemonSet,
}

impl Tier {
    /// The tier of `pod`.
    pub fn of(pod: &SlimPod) -> Self {
        match (is_critical(pod), is_owned_by_daemon_set(pod)) {
            (false, false) => Tier::NonCritical,
            (false, true) => Tier::NonCriticalDaemonSet,
            (true, false) => Tier::Critical,
            (true, true) => Tier::CriticalDaemonSet,
        }
    }
}

/// Whether the pod's `karpenter.sh/do-not-disrupt` protects it at `now`: `"true"`, or a
/// duration not yet elapsed since the pod started. An invalid value protects nothing.
pub fn has_active_do_not_disrupt(pod: &SlimPod, now: Timestamp) -> bool {
    do_not_disrupt::evaluate(pod, now).blocks()
}

/// Whether the drain waits for the pod to go (upstream `IsWaitingEviction`). Pods with
/// do-not-disrupt and pods already terminating are waited for.
pub fn is_waiting_eviction(pod: &SlimPod, now: Timestamp) -> bool {
    !is_terminal(pod)
        && !tolerates_disrupted_taint(pod)
        && !is_stuck_terminating(pod, now)
        && !is_mirror(pod)
}

/// Whether the drain may call the eviction API on the pod at `now` (upstream `IsEvictable`).
pub fn is_evictable(pod: &SlimPod, now: Timestamp) -> bool {
    !is_terminal(pod)
        && !is_terminating(pod)
        && !tolerates_disrupted_taint(pod)
        && !is_mirror(pod)
        && !has_active_do_not_disrupt(pod, now)
}

/// When the pod must be deleted for its whole grace period to end by `deadline` (the
/// NodeClaim's deletion time plus its terminationGracePeriod).
pub fn force_delete_time(pod: &SlimPod, deadline: Timestamp) -> Timestamp {
    deadline
        .saturating_sub(SignedDuration::from_secs(pod_grace_period_seconds(pod)))
        .unwrap_or(Timestamp::MIN)
}

/// The grace period to delete the pod with now, when the deadline requires deleting it rather
/// than waiting for an eviction; `None` when it can wait.
///
/// A pod not yet terminating is deleted from [`force_delete_time`] on; a terminating one when
/// its own deletion deadline falls after the node's. Either gets what is left until the
/// deadline, at least one second: a grace period of 0 would remove the pod from etcd before
/// its containers stop.
pub fn force_delete_grace_period(
    pod: &SlimPod,
    now: Timestamp,
    deadline: Timestamp,
) -> Option<i64> {
    let due = match &pod.metadata.deletion_timestamp {
        None => now >= force_delete_time(pod, deadline),
        Some(pod_deadline) => pod_deadline.0 > deadline,
    };
    due.then(|| remaining_seconds(now, deadline).max(1))
}

/// Whole seconds from `now` to `deadline`, negative when it has passed.
fn remaining_seconds(now: Timestamp, deadline: Timestamp) -> i64 {
    deadline.duration_since(now).as_secs()
}

/// A pod to delete because of the terminationGracePeriod deadline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForceDelete<'a> {
    /// The pod.
    pub pod: &'a SlimPod,
    /// The grace period to delete it with.
    pub grace_period_seconds: i64,
}

/// What the drain of one node does in this pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrainPlan<'a> {
    /// Pods to delete now for the deadline, whatever their tier, PDBs and do-not-disrupt.
    pub force_delete: Vec<ForceDelete<'a>>,
    /// Pods to evict now: the evictable pods of the tier being drained.
    pub evict: Vec<&'a SlimPod>,
    /// The tier being drained: the first with a pod still waiting; `None` when none waits.
    pub tier: Option<Tier>,
    /// How many pods the drain still waits for, across tiers.
    pub waiting: usize,
    /// Whether the terminationGracePeriod deadline has passed: the drain is over regardless.
    pub deadline_passed: bool,
    /// The next time a waiting pod becomes due for deletion, if one will.
    pub next_force_delete: Option<Timestamp>,
}

impl DrainPlan<'_> {
    /// Whether the node counts as drained: nothing left to wait for, or the deadline passed.
    pub fn is_drained(&self) -> bool {
        self.waiting == 0 || self.deadline_passed
    }
}

/// Plans one pass of the drain of a node whose pods are `pods`, at `now`, given the NodeClaim's
/// termination deadline (`None` without a terminationGracePeriod).
pub fn plan<'a>(
    pods: impl IntoIterator<Item = &'a SlimPod>,
    now: Timestamp,
    deadline: Option<Timestamp>,
) -> DrainPlan<'a> {
    let waiting: Vec<&SlimPod> = pods
        .into_iter()
        .filter(|pod| is_waiting_eviction(pod, now))
        .collect();
    let mut plan = DrainPlan {
        waiting: waiting.len(),
        deadline_passed: deadline.is_some_and(|deadline| now >= deadline),
        tier: waiting.iter().map(|pod| Tier::of(pod)).min(),
        ..DrainPlan::default()
    };
    for pod in &waiting {
        let Some(deadline) = deadline else { break };
        match force_delete_grace_period(pod, now, deadline) {
            Some(grace_period_seconds) => plan.force_delete.push(ForceDelete {
                pod,
                grace_period_seconds,
            }),
            None if !is_terminating(pod) => {
                let due = force_delete_time(pod, deadline);
                plan.next_force_delete = Some(plan.next_force_delete.map_or(due, |t| t.min(due)));
            }
            None => {}
        }
    }
    let deleting = |pod: &SlimPod| plan.force_delete.iter().any(|f| std::ptr::eq(f.pod, pod));
    plan.evict = waiting
        .iter()
        .copied()
        .filter(|pod| Some(Tier::of(pod)) == plan.tier && is_evictable(pod, now) && !deleting(pod))
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing::{self, at, merged};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{Value, json};

    fn pod(name: &str, extra: Value) -> Pod {
        Pod::from(testing::pod(
            name,
            merged(
                json!({
                    "spec": { "containers": [{ "name": "app", "image": "nginx" }], "nodeName": "node-a" },
                    "status": { "phase": "Running" },
                }),
                extra,
            ),
        ))
    }

    fn owned_by(kind: &str, api_version: &str) -> Value {
        json!({ "metadata": { "ownerReferences": [{
            "apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u", "controller": true,
        }] } })
    }

    fn critical() -> Value {
        json!({ "spec": { "priorityClassName": "system-node-critical" } })
    }

    fn terminating_until(seconds: i64) -> Value {
        json!({ "metadata": { "deletionTimestamp": Time(at(seconds)) } })
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter()
            .map(|pod| pod.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn tiers_follow_criticality_then_daemon_set_ownership() {
        let web = pod("web", owned_by("ReplicaSet", "apps/v1"));
        let logs = pod("logs", owned_by("DaemonSet", "apps/v1"));
        let dns = pod("dns", merged(owned_by("ReplicaSet", "apps/v1"), critical()));
        let cni = pod("cni", merged(owned_by("DaemonSet", "apps/v1"), critical()));
        assert_eq!(Tier::of(&web), Tier::NonCritical);
        assert_eq!(Tier::of(&logs), Tier::NonCriticalDaemonSet);
        assert_eq!(Tier::of(&dns), Tier::Critical);
        assert_eq!(Tier::of(&cni), Tier::CriticalDaemonSet);
        assert!(Tier::NonCritical < Tier::NonCriticalDaemonSet);
        assert!(Tier::NonCriticalDaemonSet < Tier::Critical);
        assert!(Tier::Critical < Tier::CriticalDaemonSet);
    }

    #[test]
    fn only_the_two_system_priority_classes_are_critical() {
        let cluster_critical = pod(
            "a",
            json!({ "spec": { "priorityClassName": "system-cluster-critical" } }),
        );
        let high = pod("b", json!({ "spec": { "priorityClassName": "high" } }));
        assert!(is_critical(&cluster_critical));
        assert!(is_critical(&pod("c", critical())));
        assert!(!is_critical(&high));
        assert!(!is_critical(&pod("d", json!({}))));
    }

    #[test]
    fn daemon_set_ownership_needs_the_apps_group() {
        assert!(is_owned_by_daemon_set(&pod(
            "a",
            owned_by("DaemonSet", "apps/v1")
        )));
        assert!(!is_owned_by_daemon_set(&pod(
            "b",
            owned_by("DaemonSet", "example.com/v1")
        )));
        assert!(!is_owned_by_daemon_set(&pod(
            "c",
            owned_by("ReplicaSet", "apps/v1")
        )));
    }

    #[test]
    fn mirror_pods_are_recognised_by_owner_or_annotation() {
        assert!(is_mirror(&pod("a", owned_by("Node", "v1"))));
        assert!(is_mirror(&pod(
            "b",
            json!({ "metadata": { "annotations": { "kubernetes.io/config.mirror": "abc" } } })
        )));
        assert!(!is_mirror(&pod("c", owned_by("ReplicaSet", "apps/v1"))));
    }

    #[test]
    fn tolerations_of_the_disrupted_taint_follow_kubernetes_matching() {
        let with = |toleration: Value| pod("p", json!({ "spec": { "tolerations": [toleration] } }));
        let tolerating = [
            json!({ "key": "karpenter.sh/disrupted", "operator": "Exists" }),
            json!({ "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule" }),
            json!({ "key": "karpenter.sh/disrupted", "effect": "NoSchedule" }),
            json!({ "operator": "Exists" }),
        ];
        for toleration in tolerating {
            assert!(
                tolerates_disrupted_taint(&with(toleration.clone())),
                "{toleration}"
            );
        }
        let not_tolerating = [
            json!({ "key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute" }),
            json!({ "key": "karpenter.sh/disrupted", "operator": "Equal", "value": "yes" }),
            json!({ "key": "node.kubernetes.io/unreachable", "operator": "Exists" }),
        ];
        for toleration in not_tolerating {
            assert!(
                !tolerates_disrupted_taint(&with(toleration.clone())),
                "{toleration}"
            );
        }
    }

    #[test]
    fn the_drain_skips_terminal_tolerating_mirror_and_stuck_pods_but_waits_for_the_rest() {
        let now = at(1000);
        let running = pod("running", json!({}));
        let do_not_disrupt = pod(
            "dnd",
            json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        );
        let terminating = pod("terminating", terminating_until(990));
        let succeeded = pod("succeeded", json!({ "status": { "phase": "Succeeded" } }));
        let failed = pod("failed", json!({ "status": { "phase": "Failed" } }));
        let tolerating = pod(
            "tolerating",
            json!({ "spec": { "tolerations": [{ "operator": "Exists" }] } }),
        );
        let mirror = pod("mirror", owned_by("Node", "v1"));
        let stuck = pod("stuck", terminating_until(939));

        for waited in [&running, &do_not_disrupt, &terminating] {
            assert!(
                is_waiting_eviction(waited, now),
                "{:?}",
                waited.metadata.name
            );
        }
        for skipped in [&succeeded, &failed, &tolerating, &mirror, &stuck] {
            assert!(
                !is_waiting_eviction(skipped, now),
                "{:?}",
                skipped.metadata.name
            );
        }
        assert!(is_evictable(&running, now));
        assert!(
            !is_evictable(&do_not_disrupt, now),
            "waited for, never evicted"
        );
        assert!(!is_evictable(&terminating, now), "already going");
    }

    #[test]
    fn a_pod_terminating_exactly_a_minute_past_its_deadline_is_not_stuck_yet() {
        let pod = pod("p", terminating_until(0));
        assert!(!is_stuck_terminating(&pod, at(60)));
        assert!(is_stuck_terminating(&pod, at(61)));
    }

    #[test]
    fn only_the_first_tier_with_waiting_pods_is_evicted() {
        let now = at(0);
        let web = pod("web", owned_by("ReplicaSet", "apps/v1"));
        let logs = pod("logs", owned_by("DaemonSet", "apps/v1"));
        let dns = pod("dns", critical());
        let cni = pod("cni", merged(owned_by("DaemonSet", "apps/v1"), critical()));

        let plan1 = plan([&cni, &dns, &logs, &web], now, None);
        assert_eq!(plan1.tier, Some(Tier::NonCritical));
        assert_eq!(names(&plan1.evict), ["web"]);
        assert_eq!(plan1.waiting, 4);
        assert!(!plan1.is_drained());

        let web_going = pod(
            "web",
            merged(owned_by("ReplicaSet", "apps/v1"), terminating_until(30)),
        );
        let plan2 = plan([&cni, &dns, &logs, &web_going], now, None);
        assert_eq!(
            plan2.tier,
            Some(Tier::NonCritical),
            "a terminating pod holds its tier until it is gone"
        );
        assert!(plan2.evict.is_empty());

        let plan3 = plan([&cni, &dns, &logs], now, None);
        assert_eq!(names(&plan3.evict), ["logs"]);
        let plan4 = plan([&cni, &dns], now, None);
        assert_eq!(names(&plan4.evict), ["dns"]);
        let plan5 = plan([&cni], now, None);
        assert_eq!(names(&plan5.evict), ["cni"]);
        let plan6 = plan([], now, None);
        assert_eq!(plan6.tier, None);
        assert!(plan6.is_drained());
    }

    #[test]
    fn a_do_not_disrupt_pod_blocks_its_tier_without_being_evicted() {
        let now = at(0);
        let dnd = pod(
            "dnd",
            json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        );
        let web = pod("web", json!({}));
        let logs = pod("logs", owned_by("DaemonSet", "apps/v1"));
        let plan = plan([&dnd, &logs, &web], now, None);
        assert_eq!(names(&plan.evict), ["web"]);
        let plan = super::plan([&dnd, &logs], now, None);
        assert!(plan.evict.is_empty(), "the DaemonSet tier waits for dnd");
        assert_eq!(plan.waiting, 2);
        assert!(!plan.is_drained());
    }

    /// A pod started at `at(0)` whose `karpenter.sh/do-not-disrupt` is `value`.
    fn started_with_do_not_disrupt(name: &str, value: &str) -> Pod {
        pod(
            name,
            json!({
                "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": value } },
                "status": { "startTime": Time(at(0)) },
            }),
        )
    }

    #[test]
    fn a_do_not_disrupt_duration_holds_the_pod_until_it_has_elapsed() {
        let dnd = started_with_do_not_disrupt("dnd", "30m");
        let web = pod("web", json!({}));

        let before = at(30 * 60 - 1);
        assert!(!is_evictable(&dnd, before));
        let plan_before = plan([&dnd, &web], before, None);
        assert_eq!(names(&plan_before.evict), ["web"]);
        assert_eq!(
            plan_before.waiting, 2,
            "the drain waits for the protected pod"
        );

        let expiry = at(30 * 60);
        assert!(
            is_evictable(&dnd, expiry),
            "the duration counts from startTime"
        );
        let plan_after = plan([&dnd, &web], expiry, None);
        assert_eq!(names(&plan_after.evict), ["dnd", "web"]);
    }

    #[test]
    fn an_invalid_do_not_disrupt_value_protects_nothing() {
        let now = at(0);
        for value in ["false", "yes", "0s", "-1h"] {
            let pod = started_with_do_not_disrupt("p", value);
            assert!(is_evictable(&pod, now), "{value:?}");
        }
        assert!(!is_evictable(
            &started_with_do_not_disrupt("p", "true"),
            at(1_000_000)
        ));
    }

    #[test]
    fn force_deletes_ignore_an_active_do_not_disrupt_duration() {
        let dnd = started_with_do_not_disrupt("dnd", "1h");
        let plan = plan([&dnd], at(575), Some(at(600)));
        assert!(has_active_do_not_disrupt(&dnd, at(575)));
        assert_eq!(plan.force_delete.len(), 1);
        assert_eq!(plan.force_delete[0].grace_period_seconds, 25);
        assert!(plan.evict.is_empty());
    }

    #[test]
    fn skipped_pods_alone_leave_the_node_drained() {
        let tolerating = pod(
            "tolerating",
            json!({ "spec": { "tolerations": [{ "key": "karpenter.sh/disrupted", "operator": "Exists" }] } }),
        );
        let done = pod("done", json!({ "status": { "phase": "Succeeded" } }));
        let plan = plan([&tolerating, &done], at(0), None);
        assert!(plan.is_drained());
        assert!(plan.evict.is_empty());
    }

    #[test]
    fn a_pod_is_deleted_its_grace_period_before_the_deadline_and_given_what_is_left() {
        let deadline = at(600);
        let pod = pod(
            "p",
            json!({ "spec": { "terminationGracePeriodSeconds": 120 } }),
        );
        assert_eq!(force_delete_time(&pod, deadline), at(480));
        assert_eq!(force_delete_grace_period(&pod, at(479), deadline), None);
        assert_eq!(
            force_delete_grace_period(&pod, at(480), deadline),
            Some(120)
        );
        assert_eq!(
            force_delete_grace_period(&pod, at(550), deadline),
            Some(50),
            "a late pass still ends the pod by the deadline"
        );
        assert_eq!(
            force_delete_grace_period(&pod, at(700), deadline),
            Some(1),
            "never 0: that would skip the kubelet"
        );
    }

    #[test]
    fn a_pod_without_its_own_grace_period_gets_kubernetes_default() {
        let pod = pod("p", json!({}));
        assert_eq!(pod_grace_period_seconds(&pod), 30);
        assert_eq!(force_delete_time(&pod, at(600)), at(570));
    }

    #[test]
    fn a_terminating_pod_is_deleted_again_only_when_its_deadline_falls_after_the_nodes() {
        let deadline = at(600);
        let within = pod("within", terminating_until(590));
        let beyond = pod("beyond", terminating_until(900));
        assert_eq!(force_delete_grace_period(&within, at(100), deadline), None);
        assert_eq!(
            force_delete_grace_period(&beyond, at(100), deadline),
            Some(500)
        );
    }

    #[test]
    fn force_deletes_cross_tiers_and_ignore_do_not_disrupt() {
        let deadline = at(600);
        let now = at(575);
        let dnd_critical = pod(
            "dnd-critical",
            merged(
                critical(),
                json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
            ),
        );
        let long_grace = pod(
            "long-grace",
            json!({ "spec": { "terminationGracePeriodSeconds": 3600 } }),
        );
        let short_grace = pod(
            "short-grace",
            json!({ "spec": { "terminationGracePeriodSeconds": 10 } }),
        );
        let plan = plan(
            [&dnd_critical, &long_grace, &short_grace],
            now,
            Some(deadline),
        );
        let deleted: Vec<(&str, i64)> = plan
            .force_delete
            .iter()
            .map(|f| {
                (
                    f.pod.metadata.name.as_deref().unwrap(),
                    f.grace_period_seconds,
                )
            })
            .collect();
        assert_eq!(deleted, [("dnd-critical", 25), ("long-grace", 25)]);
        assert_eq!(
            names(&plan.evict),
            ["short-grace"],
            "the non-critical tier's other pod is evicted as usual"
        );
        assert_eq!(plan.next_force_delete, Some(at(590)));
        assert!(!plan.is_drained());
    }

    #[test]
    fn at_the_deadline_the_drain_is_over_whatever_still_runs() {
        let deadline = at(600);
        let stubborn = pod("stubborn", terminating_until(600));
        let before = plan([&stubborn], at(599), Some(deadline));
        assert!(!before.is_drained());
        let at_deadline = plan([&stubborn], at(600), Some(deadline));
        assert!(at_deadline.deadline_passed);
        assert!(at_deadline.is_drained());
    }
}
