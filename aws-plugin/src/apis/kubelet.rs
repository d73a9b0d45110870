//! `spec.kubelet`: the kubelet settings Karpenter understands, as upstream's current release
//! (aws/karpenter-provider-aws v1.14) types them: a closed object whose unknown fields the API
//! server prunes (structural schema), with the values of the reserved-resource and eviction
//! maps checked against upstream's quantity and percentage patterns.
//!
//! Upstream's unreleased main opens the object (`x-kubernetes-preserve-unknown-fields`) and
//! passes unknown keys through to the AMI families' kubelet configuration; until a release
//! ships that, a field this type does not know is dropped here as the API server drops it
//! (serde ignores it) and never reaches a node.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::patterns::{self, Pattern};
use super::validation::{Violation, quoted};

/// The keys `systemReserved` and `kubeReserved` accept.
pub const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

/// The eviction signals the eviction maps accept.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// Kubelet settings for the nodes (a subset of upstream's `KubeletConfiguration`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
        "message": "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    },
    {
        "rule": "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
        "message": "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    },
    {
        "rule": "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
        "message": "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    },
]))]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// The most pods a node runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// The most pods per vCPU; capped by `maxPods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the OS (cpu, memory, ephemeral-storage, pid).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = system_reserved_rules)]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes components (cpu, memory, ephemeral-storage, pid).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = kube_reserved_rules)]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_hard_rules)]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds by signal; each needs a grace period.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_soft_rules)]
    pub eviction_soft: BTreeMap<String, String>,
    /// How long each soft threshold must hold before eviction (Go durations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_soft_grace_period_rules)]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// The longest grace period, in seconds, pods get when evicted for a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percentage above which image garbage collection always runs.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percentage image garbage collection frees down to.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU CFS quotas are enforced for containers with CPU limits.
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

fn set_rules(schema: &mut Schema, rules: Vec<serde_json::Value>) {
    schema.insert("x-kubernetes-validations".into(), rules.into());
}

/// Puts `pattern` on each value of a map.
fn set_value_pattern(schema: &mut Schema, pattern: Pattern) {
    if let Some(values) = schema
        .get_mut("additionalProperties")
        .and_then(serde_json::Value::as_object_mut)
    {
        values.insert("pattern".into(), pattern.as_str().into());
    }
}

// The CEL messages are the Rust violations' messages, so the CRD and `validate` say the same.
fn reserved_rules(schema: &mut Schema, field: &'static str) {
    let checks = RESERVED_RESOURCES
        .iter()
        .map(|r| format!("x=='{r}'"))
        .collect::<Vec<_>>()
        .join(" || ");
    let allowed = &RESERVED_RESOURCES;
    set_value_pattern(schema, patterns::RESERVED_QUANTITY);
    set_rules(
        schema,
        vec![
            serde_json::json!({
                "rule": format!("self.all(x, {checks})"),
                "message": Violation::InvalidKubeletKey { field, allowed }.to_string(),
            }),
            serde_json::json!({
                "rule": "self.all(x, !self[x].startsWith('-'))",
                "message": Violation::NegativeReserved(field).to_string(),
            }),
        ],
    );
}

fn signal_rules(schema: &mut Schema, field: &'static str) {
    let allowed = &EVICTION_SIGNALS;
    set_rules(
        schema,
        vec![serde_json::json!({
            "rule": format!("self.all(x, x in [{}])", quoted(allowed, ",")),
            "message": Violation::InvalidKubeletKey { field, allowed }.to_string(),
        })],
    );
}

fn system_reserved_rules(schema: &mut Schema) {
    reserved_rules(schema, "systemReserved");
}

fn kube_reserved_rules(schema: &mut Schema) {
    reserved_rules(schema, "kubeReserved");
}

fn eviction_hard_rules(schema: &mut Schema) {
    set_value_pattern(schema, patterns::EVICTION_THRESHOLD);
    signal_rules(schema, "evictionHard");
}

fn eviction_soft_rules(schema: &mut Schema) {
    set_value_pattern(schema, patterns::EVICTION_THRESHOLD);
    signal_rules(schema, "evictionSoft");
}

fn eviction_soft_grace_period_rules(schema: &mut Schema) {
    signal_rules(schema, "evictionSoftGracePeriod");
}
