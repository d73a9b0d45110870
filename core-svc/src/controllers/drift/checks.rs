//! The drift checks, pure: static drift (the NodePool's hash), requirements drift (the
//! NodeClaim's labels against the NodePool's requirements), a vanished instance type, and the
//! conditions a verdict leaves on a NodeClaim. The controller ([`super`]) decides when to ask
//! which, and asks the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use core_domain::instance_type::InstanceType;
use core_domain::labels::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE,
};
use core_domain::requirements::{
    CompatibilityError, NodeSelectorRequirement, Requirement, Requirements,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::CONDITION_DRIFTED;
use karpenter_api::{Condition, ConditionStatus, NodeClaim, NodePool, condition};

use crate::cloudprovider::{CloudInstance, CloudProviderError, DriftReason};
use crate::controllers::hash::HashAnnotationKeys;
use crate::controllers::interruption::{
    ANNOTATION_REBALANCE_AS_DRIFT, ANNOTATION_REBALANCE_RECOMMENDED,
};
use crate::events::Reason;
use crate::objects::name_of;

/// The NodePool's template changed (static drift).
pub const REASON_NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
/// The NodeClaim's labels no longer satisfy the NodePool's requirements.
pub const REASON_REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
/// The NodeClaim's instance type, or any offering of it matching the NodeClaim, is gone.
pub const REASON_INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
/// The cloud recommended rebalancing the spot instance, and the NodePool treats that as drift.
pub const REASON_REBALANCE_RECOMMENDATION: &str = "RebalanceRecommendation";

fn drift(reason: &str, message: String) -> DriftReason {
    DriftReason {
        reason: reason.to_owned(),
        message,
    }
}

/// Static drift, then requirements drift, then a rebalance recommendation the NodePool treats
/// as drift, of a NodeClaim from its NodePool: the checks that need no plugin (upstream
/// `areStaticFieldsDrifted`, `areRequirementsDrifted`; the last is this project's).
pub fn drift_of(node_claim: &NodeClaim, node_pool: &NodePool) -> Option<DriftReason> {
    static_drift(node_claim, node_pool)
        .or_else(|| requirements_drift(node_claim, node_pool))
        .or_else(|| rebalance_drift(node_claim, node_pool))
}

/// `RebalanceRecommendation` when the cloud recommended rebalancing the NodeClaim's spot
/// instance ([`ANNOTATION_REBALANCE_RECOMMENDED`]) and its NodePool opted in to treat that as
/// drift ([`ANNOTATION_REBALANCE_AS_DRIFT`]): the node is replaced under the NodePool's
/// budgets before its capacity is reclaimed.
pub fn rebalance_drift(node_claim: &NodeClaim, node_pool: &NodePool) -> Option<DriftReason> {
    let opted_in = node_pool
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REBALANCE_AS_DRIFT))
        .is_some_and(|v| v == "true");
    let recommended = node_claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REBALANCE_RECOMMENDED))?;
    opted_in.then(|| {
        drift(
            REASON_REBALANCE_RECOMMENDATION,
            format!(
                "the cloud recommended rebalancing its spot instance at {recommended}, and \
                 NodePool {} treats that as drift ({ANNOTATION_REBALANCE_AS_DRIFT})",
                name_of(node_pool)
            ),
        )
    })
}

/// `NodePoolDrifted` when all four hash annotations are present, the versions are equal and
/// the hashes differ. Missing annotations or different versions decide nothing: the hash
/// controller re-stamps such NodeClaims instead.
pub fn static_drift(node_claim: &NodeClaim, node_pool: &NodePool) -> Option<DriftReason> {
    let keys = HashAnnotationKeys::node_pool();
    let (Some(pool_hash), Some(pool_version)) = keys.read(&node_pool.metadata) else {
        return None;
    };
    let (Some(claim_hash), Some(claim_version)) = keys.read(&node_claim.metadata) else {
        return None;
    };
    (pool_version == claim_version && pool_hash != claim_hash).then(|| {
        drift(
            REASON_NODEPOOL_DRIFTED,
            format!(
                "the template of NodePool {} changed: its hash is {pool_hash}, the NodeClaim's \
                 is {claim_hash} (hash version {pool_version})",
                name_of(node_pool),
            ),
        )
    })
}

/// `RequirementsDrifted` when the NodeClaim's labels are not compatible with the NodePool's
/// requirements (upstream `NewLabelRequirements(labels).Compatible(nodePoolRequirements)`):
/// each key the NodePool requires must be labelled unless it is only required absent, and the
/// label's value must satisfy the requirement. Requirements the domain refuses decide nothing.
pub fn requirements_drift(node_claim: &NodeClaim, node_pool: &NodePool) -> Option<DriftReason> {
    let requirements = node_pool_requirements(node_pool)?;
    let labels = node_claim.metadata.labels.clone().unwrap_or_default();
    let error = requirements.matches_labels(&labels).err()?;
    let why = match error {
        CompatibilityError::UndefinedLabel { key, .. } => {
            let requirement = requirements
                .get(&key)
                .map_or_else(|| key.clone(), ToString::to_string);
            format!("it has no label {key}, which the requirement {requirement} needs")
        }
        CompatibilityError::Conflicts(conflicts) => conflicts
            .iter()
            .map(|conflict| {
                let value = labels.get(&conflict.key).map_or("", String::as_str);
                format!(
                    "its label {}={value} does not satisfy the requirement {}",
                    conflict.key, conflict.incoming
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    };
    Some(drift(
        REASON_REQUIREMENTS_DRIFTED,
        format!(
            "the NodeClaim no longer matches the requirements of NodePool {}: {why}",
            name_of(node_pool)
        ),
    ))
}

fn node_pool_requirements(node_pool: &NodePool) -> Option<Requirements> {
    let api = &node_pool.spec.template.spec.requirements;
    let domain: Vec<NodeSelectorRequirement> = api
        .iter()
        .map(|requirement| NodeSelectorRequirement {
            key: requirement.key.clone(),
            operator: requirement.operator,
            values: requirement.values.clone(),
            // minValues constrains launches, not whether a launched node still matches.
            min_values: None,
        })
        .collect();
    match Requirements::from_node_selector_requirements(&domain) {
        Ok(requirements) => Some(requirements),
        Err(error) => {
            tracing::warn!(
                node_pool = name_of(node_pool),
                %error,
                "the NodePool's requirements are invalid; requirements drift not checked"
            );
            None
        }
    }
}

/// What Get says of the instance the plugin just called drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriftConfirmation {
    /// The instance is the NodeClaim's (or the plugin has no Get): the verdict stands.
    Confirmed,
    /// The plugin judged an instance it does not have, or one it launched for another
    /// NodeClaim: the verdict is refused and drift left unchanged. What contradicts what.
    Refused(String),
    /// Get failed: unknown, drift left unchanged this pass.
    Unknown,
}

/// Reads Get's answer about `provider_id`, the instance of NodeClaim `node_claim`, which the
/// plugin's IsDrifted called drifted for `drift`: a replacement is only ever started for an
/// instance the plugin has. Pure.
pub fn drift_confirmation(
    node_claim: &str,
    provider_id: &str,
    drift: &DriftReason,
    answer: &Result<Option<CloudInstance>, CloudProviderError>,
) -> DriftConfirmation {
    match answer {
        Err(CloudProviderError::Unsupported { .. }) => DriftConfirmation::Confirmed,
        Err(_) => DriftConfirmation::Unknown,
        Ok(None) => DriftConfirmation::Refused(format!(
            "IsDrifted answer: reason: {:?} about NodeClaim {node_claim:?}, whose instance \
             {provider_id} Get does not find: the plugin judged an instance it does not have; \
             drift left unchanged",
            drift.reason
        )),
        Ok(Some(instance)) => match instance.node_claim_name.as_deref() {
            Some(other) if other != node_claim => DriftConfirmation::Refused(format!(
                "IsDrifted answer: reason: {:?} about NodeClaim {node_claim:?}, whose instance \
                 {provider_id} Get says was launched for NodeClaim {other:?}; drift left \
                 unchanged",
                drift.reason
            )),
            _ => DriftConfirmation::Confirmed,
        },
    }
}

/// `InstanceTypeNotFound` when a NodeClaim with `labels` cannot be found in `catalogue`: no
/// instance-type label, a type the catalogue lacks, or no offering of it (available or not)
/// compatible with the labels. A `reserved` NodeClaim is also matched by on-demand offerings,
/// so that a reservation that ended does not drift its nodes (upstream). `None` for an empty
/// catalogue: that is a plugin failing, not every type gone.
pub fn instance_type_drift(
    labels: &BTreeMap<String, String>,
    catalogue: &[Arc<InstanceType>],
    node_pool: &str,
) -> Option<DriftReason> {
    if catalogue.is_empty() {
        return None;
    }
    let Some(name) = labels.get(LABEL_INSTANCE_TYPE) else {
        return Some(drift(
            REASON_INSTANCE_TYPE_NOT_FOUND,
            format!("the NodeClaim has no {LABEL_INSTANCE_TYPE} label"),
        ));
    };
    let Some(instance_type) = catalogue.iter().find(|t| t.name() == name) else {
        return Some(drift(
            REASON_INSTANCE_TYPE_NOT_FOUND,
            format!("instance type {name} is no longer offered for NodePool {node_pool}"),
        ));
    };
    let mut requirements = Requirements::from_labels(labels);
    if labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) == Some(CAPACITY_TYPE_RESERVED) {
        requirements.remove(LABEL_CAPACITY_TYPE);
        requirements.add(Requirement::in_values(
            LABEL_CAPACITY_TYPE,
            [CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_ON_DEMAND],
        ));
    }
    let offered = instance_type
        .offerings()
        .iter()
        .any(|offering| offering.is_compatible(&requirements));
    (!offered).then(|| {
        let label = |key: &str| labels.get(key).map_or("unset", String::as_str);
        drift(
            REASON_INSTANCE_TYPE_NOT_FOUND,
            format!(
                "instance type {name} has no offering in zone {} with capacity type {} any more",
                label(core_domain::labels::LABEL_TOPOLOGY_ZONE),
                label(LABEL_CAPACITY_TYPE),
            ),
        )
    })
}

/// What a pass concluded about one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Drifted, for this reason.
    Drifted(DriftReason),
    /// Not drifted: the condition goes.
    NotDrifted,
    /// Unknown: the condition stays as it is.
    Unknown,
}

/// The conditions a NodeClaim should carry after `verdict`, and the event it calls for;
/// `None` when nothing changes. The transition time moves only when the status does.
pub fn drifted_conditions(
    conditions: &[Condition],
    verdict: &Verdict,
    now: Timestamp,
) -> Option<(Vec<Condition>, Option<Reason>)> {
    let current = condition::find(conditions, CONDITION_DRIFTED);
    match verdict {
        Verdict::Unknown => None,
        Verdict::NotDrifted => {
            let current = current?;
            let remaining = conditions
                .iter()
                .filter(|c| c.type_ != CONDITION_DRIFTED)
                .cloned()
                .collect();
            let event = (current.status == ConditionStatus::True).then_some(Reason::DriftCleared);
            Some((remaining, event))
        }
        Verdict::Drifted(reason) => {
            let was = current.filter(|c| c.status == ConditionStatus::True);
            let newly = was.is_none_or(|c| c.reason.as_deref() != Some(reason.reason.as_str()));
            let message = if reason.message.is_empty() {
                format!("the cloud provider reports {}", reason.reason)
            } else {
                reason.message.clone()
            };
            let mut updated = conditions.to_vec();
            let changed = condition::set(
                &mut updated,
                CONDITION_DRIFTED,
                ConditionStatus::True,
                &reason.reason,
                &message,
                Time(now),
            );
            changed.then(|| (updated, newly.then_some(Reason::NodeClaimDrifted)))
        }
    }
}
