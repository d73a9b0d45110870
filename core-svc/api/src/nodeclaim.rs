//! NodeClaim (`karpenter.sh/v1`, cluster-scoped): one request for one node, stamped from a
//! NodePool's template and immutable once created.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::Taint,
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::Time},
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    condition::Condition,
    duration::{GoDuration, NillableDuration},
    labels::{KeyUse, LabelPolicy},
    patterns,
    requirement::{NodeSelectorRequirementWithMinValues, check_requirements},
    schema,
    validation::{Errors, FieldPath, ValidationError, Violation, check_taints},
};

/// Launched: the cloud provider created the instance.
pub const CONDITION_LAUNCHED: &str = "Launched";
/// Registered: a Node with the NodeClaim's provider ID joined the cluster.
pub const CONDITION_REGISTERED: &str = "Registered";
/// Initialized: the Node is ready and its startup taints are gone.
pub const CONDITION_INITIALIZED: &str = "Initialized";
/// Consolidatable: `consolidateAfter` has passed since the last pod event.
pub const CONDITION_CONSOLIDATABLE: &str = "Consolidatable";
/// Drifted: the NodeClaim no longer matches its NodePool or NodeClass.
pub const CONDITION_DRIFTED: &str = "Drifted";
/// Drained: the Node's pods were evicted.
pub const CONDITION_DRAINED: &str = "Drained";
/// VolumesDetached: the Node's volume attachments are gone.
pub const CONDITION_VOLUMES_DETACHED: &str = "VolumesDetached";
/// InstanceTerminating: the cloud provider is terminating the instance.
pub const CONDITION_INSTANCE_TERMINATING: &str = "InstanceTerminating";
/// ConsistentStateFound: the Node matches what the NodeClaim promised.
pub const CONDITION_CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
/// DisruptionReason: why the NodeClaim is being disrupted.
pub const CONDITION_DISRUPTION_REASON: &str = "DisruptionReason";

/// The default `expireAfter`: 30 days.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";

pub(crate) fn default_expire_after() -> NillableDuration {
    NillableDuration::known(
        DEFAULT_EXPIRE_AFTER,
        std::time::Duration::from_secs(720 * 3600),
    )
}

/// The desired state of a NodeClaim. Immutable: changing a NodeClaim means replacing it.
// The `#[kube]` attributes are laid out as `crate::crd` says.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "karpenter.sh", version = "v1", kind = "NodeClaim")]
#[kube(doc = "NodeClaim is the Schema for the NodeClaims API")]
#[kube(plural = "nodeclaims", category = "karpenter")]
#[kube(status = "NodeClaimStatus", derive = "PartialEq")]
#[kube(
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".status.nodeName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1}"#,
    printcolumn = r#"{"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1}"#,
    printcolumn = r#"{"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1}"#,
    printcolumn = r#"{"name": "Drifted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Drifted\")].status", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": "self == oldSelf", "message": "spec is immutable" }
]))]
pub struct NodeClaimSpec {
    /// Taints applied to the NodeClaim's node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub taints: Vec<Taint>,
    /// Taints applied at startup that something else (usually a DaemonSet) removes; pods need
    /// not tolerate them to be provisioned for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::taints")]
    pub startup_taints: Vec<Taint>,
    /// Requirements on the node's labels.
    #[schemars(schema_with = "schema::nodeclaim_requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resources the NodeClaim must be able to fit.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The provider-specific configuration the node is launched with.
    pub node_class_ref: NodeClassReference,
    /// How long a draining node may take before its pods are deleted regardless of PDBs and
    /// `karpenter.sh/do-not-disrupt`; unset, draining waits indefinitely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::DURATION))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation the node is replaced; `Never` disables expiry.
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = patterns::DURATION_OR_NEVER))]
    pub expire_after: NillableDuration,
}

/// The resource requests a NodeClaim must satisfy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// The minimum resources required for the NodeClaim to launch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::resource_list")]
    pub requests: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    /// Whether nothing is requested.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// A reference to the NodeClass object (provider-specific configuration).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// The kind of the referent, `EC2NodeClass`.
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "self != ''", "message": "kind may not be empty" }
    ]))]
    pub kind: String,
    /// The name of the referent.
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "self != ''", "message": "name may not be empty" }
    ]))]
    pub name: String,
    /// The API group of the referent, `karpenter.k8s.aws`.
    #[schemars(
        regex(pattern = patterns::GROUP),
        extend("x-kubernetes-validations" = [
            { "rule": "self != ''", "message": "group may not be empty" }
        ])
    )]
    pub group: String,
}

/// Checks a NodeClassReference: no empty field, a group without `/`.
pub fn check_node_class_ref(errors: &mut Errors, path: &FieldPath, r: &NodeClassReference) {
    errors.not_empty(&path.field("kind"), &r.kind, "kind");
    errors.not_empty(&path.field("name"), &r.name, "name");
    errors.not_empty(&path.field("group"), &r.group, "group");
    errors.pattern(&path.field("group"), r.group.as_str(), patterns::GROUP);
}

/// Checks a `terminationGracePeriod` against the CRD's pattern (stricter than Go syntax: whole
/// seconds, minutes and hours).
pub(crate) fn check_termination_grace_period(
    errors: &mut Errors,
    path: &FieldPath,
    tgp: Option<&GoDuration>,
) {
    errors.pattern(path, tgp.map(GoDuration::as_str), patterns::DURATION);
}

/// Checks an `expireAfter` against the CRD's pattern.
pub(crate) fn check_expire_after(errors: &mut Errors, path: &FieldPath, d: &NillableDuration) {
    errors.pattern(path, d.as_str(), patterns::DURATION_OR_NEVER);
}

/// The observed state of a NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The name of the corresponding Node.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The provider ID of the corresponding Node.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub provider_id: String,
    /// An identifier for the image the node runs.
    #[serde(default, rename = "imageID", skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    /// The estimated full capacity of the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::resource_list")]
    pub capacity: BTreeMap<String, Quantity>,
    /// The estimated allocatable capacity of the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::resource_list")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Vec<Condition>,
    /// The last time a pod was scheduled to or removed from the node (a pod going terminal or
    /// terminating counts as removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

impl NodeClaim {
    /// Checks the NodeClaim against the rules its CRD enforces on creation. `policy` holds the
    /// label rules, karpenter.sh's plus the cloud provider's restricted domains and well-known
    /// labels.
    pub fn validate(&self, policy: &LabelPolicy) -> Result<(), Vec<ValidationError>> {
        let mut errors = Errors::default();
        self.spec
            .check(&mut errors, &FieldPath::root("spec"), policy);
        errors.into_result()
    }

    /// Checks an update from `old`: the creation rules, and that the spec did not change.
    pub fn validate_update(
        &self,
        old: &Self,
        policy: &LabelPolicy,
    ) -> Result<(), Vec<ValidationError>> {
        let mut errors = Errors::default();
        let spec = FieldPath::root("spec");
        self.spec.check(&mut errors, &spec, policy);
        if self.spec != old.spec {
            errors.push(spec, Violation::Immutable("spec"));
        }
        errors.into_result()
    }
}

impl NodeClaimSpec {
    fn check(&self, errors: &mut Errors, path: &FieldPath, policy: &LabelPolicy) {
        check_taints(
            errors,
            &[
                (path.field("taints"), self.taints.as_slice()),
                (path.field("startupTaints"), self.startup_taints.as_slice()),
            ],
        );
        check_requirements(
            errors,
            &path.field("requirements"),
            &self.requirements,
            KeyUse::NodeClaim,
            policy,
        );
        check_node_class_ref(errors, &path.field("nodeClassRef"), &self.node_class_ref);
        check_termination_grace_period(
            errors,
            &path.field("terminationGracePeriod"),
            self.termination_grace_period.as_ref(),
        );
        check_expire_after(errors, &path.field("expireAfter"), &self.expire_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_expire_after_is_what_it_says() {
        assert_eq!(
            default_expire_after(),
            NillableDuration::parse(DEFAULT_EXPIRE_AFTER).unwrap()
        );
    }
}
