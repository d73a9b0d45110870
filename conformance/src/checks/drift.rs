//! IsDrifted on a fresh launch, on a NodeClaim stamped with a stale static hash, and without a
//! NodeClaim. (IsDrifted of a terminated instance is a lifecycle check, after Delete.)

use core_svc::controllers::hash::HashAnnotationKeys;
use core_svc::plugin::with_deadline;
use provider_sdk::v1::{ErrorReason, IsDriftedRequest, IsDriftedResponse, NodeClaim};
use tonic::{Code, Status};

use super::create::{Launched, Launches};
use super::node_class::group_kind;
use super::{Check, Recorder, capability_outcome, expect_error, metadata_key};
use crate::Outcome;
use crate::session::{Session, describe_message, describe_status};

pub(crate) const CAPABILITY: Check = Check {
    id: "is-drifted.capability",
    promise: "IsDrifted answers UNIMPLEMENTED exactly when TYPE_IS_DRIFTED is not announced",
};
pub(crate) const FRESH: Check = Check {
    id: "is-drifted.fresh-launch",
    promise: "IsDrifted of a NodeClaim just launched from the current node class answers not \
              drifted (an empty reason)",
};
pub(crate) const STALE_HASH: Check = Check {
    id: "is-drifted.stale-hash",
    promise: "IsDrifted of a NodeClaim whose node class hash annotation differs from the node \
              class's answers a one-word UpperCamelCase reason and a message saying what differs",
};
pub(crate) const REQUIRES_NODE_CLAIM: Check = Check {
    id: "is-drifted.requires-node-claim",
    promise: "IsDrifted without a NodeClaim answers INVALID_ARGUMENT, reason INVALID_FIELD, \
              `field` naming node_claim",
};

pub(crate) const CHECKS: [Check; 4] = [CAPABILITY, FRESH, STALE_HASH, REQUIRES_NODE_CLAIM];

/// The NodeClaim as core holds it after the launch: what was sent, with the labels,
/// annotations and status the plugin answered.
pub(crate) fn as_launched(launched: &Launched) -> NodeClaim {
    let mut claim = launched.sent.clone();
    for (key, value) in &launched.answer.labels {
        claim.labels.insert(key.clone(), value.clone());
    }
    for (key, value) in &launched.answer.annotations {
        claim.annotations.insert(key.clone(), value.clone());
    }
    claim.status.clone_from(&launched.answer.status);
    claim
}

pub(crate) async fn is_drifted(
    session: &mut Session,
    node_claim: Option<NodeClaim>,
) -> (String, Result<IsDriftedResponse, Status>) {
    let request = IsDriftedRequest {
        node_claim,
        node_class: session
            .node_class
            .as_ref()
            .and_then(provider_sdk::json::json_to_struct),
        node_claim_object: None,
    };
    let sent = format!(
        "IsDrifted {{ node_claim: {} }}",
        describe_message(&request.node_claim)
    );
    let result = session
        .cloud
        .is_drifted(with_deadline(request, session.deadlines.default))
        .await
        .map(tonic::Response::into_inner);
    session.note("IsDrifted", &result);
    (sent, result)
}

fn is_upper_camel_word(reason: &str) -> bool {
    reason.starts_with(|c: char| c.is_ascii_uppercase())
        && reason.chars().all(|c| c.is_ascii_alphanumeric())
}

pub(crate) async fn run(
    session: &mut Session,
    recorder: &mut Recorder,
    launches: Option<&Launches>,
) {
    let Some(launches) = launches else {
        recorder.skip(&CHECKS, "nothing launched (create.launches)");
        return;
    };
    let claim = as_launched(&launches.primary);
    let (sent, result) = is_drifted(session, Some(claim.clone())).await;
    let announced = session.capabilities.is_drifted;
    recorder.record(
        CAPABILITY,
        capability_outcome("IsDrifted", announced, &result, &sent),
    );
    if !announced {
        recorder.skip(&CHECKS[1..], "IsDrifted is not announced");
        return;
    }
    recorder.record(
        FRESH,
        match &result {
            Ok(answer) if answer.reason.is_empty() => Outcome::Pass,
            Ok(answer) => Outcome::fail(
                &sent,
                describe_message(answer),
                "an empty reason: the instance was launched from this very node class",
            ),
            Err(status) => Outcome::fail(&sent, describe_status(status), "OK, not drifted"),
        },
    );

    let outcome = match &session.static_hash {
        None => Outcome::skip("ResolveNodeClass gave no static hash"),
        Some(_) => {
            let (group, kind) = group_kind(
                session
                    .node_class
                    .as_ref()
                    .unwrap_or(&serde_json::Value::Null),
            );
            let keys = HashAnnotationKeys::node_class(&group, &kind);
            let mut stale = claim;
            stale
                .annotations
                .insert(keys.hash.clone(), "conformance-stale-hash".to_owned());
            let (sent, result) = is_drifted(session, Some(stale)).await;
            match result {
                Ok(answer) if is_upper_camel_word(&answer.reason) && !answer.message.is_empty() => {
                    Outcome::Pass
                }
                Ok(answer) => Outcome::fail(
                    sent,
                    describe_message(&answer),
                    format!(
                        "drifted: an UpperCamelCase reason (e.g. NodeClassDrift) and a message, as \
                         {} differs from the node class's",
                        keys.hash
                    ),
                ),
                Err(status) => Outcome::fail(sent, describe_status(&status), "OK, drifted"),
            }
        }
    };
    recorder.record(STALE_HASH, outcome);

    let (sent, result) = is_drifted(session, None).await;
    recorder.record(
        REQUIRES_NODE_CLAIM,
        expect_error(
            &sent,
            &result,
            Code::InvalidArgument,
            ErrorReason::InvalidField,
            metadata_key("field", |f| f.contains("node_claim"), "naming node_claim"),
        ),
    );
}
