//! Core's checks of a plugin's answers, for tools that test a plugin (the conformance runner,
//! `provider-conformance`): the same functions the client runs on every answer, so a plugin
//! that passes the runner is a plugin core accepts. Each returns the problem as text starting
//! with the field's path.

use provider_sdk::v1;

use super::convert;
use crate::cloudprovider::{
    CloudInstance, Interruption, LaunchedNodeClaim, RepairPolicy, ResolvedNodeClass,
};

/// A ResolveNodeClass answer, as core reads it.
pub fn resolved(answer: v1::ResolveNodeClassResponse) -> Result<ResolvedNodeClass, String> {
    convert::resolved_from_proto(answer).map_err(|e| e.to_string())
}

/// The NodeClaim of a LAUNCHED Create answer for the NodeClaim `requested_name`.
pub fn launched(
    claim: Option<v1::NodeClaim>,
    requested_name: &str,
) -> Result<LaunchedNodeClaim, String> {
    convert::launched_from_proto(claim, requested_name).map_err(|e| e.to_string())
}

/// One instance of a Get or List answer; `field` is its path in the answer.
pub fn instance(claim: v1::NodeClaim, field: &str) -> Result<CloudInstance, String> {
    convert::instance_from_proto(claim, field)
}

/// The `index`th policy of a GetRepairPolicies answer.
pub fn repair_policy(policy: v1::RepairPolicy, index: usize) -> Result<RepairPolicy, String> {
    convert::repair_policy_from_proto(policy, index)
}

/// One notice of a WatchInterruptions batch; `field` is its path in the batch.
pub fn interruption(notice: v1::InterruptionNotice, field: &str) -> Result<Interruption, String> {
    convert::interruption_from_proto(notice, field)
}
