//! What is judged last: the repair policies, the interruption stream, the cleanup of everything
//! the suite launched, and
//! the two promises every call of the run had to keep (an ErrorInfo on every error, every answer
//! within the API's deadline).

use std::collections::BTreeSet;

use core_svc::cloudprovider::grpc::answers;
use core_svc::plugin::with_deadline;
use provider_sdk::v1::{
    AckInterruptionsRequest, DeleteRequest, GetRepairPoliciesRequest, WatchInterruptionsRequest,
};
use tonic::Code;

use super::{Check, Recorder, capability_outcome};
use crate::Outcome;
use crate::session::{Session, describe_message, describe_status, error_info_problem};

pub(crate) const REPAIR_CAPABILITY: Check = Check {
    id: "repair-policies.capability",
    promise: "GetRepairPolicies answers UNIMPLEMENTED exactly when TYPE_GET_REPAIR_POLICIES is \
              not announced",
};
pub(crate) const REPAIR_WELL_FORMED: Check = Check {
    id: "repair-policies.well-formed",
    promise: "every repair policy names a condition type, a status True, False or Unknown and a \
              toleration of 0 or more, no type and status twice",
};
pub(crate) const INTERRUPTIONS_CAPABILITY: Check = Check {
    id: "interruptions.capability",
    promise: "WatchInterruptions answers UNIMPLEMENTED exactly when TYPE_WATCH_INTERRUPTIONS \
              is not announced",
};
pub(crate) const INTERRUPTIONS_ACK: Check = Check {
    id: "interruptions.ack-unknown",
    promise: "AckInterruptions of an event id never sent answers OK: acknowledging is \
              idempotent, and core acknowledges again what it sees again",
};
pub(crate) const CLEANUP: Check = Check {
    id: "cleanup.nothing-left",
    promise: "every instance the suite launched terminates on Delete, and List shows none left",
};
pub(crate) const ERROR_INFO: Check = Check {
    id: "errors.error-info",
    promise: "every error status of the run carries a google.rpc.ErrorInfo of domain \
              cloudprovider.karpenter.v1 with an ErrorReason (gRPC's own UNIMPLEMENTED, \
              UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED excepted)",
};
pub(crate) const DEADLINES: Check = Check {
    id: "errors.deadlines",
    promise: "every call of the run answered within the deadline the API documents for it",
};

/// WatchInterruptions opens (the stream is dropped at once: nothing is acknowledged, so the
/// plugin keeps whatever it had), and AckInterruptions of an id never sent is OK.
async fn interruptions(session: &mut Session, recorder: &mut Recorder) {
    let sent = "WatchInterruptions {}";
    let opened = session
        .cloud
        .watch_interruptions(with_deadline(
            WatchInterruptionsRequest {},
            session.deadlines.default,
        ))
        .await
        .map(drop);
    session.note("WatchInterruptions", &opened);
    let announced = session.capabilities.watch_interruptions;
    recorder.record(
        INTERRUPTIONS_CAPABILITY,
        capability_outcome("WatchInterruptions", announced, &opened, sent),
    );
    if !announced {
        recorder.skip(&[INTERRUPTIONS_ACK], "WatchInterruptions is not announced");
        return;
    }
    let sent = r#"AckInterruptions { event_ids: ["conformance-never-sent"] }"#;
    let acked = session
        .cloud
        .ack_interruptions(with_deadline(
            AckInterruptionsRequest {
                event_ids: vec!["conformance-never-sent".to_owned()],
            },
            session.deadlines.default,
        ))
        .await
        .map(drop);
    session.note("AckInterruptions", &acked);
    recorder.record(
        INTERRUPTIONS_ACK,
        match acked {
            Ok(()) => Outcome::Pass,
            Err(status) => Outcome::fail(sent, describe_status(&status), "OK"),
        },
    );
}

/// gRPC's own statuses, which carry no ErrorInfo.
const GRPC_OWN: [Code; 4] = [
    Code::Unimplemented,
    Code::Unavailable,
    Code::DeadlineExceeded,
    Code::Cancelled,
];

pub(crate) const CHECKS: [Check; 7] = [
    REPAIR_CAPABILITY,
    REPAIR_WELL_FORMED,
    INTERRUPTIONS_CAPABILITY,
    INTERRUPTIONS_ACK,
    CLEANUP,
    ERROR_INFO,
    DEADLINES,
];

pub(crate) async fn run(session: &mut Session, recorder: &mut Recorder) {
    let sent = "GetRepairPolicies {}";
    let result = session
        .cloud
        .get_repair_policies(with_deadline(
            GetRepairPoliciesRequest {},
            session.deadlines.default,
        ))
        .await
        .map(tonic::Response::into_inner);
    session.note("GetRepairPolicies", &result);
    let announced = session.capabilities.get_repair_policies;
    recorder.record(
        REPAIR_CAPABILITY,
        capability_outcome("GetRepairPolicies", announced, &result, sent),
    );
    let outcome = match result {
        _ if !announced => Outcome::skip("GetRepairPolicies is not announced"),
        Ok(answer) => {
            let mut seen = BTreeSet::new();
            let problem = answer.policies.iter().enumerate().find_map(|(i, policy)| {
                match answers::repair_policy(policy.clone(), i) {
                    Err(problem) => Some(problem),
                    Ok(_) if !seen.insert((&policy.condition_type, policy.condition_status)) => {
                        Some(format!(
                            "policies[{i}]: {} with that status appears twice",
                            policy.condition_type
                        ))
                    }
                    Ok(_) => None,
                }
            });
            match problem {
                None => Outcome::Pass,
                Some(problem) => Outcome::fail(sent, describe_message(&answer), problem),
            }
        }
        Err(status) => Outcome::fail(sent, describe_status(&status), "OK with the policies"),
    };
    recorder.record(REPAIR_WELL_FORMED, outcome);

    interruptions(session, recorder).await;

    recorder.record(CLEANUP, cleanup(session).await);

    let missing = session
        .errors
        .iter()
        .filter(|seen| !GRPC_OWN.contains(&seen.status.code()))
        .find_map(|seen| error_info_problem(&seen.status).map(|problem| (seen, problem)));
    recorder.record(
        ERROR_INFO,
        match missing {
            None => Outcome::Pass,
            Some((seen, problem)) => Outcome::fail(
                seen.rpc,
                describe_status(&seen.status),
                format!("an ErrorInfo: {problem}"),
            ),
        },
    );
    let exceeded: Vec<&str> = session
        .errors
        .iter()
        .filter(|seen| seen.status.code() == Code::DeadlineExceeded)
        .map(|seen| seen.rpc)
        .collect();
    recorder.record(
        DEADLINES,
        match exceeded.as_slice() {
            [] => Outcome::Pass,
            rpcs => Outcome::fail(
                format!("{rpcs:?}"),
                "DEADLINE_EXCEEDED",
                "answers within the documented deadlines (Create 2 minutes, Delete 30 seconds, \
                 GetInstanceTypes 60 seconds, every other call 15 seconds)",
            ),
        },
    );
}

/// Deletes everything this run launched, then checks List shows none of it.
async fn cleanup(session: &mut Session) -> Outcome {
    let left: Vec<(String, Option<String>)> = session
        .launched
        .iter()
        .map(|(name, id)| (name.clone(), id.clone()))
        .collect();
    let mut failures = Vec::new();
    for (name, provider_id) in left {
        let request = DeleteRequest {
            provider_id: provider_id.unwrap_or_default(),
            node_claim_name: name.clone(),
        };
        if let Err(error) = session.delete_until_gone(request).await {
            failures.push(format!("{name}: {error}"));
        }
    }
    if !failures.is_empty() {
        return Outcome::fail(
            "Delete of every NodeClaim the suite launched, until GONE",
            failures.join("; "),
            "GONE for each",
        );
    }
    if !session.capabilities.list {
        return Outcome::Pass;
    }
    let prefix = session.name("");
    match session.list_all(0).await {
        Ok(listing) => {
            let left: Vec<&str> = listing
                .node_claims
                .iter()
                .filter(|c| c.name.starts_with(&prefix))
                .map(|c| c.name.as_str())
                .collect();
            if left.is_empty() {
                Outcome::Pass
            } else {
                Outcome::fail(
                    "List, after deleting everything the suite launched",
                    format!("still listed: {left:?}"),
                    "none of the suite's NodeClaims",
                )
            }
        }
        Err(status) => Outcome::fail("List", describe_status(&status), "OK"),
    }
}
