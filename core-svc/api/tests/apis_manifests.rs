//! Upstream v1 manifests (from the Karpenter docs) load unchanged, keep their values, and
//! re-serialize with the same meaning; omitted fields take upstream's defaults.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::time::Duration;

use core_domain::labels::LabelValueType;
use karpenter_api::{
    ConsolidationPolicy, DisruptionReason, LabelPolicy, NodeClaim, NodePool, Operator, condition,
    testing::{Fixtures, assert_round_trips},
};
use serde_json::{Value, json};

const FIXTURES: Fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));

fn hours(h: u64) -> Duration {
    Duration::from_secs(h * 3600)
}

/// The AWS provider's domain.
const AWS_GROUP: &str = "karpenter.k8s.aws";

/// The AWS provider's label rules as core learns them from its vocabulary: its restricted
/// domain, with the labels the docs' manifests use allowed and typed (core itself knows no
/// provider label; aws-plugin's own tests check its full vocabulary).
fn aws_policy() -> LabelPolicy {
    let string = |key| (key, LabelValueType::String);
    let integer = |key| (key, LabelValueType::Integer);
    LabelPolicy::with_vocabulary(
        [AWS_GROUP],
        [
            string("karpenter.k8s.aws/instance-category"),
            string("karpenter.k8s.aws/instance-family"),
            string("karpenter.k8s.aws/instance-hypervisor"),
            integer("karpenter.k8s.aws/instance-cpu"),
            integer("karpenter.k8s.aws/instance-generation"),
            integer("karpenter.k8s.aws/instance-memory"),
        ],
    )
}

#[test]
fn docs_nodepool_loads_with_its_values() {
    let (np, input) = FIXTURES.load::<NodePool>("nodepool-docs.yaml");
    assert_eq!(np.metadata.name.as_deref(), Some("default"));
    let template = &np.spec.template;
    assert_eq!(template.metadata.labels["billing-team"], "my-team");
    assert_eq!(
        template.metadata.annotations["example.com/owner"],
        "my-team"
    );
    let spec = &template.spec;
    assert_eq!(spec.node_class_ref.group, "karpenter.k8s.aws");
    assert_eq!(spec.node_class_ref.kind, "EC2NodeClass");
    assert_eq!(spec.node_class_ref.name, "default");
    assert_eq!(spec.taints[0].key, "example.com/special-taint");
    assert_eq!(spec.taints[0].effect, "NoSchedule");
    assert_eq!(spec.startup_taints[0].key, "example.com/another-taint");
    assert_eq!(spec.expire_after.duration(), Some(hours(720)));
    let tgp = spec.termination_grace_period.as_ref().unwrap();
    assert_eq!((tgp.as_str(), tgp.duration()), ("48h", hours(48)));

    let reqs = &spec.requirements;
    assert_eq!(reqs.len(), 8);
    assert_eq!(reqs[0].key, "karpenter.k8s.aws/instance-category");
    assert_eq!(reqs[0].operator, Operator::In);
    assert_eq!(reqs[0].values, ["c", "m", "r"]);
    assert_eq!(reqs[0].min_values, Some(2));
    assert_eq!(reqs[1].min_values, Some(5));
    assert_eq!(reqs[2].min_values, None);
    assert_eq!(reqs[4].operator, Operator::Gt);
    assert_eq!(reqs[4].values, ["2"]);
    assert_eq!(reqs[7].values, ["spot", "on-demand", "reserved"]);

    let disruption = &np.spec.disruption;
    assert_eq!(
        disruption.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(
        disruption.consolidate_after.duration(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(disruption.budgets.len(), 2);
    assert_eq!(disruption.budgets[0].nodes, "10%");
    assert_eq!(disruption.budgets[0].schedule, None);
    let business_hours = &disruption.budgets[1];
    assert_eq!(business_hours.schedule.as_deref(), Some("0 9 * * mon-fri"));
    assert_eq!(
        business_hours.duration.as_ref().map(|d| d.duration()),
        Some(hours(8))
    );
    assert_eq!(business_hours.nodes, "0");

    assert_eq!(np.spec.limits["cpu"].0, "1000");
    assert_eq!(np.spec.limits["memory"].0, "1000Gi");
    assert_eq!(np.spec.weight, Some(10));
    assert_eq!(np.spec.replicas, None);
    assert!(!np.is_static());

    assert_round_trips(&np, &input);
    np.validate(&aws_policy()).unwrap();
}

#[test]
fn provider_domains_without_exceptions_restrict_the_docs_requirements() {
    let (np, _) = FIXTURES.load::<NodePool>("nodepool-docs.yaml");
    let strict = LabelPolicy::with_provider([AWS_GROUP], std::iter::empty::<&str>());
    let errors: Vec<String> = np
        .validate(&strict)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        (0..5)
            .map(|i| format!(
                "spec.template.spec.requirements[{i}].key: label domain \"karpenter.k8s.aws\" is restricted"
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn docs_budgets_load_with_reasons_and_schedules() {
    let (np, input) = FIXTURES.load::<NodePool>("nodepool-budgets.yaml");
    let budgets = &np.spec.disruption.budgets;
    assert_eq!(budgets.len(), 3);
    assert_eq!(budgets[0].nodes, "20%");
    assert_eq!(
        budgets[0].reasons.as_deref(),
        Some(&[DisruptionReason::Empty, DisruptionReason::Drifted][..])
    );
    assert_eq!(budgets[1].nodes, "5");
    assert_eq!(budgets[1].reasons, None, "unset reasons: all methods");
    assert_eq!(budgets[2].schedule.as_deref(), Some("@daily"));
    assert_eq!(
        budgets[2]
            .duration
            .as_ref()
            .map(|d| (d.as_str(), d.duration())),
        Some(("10m", Duration::from_secs(600)))
    );
    assert_eq!(
        budgets[2].reasons.as_deref(),
        Some(&[DisruptionReason::Underutilized][..])
    );
    assert!(np.spec.template.spec.requirements.is_empty());
    assert_round_trips(&np, &input);
    np.validate(&LabelPolicy::core()).unwrap();
}

#[test]
fn omitted_fields_take_upstream_defaults() {
    let (np, input) = FIXTURES.load::<NodePool>("nodepool-minimal.yaml");
    let out = assert_round_trips(&np, &input);
    assert_eq!(
        out["spec"]["disruption"],
        json!({
            "consolidateAfter": "0s",
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "budgets": [{ "nodes": "10%" }],
        })
    );
    assert_eq!(out["spec"]["template"]["spec"]["expireAfter"], "720h");
    let spec = &np.spec;
    assert_eq!(
        spec.disruption.consolidate_after.duration(),
        Some(Duration::ZERO)
    );
    assert_eq!(spec.template.spec.expire_after.duration(), Some(hours(720)));
    assert_eq!(spec.template.spec.termination_grace_period, None);
    assert!(spec.template.metadata.is_empty());
    assert!(spec.limits.is_empty());
    assert_eq!((spec.weight, spec.replicas), (None, None));
    assert!(np.status.is_none());
    np.validate(&LabelPolicy::core()).unwrap();
}

#[test]
fn nested_defaults_apply_inside_a_given_disruption() {
    let np: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "x" },
        "spec": {
            "disruption": { "consolidateAfter": "Never", "budgets": [{ "schedule": "@daily", "duration": "1h" }] },
            "template": { "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": [],
                "expireAfter": "Never",
            } },
        },
    }))
    .unwrap();
    let d = &np.spec.disruption;
    assert!(d.consolidate_after.is_never());
    assert_eq!(
        d.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(d.budgets[0].nodes, "10%");
    assert!(np.spec.template.spec.expire_after.is_never());
    assert_eq!(
        serde_json::to_value(&np).unwrap()["spec"]["template"]["spec"]["expireAfter"],
        "Never"
    );
}

#[test]
fn a_given_disruption_requires_consolidate_after_as_upstream() {
    let err = serde_json::from_value::<NodePool>(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "x" },
        "spec": {
            "disruption": { "consolidationPolicy": "WhenEmpty" },
            "template": { "spec": {
                "nodeClassRef": { "group": "g", "kind": "K", "name": "n" },
                "requirements": [],
            } },
        },
    }))
    .unwrap_err();
    assert!(
        err.to_string().contains("missing field `consolidateAfter`"),
        "{err}"
    );
}

#[test]
fn static_nodepool_loads() {
    let (np, input) = FIXTURES.load::<NodePool>("nodepool-static.yaml");
    assert!(np.is_static());
    assert_eq!(np.spec.replicas, Some(3));
    assert_eq!(np.spec.limits["nodes"].0, "5");
    assert_eq!(
        np.spec.template.spec.requirements[1].operator,
        Operator::Gte
    );
    assert_round_trips(&np, &input);
    np.validate(&aws_policy()).unwrap();
}

#[test]
fn docs_nodeclaim_loads_with_spec_and_status() {
    let (nc, input) = FIXTURES.load::<NodeClaim>("nodeclaim-docs.yaml");
    let spec = &nc.spec;
    assert_eq!(spec.node_class_ref.name, "default");
    assert_eq!(spec.requirements.len(), 5);
    assert_eq!(spec.requirements[2].key, "karpenter.sh/nodepool");
    assert_eq!(spec.resources.requests["cpu"].0, "1355m");
    assert_eq!(spec.startup_taints[0].value.as_deref(), Some("true"));
    assert_eq!(spec.expire_after.duration(), Some(hours(720)));

    let status = nc.status.as_ref().unwrap();
    assert_eq!(
        status.node_name,
        "ip-192-168-57-125.us-west-2.compute.internal"
    );
    assert_eq!(status.provider_id, "aws:///us-west-2b/i-06f24b7b4a1b6bed5");
    assert_eq!(status.image_id, "ami-08946d4d49fc3f27b");
    assert_eq!(status.capacity["memory"].0, "3729Mi");
    assert_eq!(status.allocatable["pods"].0, "29");
    assert_eq!(status.conditions.len(), 5);
    assert!(condition::is_true(
        &status.conditions,
        condition::CONDITION_READY
    ));
    assert!(condition::is_true(&status.conditions, "Launched"));
    assert!(status.last_pod_event_time.is_some());

    assert_round_trips(&nc, &input);
    nc.validate(&aws_policy()).unwrap();
}

#[test]
fn unknown_fields_are_ignored_as_the_api_server_prunes_them() {
    let mut manifest: Value = FIXTURES.yaml("nodepool-minimal.yaml");
    manifest["spec"]["futureField"] = json!({ "a": 1 });
    manifest["spec"]["template"]["spec"]["kubelet"] = json!({ "maxPods": 10 });
    let np: NodePool = serde_json::from_value(manifest).unwrap();
    let out = serde_json::to_value(&np).unwrap();
    assert!(out["spec"].get("futureField").is_none());
    assert!(out["spec"]["template"]["spec"].get("kubelet").is_none());
}

#[test]
fn malformed_values_fail_to_load_with_a_typed_reason() {
    let mut manifest: Value = FIXTURES.yaml("nodepool-minimal.yaml");
    manifest["spec"]["template"]["spec"]["expireAfter"] = json!("30d");
    let err = serde_json::from_value::<NodePool>(manifest.clone()).unwrap_err();
    assert!(err.to_string().contains("unknown unit \"d\""), "{err}");

    manifest["spec"]["template"]["spec"]["expireAfter"] = json!("720h");
    manifest["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Near");
    let err = serde_json::from_value::<NodePool>(manifest).unwrap_err();
    assert!(err.to_string().contains("unknown variant `Near`"), "{err}");
}
