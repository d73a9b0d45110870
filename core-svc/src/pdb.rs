//! A PodDisruptionBudget's arithmetic, once for the whole crate: how many of the pods it
//! selects may be disrupted now, as the Kubernetes disruption controller computes it
//! (`pkg/controller/disruption`), and the eviction API's check of one pod against it
//! (`pkg/registry/core/pod/storage/eviction.go`). Pure: a budget and pods in, a
//! [`PdbAllowance`] out. The in-memory cluster derives budget statuses and answers evictions
//! with it; disruption predicts what the eviction API will say with it.
//!
//! - **selected**: pods in the budget's namespace that its selector matches (an empty selector
//!   matches every pod; a missing or unparsable one none);
//! - **healthy**: Ready and not terminating;
//! - **expected pods**: with `maxUnavailable`, or `minAvailable` as a percentage, the selected
//!   pods that a controller owns and that are not terminal, standing in for the controllers'
//!   scale, which the pods alone do not tell. Terminating pods count: a replica being evicted
//!   is still part of its workload's scale, and leaving it out would lower the bar for the
//!   next eviction (three evictions admitted in one drain under `maxUnavailable: 1`); with an
//!   integer `minAvailable`, every selected pod;
//! - **desired healthy**: `minAvailable`, or the expected pods minus `maxUnavailable` (never
//!   below 0); a percentage is of the expected pods, rounded up
//!   (`GetScaledValueFromIntOrPercent(value, total, roundUp=true)`);
//! - **disruptions allowed**: healthy minus desired, 0 when that is negative or no pod is
//!   expected; a budget whose values cannot be computed allows nothing.
//!
//! A status the disruption controller wrote can only lower the allowance
//! ([`PdbAllowance::lowered_by_status`]): it knows the workloads' scale and counts the
//! evictions it has just admitted. The in-memory cluster does not apply it, since there the
//! arithmetic *is* the disruption controller.

use crate::objects::SlimPod;
use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};

use crate::objects::{is_pod_ready, is_terminal, is_terminating};

/// `unhealthyPodEvictionPolicy: AlwaysAllow`: a budget that never protects pods that are not
/// Ready.
pub const UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW: &str = "AlwaysAllow";
/// `unhealthyPodEvictionPolicy: IfHealthyBudget` (the default): a pod that is not Ready may go
/// only while the budget has the healthy pods it wants.
pub const UNHEALTHY_POD_EVICTION_IF_HEALTHY_BUDGET: &str = "IfHealthyBudget";

/// A PodDisruptionBudget's arithmetic at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdbAllowance {
    /// The budget, `namespace/name`.
    pub pdb: String,
    /// The pods the budget expects to exist.
    pub expected_pods: i32,
    /// The selected pods that are Ready and not terminating.
    pub current_healthy: i32,
    /// How many of them must stay healthy.
    pub desired_healthy: i32,
    /// How many pods may be evicted now.
    pub disruptions_allowed: i32,
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`: pods that are not Ready never count against it.
    pub unhealthy_always_allow: bool,
    /// `maxUnavailable: 0` (or `"0%"`) or `minAvailable: "100%"`: it never allows an eviction.
    pub fully_blocking: bool,
}

impl PdbAllowance {
    /// The allowance lowered to what a status the disruption controller wrote for the budget's
    /// current generation allows; a status of an older generation is stale and ignored.
    pub fn lowered_by_status(mut self, pdb: &PodDisruptionBudget) -> Self {
        if let Some(status) = &pdb.status
            && status.observed_generation == pdb.metadata.generation
        {
            self.disruptions_allowed = self
                .disruptions_allowed
                .min(status.disruptions_allowed.max(0));
        }
        self
    }

    /// The eviction API's verdict for a running pod that this budget, and no other, selects:
    /// a pod that is not Ready may go under `AlwaysAllow`, or (`IfHealthyBudget`, the default)
    /// while the budget has the healthy pods it wants; any pod may go while disruptions are
    /// allowed.
    pub fn admits_eviction(&self, pod: &SlimPod) -> bool {
        if !is_pod_ready(pod) {
            let healthy_budget =
                self.current_healthy >= self.desired_healthy && self.desired_healthy > 0;
            if self.unhealthy_always_allow || healthy_budget {
                return true;
            }
        }
        self.disruptions_allowed > 0
    }
}

/// The budget's parsed selector; `None` selects nothing (a missing or unparsable one).
pub fn selector(pdb: &PodDisruptionBudget) -> Option<Selector> {
    let selector = pdb.spec.as_ref()?.selector.clone()?;
    Selector::try_from(selector).ok()
}

/// Whether the budget selects `pod`, given its [`selector`] (parsed once by the caller, who
/// usually matches many pods).
pub fn selects(pdb: &PodDisruptionBudget, selector: Option<&Selector>, pod: &SlimPod) -> bool {
    pdb.metadata.namespace == pod.metadata.namespace
        && selector.is_some_and(|selector| {
            selector.matches(pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
        })
}

/// The budget's allowance from `pods` alone (any pods: those it selects are picked out), as the
/// module documentation says; `selector` is the budget's [`selector`]. The budget's status is
/// not read.
pub fn allowance<'p>(
    pdb: &PodDisruptionBudget,
    selector: Option<&Selector>,
    pods: impl IntoIterator<Item = &'p SlimPod>,
) -> PdbAllowance {
    let selected: Vec<&SlimPod> = pods
        .into_iter()
        .filter(|pod| selects(pdb, selector, pod))
        .collect();
    allowance_of_selected(pdb, &selected)
}

/// [`allowance`] when the caller has already picked out the pods the budget selects (and
/// needs them for more than the allowance); `selected` must hold exactly those.
pub fn allowance_of_selected(pdb: &PodDisruptionBudget, selected: &[&SlimPod]) -> PdbAllowance {
    let count = |keep: &dyn Fn(&SlimPod) -> bool| {
        i32::try_from(selected.iter().filter(|pod| keep(pod)).count()).unwrap_or(i32::MAX)
    };
    let current_healthy = count(&|pod| !is_terminating(pod) && is_pod_ready(pod));
    // Pods without a controller count for nothing, as in Kubernetes.
    let managed = || {
        count(&|pod| {
            !is_terminal(pod)
                && pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|owner| owner.controller == Some(true))
        })
    };
    let spec = pdb.spec.as_ref();
    let max_unavailable = spec.and_then(|spec| spec.max_unavailable.as_ref());
    let min_available = spec.and_then(|spec| spec.min_available.as_ref());
    let (expected_pods, desired) = match (max_unavailable, min_available) {
        (Some(max_unavailable), _) => {
            let expected = managed();
            let desired = scaled(max_unavailable, expected).map(|max| (expected - max).max(0));
            (expected, desired)
        }
        (None, Some(IntOrString::Int(min_available))) => (count(&|_| true), Some(*min_available)),
        (None, Some(min_available)) => {
            let expected = managed();
            (expected, scaled(min_available, expected))
        }
        (None, None) => (0, Some(0)),
    };
    // A budget that cannot be computed protects everything.
    let surplus = current_healthy.saturating_sub(desired.unwrap_or(i32::MAX));
    let disruptions_allowed = if expected_pods <= 0 || surplus <= 0 {
        0
    } else {
        surplus
    };
    let fully_blocking = matches!(max_unavailable, Some(IntOrString::Int(0)))
        || matches!(max_unavailable, Some(IntOrString::String(text)) if text == "0%")
        || matches!(min_available, Some(IntOrString::String(text)) if text == "100%");
    PdbAllowance {
        pdb: key(pdb),
        expected_pods,
        current_healthy,
        desired_healthy: desired.unwrap_or(0),
        disruptions_allowed,
        unhealthy_always_allow: spec.and_then(|spec| spec.unhealthy_pod_eviction_policy.as_deref())
            == Some(UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW),
        fully_blocking,
    }
}

/// The budget's allowance from `pods` (any pods: those it selects are picked out), lowered by
/// a current status: what to expect of the eviction API of a real cluster.
pub fn pdb_allowance<'p>(
    pdb: &PodDisruptionBudget,
    pods: impl IntoIterator<Item = &'p SlimPod>,
) -> PdbAllowance {
    allowance(pdb, selector(pdb).as_ref(), pods).lowered_by_status(pdb)
}

/// `GetScaledValueFromIntOrPercent(value, total, roundUp=true)`; `None` for a string that is
/// not a percentage, or a result beyond `i32`.
fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            // Go's Atoi takes a sign, so a percentage may be negative; i128 cannot overflow.
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            let numerator = i128::from(percent) * i128::from(total.max(0)) + 99;
            i32::try_from(numerator.div_euclid(100)).ok()
        }
    }
}

fn key(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or_default(),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SlimPod as Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use serde_json::{Value, json};

    /// A running, Ready pod `name` labelled `app: web`, owned by a ReplicaSet, plus `extra`
    /// merged over the top level.
    fn pod(name: &str, extra: Value) -> Pod {
        let mut value = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": { "app": "web" },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u",
                    "controller": true,
                }],
            },
            "spec": { "containers": [{ "name": "app", "image": "nginx" }] },
            "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] },
        });
        if let (Value::Object(value), Value::Object(extra)) = (&mut value, extra) {
            for (field, patch) in extra {
                match (value.get_mut(&field), patch) {
                    (Some(Value::Object(target)), Value::Object(patch)) => target.extend(patch),
                    (_, patch) => {
                        value.insert(field, patch);
                    }
                }
            }
        }
        serde_json::from_value(value).unwrap()
    }

    fn unready(name: &str) -> Pod {
        pod(
            name,
            json!({ "status": { "conditions": [{ "type": "Ready", "status": "False" }] } }),
        )
    }

    fn budget(spec: Value) -> PodDisruptionBudget {
        let mut spec = spec;
        if let Value::Object(fields) = &mut spec {
            fields
                .entry("selector")
                .or_insert(json!({ "matchLabels": { "app": "web" } }));
        }
        serde_json::from_value(json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": { "name": "web-pdb", "namespace": "default", "generation": 1 },
            "spec": spec,
        }))
        .unwrap()
    }

    fn three_web_pods() -> Vec<Pod> {
        ["w0", "w1", "w2"]
            .into_iter()
            .map(|name| pod(name, json!({})))
            .collect()
    }

    #[test]
    fn given_percentages_then_they_scale_rounding_up_as_kubernetes_does() {
        let percent = |text: &str| IntOrString::String(text.to_owned());
        assert_eq!(scaled(&percent("50%"), 3), Some(2));
        assert_eq!(scaled(&percent("10%"), 1), Some(1));
        assert_eq!(scaled(&percent("0%"), 7), Some(0));
        assert_eq!(scaled(&percent("100%"), 7), Some(7));
        assert_eq!(scaled(&percent("-5%"), 10), Some(0), "ceil(-0.5) is 0");
        assert_eq!(scaled(&IntOrString::Int(4), 7), Some(4));
        assert_eq!(scaled(&percent("5"), 7), None);
        assert_eq!(scaled(&percent("9223372036854775807%"), 3), None);
    }

    #[test]
    fn given_max_unavailable_then_the_expected_pods_are_the_controlled_ones_not_terminal() {
        let mut pods = three_web_pods();
        pods.push(pod(
            "orphan",
            json!({ "metadata": { "ownerReferences": [] } }),
        ));
        pods.push(pod("done", json!({ "status": { "phase": "Succeeded" } })));
        pods.push(pod(
            "going",
            json!({ "metadata": { "deletionTimestamp": "2025-03-01T00:00:00Z" } }),
        ));
        let allowance = pdb_allowance(&budget(json!({ "maxUnavailable": "34%" })), &pods);
        // "going" is terminating but still one of the workload's replicas: 4 expected; 34% of
        // 4 is 1.36, up to 2: two must stay. The orphan and "done" are Ready, "going" is not
        // healthy.
        assert_eq!(allowance.expected_pods, 4);
        assert_eq!(allowance.desired_healthy, 2);
        assert_eq!(allowance.current_healthy, 5);
        assert_eq!(allowance.disruptions_allowed, 3);
        assert_eq!(allowance.pdb, "default/web-pdb");
    }

    #[test]
    fn given_an_integer_min_available_then_every_selected_pod_is_expected() {
        let mut pods = three_web_pods();
        pods.push(pod(
            "orphan",
            json!({ "metadata": { "ownerReferences": [] } }),
        ));
        pods.push(pod(
            "elsewhere",
            json!({ "metadata": { "namespace": "other" } }),
        ));
        pods.push(pod(
            "db",
            json!({ "metadata": { "labels": { "app": "db" } } }),
        ));
        let allowance = pdb_allowance(&budget(json!({ "minAvailable": 3 })), &pods);
        assert_eq!(
            (
                allowance.expected_pods,
                allowance.current_healthy,
                allowance.disruptions_allowed
            ),
            (4, 4, 1)
        );
    }

    #[test]
    fn given_no_expected_pods_or_an_uncomputable_budget_then_nothing_is_allowed() {
        let orphans: Vec<Pod> = ["a", "b"]
            .into_iter()
            .map(|name| pod(name, json!({ "metadata": { "ownerReferences": [] } })))
            .collect();
        let none_expected = pdb_allowance(&budget(json!({ "maxUnavailable": 1 })), &orphans);
        assert_eq!(none_expected.expected_pods, 0);
        assert_eq!(none_expected.disruptions_allowed, 0);
        let garbage = pdb_allowance(
            &budget(json!({ "minAvailable": "lots" })),
            &three_web_pods(),
        );
        assert_eq!(garbage.disruptions_allowed, 0);
        assert_eq!(garbage.desired_healthy, 0);
        let no_selector = pdb_allowance(
            &budget(json!({ "maxUnavailable": 1, "selector": null })),
            &three_web_pods(),
        );
        assert_eq!(
            no_selector.expected_pods, 0,
            "a missing selector selects nothing"
        );
    }

    #[test]
    fn given_fully_blocking_values_then_they_are_flagged() {
        let pods = three_web_pods();
        for spec in [
            json!({ "maxUnavailable": 0 }),
            json!({ "maxUnavailable": "0%" }),
            json!({ "minAvailable": "100%" }),
        ] {
            let allowance = pdb_allowance(&budget(spec.clone()), &pods);
            assert!(allowance.fully_blocking, "{spec}");
            assert_eq!(allowance.disruptions_allowed, 0, "{spec}");
        }
        assert!(!pdb_allowance(&budget(json!({ "minAvailable": "99%" })), &pods).fully_blocking);
        assert!(!pdb_allowance(&budget(json!({ "minAvailable": 3 })), &pods).fully_blocking);
    }

    #[test]
    fn given_a_status_of_the_current_generation_then_it_can_only_lower_the_allowance() {
        let pods = three_web_pods();
        let with_status = |generation: i64, allowed: i32| {
            let mut pdb = budget(json!({ "maxUnavailable": 2 }));
            pdb.status = Some(PodDisruptionBudgetStatus {
                observed_generation: Some(generation),
                disruptions_allowed: allowed,
                ..Default::default()
            });
            pdb
        };
        assert_eq!(
            pdb_allowance(&with_status(1, 0), &pods).disruptions_allowed,
            0
        );
        assert_eq!(
            pdb_allowance(&with_status(1, 1), &pods).disruptions_allowed,
            1
        );
        assert_eq!(
            pdb_allowance(&with_status(1, 9), &pods).disruptions_allowed,
            2
        );
        assert_eq!(
            pdb_allowance(&with_status(0, 0), &pods).disruptions_allowed,
            2,
            "a stale status is ignored"
        );
        let from_pods = allowance(
            &with_status(1, 0),
            selector(&with_status(1, 0)).as_ref(),
            &pods,
        );
        assert_eq!(
            from_pods.disruptions_allowed, 2,
            "allowance reads no status"
        );
    }

    #[test]
    fn given_unready_pods_then_the_eviction_check_follows_the_unhealthy_policy() {
        let pods = vec![pod("w0", json!({})), pod("w1", json!({})), unready("w2")];
        // maxUnavailable 1 of 3: 2 must stay, 2 are healthy, nothing may go...
        let default_policy = pdb_allowance(&budget(json!({ "maxUnavailable": 1 })), &pods);
        assert_eq!(default_policy.disruptions_allowed, 0);
        assert!(!default_policy.admits_eviction(&pods[0]));
        // ...but the unready pod may, since the budget has its healthy pods.
        assert!(default_policy.admits_eviction(&pods[2]));

        // minAvailable 3: the budget lacks a healthy pod, so only AlwaysAllow lets w2 go.
        let short = pdb_allowance(&budget(json!({ "minAvailable": 3 })), &pods);
        assert!(!short.admits_eviction(&pods[2]));
        let always = pdb_allowance(
            &budget(json!({ "minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow" })),
            &pods,
        );
        assert!(always.unhealthy_always_allow);
        assert!(always.admits_eviction(&pods[2]));
        assert!(
            !always.admits_eviction(&pods[0]),
            "healthy pods still count"
        );

        // desiredHealthy 0 never admits an unready pod through the healthy-budget rule.
        let zero = pdb_allowance(&budget(json!({ "minAvailable": 0 })), &[unready("w9")]);
        assert_eq!(zero.desired_healthy, 0);
        assert!(!zero.admits_eviction(&unready("w9")));
    }
}
