//! What disrupting a node costs (upstream kubernetes-sigs/karpenter
//! `pkg/utils/disruption`: `EvictionCost`, `ReschedulingCost`, `LifetimeRemaining`).
//!
//! - A pod's eviction cost is 1, plus its `controller.kubernetes.io/pod-deletion-cost` over
//!   2^27, plus its priority over 2^25, clamped to [-10, 10]: a pod of the highest user
//!   priority (10^9) costs about 30 plain pods before the clamp, one of the lowest deletion cost
//!   about -15.
//! - A node's disruption cost is the sum over its reschedulable pods, times the fraction of its
//!   lifetime left (`expireAfter`): a node about to expire is cheap to disrupt, since it goes
//!   soon anyway.
//! - Candidates are tried cheapest first, ties broken by node name so that every pass, and
//!   every replica of the simulator, picks the same node.
//!
//! Differences from upstream: the node's cost sums its reschedulable pods (those that must move:
//! not DaemonSet, mirror or finished pods), where upstream sums every pod bound to it, so a node
//! full of completed Jobs is not dearer to disrupt than an empty one; the lifetime is the
//! NodeClaim's own `expireAfter` (what the expiration controller enforces), not the NodePool
//! template's current one; a deletion cost that is not a finite number is ignored rather than
//! making the cost NaN.

use crate::cluster::SlimPod;
use std::cmp::Ordering;

use jiff::Timestamp;
use karpenter_api::NodeClaim;

use crate::cluster::Snapshot;

/// The annotation by which a workload says how much deleting one of its pods costs.
pub const ANNOTATION_POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The divisor of the pod deletion cost (upstream `2^27`).
pub const DELETION_COST_SCALE: f64 = 134_217_728.0;
/// The divisor of the pod priority (upstream `2^25`).
pub const PRIORITY_SCALE: f64 = 33_554_432.0;
/// The lowest and highest cost one pod can have.
pub const POD_COST_BOUNDS: (f64, f64) = (-10.0, 10.0);

/// The pod's priority: `spec.priority` (set by admission from its priority class), else its
/// priority class's value looked up in the snapshot, else the global default class's, else 0.
/// The lookups stand in for admission where there is none (the in-memory cluster).
pub fn pod_priority(pod: &SlimPod, snapshot: &Snapshot) -> i32 {
    let spec = pod.spec.as_ref();
    if let Some(priority) = spec.and_then(|spec| spec.priority) {
        return priority;
    }
    let named = spec
        .and_then(|spec| spec.priority_class_name.as_deref())
        .filter(|name| !name.is_empty());
    match named {
        Some(name) => snapshot.priority_class(name).map_or(0, |class| class.value),
        None => snapshot
            .priority_classes
            .iter()
            .find(|class| class.global_default == Some(true))
            .map_or(0, |class| class.value),
    }
}

/// The pod's deletion cost from its annotation; `None` when absent or not a finite number.
pub fn pod_deletion_cost(pod: &SlimPod) -> Option<f64> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(ANNOTATION_POD_DELETION_COST))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .filter(|cost| cost.is_finite())
}

/// What evicting the pod costs (upstream `EvictionCost`): 1, plus the deletion cost over 2^27,
/// plus `priority` over 2^25, clamped to [-10, 10].
pub fn eviction_cost(pod: &SlimPod, priority: i32) -> f64 {
    let mut cost = 1.0;
    if let Some(deletion_cost) = pod_deletion_cost(pod) {
        cost += deletion_cost / DELETION_COST_SCALE;
    }
    cost += f64::from(priority) / PRIORITY_SCALE;
    cost.clamp(POD_COST_BOUNDS.0, POD_COST_BOUNDS.1)
}

/// The sum of the pods' eviction costs (upstream `ReschedulingCost`).
pub fn rescheduling_cost<'a>(
    pods: impl IntoIterator<Item = &'a SlimPod>,
    snapshot: &Snapshot,
) -> f64 {
    pods.into_iter()
        .map(|pod| eviction_cost(pod, pod_priority(pod, snapshot)))
        .sum()
}

/// 1 plus the positive eviction costs of the pods (upstream `RescheduleDisruptionCost`, v1.14):
/// at most 1 means no pod that matters has to move, which is what "empty" means upstream.
pub fn reschedule_disruption_cost<'a>(
    pods: impl IntoIterator<Item = &'a SlimPod>,
    snapshot: &Snapshot,
) -> f64 {
    1.0 + pods
        .into_iter()
        .map(|pod| eviction_cost(pod, pod_priority(pod, snapshot)).max(0.0))
        .sum::<f64>()
}

/// The fraction of the NodeClaim's lifetime left at `now`, in [0, 1] (upstream
/// `LifetimeRemaining`): `(expireAfter - age) / expireAfter`; 1 with `expireAfter: Never` or
/// without a creation time; 0 with an `expireAfter` of zero.
pub fn lifetime_remaining(node_claim: &NodeClaim, now: Timestamp) -> f64 {
    let Some(expire_after) = node_claim.spec.expire_after.duration() else {
        return 1.0;
    };
    let Some(created) = node_claim.metadata.creation_timestamp.as_ref() else {
        return 1.0;
    };
    let total = expire_after.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let age = now.duration_since(created.0).as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// A node's disruption cost: the rescheduling cost of the pods that must move, times the
/// fraction of its lifetime left.
pub fn disruption_cost<'a>(
    reschedulable_pods: impl IntoIterator<Item = &'a SlimPod>,
    node_claim: &NodeClaim,
    snapshot: &Snapshot,
    now: Timestamp,
) -> f64 {
    rescheduling_cost(reschedulable_pods, snapshot) * lifetime_remaining(node_claim, now)
}

/// Orders by disruption cost ascending, then by name: the order candidates are tried in.
pub fn by_disruption_cost(a: (f64, &str), b: (f64, &str)) -> Ordering {
    a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1))
}

/// Sorts `items` cheapest to disrupt first, ties by name (`key` gives each one's cost and name).
pub fn sort_by_disruption_cost<T>(items: &mut [T], key: impl Fn(&T) -> (f64, &str)) {
    items.sort_by(|a, b| by_disruption_cost(key(a), key(b)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing;
    use serde_json::json;

    fn pod(priority: Option<i32>, deletion_cost: Option<&str>) -> Pod {
        let mut value = json!({
            "metadata": { "name": "p", "namespace": "ns" },
            "spec": { "containers": [] },
        });
        if let Some(priority) = priority {
            value["spec"]["priority"] = json!(priority);
        }
        if let Some(cost) = deletion_cost {
            value["metadata"]["annotations"] = json!({ ANNOTATION_POD_DELETION_COST: cost });
        }
        serde_json::from_value(value).unwrap()
    }

    fn node_claim(created: &str, expire_after: &str) -> NodeClaim {
        testing::node_claim(
            "c",
            json!({
                "metadata": { "creationTimestamp": created },
                "spec": { "expireAfter": expire_after },
            }),
        )
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_plain_pod_costs_one() {
        assert_eq!(eviction_cost(&pod(None, None), 0), 1.0);
    }

    #[test]
    fn priority_adds_its_value_over_two_to_the_twenty_fifth() {
        let cost = eviction_cost(&pod(None, None), 1 << 24);
        assert!((cost - 1.5).abs() < 1e-12, "{cost}");
        assert!(eviction_cost(&pod(None, None), -(1 << 24)) < 1.0);
        assert_eq!(
            eviction_cost(&pod(None, None), 1_000_000_000),
            10.0,
            "the highest user priority is clamped"
        );
        assert_eq!(eviction_cost(&pod(None, None), i32::MIN), -10.0);
    }

    #[test]
    fn deletion_cost_adds_its_value_over_two_to_the_twenty_seventh() {
        let cost = eviction_cost(&pod(None, Some("67108864")), 0);
        assert!((cost - 1.5).abs() < 1e-12, "{cost}");
        assert_eq!(
            eviction_cost(&pod(None, Some("-2147483647")), 0),
            -10.0,
            "about -15 before the clamp"
        );
        assert_eq!(
            eviction_cost(&pod(None, Some("lots")), 0),
            1.0,
            "an unparsable cost is ignored"
        );
        assert_eq!(eviction_cost(&pod(None, Some("NaN")), 0), 1.0);
    }

    #[test]
    fn priority_comes_from_the_spec_else_the_class_else_the_global_default() {
        let mut snapshot = Snapshot {
            priority_classes: crate::cluster::shared([
                serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000}))
                    .unwrap(),
                serde_json::from_value(
                    json!({"metadata": {"name": "default"}, "value": 7, "globalDefault": true}),
                )
                .unwrap(),
            ]),
            ..Snapshot::default()
        };
        snapshot.sort();
        assert_eq!(pod_priority(&pod(Some(5), None), &snapshot), 5);
        let mut classed = pod(None, None);
        classed.spec.as_mut().unwrap().priority_class_name = Some("high".into());
        assert_eq!(pod_priority(&classed, &snapshot), 1000);
        assert_eq!(pod_priority(&pod(None, None), &snapshot), 7);
        classed.spec.as_mut().unwrap().priority_class_name = Some("gone".into());
        assert_eq!(pod_priority(&classed, &snapshot), 0);
    }

    #[test]
    fn lifetime_remaining_falls_from_one_to_zero_over_expire_after() {
        let claim = node_claim("2025-01-01T00:00:00Z", "10h");
        assert_eq!(lifetime_remaining(&claim, at("2025-01-01T00:00:00Z")), 1.0);
        assert!((lifetime_remaining(&claim, at("2025-01-01T07:30:00Z")) - 0.25).abs() < 1e-12);
        assert_eq!(lifetime_remaining(&claim, at("2025-01-02T00:00:00Z")), 0.0);
        assert_eq!(
            lifetime_remaining(&claim, at("2024-12-31T00:00:00Z")),
            1.0,
            "clock skew cannot make it exceed one"
        );
        let never = node_claim("2025-01-01T00:00:00Z", "Never");
        assert_eq!(lifetime_remaining(&never, at("2030-01-01T00:00:00Z")), 1.0);
        let zero = node_claim("2025-01-01T00:00:00Z", "0s");
        assert_eq!(lifetime_remaining(&zero, at("2025-01-01T00:00:00Z")), 0.0);
    }

    #[test]
    fn cost_scales_with_lifetime_and_only_positive_costs_make_a_node_non_empty() {
        let snapshot = Snapshot::default();
        let pods = [pod(Some(0), None), pod(Some(0), None)];
        let claim = node_claim("2025-01-01T00:00:00Z", "10h");
        let young = disruption_cost(&pods, &claim, &snapshot, at("2025-01-01T00:00:00Z"));
        let old = disruption_cost(&pods, &claim, &snapshot, at("2025-01-01T05:00:00Z"));
        assert_eq!(young, 2.0);
        assert_eq!(old, 1.0);
        assert_eq!(reschedule_disruption_cost(&pods, &snapshot), 3.0);
        let negligible = [pod(Some(i32::MIN), None)];
        assert_eq!(reschedule_disruption_cost(&negligible, &snapshot), 1.0);
        assert_eq!(
            reschedule_disruption_cost(std::iter::empty(), &snapshot),
            1.0
        );
    }

    #[test]
    fn sorting_is_by_cost_then_name() {
        let mut items = vec![(2.0, "b"), (1.0, "z"), (2.0, "a"), (-1.0, "m")];
        sort_by_disruption_cost(&mut items, |item| (item.0, item.1));
        assert_eq!(items, vec![(-1.0, "m"), (1.0, "z"), (2.0, "a"), (2.0, "b")]);
    }
}
