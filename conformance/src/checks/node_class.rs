//! Node classes: the kinds the plugin manages, ResolveNodeClass of a valid, an unreadable
//! and a foreign-kind object, and ConvertNodeClass of a current and an unknown kind. Afterwards the session holds the node class as core would send
//! it: the object with its published status and hash annotations.

use core_svc::apis::ConditionStatus;
use core_svc::cloudprovider::grpc::answers;
use core_svc::controllers::hash::HashAnnotationKeys;
use core_svc::controllers::nodeclass::{Resolution, desired_status};
use core_svc::plugin::{validate_node_classes, with_deadline};
use kube::core::DynamicObject;
use provider_sdk::json::json_to_struct;
use provider_sdk::v1::{
    ConvertNodeClassRequest, ConvertNodeClassResponse, ErrorReason, GetSupportedNodeClassesRequest,
    NodeClassKind, ResolveNodeClassRequest, ResolveNodeClassResponse, convert_node_class_request,
};
use serde_json::{Value, json};
use tonic::{Code, Status};

use super::{Check, Recorder, capability_outcome, expect_error, metadata_key};
use crate::Outcome;
use crate::session::{Session, SessionError, describe_message, describe_status};

pub(crate) const SUPPORTED: Check = Check {
    id: "node-classes.supported",
    promise: "GetSupportedNodeClasses names at least one kind, each with group, version and \
              kind, none twice",
};
pub(crate) const RESOLVE_CAPABILITY: Check = Check {
    id: "node-classes.resolve-capability",
    promise: "ResolveNodeClass answers UNIMPLEMENTED exactly when TYPE_RESOLVE_NODE_CLASS is not \
              announced",
};
pub(crate) const RESOLVE_VALID: Check = Check {
    id: "node-classes.resolve-valid",
    promise: "ResolveNodeClass of a valid node class answers conditions that are all True, a \
              status without `conditions`, a hash version with a hash, and core accepts it",
};
pub(crate) const RESOLVE_STABLE: Check = Check {
    id: "node-classes.resolve-stable",
    promise: "ResolveNodeClass of an unchanged node class answers the same static hash and status",
};
pub(crate) const RESOLVE_INVALID: Check = Check {
    id: "node-classes.resolve-invalid",
    promise: "ResolveNodeClass of an object it cannot read answers INVALID_ARGUMENT, reason \
              INVALID_FIELD, metadata `field` naming the spec",
};
pub(crate) const RESOLVE_UNKNOWN_KIND: Check = Check {
    id: "node-classes.resolve-unknown-kind",
    promise: "ResolveNodeClass of a kind it does not manage answers INVALID_ARGUMENT, reason \
              NODE_CLASS_KIND_UNSUPPORTED, metadata `kind`",
};

pub(crate) const CONVERT_CAPABILITY: Check = Check {
    id: "node-classes.convert-capability",
    promise: "ConvertNodeClass answers UNIMPLEMENTED exactly when TYPE_CONVERT_NODE_CLASS is not \
              announced",
};
pub(crate) const CONVERT_CURRENT: Check = Check {
    id: "node-classes.convert-current",
    promise: "ConvertNodeClass of a current node class answers `known` with an object of the \
              same apiVersion, kind and name",
};
pub(crate) const CONVERT_UNKNOWN_KIND: Check = Check {
    id: "node-classes.convert-unknown-kind",
    promise: "ConvertNodeClass of a kind it does not convert answers OK with `known` false, so \
              core passes the object through",
};

pub(crate) const CHECKS: [Check; 9] = [
    SUPPORTED,
    CONVERT_CAPABILITY,
    CONVERT_CURRENT,
    CONVERT_UNKNOWN_KIND,
    RESOLVE_CAPABILITY,
    RESOLVE_VALID,
    RESOLVE_STABLE,
    RESOLVE_INVALID,
    RESOLVE_UNKNOWN_KIND,
];

/// The group and kind of a node class object.
pub(crate) fn group_kind(object: &Value) -> (String, String) {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    (group.to_owned(), kind.to_owned())
}

/// The object's `metadata.name`.
pub(crate) fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The node class to test with: the one given, which must be of a kind the plugin manages, or
/// an empty one of the default kind.
fn node_class_to_use(
    given: Option<&Value>,
    kinds: &[NodeClassKind],
) -> Result<Option<Value>, SessionError> {
    match given {
        Some(object) => {
            if !object.is_object() || name_of(object).is_empty() {
                return Err(SessionError::NodeClass(
                    "must be an object with apiVersion, kind and metadata.name".to_owned(),
                ));
            }
            let (group, kind) = group_kind(object);
            if !kinds.is_empty() && !kinds.iter().any(|k| k.group == group && k.kind == kind) {
                return Err(SessionError::NodeClass(format!(
                    "{group}/{kind} is not a kind the plugin manages ({})",
                    kinds
                        .iter()
                        .map(|k| format!("{}/{}", k.group, k.kind))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            Ok(Some(object.clone()))
        }
        None => Ok(kinds.first().map(|kind| {
            json!({
                "apiVersion": format!("{}/{}", kind.group, kind.version),
                "kind": kind.kind,
                "metadata": {"name": "conformance"},
                "spec": {},
            })
        })),
    }
}

fn resolve_request(object: &Value) -> ResolveNodeClassRequest {
    ResolveNodeClassRequest {
        node_class: provider_sdk::json::json_to_struct(object),
    }
}

async fn resolve(
    session: &mut Session,
    object: &Value,
) -> Result<ResolveNodeClassResponse, Status> {
    let result = session
        .cloud
        .resolve_node_class(with_deadline(
            resolve_request(object),
            session.deadlines.default,
        ))
        .await
        .map(tonic::Response::into_inner);
    session.note("ResolveNodeClass", &result);
    result
}

/// The node class as core publishes it: status and conditions from the resolution, the hash
/// annotations stamped.
fn published(object: &Value, resolution: Resolution<'_>) -> Value {
    let Ok(dynamic) = serde_json::from_value::<DynamicObject>(object.clone()) else {
        return object.clone();
    };
    let mut published = object.clone();
    published["status"] = desired_status(&dynamic, resolution, jiff::Timestamp::now());
    if let Resolution::Resolved(resolved) = resolution
        && let Some(hash) = &resolved.static_hash
    {
        let (group, kind) = group_kind(object);
        let keys = HashAnnotationKeys::node_class(&group, &kind);
        published["metadata"]["annotations"][&keys.hash] = json!(hash);
        published["metadata"]["annotations"][&keys.version] = json!(resolved.static_hash_version);
    }
    published
}

/// ConvertNodeClass of the node class under test (a current object, which the plugin returns
/// as it is) and of a kind nobody converts.
async fn convert_checks(session: &mut Session, recorder: &mut Recorder, object: &Value) {
    let sent = format!("ConvertNodeClass {{ object: {object} }}");
    let current = convert(session, object).await;
    let announced = session.capabilities.convert_node_class;
    recorder.record(
        CONVERT_CAPABILITY,
        capability_outcome("ConvertNodeClass", announced, &current, &sent),
    );
    if !announced {
        recorder.skip(
            &[CONVERT_CURRENT, CONVERT_UNKNOWN_KIND],
            "ConvertNodeClass is not announced",
        );
        return;
    }
    let same = |answer: &ConvertNodeClassResponse| {
        let Some(converted) = answer
            .object
            .clone()
            .map(provider_sdk::json::struct_to_json)
        else {
            return false;
        };
        ["apiVersion", "kind"]
            .iter()
            .all(|key| converted[key] == object[key])
            && converted["metadata"]["name"] == object["metadata"]["name"]
    };
    recorder.record(
        CONVERT_CURRENT,
        match &current {
            Ok(answer) if answer.known && same(answer) => Outcome::Pass,
            Ok(answer) => Outcome::fail(
                &sent,
                describe_message(answer),
                "known, with the object of the same apiVersion, kind and name",
            ),
            Err(status) => Outcome::fail(&sent, describe_status(status), "OK with the object"),
        },
    );
    let mut foreign = object.clone();
    foreign["apiVersion"] = json!(format!("{}/v0conformance", group_kind(object).0));
    foreign["kind"] = json!("ConformanceUnknownKind");
    let sent = format!("ConvertNodeClass {{ object: {foreign} }}");
    recorder.record(
        CONVERT_UNKNOWN_KIND,
        match convert(session, &foreign).await {
            Ok(answer) if !answer.known => Outcome::Pass,
            Ok(answer) => Outcome::fail(&sent, describe_message(&answer), "`known` false"),
            Err(status) => Outcome::fail(&sent, describe_status(&status), "OK with `known` false"),
        },
    );
}

/// Calls ConvertNodeClass on `object`.
async fn convert(
    session: &mut Session,
    object: &Value,
) -> Result<ConvertNodeClassResponse, Status> {
    let request = ConvertNodeClassRequest {
        source: Some(convert_node_class_request::Source::Object(
            json_to_struct(object).unwrap_or_default(),
        )),
        ..ConvertNodeClassRequest::default()
    };
    let result = session
        .cloud
        .convert_node_class(with_deadline(request, session.deadlines.default))
        .await
        .map(tonic::Response::into_inner);
    session.note("ConvertNodeClass", &result);
    result
}

pub(crate) async fn run(
    session: &mut Session,
    recorder: &mut Recorder,
) -> Result<(), SessionError> {
    let result = session
        .cloud
        .get_supported_node_classes(with_deadline(
            GetSupportedNodeClassesRequest {},
            session.deadlines.default,
        ))
        .await
        .map(tonic::Response::into_inner);
    session.note("GetSupportedNodeClasses", &result);
    let sent = "GetSupportedNodeClasses {}";
    let outcome = match result {
        Ok(answer) => match validate_node_classes(&answer.node_classes) {
            Ok(()) => {
                session.kinds = answer.node_classes;
                Outcome::Pass
            }
            Err(error) => Outcome::fail(sent, describe_message(&answer), error.to_string()),
        },
        Err(status) => Outcome::fail(sent, describe_status(&status), "OK with the kinds"),
    };
    recorder.record(SUPPORTED, outcome);

    let Some(object) = node_class_to_use(session.config.node_class.as_ref(), &session.kinds)?
    else {
        recorder.skip(
            &CHECKS[1..],
            "no node class kind to test with (node-classes.supported)",
        );
        return Ok(());
    };

    convert_checks(session, recorder, &object).await;

    let sent = format!("ResolveNodeClass {{ node_class: {object} }}");
    let first = resolve(session, &object).await;
    let announced = session.capabilities.resolve_node_class;
    recorder.record(
        RESOLVE_CAPABILITY,
        capability_outcome("ResolveNodeClass", announced, &first, &sent),
    );
    if !announced {
        recorder.skip(
            &[
                RESOLVE_VALID,
                RESOLVE_STABLE,
                RESOLVE_INVALID,
                RESOLVE_UNKNOWN_KIND,
            ],
            "ResolveNodeClass is not announced",
        );
        session.node_class = Some(published(&object, Resolution::Unsupported));
        return Ok(());
    }

    let resolved = match &first {
        Ok(answer) => match answers::resolved(answer.clone()) {
            Ok(resolved) => {
                let not_true = resolved
                    .conditions
                    .iter()
                    .find(|c| c.status != ConditionStatus::True);
                match not_true {
                    None => {
                        recorder.record(RESOLVE_VALID, Outcome::Pass);
                        Some(resolved)
                    }
                    Some(condition) => {
                        recorder.record(
                            RESOLVE_VALID,
                            Outcome::fail(
                                &sent,
                                describe_message(answer),
                                format!(
                                    "every condition True for a valid node class (condition {} \
                                     is not; give the suite one your plugin resolves ready with \
                                     --node-class)",
                                    condition.type_
                                ),
                            ),
                        );
                        None
                    }
                }
            }
            Err(problem) => {
                recorder.record(
                    RESOLVE_VALID,
                    Outcome::fail(&sent, describe_message(answer), problem),
                );
                None
            }
        },
        Err(status) => {
            recorder.record(
                RESOLVE_VALID,
                Outcome::fail(
                    &sent,
                    describe_status(status),
                    "OK with the node class resolved",
                ),
            );
            None
        }
    };

    match (&first, &resolved) {
        (Ok(first), Some(_)) => {
            let again = resolve(session, &object).await;
            let outcome = match again {
                Ok(again)
                    if again.static_hash == first.static_hash
                        && again.static_hash_version == first.static_hash_version
                        && again.status == first.status =>
                {
                    Outcome::Pass
                }
                Ok(again) => Outcome::fail(
                    format!("{sent}, twice"),
                    format!(
                        "first {}, then {}",
                        describe_message(first),
                        describe_message(&again)
                    ),
                    "the same static hash, version and status both times",
                ),
                Err(status) => Outcome::fail(
                    format!("{sent}, twice"),
                    describe_status(&status),
                    "the same answer both times",
                ),
            };
            recorder.record(RESOLVE_STABLE, outcome);
        }
        _ => recorder.skip(&[RESOLVE_STABLE], "node-classes.resolve-valid failed"),
    }

    let mut unreadable = object.clone();
    unreadable["spec"] = json!(42);
    let result = resolve(session, &unreadable).await;
    recorder.record(
        RESOLVE_INVALID,
        expect_error(
            &format!("ResolveNodeClass {{ node_class: {unreadable} }}"),
            &result,
            Code::InvalidArgument,
            ErrorReason::InvalidField,
            metadata_key("field", |f| f.contains("spec"), "naming the spec"),
        ),
    );

    let mut foreign = object.clone();
    foreign["apiVersion"] = json!("conformance.invalid/v1");
    foreign["kind"] = json!("ConformanceUnknownKind");
    let result = resolve(session, &foreign).await;
    recorder.record(
        RESOLVE_UNKNOWN_KIND,
        expect_error(
            &format!("ResolveNodeClass {{ node_class: {foreign} }}"),
            &result,
            Code::InvalidArgument,
            ErrorReason::NodeClassKindUnsupported,
            metadata_key(
                "kind",
                |k| k.contains("ConformanceUnknownKind"),
                "naming the kind sent",
            ),
        ),
    );

    if let Some(resolved) = &resolved {
        session.static_hash = resolved
            .static_hash
            .clone()
            .map(|hash| (hash, resolved.static_hash_version.clone()));
        session.node_class = Some(published(&object, Resolution::Resolved(resolved)));
    }
    Ok(())
}
