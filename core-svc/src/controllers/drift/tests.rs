use core_domain::labels::{
    CAPACITY_TYPE_RESERVED, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::condition;
use karpenter_api::nodeclaim::CONDITION_DRIFTED;
use karpenter_api::nodepool::{ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION};
use serde_json::{Value, json};

use super::*;
use crate::cloudprovider::fake;
use crate::controllers::testing::{self, at};

fn node_pool(requirements: Value, annotations: Value) -> NodePool {
    testing::node_pool(
        "default",
        json!({
            "metadata": { "annotations": annotations },
            "spec": { "template": { "spec": { "requirements": requirements } } },
        }),
    )
}

fn node_claim(labels: Value, annotations: Value) -> NodeClaim {
    testing::node_claim(
        "default-x",
        json!({ "metadata": { "labels": labels, "annotations": annotations } }),
    )
}

fn labels() -> Value {
    json!({
        "karpenter.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "test-zone-1",
        "karpenter.sh/capacity-type": "spot",
        "cpu-count": "4",
    })
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> Value {
    json!({ "key": key, "operator": operator, "values": values })
}

fn requirements_drift_reason(requirements: Value) -> Option<String> {
    drift_of(
        &node_claim(labels(), json!({})),
        &node_pool(requirements, json!({})),
    )
    .map(|drift| drift.reason)
}

#[test]
fn upstreams_requirements_table() {
    let it = "node.kubernetes.io/instance-type";
    let drifted = Some(REASON_REQUIREMENTS_DRIFTED.to_owned());
    for (case, requirements, expected) in [
        (
            "unchanged In",
            json!([requirement(it, "In", &["m5.large"])]),
            None,
        ),
        (
            "In changed to a value the label lacks",
            json!([requirement(it, "In", &["m5.xlarge"])]),
            drifted.clone(),
        ),
        (
            "a new In requirement on a key the NodeClaim lacks",
            json!([requirement("team", "In", &["a"])]),
            drifted.clone(),
        ),
        (
            "In narrowed to exclude the value",
            json!([requirement(
                "karpenter.sh/capacity-type",
                "In",
                &["on-demand"]
            )]),
            drifted.clone(),
        ),
        (
            "In expanded",
            json!([requirement(it, "In", &["m5.large", "m5.xlarge"])]),
            None,
        ),
        ("Exists", json!([requirement(it, "Exists", &[])]), None),
        (
            "NotIn on a key the NodeClaim lacks",
            json!([requirement("team", "NotIn", &["a"])]),
            None,
        ),
        (
            "DoesNotExist on a key the NodeClaim lacks",
            json!([requirement("team", "DoesNotExist", &[])]),
            None,
        ),
        (
            "DoesNotExist on a present key",
            json!([requirement(it, "DoesNotExist", &[])]),
            drifted.clone(),
        ),
        (
            "Gt below the value",
            json!([requirement("cpu-count", "Gt", &["2"])]),
            None,
        ),
        (
            "Gt moved past the value",
            json!([requirement("cpu-count", "Gt", &["4"])]),
            drifted.clone(),
        ),
        (
            "Lt above the value",
            json!([requirement("cpu-count", "Lt", &["8"])]),
            None,
        ),
        (
            "Lt moved past the value",
            json!([requirement("cpu-count", "Lt", &["4"])]),
            drifted.clone(),
        ),
    ] {
        assert_eq!(requirements_drift_reason(requirements), expected, "{case}");
    }
}

#[test]
fn requirements_drift_says_which_requirement_the_labels_fail() {
    let claim = node_claim(labels(), json!({}));
    let conflict = requirements_drift(
        &claim,
        &node_pool(
            json!([requirement(
                "karpenter.sh/capacity-type",
                "In",
                &["on-demand"]
            )]),
            json!({}),
        ),
    )
    .unwrap();
    assert_eq!(
        conflict.message,
        "the NodeClaim no longer matches the requirements of NodePool default: its label \
         karpenter.sh/capacity-type=spot does not satisfy the requirement \
         karpenter.sh/capacity-type In [on-demand]"
    );
    let missing = requirements_drift(
        &claim,
        &node_pool(json!([requirement("team", "In", &["a"])]), json!({})),
    )
    .unwrap();
    assert_eq!(
        missing.message,
        "the NodeClaim no longer matches the requirements of NodePool default: it has no \
         label team, which the requirement team In [a] needs"
    );
}

fn hashes(hash: &str, version: &str) -> Value {
    json!({ ANNOTATION_NODEPOOL_HASH: hash, ANNOTATION_NODEPOOL_HASH_VERSION: version })
}

#[test]
fn static_drift_needs_all_four_annotations_and_equal_versions() {
    let pool = node_pool(json!([]), hashes("111", "rs-v1"));
    let drifted = static_drift(&node_claim(labels(), hashes("222", "rs-v1")), &pool).unwrap();
    assert_eq!(drifted.reason, REASON_NODEPOOL_DRIFTED);
    assert_eq!(
        drifted.message,
        "the template of NodePool default changed: its hash is 111, the NodeClaim's is 222 \
         (hash version rs-v1)"
    );
    assert_eq!(
        static_drift(&node_claim(labels(), hashes("111", "rs-v1")), &pool),
        None
    );
    assert_eq!(
        static_drift(&node_claim(labels(), hashes("222", "v3")), &pool),
        None,
        "versions differ: re-stamped, not drifted"
    );
    assert_eq!(static_drift(&node_claim(labels(), json!({})), &pool), None);
    assert_eq!(
        static_drift(
            &node_claim(labels(), hashes("222", "rs-v1")),
            &node_pool(json!([]), json!({}))
        ),
        None
    );
}

#[test]
fn static_drift_wins_over_requirements_drift() {
    let pool = node_pool(
        json!([requirement("team", "In", &["a"])]),
        hashes("111", "rs-v1"),
    );
    let claim = node_claim(labels(), hashes("222", "rs-v1"));
    assert_eq!(
        drift_of(&claim, &pool).unwrap().reason,
        REASON_NODEPOOL_DRIFTED
    );
}

fn catalogue() -> Vec<Arc<InstanceType>> {
    vec![Arc::new(fake::instance_type("m5.large", 2, 8, 29, "amd64"))]
}

fn string_labels(value: Value) -> BTreeMap<String, String> {
    serde_json::from_value(value).unwrap()
}

#[test]
fn instance_type_drift_when_the_type_or_every_matching_offering_is_gone() {
    let present = string_labels(labels());
    assert_eq!(instance_type_drift(&present, &catalogue(), "default"), None);
    assert_eq!(
        instance_type_drift(&present, &[], "default"),
        None,
        "an empty catalogue decides nothing"
    );

    let mut gone = present.clone();
    gone.insert(LABEL_INSTANCE_TYPE.into(), "m4.large".into());
    assert_eq!(
        instance_type_drift(&gone, &catalogue(), "default")
            .unwrap()
            .message,
        "instance type m4.large is no longer offered for NodePool default"
    );

    let mut unlabelled = present.clone();
    unlabelled.remove(LABEL_INSTANCE_TYPE);
    assert_eq!(
        instance_type_drift(&unlabelled, &catalogue(), "default")
            .unwrap()
            .reason,
        REASON_INSTANCE_TYPE_NOT_FOUND
    );

    // The fake offers spot in test-zone-1 and 2 only.
    let mut no_offering = present.clone();
    no_offering.insert(LABEL_TOPOLOGY_ZONE.into(), "test-zone-3".into());
    assert_eq!(
        instance_type_drift(&no_offering, &catalogue(), "default")
            .unwrap()
            .message,
        "instance type m5.large has no offering in zone test-zone-3 with capacity type spot \
         any more"
    );

    let mut reserved = no_offering;
    reserved.insert(LABEL_CAPACITY_TYPE.into(), CAPACITY_TYPE_RESERVED.into());
    assert_eq!(
        instance_type_drift(&reserved, &catalogue(), "default"),
        None,
        "a reserved node may fall back to on-demand"
    );
}

#[test]
fn drifted_conditions_sets_updates_and_clears_with_events() {
    let amid = Verdict::Drifted(DriftReason {
        reason: "AMIDrift".into(),
        message: "image ami-1 is not among ami-2".into(),
    });
    let (set, event) = drifted_conditions(&[], &amid, at(10)).unwrap();
    assert_eq!(event, Some(Reason::NodeClaimDrifted));
    let drifted = condition::find(&set, CONDITION_DRIFTED).unwrap();
    assert_eq!(drifted.reason.as_deref(), Some("AMIDrift"));
    assert_eq!(
        drifted.message.as_deref(),
        Some("image ami-1 is not among ami-2")
    );

    assert_eq!(drifted_conditions(&set, &amid, at(20)), None, "unchanged");
    assert_eq!(drifted_conditions(&set, &Verdict::Unknown, at(20)), None);

    let other = Verdict::Drifted(DriftReason {
        reason: "SubnetDrift".into(),
        message: String::new(),
    });
    let (moved, event) = drifted_conditions(&set, &other, at(30)).unwrap();
    assert_eq!(
        event,
        Some(Reason::NodeClaimDrifted),
        "a new reason is announced"
    );
    let drifted = condition::find(&moved, CONDITION_DRIFTED).unwrap();
    assert_eq!(
        drifted.last_transition_time,
        Time(at(10)),
        "still True since 10"
    );
    assert_eq!(
        drifted.message.as_deref(),
        Some("the cloud provider reports SubnetDrift")
    );

    let (cleared, event) = drifted_conditions(&moved, &Verdict::NotDrifted, at(40)).unwrap();
    assert_eq!(event, Some(Reason::DriftCleared));
    assert!(cleared.is_empty());
    assert_eq!(
        drifted_conditions(&cleared, &Verdict::NotDrifted, at(50)),
        None
    );
}

/// A rebalance recommendation drifts a NodeClaim only when its NodePool opted in; static
/// drift still comes first.
#[test]
fn a_rebalance_recommendation_drifts_only_by_the_node_pools_opt_in() {
    use crate::controllers::interruption::{
        ANNOTATION_REBALANCE_AS_DRIFT, ANNOTATION_REBALANCE_RECOMMENDED,
    };
    let recommended = node_claim(
        labels(),
        json!({ ANNOTATION_REBALANCE_RECOMMENDED: "2026-01-01T00:00:00Z" }),
    );
    let plain = node_pool(json!([]), json!({}));
    let opted = node_pool(json!([]), json!({ ANNOTATION_REBALANCE_AS_DRIFT: "true" }));
    assert_eq!(drift_of(&recommended, &plain), None);
    assert_eq!(
        drift_of(&recommended, &opted).map(|d| d.reason),
        Some(REASON_REBALANCE_RECOMMENDATION.to_owned())
    );
    assert_eq!(drift_of(&node_claim(labels(), json!({})), &opted), None);
}
