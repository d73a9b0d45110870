//! PodDisruptionBudgets as the disruption controller judges them, for the report's
//! `pdbViolations`: an eviction violates a budget when, once its pod is gone, fewer of the
//! budget's pods are healthy than the budget requires.
//!
//! Computed here from the pods and the workloads' scale rather than read from the cluster's
//! budget status, so the figure checks the eviction API stand-in instead of trusting it. As the
//! disruption controller: the expected count is the scale of the pods' controllers (a
//! Deployment's replicas, not how many of its pods happen to be alive), except for an integer
//! `minAvailable`, which counts the pods; healthy means Ready and not terminating; percentages
//! round up.

use core_svc::cluster::SlimPod;
use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::world::{is_pod_ready, is_terminal, is_terminating};

/// What controls a pod, for the expected count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Controller {
    /// A workload with a scale: its key (counted once) and its replicas.
    Scaled {
        /// Identifies the workload.
        key: String,
        /// Its desired replicas.
        replicas: i32,
    },
    /// Some other controller: the pod counts as one expected pod.
    Other,
    /// No controller: the pod counts for nothing.
    None,
}

/// Whether a policy/v1 label selector selects `labels` (an empty selector selects every pod).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// Whether `pdb` covers `pod`: same namespace, and its selector (a missing one selects none).
pub fn covers(pdb: &PodDisruptionBudget, pod: &SlimPod) -> bool {
    fn namespace(ns: &Option<String>) -> &str {
        ns.as_deref().unwrap_or("default")
    }
    let empty = BTreeMap::new();
    namespace(&pdb.metadata.namespace) == namespace(&pod.metadata.namespace)
        && pdb
            .spec
            .as_ref()
            .and_then(|spec| spec.selector.as_ref())
            .is_some_and(|selector| {
                selects(selector, pod.metadata.labels.as_ref().unwrap_or(&empty))
            })
}

fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            i32::try_from((percent * i64::from(total) + 99) / 100).ok()
        }
    }
}

/// How many healthy pods `pdb` requires among `pods` (every pod it covers).
pub fn desired_healthy(
    pdb: &PodDisruptionBudget,
    pods: &[&SlimPod],
    controller_of: &dyn Fn(&SlimPod) -> Controller,
) -> i32 {
    let spec = pdb.spec.as_ref();
    let expected = || {
        let mut scales: BTreeMap<String, i32> = BTreeMap::new();
        let mut others = 0;
        for pod in pods {
            match controller_of(pod) {
                Controller::Scaled { key, replicas } => {
                    scales.insert(key, replicas);
                }
                Controller::Other if !is_terminating(pod) && !is_terminal(pod) => others += 1,
                Controller::Other | Controller::None => {}
            }
        }
        scales.values().sum::<i32>() + others
    };
    match (
        spec.and_then(|s| s.max_unavailable.as_ref()),
        spec.and_then(|s| s.min_available.as_ref()),
    ) {
        (Some(max_unavailable), _) => {
            let expected = expected();
            // A budget the controller cannot read requires everything.
            (expected - scaled(max_unavailable, expected).unwrap_or(0)).max(0)
        }
        (None, Some(IntOrString::Int(min))) => *min,
        (None, Some(min)) => scaled(min, expected()).unwrap_or(i32::MAX),
        (None, None) => 0,
    }
}

/// Whether `qualified` (`namespace/name`, the default namespace when the pod names none) names
/// `pod`.
fn is_named(pod: &SlimPod, qualified: &str) -> bool {
    qualified
        .strip_prefix(pod.metadata.namespace.as_deref().unwrap_or("default"))
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| Some(name) == pod.metadata.name.as_deref())
}

/// How many of the evictions (`namespace/name`, in the order they happened) each left `pdb`
/// with fewer healthy pods than it requires, given the pods before them.
pub fn violations<P: std::borrow::Borrow<SlimPod>>(
    pdb: &PodDisruptionBudget,
    pods_before: &[P],
    evicted: &[String],
    controller_of: &dyn Fn(&SlimPod) -> Controller,
) -> u64 {
    let pods_before = || pods_before.iter().map(std::borrow::Borrow::borrow);
    // The evicted pods this budget covers, in eviction order, each looked up once. Most
    // evictions leave most budgets alone: those need no count of their pods.
    let evicted: Vec<&SlimPod> = evicted
        .iter()
        .filter_map(|qualified| pods_before().find(|pod| is_named(pod, qualified)))
        .filter(|pod| covers(pdb, pod))
        .collect();
    if evicted.is_empty() {
        return 0;
    }
    let covered: Vec<&SlimPod> = pods_before().filter(|pod| covers(pdb, pod)).collect();
    let desired = desired_healthy(pdb, &covered, controller_of);
    let healthy = |pod: &SlimPod| is_pod_ready(pod) && !is_terminating(pod);
    let mut left =
        i32::try_from(covered.iter().filter(|pod| healthy(pod)).count()).unwrap_or(i32::MAX);
    let mut count = 0;
    for pod in evicted {
        if !healthy(pod) {
            continue;
        }
        left -= 1;
        if left < desired {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use core_svc::cluster::SlimPod as Pod;

    fn pod(name: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        }))
        .unwrap()
    }

    fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn deployment_of_four(_: &Pod) -> Controller {
        Controller::Scaled {
            key: "Deployment default/web".to_owned(),
            replicas: 4,
        }
    }

    fn evicting(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("default/{n}")).collect()
    }

    #[test]
    fn max_unavailable_one_of_four_allows_one_eviction_at_a_time() {
        let pods: Vec<Pod> = ["a", "b", "c", "d"].iter().map(|n| pod(n, true)).collect();
        let pdb = budget(json!({"maxUnavailable": 1}));
        assert_eq!(
            violations(&pdb, &pods, &evicting(&["a"]), &deployment_of_four),
            0
        );
        assert_eq!(
            violations(
                &pdb,
                &pods,
                &evicting(&["a", "b", "c"]),
                &deployment_of_four
            ),
            2,
            "the second and third evictions each left fewer than three healthy"
        );
    }

    #[test]
    fn the_expected_count_is_the_scale_not_the_pods_left() {
        // Two of four replicas already gone: the budget still requires three healthy.
        let pods: Vec<Pod> = ["a", "b"].iter().map(|n| pod(n, true)).collect();
        let pdb = budget(json!({"maxUnavailable": 1}));
        assert_eq!(
            violations(&pdb, &pods, &evicting(&["a"]), &deployment_of_four),
            1
        );
    }

    #[test]
    fn evicting_an_unhealthy_pod_takes_nothing_from_the_budget() {
        let pods = vec![
            pod("a", false),
            pod("b", true),
            pod("c", true),
            pod("d", true),
        ];
        let pdb = budget(json!({"minAvailable": 3}));
        assert_eq!(
            violations(&pdb, &pods, &evicting(&["a"]), &deployment_of_four),
            0
        );
    }

    #[test]
    fn percentages_round_up() {
        let pods: Vec<Pod> = ["a", "b", "c", "d"].iter().map(|n| pod(n, true)).collect();
        let covered: Vec<&Pod> = pods.iter().collect();
        let pdb = budget(json!({"minAvailable": "60%"}));
        assert_eq!(desired_healthy(&pdb, &covered, &deployment_of_four), 3);
        let pdb = budget(json!({"maxUnavailable": "30%"}));
        assert_eq!(desired_healthy(&pdb, &covered, &deployment_of_four), 2);
    }

    #[test]
    fn an_eviction_outside_a_budget_counts_nothing_against_it() {
        let pdb = budget(json!({"maxUnavailable": 0}));
        let mut other = pod("other", true);
        other.metadata.labels = Some([("app".to_owned(), "api".to_owned())].into());
        let pods = vec![pod("a", true), pod("b", true), other];
        assert_eq!(
            violations(&pdb, &pods, &evicting(&["other"]), &deployment_of_four),
            0
        );
        assert_eq!(
            violations(&pdb, &pods, &evicting(&["a"]), &deployment_of_four),
            1
        );
        assert!(is_named(&pods[0], "default/a"));
        assert!(!is_named(&pods[0], "default/ab"));
        assert!(!is_named(&pods[0], "kube-system/a"));
    }

    #[test]
    fn selectors_match_as_policy_v1_does() {
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let selector: LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"app": "web"}})).unwrap();
        assert!(selects(&selector, &labels));
        let selector: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
        )
        .unwrap();
        assert!(!selects(&selector, &labels));
        assert!(selects(&LabelSelector::default(), &labels));
    }
}
