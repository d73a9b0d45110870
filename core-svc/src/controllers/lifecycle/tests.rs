//! The lifecycle controller's unit tests: the plan of each stage and the passes that apply it.

use super::*;

use std::collections::BTreeMap;
use std::time::Duration;

use core_domain::labels::{LABEL_INSTANCE_TYPE, LABEL_NODE_REGISTERED};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::nodeclaim::CONDITION_LAUNCHED;
use karpenter_api::{NodeClaim, condition};
use serde_json::{Value, json};

use crate::cloudprovider::{CloudProviderError, LaunchedNodeClaim};
use crate::controllers::Settings;
use crate::controllers::testing::{self, at, kinds, merge, merged, snapshot};
use crate::controllers::{Requeue, Snapshot, TERMINATION_FINALIZER};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn node_claim(extra: Value) -> NodeClaim {
    testing::node_claim(
        "default-abcde",
        merged(
            json!({
                "metadata": {
                    "uid": "uid-1",
                    "resourceVersion": "7",
                    "creationTimestamp": at(0).to_string(),
                    "labels": { "karpenter.sh/nodepool": "default", "team": "a" },
                    "finalizers": [TERMINATION_FINALIZER],
                },
                "spec": {
                    "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
                    "startupTaints": [{ "key": "init", "effect": "NoSchedule" }],
                    "resources": { "requests": { "cpu": "1", "example.com/fpga": "1" } },
                },
            }),
            extra,
        ),
    )
}

fn node(extra: Value) -> Node {
    testing::node(
        "node-1",
        merged(
            json!({
                "metadata": { "resourceVersion": "3", "labels": { "kubelet": "own", "team": "b" } },
                "spec": {
                    "providerID": "fake:///z/i-1",
                    "taints": [
                        { "key": UNREGISTERED_TAINT_KEY, "effect": "NoExecute" },
                        { "key": "kubelet-own", "effect": "NoSchedule" },
                    ],
                },
            }),
            extra,
        ),
    )
}

fn launched_condition(status: &str, reason: &str) -> Value {
    json!({ "type": "Launched", "status": status, "reason": reason, "lastTransitionTime": at(0).to_string() })
}

fn steps(snapshot: &Snapshot, now: Timestamp) -> Vec<Step> {
    plan(snapshot, now, &Settings::default(), &kinds())
        .node_claims
        .into_iter()
        .flat_map(|plan| plan.steps)
        .collect()
}

#[test]
fn a_new_node_claim_gets_the_finalizer_then_launches() {
    let fresh = node_claim(json!({ "metadata": { "finalizers": null } }));
    let plan = plan(
        &snapshot(vec![fresh], vec![]),
        at(10),
        &Settings::default(),
        &kinds(),
    );
    assert_eq!(
        plan.node_claims[0].steps,
        vec![Step::AddFinalizer, Step::Launch]
    );
    assert_eq!(
        plan.requeue,
        Requeue::After(Duration::from_secs(290)),
        "the launch deadline"
    );
}

#[test]
fn a_node_claim_of_another_provider_is_left_alone() {
    let foreign = node_claim(json!({ "spec": { "nodeClassRef": { "group": "other.sh" } } }));
    assert_eq!(steps(&snapshot(vec![foreign], vec![]), at(10)), vec![]);
}

#[test]
fn launch_times_out_at_the_launch_timeout() {
    let pending = snapshot(vec![node_claim(json!({}))], vec![]);
    assert_eq!(steps(&pending, at(299)), vec![Step::Launch]);
    assert_eq!(
        steps(&pending, at(300)),
        vec![Step::Delete(Timeout::Launch)]
    );
}

#[test]
fn an_invalid_request_is_not_sent_again() {
    let refused = node_claim(json!({ "status": {
            "conditions": [launched_condition("Unknown", REASON_INVALID_REQUEST)]
        } }));
    let snapshot = snapshot(vec![refused], vec![]);
    assert_eq!(steps(&snapshot, at(10)), vec![]);
    assert_eq!(
        steps(&snapshot, at(300)),
        vec![Step::Delete(Timeout::Launch)]
    );
}

#[test]
fn a_launched_node_claim_registers_its_node_or_times_out() {
    let launched = node_claim(json!({ "status": {
            "providerID": "fake:///z/i-1",
            "conditions": [launched_condition("True", "")]
        } }));
    let without_node = snapshot(vec![launched.clone()], vec![]);
    assert_eq!(steps(&without_node, at(899)), vec![]);
    assert_eq!(
        steps(&without_node, at(900)),
        vec![Step::Delete(Timeout::Registration)]
    );
    let with_node = snapshot(vec![launched], vec![node(json!({}))]);
    assert_eq!(
        steps(&with_node, at(900)),
        vec![Step::Register {
            node: "node-1".into()
        }]
    );
}

#[test]
fn a_deleted_node_claim_that_never_launched_is_finalized_here_only() {
    let deleting = json!({ "metadata": { "deletionTimestamp": at(5).to_string() } });
    let unlaunched = node_claim(deleting.clone());
    assert_eq!(
        steps(&snapshot(vec![unlaunched], vec![]), at(10)),
        vec![Step::FinalizeUnlaunched]
    );
    let mut launched = deleting;
    merge(
        &mut launched,
        json!({ "status": { "providerID": "fake:///z/i-1" } }),
    );
    assert_eq!(
        steps(&snapshot(vec![node_claim(launched)], vec![]), at(10)),
        vec![],
        "termination's job"
    );
}

#[test]
fn launch_failures_map_to_the_port_contract() {
    assert!(matches!(
        launch_failure(&CloudProviderError::InsufficientCapacity("none".into())),
        LaunchFailure::Delete {
            reason: "InsufficientCapacity",
            ..
        }
    ));
    assert!(matches!(
        launch_failure(&CloudProviderError::NodeClassNotReady("x".into())),
        LaunchFailure::Delete {
            reason: "NodeClassNotReady",
            ..
        }
    ));
    assert!(matches!(
        launch_failure(&CloudProviderError::InvalidRequest("x".into())),
        LaunchFailure::Unknown { retry: false, .. }
    ));
    assert_eq!(
        launch_failure(&CloudProviderError::Unavailable("down".into())),
        LaunchFailure::PluginUnavailable
    );
    let LaunchFailure::Unknown { message, retry, .. } =
        launch_failure(&CloudProviderError::Other {
            kind: crate::cloudprovider::FailureKind::Internal,
            message: "x".repeat(1000),
        })
    else {
        panic!("expected Unknown");
    };
    assert!(retry);
    assert_eq!(message.chars().count(), MAX_MESSAGE);
}

#[test]
fn a_pending_launch_is_asked_again_when_the_plugin_says_within_bounds() {
    let pending = |retry_after: Option<u64>| {
        launch_failure(&CloudProviderError::LaunchPending {
            message: "host booting".into(),
            retry_after: retry_after.map(std::time::Duration::from_secs),
        })
    };
    let retry = |failure: LaunchFailure| match failure {
        LaunchFailure::Pending { retry_after, .. } => retry_after.as_secs(),
        other => panic!("expected Pending, got {other:?}"),
    };
    assert_eq!(retry(pending(Some(20))), 20);
    assert_eq!(retry(pending(None)), LAUNCH_RETRY.as_secs());
    assert_eq!(retry(pending(Some(0))), 1, "never a busy loop");
    assert_eq!(
        retry(pending(Some(3600))),
        60,
        "never past the launch timeout"
    );
}

#[test]
fn the_node_claims_own_labels_win_over_the_launchs() {
    let launched = LaunchedNodeClaim {
        provider_id: "fake:///z/i-1".into(),
        image_id: None,
        labels: BTreeMap::from([
            ("team".into(), "from-cloud".into()),
            (LABEL_INSTANCE_TYPE.into(), "m5.large".into()),
        ]),
        annotations: BTreeMap::new(),
        capacity: Default::default(),
        allocatable: Default::default(),
        state: Default::default(),
    };
    assert_eq!(
        launch_metadata_patch(&node_claim(json!({})), &launched),
        Some(json!({ "metadata": { "labels": { LABEL_INSTANCE_TYPE: "m5.large" } } }))
    );
}

#[test]
fn registration_syncs_the_node_and_drops_the_unregistered_taint() {
    let patch = registration_patch(&node_claim(json!({})), &node(json!({})));
    assert_eq!(patch["metadata"]["resourceVersion"], "3");
    assert_eq!(
        patch["metadata"]["labels"]["team"], "a",
        "the NodeClaim's labels win"
    );
    assert_eq!(patch["metadata"]["labels"][LABEL_NODE_REGISTERED], "true");
    assert_eq!(
        patch["metadata"]["finalizers"],
        json!([TERMINATION_FINALIZER])
    );
    assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(
        patch["spec"]["taints"],
        json!([
            { "key": "kubelet-own", "effect": "NoSchedule" },
            { "key": "dedicated", "value": "gpu", "effect": "NoSchedule" },
            { "key": "init", "effect": "NoSchedule" },
        ])
    );
}

#[test]
fn a_node_registered_before_does_not_get_its_startup_taints_back() {
    let registered = node(json!({ "metadata": { "labels": { LABEL_NODE_REGISTERED: "true" } } }));
    let patch = registration_patch(&node_claim(json!({})), &registered);
    assert_eq!(
        patch["spec"]["taints"],
        json!([{ "key": "kubelet-own", "effect": "NoSchedule" }])
    );
}

#[test]
fn initialization_waits_for_readiness_taints_and_extended_resources() {
    let node_claim = node_claim(json!({}));
    let ready = json!({ "conditions": [{ "type": "Ready", "status": "True" }] });
    let not_ready = node(json!({ "spec": { "taints": null } }));
    assert_eq!(
        initialization_blocker(&node_claim, &not_ready).as_deref(),
        Some("the node is not ready")
    );
    let startup_taint = node(json!({
        "spec": { "taints": [{ "key": "init", "effect": "NoSchedule" }] },
        "status": ready.clone(),
    }));
    assert!(
        initialization_blocker(&node_claim, &startup_taint)
            .unwrap()
            .contains("init")
    );
    let uninitialized = node(json!({
        "spec": { "taints": [{ "key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule" }] },
        "status": ready.clone(),
    }));
    assert!(
        initialization_blocker(&node_claim, &uninitialized)
            .unwrap()
            .contains("uninitialized")
    );
    let no_fpga = node(json!({ "spec": { "taints": null }, "status": ready.clone() }));
    assert!(
        initialization_blocker(&node_claim, &no_fpga)
            .unwrap()
            .contains("example.com/fpga")
    );
    let mut status = ready;
    merge(
        &mut status,
        json!({ "allocatable": { "example.com/fpga": "1" } }),
    );
    let initialized = node(json!({ "spec": { "taints": null }, "status": status }));
    assert_eq!(initialization_blocker(&node_claim, &initialized), None);
}

#[test]
fn extended_resources_are_the_domain_prefixed_ones_outside_kubernetes_io() {
    assert!(is_extended_resource("nvidia.com/gpu"));
    assert!(!is_extended_resource("cpu"));
    assert!(!is_extended_resource("hugepages-2Mi"));
    assert!(!is_extended_resource("kubernetes.io/something"));
}

#[test]
fn launched_status_sets_launched_and_the_instance_fields() {
    let launched = LaunchedNodeClaim {
        provider_id: "fake:///z/i-1".into(),
        image_id: Some("img".into()),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        capacity: Default::default(),
        allocatable: Default::default(),
        state: Default::default(),
    };
    let status = launched_status(None, &launched, at(3));
    assert_eq!(status.provider_id, "fake:///z/i-1");
    assert_eq!(status.image_id, "img");
    assert!(condition::is_true(&status.conditions, CONDITION_LAUNCHED));
    assert_eq!(status.conditions[0].last_transition_time, Time(at(3)));
}
