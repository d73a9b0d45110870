//! Each rule of the NodePool and NodeClaim CRDs, enforced in Rust: one invalid manifest per rule,
//! with the exact message.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use karpenter_api::{
    LabelPolicy, NodeClaim, NodePool,
    testing::{Fixtures, messages as strings},
};

const FIXTURES: Fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));

/// karpenter.sh's label rules alone, no cloud provider's.
fn core() -> LabelPolicy {
    LabelPolicy::core()
}

fn nodepool(patch_yaml: &str) -> NodePool {
    serde_json::from_value(FIXTURES.patched("nodepool-minimal.yaml", patch_yaml)).unwrap()
}

fn nodepool_errors(patch_yaml: &str) -> Vec<String> {
    strings(nodepool(patch_yaml).validate(&core()))
}

fn nodepool_warnings(patch_yaml: &str) -> Vec<String> {
    nodepool(patch_yaml)
        .warnings(&core())
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A patch replacing the minimal fixture's requirements.
fn with_requirement(requirement_yaml: &str) -> String {
    format!("spec:\n  template:\n    spec:\n      requirements:\n      - {requirement_yaml}\n")
}

fn with_label(key: &str, value: &str) -> String {
    format!("spec:\n  template:\n    metadata:\n      labels:\n        {key:?}: {value:?}\n")
}

#[track_caller]
fn check(patch_yaml: &str, expected: &[&str]) {
    assert_eq!(
        nodepool_errors(patch_yaml),
        expected,
        "patch:\n{patch_yaml}"
    );
}

const BUDGET_NODES: &str = "^((100|[0-9]{1,2})%|[0-9]+)$";
const BUDGET_SCHEDULE: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
const BUDGET_DURATION: &str = "^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
const DURATION_OR_NEVER: &str = "^(([0-9]+(s|m|h))+|Never)$";
const DURATION: &str = "^([0-9]+(s|m|h))+$";

#[test]
fn valid_base() {
    check("{}", &[]);
}

#[test]
fn budget_schedule_requires_duration_and_the_reverse() {
    check(
        "spec: {disruption: {consolidateAfter: 0s, budgets: [{nodes: '10%'}, {nodes: '0', schedule: '@daily'}]}}",
        &["spec.disruption.budgets[1]: 'schedule' must be set with 'duration'"],
    );
    check(
        "spec: {disruption: {consolidateAfter: 0s, budgets: [{nodes: '0', duration: 1h}]}}",
        &["spec.disruption.budgets[0]: 'schedule' must be set with 'duration'"],
    );
    check(
        "spec: {disruption: {consolidateAfter: 0s, budgets: [{nodes: '0', duration: 1h, schedule: '0 9 * * mon-fri'}]}}",
        &[],
    );
}

#[test]
fn budget_nodes_pattern() {
    for ok in ["0", "5", "100", "0%", "10%", "100%"] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '{ok}'}}]}}}}"
            ),
            &[],
        );
    }
    for bad in ["101%", "1000%", "-1", "10 %", "ten", ""] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '{bad}'}}]}}}}"
            ),
            &[&format!(
                "spec.disruption.budgets[0].nodes: {bad:?} does not match {BUDGET_NODES}"
            )],
        );
    }
}

#[test]
fn budget_schedule_pattern() {
    for ok in ["@yearly", "@hourly", "*/15 * * * *", "0 22 * * sun"] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '0', schedule: '{ok}', duration: 1h}}]}}}}"
            ),
            &[],
        );
    }
    for bad in ["@every 5m", "@reboot", "0 9 * *", "daily"] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '0', schedule: '{bad}', duration: 1h}}]}}}}"
            ),
            &[&format!(
                "spec.disruption.budgets[0].schedule: {bad:?} does not match {BUDGET_SCHEDULE}"
            )],
        );
    }
}

#[test]
fn budget_duration_pattern() {
    for ok in ["10m", "8h", "1h30m", "8h0m0s"] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '0', schedule: '@daily', duration: '{ok}'}}]}}}}"
            ),
            &[],
        );
    }
    for bad in ["30s", "1h30m10s", "1.5h", "100ms"] {
        check(
            &format!(
                "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{{nodes: '0', schedule: '@daily', duration: '{bad}'}}]}}}}"
            ),
            &[&format!(
                "spec.disruption.budgets[0].duration: {bad:?} does not match {BUDGET_DURATION}"
            )],
        );
    }
}

#[test]
fn budget_limits() {
    let many: Vec<String> = (0..51).map(|_| "{nodes: '1'}".to_owned()).collect();
    check(
        &format!(
            "spec: {{disruption: {{consolidateAfter: 0s, budgets: [{}]}}}}",
            many.join(", ")
        ),
        &["spec.disruption.budgets: must have at most 50 items"],
    );
    check(
        "spec: {disruption: {consolidateAfter: 0s, budgets: [{nodes: '1', reasons: [Empty, Drifted, Empty]}]}}",
        &["spec.disruption.budgets[0].reasons[2]: duplicate value \"Empty\""],
    );
}

#[test]
fn consolidate_after_and_expire_after_patterns() {
    for ok in ["0s", "30s", "1m", "1h30m", "Never"] {
        check(
            &format!("spec: {{disruption: {{consolidateAfter: '{ok}'}}}}"),
            &[],
        );
        check(
            &format!("spec: {{template: {{spec: {{expireAfter: '{ok}'}}}}}}"),
            &[],
        );
    }
    // Go durations the parser accepts, that the CRD's patterns do not.
    for bad in ["1.5h", "300ms", "2us"] {
        check(
            &format!("spec: {{disruption: {{consolidateAfter: '{bad}'}}}}"),
            &[&format!(
                "spec.disruption.consolidateAfter: {bad:?} does not match {DURATION_OR_NEVER}"
            )],
        );
        check(
            &format!("spec: {{template: {{spec: {{expireAfter: '{bad}'}}}}}}"),
            &[&format!(
                "spec.template.spec.expireAfter: {bad:?} does not match {DURATION_OR_NEVER}"
            )],
        );
    }
}

#[test]
fn termination_grace_period_pattern() {
    check(
        "spec: {template: {spec: {terminationGracePeriod: 48h}}}",
        &[],
    );
    check(
        "spec: {template: {spec: {terminationGracePeriod: 1h30m10s}}}",
        &[],
    );
    check(
        "spec: {template: {spec: {terminationGracePeriod: 90ms}}}",
        &[&format!(
            "spec.template.spec.terminationGracePeriod: \"90ms\" does not match {DURATION}"
        )],
    );
}

#[test]
fn weight_bounds() {
    check("spec: {weight: 1}", &[]);
    check("spec: {weight: 100}", &[]);
    check(
        "spec: {weight: 0}",
        &["spec.weight: must be greater than or equal to 1"],
    );
    check(
        "spec: {weight: 101}",
        &["spec.weight: must be less than or equal to 100"],
    );
}

#[test]
fn in_requires_values() {
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: In, values: []}"),
        &["spec.template.spec.requirements[0].values: In requires at least one value"],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: In}"),
        &["spec.template.spec.requirements[0].values: In requires at least one value"],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: NotIn, values: [arm64]}"),
        &[],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: Exists}"),
        &[],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: DoesNotExist}"),
        &[],
    );
}

#[test]
fn numeric_operators_require_one_non_negative_integer() {
    let key = "karpenter.k8s.aws/instance-cpu";
    for op in ["Gt", "Lt", "Gte", "Lte"] {
        check(
            &with_requirement(&format!("{{key: {key}, operator: {op}, values: ['4']}}")),
            &[],
        );
        check(
            &with_requirement(&format!("{{key: {key}, operator: {op}, values: ['0']}}")),
            &[],
        );
        for values in ["[]", "['1', '2']", "['four']", "['1.5']"] {
            check(
                &with_requirement(&format!("{{key: {key}, operator: {op}, values: {values}}}")),
                &[&format!(
                    "spec.template.spec.requirements[0].values: {op} requires a single non-negative integer value"
                )],
            );
        }
        // A negative number is refused by the CEL rule; that it is no label value either is
        // only a warning, as upstream's pattern sits where the API server ignores it.
        let negative = with_requirement(&format!("{{key: {key}, operator: {op}, values: ['-1']}}"));
        check(
            &negative,
            &[&format!(
                "spec.template.spec.requirements[0].values: {op} requires a single non-negative integer value"
            )],
        );
        assert_eq!(
            nodepool_warnings(&negative),
            [
                "spec.template.spec.requirements[0].values[0]: value \"-1\" must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
            ]
        );
    }
}

#[test]
fn min_values_bounds_and_in_needs_as_many_values() {
    check(
        &with_requirement(
            "{key: kubernetes.io/arch, operator: In, values: [amd64, arm64], minValues: 2}",
        ),
        &[],
    );
    check(
        &with_requirement(
            "{key: kubernetes.io/arch, operator: In, values: [amd64, arm64], minValues: 3}",
        ),
        &[
            "spec.template.spec.requirements[0].values: In with minValues 3 requires at least 3 values",
        ],
    );
    check(
        &with_requirement(
            "{key: node.kubernetes.io/instance-type, operator: Exists, minValues: 10}",
        ),
        &[],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: Exists, minValues: 0}"),
        &["spec.template.spec.requirements[0].minValues: must be greater than or equal to 1"],
    );
    check(
        &with_requirement("{key: kubernetes.io/arch, operator: Exists, minValues: 51}"),
        &["spec.template.spec.requirements[0].minValues: must be less than or equal to 50"],
    );
}

#[test]
fn requirement_keys_and_values() {
    check(
        &with_requirement("{key: karpenter.sh/foo, operator: Exists}"),
        &["spec.template.spec.requirements[0].key: label domain \"karpenter.sh\" is restricted"],
    );
    check(
        &with_requirement("{key: karpenter.sh/nodepool, operator: In, values: [a]}"),
        &["spec.template.spec.requirements[0].key: label \"karpenter.sh/nodepool\" is restricted"],
    );
    check(
        &with_requirement("{key: karpenter.sh/capacity-type, operator: In, values: [spot]}"),
        &[],
    );
    check(
        &with_requirement("{key: kubernetes.io/hostname, operator: Exists}"),
        &["spec.template.spec.requirements[0].key: label \"kubernetes.io/hostname\" is restricted"],
    );
    // Open since upstream core v1.9 (kubernetes-sigs/karpenter#2586).
    check(
        &with_requirement("{key: app.k8s.io/team, operator: Exists}"),
        &[],
    );
    check(
        &with_requirement("{key: node-role.kubernetes.io/gpu, operator: Exists}"),
        &[],
    );
    check(
        &with_requirement("{key: Example.com/team, operator: Exists}"),
        &[
            "spec.template.spec.requirements[0].key: key \"Example.com/team\" is not a qualified name: an optional lowercase DNS subdomain and '/', then alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ],
    );
    let long = "a".repeat(64);
    check(
        &with_requirement(&format!("{{key: example.com/{long}, operator: Exists}}")),
        &[&format!(
            "spec.template.spec.requirements[0].key: key \"example.com/{long}\": name part must be no more than 63 characters"
        )],
    );
    // Upstream puts the label-value length and pattern on the `values` array, where the API
    // server ignores them: admitted, and a warning.
    let bad_value = with_requirement("{key: example.com/team, operator: In, values: [ok, -bad]}");
    check(&bad_value, &[]);
    assert_eq!(
        nodepool_warnings(&bad_value),
        [
            "spec.template.spec.requirements[0].values[1]: value \"-bad\" must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ]
    );
    let many: Vec<&str> = (0..101)
        .map(|_| "{key: example.com/a, operator: Exists}")
        .collect();
    check(
        &format!(
            "spec: {{template: {{spec: {{requirements: [{}]}}}}}}",
            many.join(", ")
        ),
        &["spec.template.spec.requirements: must have at most 100 items"],
    );
}

#[test]
fn provider_restricted_domains() {
    let aws =
        LabelPolicy::with_provider(["karpenter.k8s.aws"], ["karpenter.k8s.aws/instance-family"]);
    let np = nodepool(&with_requirement(
        "{key: karpenter.k8s.aws/instance-family, operator: Exists}",
    ));
    assert!(np.validate(&aws).is_ok());
    let np = nodepool(&with_label("karpenter.k8s.aws/ec2nodeclass", "x"));
    assert_eq!(
        strings(np.validate(&aws)),
        [
            "spec.template.metadata.labels[\"karpenter.k8s.aws/ec2nodeclass\"]: label domain \"karpenter.k8s.aws\" is restricted"
        ]
    );
}

#[test]
fn template_labels() {
    check(&with_label("billing-team", "my-team"), &[]);
    check(&with_label("karpenter.sh/capacity-type", "spot"), &[]);
    check(&with_label("node.kubernetes.io/role", "x"), &[]);
    check(&with_label("node-restriction.kubernetes.io/team", "x"), &[]);
    check(&with_label("kops.k8s.io/instancegroup", "x"), &[]);
    check(
        &with_label("karpenter.sh/foo", "x"),
        &[
            "spec.template.metadata.labels[\"karpenter.sh/foo\"]: label domain \"karpenter.sh\" is restricted",
        ],
    );
    check(
        &with_label("karpenter.sh/nodepool", "x"),
        &[
            "spec.template.metadata.labels[\"karpenter.sh/nodepool\"]: label \"karpenter.sh/nodepool\" is restricted",
        ],
    );
    // Open since upstream core v1.9 (kubernetes-sigs/karpenter#2586).
    check(&with_label("kubernetes.io/foo", "x"), &[]);
    check(&with_label("example.k8s.io/foo", "x"), &[]);
    check(&with_label("node-role.kubernetes.io/gpu", "x"), &[]);
    check(
        &with_label("kubernetes.io/hostname", "x"),
        &[
            "spec.template.metadata.labels[\"kubernetes.io/hostname\"]: label \"kubernetes.io/hostname\" is restricted",
        ],
    );
    let long = "v".repeat(64);
    check(&with_label("team", &"v".repeat(63)), &[]);
    check(
        &with_label("team", &long),
        &[&format!(
            "spec.template.metadata.labels[\"team\"]: value \"{long}\" must be no more than 63 characters"
        )],
    );
    check(
        &with_label("team", "my team"),
        &[
            "spec.template.metadata.labels[\"team\"]: value \"my team\" must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ],
    );
    check(&with_label("team", ""), &[]);
    let labels: Vec<String> = (0..101).map(|i| format!("l{i}: v")).collect();
    check(
        &format!(
            "spec: {{template: {{metadata: {{labels: {{{}}}}}}}}}",
            labels.join(", ")
        ),
        &["spec.template.metadata.labels: must have at most 100 entries"],
    );
}

#[test]
fn taints() {
    check(
        "spec: {template: {spec: {taints: [{key: example.com/special, value: 'true', effect: NoSchedule}]}}}",
        &[],
    );
    check(
        "spec: {template: {spec: {taints: [{key: example.com/special, effect: Sometimes}]}}}",
        &[
            "spec.template.spec.taints[0].effect: \"Sometimes\" is not one of [\"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"]",
        ],
    );
    check(
        "spec: {template: {spec: {taints: [{key: '', effect: NoSchedule}]}}}",
        &["spec.template.spec.taints[0].key: key may not be empty"],
    );
    check(
        "spec: {template: {spec: {startupTaints: [{key: 'bad key', effect: NoSchedule}]}}}",
        &[&format!(
            "spec.template.spec.startupTaints[0].key: \"bad key\" does not match {}",
            karpenter_api::patterns::QUALIFIED_NAME
        )],
    );
    check(
        "spec: {template: {spec: {taints: [{key: a, effect: NoSchedule}], startupTaints: [{key: a, effect: NoSchedule}]}}}",
        &["spec.template.spec.startupTaints[0]: duplicate taint Key/Effect pair a=NoSchedule"],
    );
    check(
        "spec: {template: {spec: {taints: [{key: a, effect: NoSchedule}, {key: a, effect: NoExecute}]}}}",
        &[],
    );
}

#[test]
fn node_class_ref() {
    check(
        "spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ''}}}}",
        &["spec.template.spec.nodeClassRef.name: name may not be empty"],
    );
    check(
        "spec: {template: {spec: {nodeClassRef: {group: '', kind: '', name: default}}}}",
        &[
            "spec.template.spec.nodeClassRef.kind: kind may not be empty",
            "spec.template.spec.nodeClassRef.group: group may not be empty",
        ],
    );
    check(
        "spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws/v1, kind: EC2NodeClass, name: default}}}}",
        &["spec.template.spec.nodeClassRef.group: \"karpenter.k8s.aws/v1\" does not match ^[^/]*$"],
    );
}

#[test]
fn static_nodepools() {
    check("spec: {replicas: 2, limits: {nodes: 5}}", &[]);
    check("spec: {replicas: 0}", &[]);
    check(
        "spec: {replicas: 2, limits: {nodes: 5, cpu: 10}}",
        &["spec.limits: only 'limits.nodes' is supported on static NodePools"],
    );
    check(
        "spec: {replicas: 2, weight: 10}",
        &["spec.weight: 'weight' is not supported on static NodePools"],
    );
    check(
        "spec: {replicas: -1}",
        &["spec.replicas: must be greater than or equal to 0"],
    );
    check("spec: {limits: {cpu: 10, memory: 10Gi}, weight: 10}", &[]);
}

#[test]
fn nodepool_transitions() {
    let old = nodepool("{}");
    let same = nodepool("{}");
    assert!(same.validate_update(&old, &core()).is_ok());
    let regrouped = nodepool(
        "spec: {template: {spec: {nodeClassRef: {group: example.com, kind: Other, name: other}}}}",
    );
    assert_eq!(
        strings(regrouped.validate_update(&old, &core())),
        [
            "spec.template.spec.nodeClassRef.group: nodeClassRef.group is immutable",
            "spec.template.spec.nodeClassRef.kind: nodeClassRef.kind is immutable",
        ]
    );
    let renamed = nodepool("spec: {template: {spec: {nodeClassRef: {name: other}}}}");
    assert!(
        renamed.validate_update(&old, &core()).is_ok(),
        "the name may change"
    );
    let made_static = nodepool("spec: {replicas: 1}");
    assert_eq!(
        strings(made_static.validate_update(&old, &core())),
        [
            "spec: Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
        ]
    );
}

fn nodeclaim(patch_yaml: &str) -> NodeClaim {
    serde_json::from_value(FIXTURES.patched("nodeclaim-docs.yaml", patch_yaml)).unwrap()
}

#[test]
fn nodeclaim_rules() {
    assert!(nodeclaim("{}").validate(&core()).is_ok());
    assert_eq!(
        strings(
            nodeclaim("spec: {requirements: [{key: kubernetes.io/arch, operator: In}]}")
                .validate(&core())
        ),
        ["spec.requirements[0].values: In requires at least one value"]
    );
    assert_eq!(
        strings(
            nodeclaim("spec: {requirements: [{key: karpenter.sh/foo, operator: Exists}]}")
                .validate(&core())
        ),
        ["spec.requirements[0].key: label domain \"karpenter.sh\" is restricted"]
    );
    assert_eq!(
        strings(nodeclaim("spec: {terminationGracePeriod: 1.5h}").validate(&core())),
        [format!(
            "spec.terminationGracePeriod: \"1.5h\" does not match {DURATION}"
        )]
    );
    assert_eq!(
        strings(nodeclaim("spec: {nodeClassRef: {kind: ''}}").validate(&core())),
        ["spec.nodeClassRef.kind: kind may not be empty"]
    );
}

#[test]
fn nodeclaim_spec_is_immutable() {
    let old = nodeclaim("{}");
    let relabeled = nodeclaim("metadata: {labels: {extra: x}}");
    assert!(relabeled.validate_update(&old, &core()).is_ok());
    let changed = nodeclaim("spec: {expireAfter: Never}");
    assert_eq!(
        strings(changed.validate_update(&old, &core())),
        ["spec: spec is immutable"]
    );
}

/// The plugin's vocabulary types its labels: bounds compare integers only, and an integer
/// label takes integers only; a string label refuses bounds.
#[test]
fn requirements_follow_the_value_types_of_the_provider_vocabulary() {
    use karpenter_api::labels::LabelValueType;
    let policy = LabelPolicy::with_vocabulary(
        ["karpenter.k8s.aws"],
        [
            ("karpenter.k8s.aws/instance-cpu", LabelValueType::Integer),
            ("karpenter.k8s.aws/instance-family", LabelValueType::String),
        ],
    );
    let np = nodepool(&with_requirement(
        "{key: karpenter.k8s.aws/instance-cpu, operator: In, values: ['4', large]}",
    ));
    assert_eq!(
        strings(np.validate(&policy)),
        [
            "spec.template.spec.requirements[0].values[1]: \"large\" is not a non-negative integer, and the values of karpenter.k8s.aws/instance-cpu are"
        ]
    );
    let np = nodepool(&with_requirement(
        "{key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ['4']}",
    ));
    assert!(np.validate(&policy).is_ok());
    let np = nodepool(&with_requirement(
        "{key: karpenter.k8s.aws/instance-family, operator: Gt, values: ['4']}",
    ));
    assert_eq!(
        strings(np.validate(&policy)),
        [
            "spec.template.spec.requirements[0].operator: Gt compares integers, and the values of karpenter.k8s.aws/instance-family are strings"
        ]
    );
    let np = nodepool(&with_requirement(
        "{key: karpenter.k8s.aws/instance-famly, operator: In, values: [m5]}",
    ));
    assert_eq!(
        strings(np.validate(&policy)),
        [
            "spec.template.spec.requirements[0].key: label domain \"karpenter.k8s.aws\" is restricted; did you mean karpenter.k8s.aws/instance-family?"
        ]
    );
}
