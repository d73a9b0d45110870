//! `EC2NodeClass.status`: what the selectors resolved to, and readiness.

use k8s_openapi::{
    api::core::v1::NodeSelectorRequirement, apimachinery::pkg::apis::meta::v1::Time,
};
use karpenter_api::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ec2nodeclass::InstanceMatchCriteria, patterns};

/// SubnetsReady: the subnet selectors matched subnets.
pub const CONDITION_SUBNETS_READY: &str = "SubnetsReady";
/// SecurityGroupsReady: the security group selectors matched security groups.
pub const CONDITION_SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
/// AMIsReady: the AMI selectors matched AMIs.
pub const CONDITION_AMIS_READY: &str = "AMIsReady";
/// InstanceProfileReady: the instance profile exists (created from `role`, or given).
pub const CONDITION_INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
/// CapacityReservationsReady: the capacity reservation selectors were resolved.
pub const CONDITION_CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
/// PlacementGroupReady: the placement group selector found its group (true without one).
pub const CONDITION_PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
/// ValidationSucceeded: the runtime validation passed.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

/// The resolved state of an EC2NodeClass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// The subnets the subnet selectors currently match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// The security groups the security group selectors currently match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    /// The capacity reservations the capacity reservation selectors currently match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    /// The AMIs the AMI selectors currently match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    /// The instance profile in use (generated from `role`, or `instanceProfile`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_profile: String,
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Subnet {
    /// The subnet ID.
    pub id: String,
    /// Its availability zone.
    pub zone: String,
    /// Its availability zone ID.
    #[serde(default, rename = "zoneID", skip_serializing_if = "String::is_empty")]
    pub zone_id: String,
}

/// A resolved security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroup {
    /// The security group ID.
    pub id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A resolved AMI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ami {
    /// The AMI ID.
    pub id: String,
    /// Whether the AMI is deprecated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// The AMI name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The instance types the AMI may run on, as requirements.
    #[schemars(schema_with = "node_selector_requirements")]
    pub requirements: Vec<NodeSelectorRequirement>,
}

fn node_selector_requirements(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "description": "A selector on a label key: the operator relates the key to the values.",
            "type": "object",
            "required": ["key", "operator"],
            "properties": {
                "key": { "description": "The label key.", "type": "string" },
                "operator": {
                    "description": "In, NotIn, Exists, DoesNotExist, Gt or Lt.",
                    "type": "string",
                },
                "values": {
                    "description": "The values.",
                    "type": "array",
                    "items": { "type": "string" },
                    "x-kubernetes-list-type": "atomic",
                },
            },
        },
    })
}

/// A resolved capacity reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// The availability zone the reservation is in.
    pub availability_zone: String,
    /// When the reservation expires and its capacity is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The reservation ID.
    #[schemars(regex(pattern = patterns::CAPACITY_RESERVATION_ID))]
    pub id: String,
    /// Which instance launches the reservation accepts.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The instance type reserved.
    pub instance_type: String,
    /// The account that owns the reservation.
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = patterns::ACCOUNT_ID))]
    pub owner_id: String,
    /// The kind of reservation.
    #[serde(default)]
    #[schemars(extend("default" = "default"))]
    pub reservation_type: CapacityReservationType,
    /// Whether the reservation is active or about to be reclaimed.
    #[serde(default)]
    #[schemars(extend("default" = "active"))]
    pub state: CapacityReservationState,
    /// Whether its owner may reclaim it (an interruptible allocation of another reservation).
    #[serde(default)]
    pub interruptible: bool,
}

/// The kind of a capacity reservation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    /// An on-demand capacity reservation.
    #[default]
    Default,
    /// A capacity block (time-bound, for ML workloads).
    CapacityBlock,
}

/// The state of a capacity reservation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    /// Usable.
    #[default]
    Active,
    /// Within EC2's reclamation window (capacity blocks only).
    Expiring,
}
