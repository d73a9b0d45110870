//! `deploy/iam/aws-plugin-policy.json` is exactly what aws-plugin needs:
//!
//! - its actions are the AWS operations the plugin's SDK adapters call (read from the
//!   adapters' sources, `src/<service>/sdk.rs`, so a new call or a new port shows up here
//!   without anyone listing it), plus the ones AWS checks on the plugin's behalf when it makes
//!   those calls, each named with the call that implies it; nothing else;
//! - the tags the plugin puts on what it creates satisfy the conditions the policy scopes
//!   creation, tagging and deletion with (a policy stricter than the plugin's tags would
//!   refuse every launch on a real account);
//! - it names only the placeholders the docs tell operators to substitute.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use aws_plugin::apis::EC2NodeClass;
use aws_plugin::ec2::Tag;
use aws_plugin::iam::Iam as _;
use aws_plugin::iam::memory::MemoryIam;
use aws_plugin::instance::tags::{instance_tags, launch_tags};
use aws_plugin::node_class::ClusterIdentity;
use aws_plugin::node_class::instance_profile::{profile_name, resolve};
use serde_json::{Value, json};

const CLUSTER: &str = "my-cluster";
const REGION: &str = "us-east-1";

/// Actions AWS authorizes on the plugin's behalf, with the call that implies each.
const IMPLIED: &[(&str, &str)] = &[
    (
        "ec2:RunInstances",
        "ec2:CreateFleet of type instant launches through RunInstances and needs its permission",
    ),
    (
        "iam:PassRole",
        "a launch template with an instance profile passes the profile's role to EC2",
    ),
];

/// The placeholders `docs/getting-started.md` has operators substitute (with envsubst).
const PLACEHOLDERS: [&str; 5] = [
    "AWS_PARTITION",
    "AWS_REGION",
    "AWS_ACCOUNT_ID",
    "CLUSTER_NAME",
    "NODE_ROLE_ARN",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn policy_text() -> String {
    let path = crate_dir().join("../deploy/iam/aws-plugin-policy.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The policy with its placeholders substituted for a cluster `my-cluster` in us-east-1.
fn policy() -> Value {
    let text = policy_text()
        .replace("${AWS_PARTITION}", "aws")
        .replace("${AWS_REGION}", REGION)
        .replace("${AWS_ACCOUNT_ID}", "111122223333")
        .replace("${CLUSTER_NAME}", CLUSTER)
        .replace(
            "${NODE_ROLE_ARN}",
            "arn:aws:iam::111122223333:role/KarpenterNodeRole",
        );
    serde_json::from_str(&text).expect("the policy is JSON")
}

fn statements(policy: &Value) -> &[Value] {
    policy["Statement"].as_array().expect("a Statement list")
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect(),
        other => panic!("expected a string or a list of strings, not {other}"),
    }
}

fn statement<'a>(policy: &'a Value, sid: &str) -> &'a Value {
    statements(policy)
        .iter()
        .find(|s| s["Sid"] == sid)
        .unwrap_or_else(|| panic!("no statement {sid}"))
}

/// `describe_images` → `DescribeImages`.
fn operation(method: &str) -> String {
    method
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

/// The client methods called in an adapter's source: every `.client` followed by
/// `.method()` (the SDK's fluent builders: one method per operation).
fn client_calls(source: &str) -> BTreeSet<String> {
    let mut calls = BTreeSet::new();
    for after in source.split(".client").skip(1) {
        let Some(rest) = after.trim_start().strip_prefix('.') else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && rest[name.len()..].starts_with("()") {
            calls.insert(name);
        }
    }
    calls
}

/// `service:Operation` for every SDK call of every adapter under `src/<service>/sdk.rs`.
fn adapter_actions(src: &Path) -> BTreeSet<String> {
    let mut actions = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("src") {
        let dir = entry.expect("an entry").path();
        let adapter = dir.join("sdk.rs");
        if !adapter.is_file() {
            continue;
        }
        let service = dir.file_name().and_then(|n| n.to_str()).expect("a name");
        let source = std::fs::read_to_string(&adapter).expect("the adapter");
        let calls = client_calls(&source);
        assert!(
            !calls.is_empty(),
            "{}: no SDK call found",
            adapter.display()
        );
        actions.extend(
            calls
                .iter()
                .map(|call| format!("{service}:{}", operation(call))),
        );
    }
    actions
}

#[test]
fn the_policy_allows_exactly_the_actions_the_sdk_adapters_call() {
    let called = adapter_actions(&crate_dir().join("src"));
    // The three ports as they stand, so a scan that silently finds nothing cannot pass.
    for known in [
        "ec2:CreateFleet",
        "ec2:DescribeImages",
        "iam:CreateInstanceProfile",
        "ssm:GetParameter",
    ] {
        assert!(called.contains(known), "{known} not found in {called:?}");
    }
    let mut needed = called.clone();
    needed.extend(IMPLIED.iter().map(|(action, _)| (*action).to_owned()));
    let policy = policy();
    let granted: BTreeSet<String> = statements(&policy)
        .iter()
        .flat_map(|s| strings(&s["Action"]))
        .collect();
    let missing: Vec<&String> = needed.difference(&granted).collect();
    let extra: Vec<&String> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the policy lacks {missing:?} and grants {extra:?} that nothing calls"
    );
}

#[test]
fn every_statement_is_an_allow_with_a_unique_sid_and_unscoped_only_for_reads() {
    let policy = policy();
    assert_eq!(policy["Version"], "2012-10-17");
    let mut sids = BTreeSet::new();
    for statement in statements(&policy) {
        let sid = statement["Sid"].as_str().expect("a Sid");
        assert!(sids.insert(sid.to_owned()), "Sid {sid} twice");
        assert_eq!(statement["Effect"], "Allow", "{sid}");
        let resources = strings(&statement["Resource"]);
        if resources.iter().any(|r| r == "*") {
            for action in strings(&statement["Action"]) {
                let operation = action.split(':').nth(1).unwrap_or_default();
                assert!(
                    operation.starts_with("Describe"),
                    "{sid}: {action} on every resource"
                );
            }
            assert_eq!(
                statement["Condition"]["StringEquals"]["aws:RequestedRegion"], REGION,
                "{sid}: reads held to the cluster's region"
            );
        }
    }
}

#[test]
fn the_policy_names_only_the_documented_placeholders() {
    let text = policy_text();
    let named: BTreeSet<&str> = text
        .split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
        .collect();
    let documented: BTreeSet<&str> = PLACEHOLDERS.into_iter().collect();
    assert_eq!(named, documented);
}

/// Whether `tags` satisfy a condition block's `StringEquals` and `StringLike` on `prefix`
/// keys (`aws:RequestTag/` or `aws:ResourceTag/`); other condition keys are not about tags.
fn tags_satisfy(condition: &Value, prefix: &str, tags: &[Tag]) -> Result<(), String> {
    let tags: BTreeMap<&str, &str> = tags
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_str()))
        .collect();
    for (operator, keys) in condition.as_object().expect("a Condition object") {
        let wildcard = match operator.as_str() {
            "StringEquals" => false,
            "StringLike" => true,
            _ => continue,
        };
        for (key, wanted) in keys.as_object().expect("condition keys") {
            let Some(tag) = key.strip_prefix(prefix) else {
                continue;
            };
            let value = tags
                .get(tag)
                .ok_or_else(|| format!("no tag {tag} (the condition {operator} {key})"))?;
            let ok = strings(wanted)
                .iter()
                .any(|w| (wildcard && w == "*") || w == value);
            if !ok {
                return Err(format!(
                    "tag {tag}={value} does not meet {operator} {wanted}"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn what_the_plugin_launches_carries_the_tags_the_policy_requires() {
    let policy = policy();
    let launch = launch_tags(CLUSTER, "default", "nodes", &BTreeMap::new());
    for sid in [
        "AllowScopedEC2InstanceActionsWithTags",
        "AllowScopedResourceCreationTagging",
    ] {
        tags_satisfy(
            &statement(&policy, sid)["Condition"],
            "aws:RequestTag/",
            &launch,
        )
        .unwrap_or_else(|e| panic!("{sid}: {e}"));
    }
    // The launch template (tagged with the launch tags) and the instance (with the
    // NodeClaim's name too) are what later calls are scoped to.
    tags_satisfy(
        &statement(&policy, "AllowScopedEC2LaunchTemplateAccessActions")["Condition"],
        "aws:ResourceTag/",
        &launch,
    )
    .expect("the launch template's tags");
    tags_satisfy(
        &statement(&policy, "AllowScopedDeletion")["Condition"],
        "aws:ResourceTag/",
        &instance_tags(&launch, "default-abcde"),
    )
    .expect("the instance's tags");
}

#[tokio::test]
async fn the_instance_profile_the_plugin_creates_carries_the_tags_the_policy_requires() {
    let policy = policy();
    let iam = MemoryIam::new();
    iam.add_role("KarpenterNodeRole");
    let cluster = ClusterIdentity {
        name: CLUSTER.to_owned(),
        region: REGION.to_owned(),
        kubernetes_version: Some("1.33".to_owned()),
    };
    let node_class: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "nodes"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        },
    }))
    .expect("an EC2NodeClass");
    let resolved = resolve(&iam, &cluster, &node_class)
        .await
        .expect("no AWS error")
        .expect("a profile");
    assert_eq!(resolved, profile_name(&cluster, "nodes"));
    let profile = iam
        .get_instance_profile(&resolved)
        .await
        .expect("no AWS error")
        .expect("the profile exists");
    tags_satisfy(
        &statement(&policy, "AllowScopedInstanceProfileCreationActions")["Condition"],
        "aws:RequestTag/",
        &profile.tags,
    )
    .expect("the create's tags");
    tags_satisfy(
        &statement(&policy, "AllowScopedInstanceProfileActions")["Condition"],
        "aws:ResourceTag/",
        &profile.tags,
    )
    .expect("the profile's tags, for the calls after it");
}

#[test]
fn the_scan_finds_client_calls_across_lines_and_ignores_fields() {
    let source = "self.client\n    .describe_images()\n .send();\nlet c = self.client.clone;\nself.client.get_parameter().name(x)";
    assert_eq!(
        client_calls(source),
        BTreeSet::from(["describe_images".to_owned(), "get_parameter".to_owned()])
    );
    assert_eq!(
        operation("describe_instance_type_offerings"),
        "DescribeInstanceTypeOfferings"
    );
}
