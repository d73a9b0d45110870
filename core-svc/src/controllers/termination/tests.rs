//! The termination controller's unit tests: its pure decisions (what to finalize, the
//! deadline, the drain's status).

use super::*;
use crate::controllers::testing::{self, at, merged, patched, snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn node_claim(value: Value) -> NodeClaim {
    testing::node_claim(
        "default-abcde",
        merged(
            json!({
                "metadata": { "finalizers": [TERMINATION_FINALIZER] },
                "status": { "providerID": "fake:///zone/i-1" },
            }),
            value,
        ),
    )
}

fn node(value: Value) -> Node {
    testing::node(
        "node-a",
        merged(
            json!({
                "metadata": { "finalizers": [TERMINATION_FINALIZER] },
                "spec": { "providerID": "fake:///zone/i-1" },
            }),
            value,
        ),
    )
}

fn deleting_at(seconds: i64) -> Value {
    json!({ "metadata": { "deletionTimestamp": Time(at(seconds)) } })
}

#[test]
fn the_deadline_is_the_deletion_time_plus_the_grace_period() {
    let mut claim = node_claim(json!({ "spec": { "terminationGracePeriod": "10m" } }));
    assert_eq!(termination_deadline(&claim), None, "not deleting");
    merge_into(&mut claim, deleting_at(100));
    assert_eq!(termination_deadline(&claim), Some(at(700)));
}

#[test]
fn without_a_grace_period_there_is_no_deadline() {
    let claim = node_claim(deleting_at(100));
    assert_eq!(termination_deadline(&claim), None);
}

/// Interruptions and repair write the deadline on NodeClaims without a grace period (the
/// default): it binds the drain all the same, or a spot node would outlive its warning.
#[test]
fn a_written_deadline_binds_without_a_grace_period() {
    let mut claim = node_claim(deleting_at(100));
    merge_into(
        &mut claim,
        json!({ "metadata": { "annotations": {
            "karpenter.sh/nodeclaim-termination-timestamp": at(220).to_string(),
        } } }),
    );
    assert_eq!(termination_deadline(&claim), Some(at(220)));
}

#[test]
fn the_annotation_wins_over_the_computed_deadline_unless_it_is_garbage() {
    let annotated = |value: &str| {
        let mut claim = node_claim(json!({ "spec": { "terminationGracePeriod": "10m" } }));
        merge_into(&mut claim, deleting_at(100));
        merge_into(
            &mut claim,
            json!({ "metadata": { "annotations": {
                "karpenter.sh/nodeclaim-termination-timestamp": value,
            } } }),
        );
        claim
    };
    assert_eq!(
        termination_deadline(&annotated(&at(400).to_string())),
        Some(at(400))
    );
    assert_eq!(termination_deadline(&annotated("tomorrow")), Some(at(700)));
}

fn merge_into(claim: &mut NodeClaim, patch: Value) {
    *claim = patched(claim, patch);
}

#[test]
fn the_drain_lasts_at_least_the_minimum_drain_time() {
    assert_eq!(
        drain_status(false, None, at(0), None),
        DrainStatus::Settling { until: at(5) },
        "a drain that begins empty still settles"
    );
    assert_eq!(
        drain_status(false, Some(at(0)), at(4), None),
        DrainStatus::Settling { until: at(5) }
    );
    assert_eq!(
        drain_status(false, Some(at(0)), at(5), None),
        DrainStatus::Drained
    );
    assert_eq!(
        drain_status(true, Some(at(0)), at(500), None),
        DrainStatus::Draining
    );
}

#[test]
fn past_the_deadline_the_drain_is_done_at_once() {
    assert_eq!(
        drain_status(true, Some(at(0)), at(600), Some(at(600))),
        DrainStatus::Drained
    );
    assert_eq!(
        drain_status(false, None, at(600), Some(at(600))),
        DrainStatus::Drained,
        "no settling either"
    );
    assert_eq!(
        drain_status(true, Some(at(0)), at(599), Some(at(600))),
        DrainStatus::Draining
    );
}

#[test]
fn launched_deleting_node_claims_with_the_finalizer_are_finalized() {
    let deleting = node_claim(deleting_at(0));
    let mut not_deleting = node_claim(json!({ "metadata": { "name": "b" } }));
    let mut never_launched = node_claim(deleting_at(0));
    merge_into(
        &mut never_launched,
        json!({ "metadata": { "name": "c" }, "status": { "providerID": "" } }),
    );
    let mut released = node_claim(deleting_at(0));
    merge_into(
        &mut released,
        json!({ "metadata": { "name": "d", "finalizers": ["other"] } }),
    );
    merge_into(
        &mut not_deleting,
        json!({ "status": { "providerID": "fake:///zone/i-2" } }),
    );
    let work = finalizations(&snapshot(
        vec![deleting, not_deleting, never_launched, released],
        vec![],
    ));
    assert_eq!(
        work,
        [Finalization::NodeClaim {
            node_claim: "default-abcde".into()
        }]
    );
}

#[test]
fn a_deleted_node_gets_its_node_claim_deleted_or_is_an_orphan() {
    let claim = node_claim(json!({}));
    let deleted_node = node(deleting_at(0));
    let orphan = node(json!({
        "metadata": { "name": "node-b", "deletionTimestamp": Time(at(0)) },
        "spec": { "providerID": "fake:///zone/i-9" },
    }));
    let unmanaged = node(json!({
        "metadata": { "name": "node-c", "deletionTimestamp": Time(at(0)), "finalizers": null },
    }));
    let work = finalizations(&snapshot(
        vec![claim],
        vec![deleted_node, orphan, unmanaged],
    ));
    assert_eq!(
        work,
        [
            Finalization::OrphanNode {
                node: "node-b".into()
            },
            Finalization::DeleteNodeClaim {
                node_claim: "default-abcde".into()
            },
        ]
    );
}

#[test]
fn a_deleted_node_of_a_deleting_node_claim_is_left_to_the_node_claim() {
    let claim = node_claim(deleting_at(0));
    let deleted_node = node(deleting_at(0));
    let work = finalizations(&snapshot(vec![claim], vec![deleted_node]));
    assert_eq!(
        work,
        [Finalization::NodeClaim {
            node_claim: "default-abcde".into()
        }]
    );
}

#[test]
fn nodes_belong_to_a_node_claim_by_provider_id_only() {
    let claim = node_claim(json!({ "status": { "nodeName": "node-b" } }));
    let same_id = node(json!({}));
    let same_name = node(json!({
        "metadata": { "name": "node-b" },
        "spec": { "providerID": "fake:///zone/i-2" },
    }));
    let snapshot = snapshot(vec![claim.clone()], vec![same_id, same_name]);
    let names: Vec<&str> = nodes_of(&snapshot, &claim)
        .into_iter()
        .map(name_of)
        .collect();
    assert_eq!(names, ["node-a"]);
}
