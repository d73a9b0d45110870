//! NodePool (`karpenter.sh/v1`, cluster-scoped): a template for NodeClaims plus the behaviour
//! around them (disruption, limits, weight, static replicas).
//!
//! `spec.template` is what NodeClaims are stamped from and what the drift hash will cover; the
//! other fields are behaviour and never drift nodes.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::Taint, apimachinery::pkg::api::resource::Quantity};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    condition::Condition,
    duration::{GoDuration, NillableDuration},
    labels::{KeyUse, LabelPolicy},
    nodeclaim::{
        NodeClassReference, check_expire_after, check_node_class_ref,
        check_termination_grace_period, default_expire_after,
    },
    patterns,
    requirement::{NodeSelectorRequirementWithMinValues, check_requirements},
    schema,
    validation::{Errors, FieldPath, ValidationError, Violation, check_labels, check_taints},
};

/// NodeClassReady: the referenced NodeClass exists and is ready.
pub const CONDITION_NODE_CLASS_READY: &str = "NodeClassReady";
/// ValidationSucceeded: the runtime validation passed.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// NodeRegistrationHealthy: recent launches registered as nodes.
pub const CONDITION_NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

/// The most budgets a NodePool may have, and the most reasons per budget.
pub const MAX_BUDGETS: usize = 50;
/// The default budget: 10% of a NodePool's nodes may be disrupted at once.
pub const DEFAULT_BUDGET_NODES: &str = "10%";
/// The default `consolidateAfter`: as soon as possible.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";
/// The limit a static NodePool may set.
pub const LIMIT_NODES: &str = "nodes";

/// The top-level NodePool specification: NodePools launch nodes for pods that are unschedulable;
/// node properties come from the template combined with the pods' scheduling constraints.
// The `#[kube]` attributes are laid out as `crate::crd` says.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "karpenter.sh", version = "v1", kind = "NodePool")]
#[kube(doc = "NodePool is the Schema for the NodePools API")]
#[kube(plural = "nodepools", category = "karpenter")]
#[kube(status = "NodePoolStatus", derive = "PartialEq")]
#[kube(scale(
    spec_replicas_path = ".spec.replicas",
    status_replicas_path = ".status.nodes"
))]
#[kube(
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1}"#,
    printcolumn = r#"{"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
        "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
    },
    {
        "rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
        "message": "only 'limits.nodes' is supported on static NodePools",
    },
    {
        "rule": "!has(self.replicas) || !has(self.weight)",
        "message": "'weight' is not supported on static NodePools",
    },
]))]
pub struct NodePoolSpec {
    /// The template NodeClaims are launched from; NodeClaims are often further constrained by
    /// the pods they are launched for.
    pub template: NodeClaimTemplate,
    /// How Karpenter may disrupt this NodePool's nodes.
    #[serde(default)]
    #[schemars(extend("default" = { "consolidateAfter": "0s" }))]
    pub disruption: Disruption,
    /// Bounds on the capacity the NodePool may provision (`nodes` counts nodes). Static NodePools
    /// support only `nodes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::resource_list")]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among NodePools: higher weights are tried first; unset counts as 0. Not
    /// supported on static NodePools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Makes the NodePool static: it keeps exactly this many nodes instead of following pod
    /// demand (alpha upstream). Consolidation settings are ignored while it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// How NodeClaims launched from a NodePool look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on the NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// The NodeClaims' spec, without resource requests (those come from pods).
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations of a NodeClaim template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels for the nodes; keys in Kubernetes' and Karpenter's own domains are restricted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::template_labels")]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        schema_with = "schema::string_map",
        extend("x-kubernetes-map-type" = "granular")
    )]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// Whether there are no labels and no annotations.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The spec of a NodeClaim template: a NodeClaim's spec without resource requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints applied to the nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints applied at startup that something else (usually a DaemonSet) removes; pods need
    /// not tolerate them to be provisioned for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// Requirements on the nodes' labels, combined with the pods' scheduling constraints.
    #[schemars(schema_with = "schema::nodepool_requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider-specific configuration the nodes are launched with. Group and kind are
    /// immutable.
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "self.group == oldSelf.group", "message": "nodeClassRef.group is immutable" },
        { "rule": "self.kind == oldSelf.kind", "message": "nodeClassRef.kind is immutable" },
    ]))]
    pub node_class_ref: NodeClassReference,
    /// How long a draining node may take before its pods are deleted regardless of PDBs and
    /// `karpenter.sh/do-not-disrupt`; unset, draining waits indefinitely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::DURATION))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation a node is replaced; `Never` disables expiry.
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = patterns::DURATION_OR_NEVER))]
    pub expire_after: NillableDuration,
}

/// How Karpenter may disrupt a NodePool's nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long after a pod was last added to or removed from a node Karpenter may consolidate
    /// it; `Never` disables consolidation.
    #[schemars(regex(pattern = patterns::DURATION_OR_NEVER))]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may disrupt.
    #[serde(default)]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once; the most restrictive active budget
    /// wins.
    #[serde(default = "default_budgets")]
    #[schemars(
        length(max = 50),
        extend(
            "default" = [{ "nodes": "10%" }],
            "x-kubernetes-list-type" = "atomic",
            "x-kubernetes-validations" = [{
                "rule": "self.all(x, has(x.schedule) == has(x.duration))",
                "message": "'schedule' must be set with 'duration'",
            }]
        )
    )]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: NillableDuration::known(
                DEFAULT_CONSOLIDATE_AFTER,
                std::time::Duration::ZERO,
            ),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_owned()
}

/// Which nodes consolidation may disrupt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere more cheaply.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, but a move must save enough to justify its churn.
    Balanced,
}

/// When, and for what, at most how many nodes may be disrupted at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The disruption methods the budget applies to; unset, it applies to all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// How many of the NodePool's nodes may be disrupting at once: a count or a percentage
    /// (rounded up).
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = patterns::BUDGET_NODES))]
    pub nodes: String,
    /// When the budget becomes active, in cron syntax (UTC); unset, it is always active.
    /// Requires `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::BUDGET_SCHEDULE))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (minutes and hours only).
    /// Requires `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::BUDGET_DURATION))]
    pub duration: Option<GoDuration>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            reasons: None,
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
        }
    }
}

/// A disruption method a budget can be limited to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum DisruptionReason {
    /// Consolidation of underutilized nodes.
    Underutilized,
    /// Consolidation of empty nodes.
    Empty,
    /// Replacement of drifted nodes.
    Drifted,
}

/// The observed state of a NodePool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// The resources the NodePool has provisioned.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::resource_list")]
    pub resources: BTreeMap<String, Quantity>,
    /// How many nodes the NodePool has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The NodeClass generation last observed; when the NodeClass changes, the
    /// NodeRegistrationHealthy condition is reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Vec<Condition>,
}

/// The annotation carrying a NodePool's (and its NodeClaims') template hash.
pub const ANNOTATION_NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// The annotation carrying the version of the hashing scheme behind the hash.
pub const ANNOTATION_NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Our hash version. Not upstream's (`v3`): our hash is computed differently, and a fleet
/// that upstream Karpenter launched is re-stamped on adoption rather than rolled. Bump it when
/// a hashed field's default changes, a field with a set value enters the hash, or one leaves
/// it (upstream's rules), or when `crate::hash`'s canonical form changes.
pub const NODEPOOL_HASH_VERSION: &str = "rs-v1";

impl NodeClaimTemplate {
    /// The static hash (upstream `NodePool.Hash()`): `spec.template` without its requirements
    /// (they drift dynamically), durations by their parsed value so `1h` and `60m` agree.
    /// Behaviour fields (limits, weight, disruption) are outside the template and never drift.
    pub fn static_hash(&self) -> String {
        let mut spec = serde_json::Map::new();
        let taints = |taints: &[Taint]| serde_json::to_value(taints).unwrap_or_default();
        spec.insert("taints".to_owned(), taints(&self.spec.taints));
        spec.insert(
            "startupTaints".to_owned(),
            taints(&self.spec.startup_taints),
        );
        spec.insert(
            "nodeClassRef".to_owned(),
            serde_json::to_value(&self.spec.node_class_ref).unwrap_or_default(),
        );
        if let Some(grace) = &self.spec.termination_grace_period {
            spec.insert(
                "terminationGracePeriodSeconds".to_owned(),
                grace.duration().as_secs_f64().into(),
            );
        }
        // `Never` and a duration must differ from each other and from "unset" (which the
        // default makes impossible anyway).
        spec.insert(
            "expireAfterSeconds".to_owned(),
            match self.spec.expire_after.duration() {
                Some(d) => d.as_secs_f64().into(),
                None => "Never".into(),
            },
        );
        let template = serde_json::json!({
            "metadata": {
                "labels": self.metadata.labels,
                "annotations": self.metadata.annotations,
            },
            "spec": spec,
        });
        crate::hash::static_hash(&template)
    }
}

impl NodePool {
    /// The template's static hash ([`NodeClaimTemplate::static_hash`]).
    pub fn static_hash(&self) -> String {
        self.spec.template.static_hash()
    }

    /// Checks the NodePool against the rules its CRD enforces on creation. `policy` holds the
    /// label rules, karpenter.sh's plus the cloud provider's restricted domains and well-known
    /// labels.
    pub fn validate(&self, policy: &LabelPolicy) -> Result<(), Vec<ValidationError>> {
        let mut errors = Errors::default();
        self.spec
            .check(&mut errors, &FieldPath::root("spec"), policy);
        errors.into_result()
    }

    /// What the CRD admits although it cannot work as written (see [`Errors`]): a requirement
    /// value no node could carry as a label.
    pub fn warnings(&self, policy: &LabelPolicy) -> Vec<ValidationError> {
        self.errors_and_warnings(policy).1
    }

    /// [`Self::validate`]'s errors and [`Self::warnings`], from one check.
    pub fn errors_and_warnings(
        &self,
        policy: &LabelPolicy,
    ) -> (Vec<ValidationError>, Vec<ValidationError>) {
        let mut errors = Errors::default();
        self.spec
            .check(&mut errors, &FieldPath::root("spec"), policy);
        errors.into_parts()
    }

    /// Checks an update from `old`: the creation rules, plus the transition rules (nodeClassRef
    /// group and kind, static versus dynamic).
    pub fn validate_update(
        &self,
        old: &Self,
        policy: &LabelPolicy,
    ) -> Result<(), Vec<ValidationError>> {
        let mut errors = Errors::default();
        let spec = FieldPath::root("spec");
        self.spec.check(&mut errors, &spec, policy);
        if self.spec.replicas.is_some() != old.spec.replicas.is_some() {
            errors.push(spec.clone(), Violation::StaticDynamicTransition);
        }
        let new_ref = &self.spec.template.spec.node_class_ref;
        let old_ref = &old.spec.template.spec.node_class_ref;
        let ref_path = spec.field("template").field("spec").field("nodeClassRef");
        if new_ref.group != old_ref.group {
            errors.push(
                ref_path.field("group"),
                Violation::Immutable("nodeClassRef.group"),
            );
        }
        if new_ref.kind != old_ref.kind {
            errors.push(
                ref_path.field("kind"),
                Violation::Immutable("nodeClassRef.kind"),
            );
        }
        errors.into_result()
    }

    /// Whether the NodePool is static (keeps `spec.replicas` nodes regardless of pods).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }
}

impl NodePoolSpec {
    fn check(&self, errors: &mut Errors, path: &FieldPath, policy: &LabelPolicy) {
        self.template.check(errors, &path.field("template"), policy);
        self.disruption.check(errors, &path.field("disruption"));
        if let Some(weight) = self.weight {
            errors.range(&path.field("weight"), weight.into(), Some(1), Some(100));
        }
        if let Some(replicas) = self.replicas {
            errors.range(&path.field("replicas"), replicas, Some(0), None);
            if self.limits.keys().any(|k| k != LIMIT_NODES) {
                errors.push(path.field("limits"), Violation::StaticLimits);
            }
            if self.weight.is_some() {
                errors.push(path.field("weight"), Violation::StaticWeight);
            }
        }
    }
}

impl NodeClaimTemplate {
    fn check(&self, errors: &mut Errors, path: &FieldPath, policy: &LabelPolicy) {
        check_labels(
            errors,
            &path.field("metadata").field("labels"),
            &self.metadata.labels,
            policy,
        );
        let spec_path = path.field("spec");
        let spec = &self.spec;
        check_taints(
            errors,
            &[
                (spec_path.field("taints"), spec.taints.as_slice()),
                (
                    spec_path.field("startupTaints"),
                    spec.startup_taints.as_slice(),
                ),
            ],
        );
        check_requirements(
            errors,
            &spec_path.field("requirements"),
            &spec.requirements,
            KeyUse::NodePool,
            policy,
        );
        check_node_class_ref(
            errors,
            &spec_path.field("nodeClassRef"),
            &spec.node_class_ref,
        );
        check_termination_grace_period(
            errors,
            &spec_path.field("terminationGracePeriod"),
            spec.termination_grace_period.as_ref(),
        );
        check_expire_after(errors, &spec_path.field("expireAfter"), &spec.expire_after);
    }
}

impl Disruption {
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        errors.pattern(
            &path.field("consolidateAfter"),
            self.consolidate_after.as_str(),
            patterns::DURATION_OR_NEVER,
        );
        let budgets = path.field("budgets");
        errors.max_items(&budgets, &self.budgets, MAX_BUDGETS);
        for (i, budget) in self.budgets.iter().enumerate() {
            budget.check(errors, &budgets.index(i));
        }
    }
}

impl Budget {
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        errors.pattern(
            &path.field("nodes"),
            self.nodes.as_str(),
            patterns::BUDGET_NODES,
        );
        let schedule = self.schedule.as_deref();
        errors.pattern(&path.field("schedule"), schedule, patterns::BUDGET_SCHEDULE);
        let duration = self.duration.as_ref().map(GoDuration::as_str);
        errors.pattern(&path.field("duration"), duration, patterns::BUDGET_DURATION);
        if self.schedule.is_some() != self.duration.is_some() {
            errors.push(path.clone(), Violation::ScheduleWithoutDuration);
        }
        if let Some(reasons) = &self.reasons {
            let reasons_path = path.field("reasons");
            errors.max_items(&reasons_path, reasons, MAX_BUDGETS);
            let mut seen = std::collections::BTreeSet::new();
            for (i, reason) in reasons.iter().enumerate() {
                if !seen.insert(*reason) {
                    errors.push(
                        reasons_path.index(i),
                        Violation::Duplicate(format!("{reason:?}")),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_consolidate_after_is_what_it_says() {
        assert_eq!(
            Disruption::default().consolidate_after,
            NillableDuration::parse(DEFAULT_CONSOLIDATE_AFTER).unwrap()
        );
    }
}
