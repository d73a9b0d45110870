//! Get and List of what Create made, Delete (by provider ID, again, by name alone), and what
//! the API promises about an instance once it is gone.

use std::collections::BTreeSet;

use core_svc::cloudprovider::grpc::answers;
use core_svc::plugin::with_deadline;
use provider_sdk::v1::{DeleteRequest, DeletionState, ErrorReason, GetRequest, GetResponse};
use tonic::{Code, Status};

use super::create::Launches;
use super::drift::{as_launched, is_drifted};
use super::{Check, Recorder, capability_outcome, expect_error, metadata_key};
use crate::Outcome;
use crate::session::{Session, describe_message, describe_status};

pub(crate) const GET_CAPABILITY: Check = Check {
    id: "get.capability",
    promise: "Get answers UNIMPLEMENTED exactly when TYPE_GET is not announced",
};
pub(crate) const GET_LAUNCHED: Check = Check {
    id: "get.launched",
    promise: "Get of a launched instance answers it: its provider ID and NodeClaim name, a \
              status core accepts",
};
pub(crate) const LIST_CAPABILITY: Check = Check {
    id: "list.capability",
    promise: "List answers UNIMPLEMENTED exactly when TYPE_LIST is not announced",
};
pub(crate) const LIST_LAUNCHED: Check = Check {
    id: "list.launched",
    promise: "List includes every instance the suite launched, each once, each with a status \
              core accepts",
};
pub(crate) const LIST_PAGES: Check = Check {
    id: "list.pages",
    promise: "List with page_size 1 answers pages of at most one instance whose tokens lead \
              through the same instances",
};
pub(crate) const DELETE_TERMINATES: Check = Check {
    id: "delete.terminates",
    promise: "Delete answers TERMINATING until the instance is gone, then GONE (or NOT_FOUND)",
};
pub(crate) const DELETE_IDEMPOTENT: Check = Check {
    id: "delete.idempotent",
    promise: "Delete of an instance already gone answers GONE or NOT_FOUND",
};
pub(crate) const DELETE_BY_NAME: Check = Check {
    id: "delete.by-name",
    promise: "Delete with an empty provider ID terminates what was launched for the NodeClaim \
              name",
};
pub(crate) const DELETE_REQUIRES_NAME: Check = Check {
    id: "delete.requires-name",
    promise: "Delete without a NodeClaim name answers INVALID_ARGUMENT, reason INVALID_FIELD, \
              `field` naming node_claim_name",
};
pub(crate) const GET_GONE: Check = Check {
    id: "get.gone",
    promise: "Get of a terminated instance answers NOT_FOUND, reason INSTANCE_NOT_FOUND, \
              `provider_id` in the metadata",
};
pub(crate) const LIST_GONE: Check = Check {
    id: "list.gone",
    promise: "List leaves out terminated instances",
};
pub(crate) const IS_DRIFTED_GONE: Check = Check {
    id: "is-drifted.gone",
    promise: "IsDrifted of a terminated instance answers NOT_FOUND (never \"not drifted\"), \
              reason INSTANCE_NOT_FOUND",
};

pub(crate) const CHECKS: [Check; 12] = [
    GET_CAPABILITY,
    GET_LAUNCHED,
    LIST_CAPABILITY,
    LIST_LAUNCHED,
    LIST_PAGES,
    DELETE_TERMINATES,
    DELETE_IDEMPOTENT,
    DELETE_BY_NAME,
    DELETE_REQUIRES_NAME,
    GET_GONE,
    LIST_GONE,
    IS_DRIFTED_GONE,
];

async fn get(session: &mut Session, provider_id: &str) -> (String, Result<GetResponse, Status>) {
    let request = GetRequest {
        provider_id: provider_id.to_owned(),
    };
    let sent = format!("Get {{ provider_id: {provider_id:?} }}");
    let result = session
        .cloud
        .get(with_deadline(request, session.deadlines.default))
        .await
        .map(tonic::Response::into_inner);
    session.note("Get", &result);
    (sent, result)
}

/// The provider IDs of this run's launches that are still alive.
fn ours(session: &Session) -> BTreeSet<String> {
    session.launched.values().flatten().cloned().collect()
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
    let primary = &launches.primary;

    let (sent, result) = get(session, &primary.provider_id).await;
    let announced = session.capabilities.get;
    recorder.record(
        GET_CAPABILITY,
        capability_outcome("Get", announced, &result, &sent),
    );
    if announced {
        let outcome = match result {
            Ok(answer) => {
                let claim = answer.node_claim.clone().unwrap_or_default();
                match answers::instance(claim.clone(), "node_claim") {
                    Err(problem) => Outcome::fail(&sent, describe_message(&answer), problem),
                    Ok(instance) if instance.provider_id != primary.provider_id => Outcome::fail(
                        &sent,
                        describe_message(&answer),
                        format!("status.provider_id {:?}", primary.provider_id),
                    ),
                    Ok(_) if !claim.name.is_empty() && claim.name != primary.sent.name => {
                        Outcome::fail(
                            &sent,
                            describe_message(&answer),
                            format!("name {:?} (or empty)", primary.sent.name),
                        )
                    }
                    Ok(_) => Outcome::Pass,
                }
            }
            Err(status) => Outcome::fail(&sent, describe_status(&status), "OK with the instance"),
        };
        recorder.record(GET_LAUNCHED, outcome);
    } else {
        recorder.skip(&[GET_LAUNCHED], "Get is not announced");
    }

    let sent = "List { page_size: 0 }, page by page";
    let listing = session.list_all(0).await;
    let announced = session.capabilities.list;
    recorder.record(
        LIST_CAPABILITY,
        capability_outcome("List", announced, &listing, sent),
    );
    if announced {
        let expected = ours(session);
        let outcome = match &listing {
            Ok(listing) => {
                let mut seen = BTreeSet::new();
                let problem = listing
                    .node_claims
                    .iter()
                    .enumerate()
                    .find_map(|(i, claim)| {
                        match answers::instance(claim.clone(), &format!("node_claims[{i}]")) {
                            Err(problem) => Some(problem),
                            Ok(instance) if !seen.insert(instance.provider_id.clone()) => {
                                Some(format!("{} is listed twice", instance.provider_id))
                            }
                            Ok(_) => None,
                        }
                    });
                let missing: Vec<&String> = expected.difference(&seen).collect();
                match problem {
                    Some(problem) => {
                        Outcome::fail(sent, describe_message(&listing.node_claims), problem)
                    }
                    None if !missing.is_empty() => Outcome::fail(
                        sent,
                        format!(
                            "{} instances; {missing:?} missing",
                            listing.node_claims.len()
                        ),
                        "every instance the suite launched",
                    ),
                    None => Outcome::Pass,
                }
            }
            Err(status) => Outcome::fail(sent, describe_status(status), "OK with the instances"),
        };
        recorder.record(LIST_LAUNCHED, outcome);
        let sent = "List { page_size: 1 }, page by page";
        let outcome = match session.list_all(1).await {
            Ok(paged) if paged.largest_page > 1 => Outcome::fail(
                sent,
                format!("a page of {} instances", paged.largest_page),
                "at most 1 instance per page",
            ),
            Ok(paged) => {
                let found: BTreeSet<String> = paged
                    .node_claims
                    .iter()
                    .filter_map(|c| c.status.as_ref().map(|s| s.provider_id.clone()))
                    .collect();
                let missing: Vec<&String> = expected.difference(&found).collect();
                if missing.is_empty() {
                    Outcome::Pass
                } else {
                    Outcome::fail(
                        sent,
                        format!("{} pages; {missing:?} missing", paged.pages),
                        "the pages lead through every instance",
                    )
                }
            }
            Err(status) => Outcome::fail(sent, describe_status(&status), "OK, page by page"),
        };
        recorder.record(LIST_PAGES, outcome);
    } else {
        recorder.skip(&[LIST_LAUNCHED, LIST_PAGES], "List is not announced");
    }

    // Delete by provider ID, until gone; then again.
    let request = DeleteRequest {
        provider_id: primary.provider_id.clone(),
        node_claim_name: primary.sent.name.clone(),
    };
    let sent = format!("Delete {}, until GONE", describe_message(&request));
    let gone = match session.delete_until_gone(request.clone()).await {
        Ok(_) => {
            recorder.record(DELETE_TERMINATES, Outcome::Pass);
            true
        }
        Err(error) => {
            recorder.record(
                DELETE_TERMINATES,
                Outcome::fail(&sent, error.to_string(), DELETE_TERMINATES.promise),
            );
            false
        }
    };
    let sent = format!("Delete {}, once more", describe_message(&request));
    let again = session
        .cloud
        .delete(with_deadline(request, session.deadlines.delete))
        .await
        .map(tonic::Response::into_inner);
    session.note("Delete", &again);
    recorder.record(
        DELETE_IDEMPOTENT,
        match again {
            _ if !gone => Outcome::skip("delete.terminates failed"),
            Ok(answer) if answer.state() == DeletionState::Gone => Outcome::Pass,
            Err(status) if status.code() == Code::NotFound => Outcome::Pass,
            Ok(answer) => Outcome::fail(&sent, describe_message(&answer), "GONE"),
            Err(status) => Outcome::fail(&sent, describe_status(&status), "GONE or NOT_FOUND"),
        },
    );

    // Delete by name alone.
    let outcome = match &launches.other {
        None => Outcome::skip("no second NodeClaim launched (create.parallel)"),
        Some(other) => {
            let request = DeleteRequest {
                provider_id: String::new(),
                node_claim_name: other.sent.name.clone(),
            };
            let sent = format!("Delete {}, until GONE", describe_message(&request));
            match session.delete_until_gone(request).await {
                Err(error) => Outcome::fail(&sent, error.to_string(), DELETE_BY_NAME.promise),
                Ok(states)
                    if !states.contains(&DeletionState::Terminating)
                        && session.capabilities.get =>
                {
                    // GONE at once: the instance must really be gone.
                    let (get_sent, result) = get(session, &other.provider_id).await;
                    match result {
                        Err(status) if status.code() == Code::NotFound => Outcome::Pass,
                        Ok(answer) => Outcome::fail(
                            format!("{sent}, then {get_sent}"),
                            format!(
                                "GONE at once, yet Get answers {}",
                                describe_message(&answer)
                            ),
                            "the instance terminated",
                        ),
                        Err(status) => Outcome::fail(
                            format!("{sent}, then {get_sent}"),
                            describe_status(&status),
                            "NOT_FOUND",
                        ),
                    }
                }
                Ok(_) => Outcome::Pass,
            }
        }
    };
    recorder.record(DELETE_BY_NAME, outcome);

    let request = DeleteRequest {
        provider_id: primary.provider_id.clone(),
        node_claim_name: String::new(),
    };
    let sent = format!("Delete {}", describe_message(&request));
    let result = session
        .cloud
        .delete(with_deadline(request, session.deadlines.delete))
        .await
        .map(tonic::Response::into_inner);
    session.note("Delete", &result);
    recorder.record(
        DELETE_REQUIRES_NAME,
        expect_error(
            &sent,
            &result,
            Code::InvalidArgument,
            ErrorReason::InvalidField,
            metadata_key(
                "field",
                |f| f.contains("node_claim_name"),
                "naming node_claim_name",
            ),
        ),
    );

    if !gone {
        recorder.skip(
            &[GET_GONE, LIST_GONE, IS_DRIFTED_GONE],
            "delete.terminates failed",
        );
        return;
    }
    if session.capabilities.get {
        let (sent, result) = get(session, &primary.provider_id).await;
        recorder.record(
            GET_GONE,
            expect_error(
                &sent,
                &result,
                Code::NotFound,
                ErrorReason::InstanceNotFound,
                metadata_key("provider_id", |id| id == primary.provider_id, "naming it"),
            ),
        );
    } else {
        recorder.skip(&[GET_GONE], "Get is not announced");
    }
    if session.capabilities.list {
        let sent = "List, page by page, after Delete";
        let outcome = match session.list_all(0).await {
            Ok(listing)
                if listing.node_claims.iter().any(|c| {
                    c.status
                        .as_ref()
                        .is_some_and(|s| s.provider_id == primary.provider_id)
                }) =>
            {
                Outcome::fail(
                    sent,
                    format!("{} is still listed", primary.provider_id),
                    "terminated instances left out",
                )
            }
            Ok(_) => Outcome::Pass,
            Err(status) => Outcome::fail(sent, describe_status(&status), "OK"),
        };
        recorder.record(LIST_GONE, outcome);
    } else {
        recorder.skip(&[LIST_GONE], "List is not announced");
    }
    if session.capabilities.is_drifted {
        let (sent, result) = is_drifted(session, Some(as_launched(primary))).await;
        recorder.record(
            IS_DRIFTED_GONE,
            expect_error(
                &sent,
                &result,
                Code::NotFound,
                ErrorReason::InstanceNotFound,
                |_| Ok(()),
            ),
        );
    } else {
        recorder.skip(&[IS_DRIFTED_GONE], "IsDrifted is not announced");
    }
}
