//! The NodePool static hash: which template changes drift NodeClaims (upstream's drift test
//! table, "should detect drift on changes to the static fields", and the hash controller's
//! "should not update the drift hash when NodePool behavior field is updated").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use karpenter_api::{NodePool, testing::Fixtures};

const FIXTURES: Fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));

fn nodepool(patch_yaml: &str) -> NodePool {
    serde_json::from_value(FIXTURES.patched("nodepool-minimal.yaml", patch_yaml)).unwrap()
}

fn hash(patch_yaml: &str) -> String {
    nodepool(patch_yaml).static_hash()
}

#[test]
fn static_fields_change_the_hash() {
    let base = hash("{}");
    for patch in [
        "spec:\n  template:\n    metadata:\n      labels:\n        team: a\n",
        "spec:\n  template:\n    metadata:\n      annotations:\n        note: a\n",
        "spec:\n  template:\n    spec:\n      taints:\n      - {key: k, effect: NoSchedule}\n",
        "spec:\n  template:\n    spec:\n      startupTaints:\n      - {key: k, effect: NoSchedule}\n",
        "spec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: other}\n",
        "spec:\n  template:\n    spec:\n      expireAfter: 24h\n",
        "spec:\n  template:\n    spec:\n      expireAfter: Never\n",
        "spec:\n  template:\n    spec:\n      terminationGracePeriod: 1h\n",
    ] {
        assert_ne!(hash(patch), base, "{patch}");
    }
}

#[test]
fn behaviour_fields_and_requirements_do_not_change_the_hash() {
    let base = hash("{}");
    for patch in [
        "spec:\n  limits:\n    cpu: \"100\"\n",
        "spec:\n  weight: 10\n",
        "spec:\n  disruption:\n    consolidationPolicy: WhenEmpty\n    consolidateAfter: 10m\n",
        "spec:\n  disruption:\n    consolidateAfter: 0s\n    budgets:\n    - nodes: \"0\"\n",
        "spec:\n  template:\n    spec:\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n",
    ] {
        assert_eq!(hash(patch), base, "{patch}");
    }
}

#[test]
fn equal_durations_written_differently_hash_the_same() {
    assert_eq!(
        hash("spec:\n  template:\n    spec:\n      expireAfter: 1h\n"),
        hash("spec:\n  template:\n    spec:\n      expireAfter: 60m\n")
    );
    // The default expireAfter (720h) written out is the same as leaving it out.
    assert_eq!(
        hash("spec:\n  template:\n    spec:\n      expireAfter: 720h\n"),
        hash("{}")
    );
}

#[test]
fn taint_order_does_not_matter() {
    assert_eq!(
        hash(
            "spec:\n  template:\n    spec:\n      taints:\n      - {key: a, effect: NoSchedule}\n      - {key: b, effect: NoSchedule}\n"
        ),
        hash(
            "spec:\n  template:\n    spec:\n      taints:\n      - {key: b, effect: NoSchedule}\n      - {key: a, effect: NoSchedule}\n"
        ),
    );
}
