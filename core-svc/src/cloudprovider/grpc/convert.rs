//! The conversions between core's types and the API's messages: requests field by field, and
//! every answer validated on the way in, a refused one naming its field. Pure; apart from the
//! client so that the retries and status codes read on their own.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use core_domain::quantity::Quantity;
use core_domain::requirements::{NodeSelectorRequirement, Requirements};
use core_domain::resources::{Quantities, ResourceName};
use core_domain::scheduler::Taint;
use karpenter_api::ConditionStatus;
use karpenter_api::patterns::is_qualified_name;
use provider_sdk::v1;

use crate::cloudprovider::{
    CloudInstance, CloudProviderError, DEFAULT_RESOLVE_AGAIN_AFTER, InstanceState, Interruption,
    InterruptionKind, LaunchedNodeClaim, NodeClaimRequest, NodeClassCondition, RepairPolicy,
    ResolvedNodeClass, Rpc,
};

use super::invalid;

/// `metadata.name` of a Kubernetes object's JSON, or empty.
pub(super) fn object_name(object: &serde_json::Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

/// A JSON object as a `google.protobuf.Struct` (numbers become doubles, as the Struct type has
/// them; Kubernetes objects keep integers beyond 2^53 in strings).
pub(super) fn json_to_struct(
    value: &serde_json::Value,
    field: &str,
) -> Result<prost_types::Struct, CloudProviderError> {
    provider_sdk::json::json_to_struct(value).ok_or_else(|| {
        CloudProviderError::InvalidRequest(format!("{field}: must be a JSON object, not {value}"))
    })
}

pub(super) fn node_claim_to_proto(
    claim: &NodeClaimRequest,
    launched: Option<&LaunchedNodeClaim>,
) -> Result<v1::NodeClaim, CloudProviderError> {
    let invalid_request = |field: &str, problem: String| {
        CloudProviderError::InvalidRequest(format!("node_claim.{field}: {problem}"))
    };
    let duration = |d: Option<Duration>, field: &str| {
        d.map(prost_types::Duration::try_from)
            .transpose()
            .map_err(|e| invalid_request(field, e.to_string()))
    };
    let requirements = claim
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| {
            requirement_to_proto(r)
                .map_err(|p| invalid_request(&format!("spec.requirements[{i}]"), p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(v1::NodeClaim {
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        labels: to_hash_map(&claim.labels),
        annotations: to_hash_map(&claim.annotations),
        creation_timestamp: claim.creation_time.map(prost_types::Timestamp::from),
        deletion_timestamp: claim.deletion_time.map(prost_types::Timestamp::from),
        spec: Some(v1::NodeClaimSpec {
            node_class_ref: Some(v1::NodeClassReference {
                group: claim.node_class_ref.group.clone(),
                kind: claim.node_class_ref.kind.clone(),
                name: claim.node_class_ref.name.clone(),
            }),
            requirements,
            resource_requests: quantities_to_proto(&claim.resource_requests),
            taints: claim.taints.iter().map(taint_to_proto).collect(),
            startup_taints: claim.startup_taints.iter().map(taint_to_proto).collect(),
            expire_after: duration(claim.expire_after, "spec.expire_after")?,
            termination_grace_period: duration(
                claim.termination_grace_period,
                "spec.termination_grace_period",
            )?,
        }),
        status: launched.map(|launched| v1::NodeClaimStatus {
            provider_id: launched.provider_id.clone(),
            image_id: launched.image_id.clone().unwrap_or_default(),
            capacity: quantities_to_proto(&launched.capacity),
            allocatable: quantities_to_proto(&launched.allocatable),
            instance_state: instance_state_to_proto(launched.state).into(),
        }),
    })
}

pub(super) fn requirement_to_proto(
    requirement: &NodeSelectorRequirement,
) -> Result<v1::Requirement, String> {
    let operator =
        v1::Operator::from_kubernetes(requirement.operator.as_str()).ok_or_else(|| {
            format!(
                "operator {:?} has no counterpart in the API",
                requirement.operator.as_str()
            )
        })?;
    let min_values = requirement
        .min_values
        .map(i32::try_from)
        .transpose()
        .map_err(|_| {
            format!(
                "min_values {:?} is beyond the API's range",
                requirement.min_values
            )
        })?;
    Ok(v1::Requirement {
        key: requirement.key.clone(),
        operator: operator.into(),
        values: requirement.values.clone(),
        min_values,
    })
}

pub(super) fn taint_to_proto(taint: &Taint) -> v1::Taint {
    // Every effect the domain knows is one of Kubernetes' three, which the API spells alike.
    let effect = v1::TaintEffect::from_kubernetes(taint.effect.as_str())
        .unwrap_or(v1::TaintEffect::Unspecified);
    v1::Taint {
        key: taint.key.clone(),
        value: taint.value.clone(),
        effect: effect.into(),
    }
}

pub(super) fn quantities_to_proto(quantities: &Quantities) -> HashMap<String, String> {
    quantities
        .iter()
        .map(|(name, quantity)| (name.as_str().to_owned(), quantity.to_string()))
        .collect()
}

pub(super) fn instance_state_to_proto(state: InstanceState) -> v1::InstanceState {
    match state {
        InstanceState::Unknown => v1::InstanceState::Unspecified,
        InstanceState::Pending => v1::InstanceState::Pending,
        InstanceState::Running => v1::InstanceState::Running,
        InstanceState::Stopping => v1::InstanceState::Stopping,
        InstanceState::Stopped => v1::InstanceState::Stopped,
        InstanceState::Terminating => v1::InstanceState::Terminating,
    }
}

pub(super) fn to_hash_map(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

// ---- Proto → core, validated ----------------------------------------------------------------
//
// Each validator returns the problem as text starting with the field's path; the caller adds
// the RPC.

pub(super) fn resolved_from_proto(
    answer: v1::ResolveNodeClassResponse,
) -> Result<ResolvedNodeClass, CloudProviderError> {
    let rpc = Rpc::ResolveNodeClass;
    let status = match answer.status {
        Some(status) => {
            provider_sdk::json::try_struct_to_json(status, "status").map_err(|e| invalid(rpc, e))?
        }
        None => serde_json::Map::new(),
    };
    if status.contains_key("conditions") {
        return Err(invalid(
            rpc,
            "status.conditions: conditions travel in the conditions field, not in status",
        ));
    }
    let mut conditions: Vec<NodeClassCondition> = Vec::with_capacity(answer.conditions.len());
    for (i, condition) in answer.conditions.into_iter().enumerate() {
        let field = format!("conditions[{i}]");
        let condition = condition_from_proto(condition, &field).map_err(|e| invalid(rpc, e))?;
        if conditions.iter().any(|c| c.type_ == condition.type_) {
            return Err(invalid(
                rpc,
                format!("{field}.type: {:?} appears twice", condition.type_),
            ));
        }
        conditions.push(condition);
    }
    let resolve_again_after = match answer.resolve_again_after {
        None => DEFAULT_RESOLVE_AGAIN_AFTER,
        Some(d) => match duration_from_proto(d) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err(invalid(
                    rpc,
                    "resolve_again_after: 0s is not a positive duration",
                ));
            }
            Err(problem) => {
                return Err(invalid(
                    rpc,
                    format!("resolve_again_after: {problem}; it must be positive"),
                ));
            }
        },
    };
    Ok(ResolvedNodeClass {
        status,
        conditions,
        static_hash: Some(answer.static_hash).filter(|h| !h.is_empty()),
        static_hash_version: answer.static_hash_version,
        resolve_again_after,
    })
}

/// A plugin's `google.protobuf.Duration`, read without overflow.
pub(super) use provider_sdk::duration::from_proto as duration_from_proto;

pub(super) fn condition_from_proto(
    condition: v1::Condition,
    field: &str,
) -> Result<NodeClassCondition, String> {
    if condition.r#type.len() > 316 || !is_qualified_name(&condition.r#type) {
        return Err(format!(
            "{field}.type: {:?} is not a condition type",
            condition.r#type
        ));
    }
    let status = condition_status_from_proto(condition.status).ok_or_else(|| {
        format!(
            "{field}.status: {} is not True, False or Unknown",
            condition.status
        )
    })?;
    if !condition.reason.is_empty() && !is_condition_reason(&condition.reason) {
        return Err(format!(
            "{field}.reason: {:?} is not a one-word UpperCamelCase reason",
            condition.reason
        ));
    }
    Ok(NodeClassCondition {
        type_: condition.r#type,
        status,
        reason: condition.reason,
        message: condition.message,
    })
}

pub(super) fn condition_status_from_proto(status: i32) -> Option<ConditionStatus> {
    match v1::ConditionStatus::try_from(status) {
        Ok(v1::ConditionStatus::True) => Some(ConditionStatus::True),
        Ok(v1::ConditionStatus::False) => Some(ConditionStatus::False),
        Ok(v1::ConditionStatus::Unknown) => Some(ConditionStatus::Unknown),
        Ok(v1::ConditionStatus::Unspecified) | Err(_) => None,
    }
}

/// A condition reason as the CRDs allow it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most
/// 1024 characters): it lands in a condition core publishes.
pub(super) fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 1024
                && first.is_ascii_alphabetic()
                && (last.is_ascii_alphanumeric() || *last == b'_')
                && bytes.iter().all(inner)
        }
        _ => false,
    }
}

pub(super) fn repair_policy_from_proto(
    policy: v1::RepairPolicy,
    index: usize,
) -> Result<RepairPolicy, String> {
    let field = format!("policies[{index}]");
    if policy.condition_type.is_empty() {
        return Err(format!("{field}.condition_type: must not be empty"));
    }
    let condition_status =
        condition_status_from_proto(policy.condition_status).ok_or_else(|| {
            format!(
                "{field}.condition_status: {} is not True, False or Unknown",
                policy.condition_status
            )
        })?;
    let toleration_duration = policy
        .toleration_duration
        .ok_or_else(|| format!("{field}.toleration_duration: missing"))
        .and_then(|d| {
            // Zero is allowed: repair as soon as the condition is seen (a node the plugin knows
            // is broken for good, say); negative durations are refused.
            duration_from_proto(d)
                .map_err(|problem| format!("{field}.toleration_duration: {problem}"))
        })?;
    Ok(RepairPolicy {
        condition_type: policy.condition_type,
        condition_status,
        toleration_duration,
    })
}

/// The fields of a NodeClaimStatus that describe an instance.
pub(super) struct InstanceStatus {
    provider_id: String,
    image_id: Option<String>,
    capacity: Quantities,
    allocatable: Quantities,
    state: InstanceState,
}

pub(super) fn instance_status_from_proto(
    status: Option<v1::NodeClaimStatus>,
    field: &str,
) -> Result<InstanceStatus, String> {
    let status = status.ok_or_else(|| format!("{field}.status: missing"))?;
    if status.provider_id.is_empty() {
        return Err(format!("{field}.status.provider_id: must not be empty"));
    }
    let state = match v1::InstanceState::try_from(status.instance_state) {
        Ok(v1::InstanceState::Unspecified) => InstanceState::Unknown,
        Ok(v1::InstanceState::Pending) => InstanceState::Pending,
        Ok(v1::InstanceState::Running) => InstanceState::Running,
        Ok(v1::InstanceState::Stopping) => InstanceState::Stopping,
        Ok(v1::InstanceState::Stopped) => InstanceState::Stopped,
        Ok(v1::InstanceState::Terminating) => InstanceState::Terminating,
        Err(_) => {
            return Err(format!(
                "{field}.status.instance_state: {} is not a known instance state",
                status.instance_state
            ));
        }
    };
    Ok(InstanceStatus {
        capacity: quantities_from_proto(&status.capacity, &format!("{field}.status.capacity"))?,
        allocatable: quantities_from_proto(
            &status.allocatable,
            &format!("{field}.status.allocatable"),
        )?,
        provider_id: status.provider_id,
        image_id: Some(status.image_id).filter(|i| !i.is_empty()),
        state,
    })
}

pub(super) fn launched_from_proto(
    claim: Option<v1::NodeClaim>,
    requested_name: &str,
) -> Result<LaunchedNodeClaim, CloudProviderError> {
    let rpc = Rpc::Create;
    let claim = claim.ok_or_else(|| invalid(rpc, "node_claim: missing"))?;
    if !claim.name.is_empty() && claim.name != requested_name {
        return Err(invalid(
            rpc,
            format!(
                "node_claim.name: {:?} is not the NodeClaim asked for, {requested_name:?}",
                claim.name
            ),
        ));
    }
    let status =
        instance_status_from_proto(claim.status, "node_claim").map_err(|e| invalid(rpc, e))?;
    let labels =
        string_map_from_proto(claim.labels, "node_claim.labels").map_err(|e| invalid(rpc, e))?;
    for key in [
        LABEL_INSTANCE_TYPE,
        LABEL_TOPOLOGY_ZONE,
        LABEL_CAPACITY_TYPE,
    ] {
        if labels.get(key).is_none_or(String::is_empty) {
            return Err(invalid(
                rpc,
                format!("node_claim.labels[{key}]: missing; the launch must resolve it"),
            ));
        }
    }
    Ok(LaunchedNodeClaim {
        provider_id: status.provider_id,
        image_id: status.image_id,
        labels,
        annotations: string_map_from_proto(claim.annotations, "node_claim.annotations")
            .map_err(|e| invalid(rpc, e))?,
        capacity: status.capacity,
        allocatable: status.allocatable,
        state: status.state,
    })
}

/// The labels a launch must resolve, which a LAUNCHED answer is checked against the request
/// on: what the scheduler chose among, and what topology and cost are computed from.
const RESOLVED_LABELS: [&str; 3] = [
    LABEL_INSTANCE_TYPE,
    LABEL_TOPOLOGY_ZONE,
    LABEL_CAPACITY_TYPE,
];

/// A LAUNCHED answer against the NodeClaim it answers: its instance type, zone and capacity
/// type must be ones the NodeClaim's requirements allow, and none may contradict a label the
/// NodeClaim carries itself (the NodeClaim's own would win, hiding what was launched). A plugin
/// that answers another NodeClaim's instance, or launched what was not asked for, is refused
/// rather than recorded. The problem starts with the field.
pub(super) fn launch_fits_request(
    launched: &LaunchedNodeClaim,
    request: &NodeClaimRequest,
) -> Result<(), String> {
    // Core built the requirements; ones it cannot read leave only the labels to check.
    let requirements =
        Requirements::from_node_selector_requirements(&request.requirements).unwrap_or_default();
    for key in RESOLVED_LABELS {
        let Some(value) = launched.labels.get(key) else {
            continue;
        };
        if let Some(own) = request.labels.get(key)
            && own != value
        {
            return Err(format!(
                "node_claim.labels[{key}]: {value:?} contradicts the NodeClaim {:?}'s own label \
                 {own:?}",
                request.name
            ));
        }
        if let Some(requirement) = requirements.get(key)
            && !requirement.has(value)
        {
            return Err(format!(
                "node_claim.labels[{key}]: {value:?} is not what the NodeClaim {:?} asked for \
                 ({requirement})",
                request.name
            ));
        }
    }
    Ok(())
}

pub(super) fn instance_from_proto(
    claim: v1::NodeClaim,
    field: &str,
) -> Result<CloudInstance, String> {
    let status = instance_status_from_proto(claim.status, field)?;
    let time = |t: Option<prost_types::Timestamp>, name: &str| {
        t.map(|t| SystemTime::try_from(t).map_err(|e| format!("{field}.{name}: {e}")))
            .transpose()
    };
    Ok(CloudInstance {
        node_claim_name: Some(claim.name).filter(|n| !n.is_empty()),
        provider_id: status.provider_id,
        image_id: status.image_id,
        labels: string_map_from_proto(claim.labels, &format!("{field}.labels"))?,
        capacity: status.capacity,
        allocatable: status.allocatable,
        creation_time: time(claim.creation_timestamp, "creation_timestamp")?,
        deletion_time: time(claim.deletion_timestamp, "deletion_timestamp")?,
        state: status.state,
    })
}

pub(super) fn string_map_from_proto(
    map: HashMap<String, String>,
    field: &str,
) -> Result<BTreeMap<String, String>, String> {
    if map.contains_key("") {
        return Err(format!("{field}: a key is empty"));
    }
    Ok(map.into_iter().collect())
}

pub(super) fn quantities_from_proto(
    map: &HashMap<String, String>,
    field: &str,
) -> Result<Quantities, String> {
    let mut entries: Vec<(&String, &String)> = map.iter().collect();
    // Sorted so that an answer with two bad entries is always refused for the same one.
    entries.sort();
    let mut quantities = Quantities::new();
    for (name, text) in entries {
        if name.is_empty() {
            return Err(format!("{field}: a resource name is empty"));
        }
        let quantity = Quantity::parse(text).map_err(|e| format!("{field}[{name}]: {e}"))?;
        if quantity.is_negative() {
            return Err(format!("{field}[{name}]: {text} is negative"));
        }
        quantities.insert(ResourceName::new(name), quantity);
    }
    Ok(quantities)
}

/// A notice of a WatchInterruptions batch, checked: an id, a known kind, a provider ID.
pub(super) fn interruption_from_proto(
    notice: v1::InterruptionNotice,
    field: &str,
) -> Result<Interruption, String> {
    if notice.event_id.is_empty() {
        return Err(format!("{field}.event_id: empty"));
    }
    if notice.provider_id.is_empty() {
        return Err(format!("{field}.provider_id: empty"));
    }
    let kind = match v1::InterruptionKind::try_from(notice.kind) {
        Ok(v1::InterruptionKind::SpotInterruption) => InterruptionKind::SpotInterruption,
        Ok(v1::InterruptionKind::RebalanceRecommendation) => {
            InterruptionKind::RebalanceRecommendation
        }
        Ok(v1::InterruptionKind::ScheduledChange) => InterruptionKind::ScheduledChange,
        Ok(v1::InterruptionKind::Stopping) => InterruptionKind::Stopping,
        Ok(v1::InterruptionKind::Terminating) => InterruptionKind::Terminating,
        Ok(v1::InterruptionKind::CapacityReservationInterruption) => {
            InterruptionKind::CapacityReservationInterruption
        }
        Ok(v1::InterruptionKind::Unspecified) | Err(_) => {
            return Err(format!(
                "{field}.kind: {} is not a kind this core knows",
                notice.kind
            ));
        }
    };
    let time = |t: Option<prost_types::Timestamp>, name: &str| {
        t.map(|t| SystemTime::try_from(t).map_err(|e| format!("{field}.{name}: {e}")))
            .transpose()
    };
    Ok(Interruption {
        event_id: notice.event_id,
        kind,
        provider_id: notice.provider_id,
        time: time(notice.time, "time")?,
        deadline: time(notice.deadline, "deadline")?,
        message: notice.message,
    })
}
