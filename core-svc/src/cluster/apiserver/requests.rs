//! The HTTP requests the adapter sends and how it reads the API server's answers: pure
//! functions, so the bodies are pinned by golden tests and the error mapping by unit tests.

use http::Request;
use karpenter_api::NodeClassReference;
use kube::core::Status;
use kube::core::params::{DeleteParams, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::{
    ClusterError, ClusterObject, DeleteOptions, FieldError, Preconditions, sort_key,
};

/// The field manager core's writes are recorded under (`managedFields`), as upstream's.
pub const FIELD_MANAGER: &str = "karpenter";

/// The request body of the `policy/v1` eviction subresource of the Pod `namespace/name`.
///
/// Built by hand: kube's `Api::evict` sends its delete options under `delete_options`, a key
/// the API server ignores (the field is `deleteOptions`), so preconditions such as the pod's
/// UID would be dropped without a word, and omits `apiVersion`/`kind`.
pub fn eviction_body(namespace: &str, name: &str, preconditions: &Preconditions) -> Value {
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    let preconditions = preconditions_json(preconditions);
    if let (Value::Object(body), Some(preconditions)) = (&mut body, preconditions) {
        body.insert(
            "deleteOptions".to_owned(),
            json!({"preconditions": preconditions}),
        );
    }
    body
}

/// `POST .../pods/NAME/eviction` for the Pod `namespace/name`.
pub fn eviction_request(
    namespace: &str,
    name: &str,
    preconditions: &Preconditions,
) -> Result<Request<Vec<u8>>, kube::core::request::Error> {
    let url = format!("/api/v1/namespaces/{namespace}/pods");
    let body = eviction_body(namespace, name, preconditions);
    kube::core::Request::new(url).create_subresource(
        "eviction",
        name,
        &PostParams::default(),
        body.to_string().into_bytes(),
    )
}

fn preconditions_json(preconditions: &Preconditions) -> Option<Value> {
    let mut map = serde_json::Map::new();
    if let Some(uid) = &preconditions.uid {
        map.insert("uid".to_owned(), Value::String(uid.clone()));
    }
    if let Some(version) = &preconditions.resource_version {
        map.insert("resourceVersion".to_owned(), Value::String(version.clone()));
    }
    (!map.is_empty()).then_some(Value::Object(map))
}

/// The API's `DeleteOptions` for ours. A negative grace period asks for the shortest graceful
/// one, as the API server reads it (1 s), never a force delete.
pub fn delete_params(options: &DeleteOptions) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: options.grace_period_seconds.map(|seconds| {
            if seconds < 0 {
                1
            } else {
                u32::try_from(seconds).unwrap_or(u32::MAX)
            }
        }),
        preconditions: (options.preconditions != Preconditions::default()).then(|| {
            kube::core::params::Preconditions {
                resource_version: options.preconditions.resource_version.clone(),
                uid: options.preconditions.uid.clone(),
            }
        }),
        ..DeleteParams::default()
    }
}

/// Patch parameters for every write core makes.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// Post parameters for every create core makes.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// What a call was about, to name it in errors.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The kind (`NodeClaim`).
    pub kind: &'a str,
    /// The namespace, for namespaced kinds.
    pub namespace: Option<&'a str>,
    /// The name.
    pub name: &'a str,
}

/// The port's error for a kube client error on `target`. Only answers the API server gave
/// become specific errors; a transport failure, a timeout or an unreadable answer is
/// [`ClusterError::Unavailable`]: nothing is known about the outcome.
pub fn cluster_error(target: Target<'_>, error: kube::Error) -> ClusterError {
    match error {
        kube::Error::Api(status) => status_error(target, &status),
        other => ClusterError::Unavailable(other.to_string()),
    }
}

/// The port's error for a failure `Status` the API server answered about `target`.
pub fn status_error(target: Target<'_>, status: &Status) -> ClusterError {
    let kind = target.kind.to_owned();
    let namespace = target.namespace.map(str::to_owned);
    let name = target.name.to_owned();
    match (status.code, status.reason.as_str()) {
        (404, _) => ClusterError::NotFound {
            kind,
            namespace,
            name,
        },
        (409, "AlreadyExists") => ClusterError::AlreadyExists {
            kind,
            namespace,
            name,
        },
        (409, _) => ClusterError::Conflict {
            kind,
            namespace,
            name,
            message: status.message.clone(),
        },
        (400 | 422, _) => ClusterError::Invalid {
            kind,
            name,
            causes: causes(status),
        },
        _ => ClusterError::Unavailable(format!(
            "{} {} {}: {} ({})",
            status.code, status.reason, target.name, status.message, target.kind
        )),
    }
}

/// The port's error for an eviction the API server refused. 429 is a PodDisruptionBudget
/// saying no for now: blocked, never a failure, and never retried here (the drain asks again
/// on its next pass). A 500 naming several budgets is the API server's refusal to choose.
pub fn eviction_error(namespace: &str, name: &str, error: kube::Error) -> ClusterError {
    let pod = format!("{namespace}/{name}");
    let target = Target {
        kind: "Pod",
        namespace: Some(namespace),
        name,
    };
    let kube::Error::Api(status) = error else {
        return cluster_error(target, error);
    };
    match status.code {
        429 => ClusterError::TooManyRequests {
            budget: budget_named_in(&status).unwrap_or_default(),
            reason: status.message.clone(),
            pod,
        },
        500 if status.message.contains("more than one PodDisruptionBudget") => {
            ClusterError::MultipleDisruptionBudgets {
                pod,
                budgets: Vec::new(),
            }
        }
        _ => status_error(target, &status),
    }
}

/// The budget a 429 names: the API server puts `DisruptionBudget` causes in the details with
/// the budget's name in the message ("The disruption budget web needs 2 healthy pods ...").
fn budget_named_in(status: &Status) -> Option<String> {
    let message = status
        .details
        .as_ref()
        .and_then(|details| {
            details
                .causes
                .iter()
                .find(|cause| cause.reason == "DisruptionBudget")
        })
        .map_or(status.message.as_str(), |cause| cause.message.as_str());
    let rest = message.split("disruption budget ").nth(1)?;
    rest.split_whitespace().next().map(str::to_owned)
}

fn causes(status: &Status) -> Vec<FieldError> {
    let causes: Vec<FieldError> = status
        .details
        .iter()
        .flat_map(|details| details.causes.iter())
        .map(|cause| FieldError {
            field: cause.field.clone(),
            message: cause.message.clone(),
        })
        .collect();
    if causes.is_empty() {
        vec![FieldError {
            field: String::new(),
            message: status.message.clone(),
        }]
    } else {
        causes
    }
}

/// The body of a create or replace of `object`: its JSON with `apiVersion` and `kind` set, which
/// the typed objects do not serialize.
pub(super) fn body<K: Serialize>(
    target: Target<'_>,
    object: &K,
    api_version: &str,
    kind: &str,
) -> Result<Vec<u8>, ClusterError> {
    let mut value = serde_json::to_value(object)
        .map_err(|error| ClusterError::invalid(target.kind, target.name, "", error.to_string()))?;
    if let Value::Object(map) = &mut value {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(api_version.to_owned()),
        );
        map.insert("kind".to_owned(), Value::String(kind.to_owned()));
    }
    serde_json::to_vec(&value)
        .map_err(|error| ClusterError::invalid(target.kind, target.name, "", error.to_string()))
}

/// The [`Target`] of a call on the `K` named `name`.
pub(super) fn typed_target<'a, K: ClusterObject>(
    namespace: Option<&'a str>,
    name: &'a str,
) -> Target<'a> {
    Target {
        kind: K::KIND,
        namespace,
        name,
    }
}

/// The request builder of `K`'s collection, in `namespace` for namespaced kinds.
pub(super) fn typed_request<K: ClusterObject>(namespace: Option<&str>) -> kube::core::Request {
    kube::core::Request::new(K::url_path(&(), namespace))
}

/// `object`'s namespace when its kind is namespaced.
pub(super) fn namespace_for<K: ClusterObject>(object: &K) -> Option<&str> {
    K::NAMESPACED.then(|| sort_key(object).0)
}

/// The [`Target`] of a call on the node class `reference` names.
pub(super) fn node_class_target(reference: &NodeClassReference) -> Target<'_> {
    Target {
        kind: &reference.kind,
        namespace: None,
        name: &reference.name,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::response::{StatusCause, StatusDetails};

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
            ..Status::failure(message, reason)
        }
    }

    #[test]
    fn given_a_uid_then_the_eviction_body_is_policy_v1_with_delete_options_preconditions() {
        let body = eviction_body("shop", "web-1", &Preconditions::uid("u-1"));
        assert_eq!(
            body,
            json!({
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "web-1", "namespace": "shop"},
                "deleteOptions": {"preconditions": {"uid": "u-1"}},
            })
        );
    }

    #[test]
    fn given_no_preconditions_then_the_eviction_body_has_no_delete_options() {
        let body = eviction_body("shop", "web-1", &Preconditions::default());
        assert_eq!(body.get("deleteOptions"), None);
    }

    #[test]
    fn given_an_eviction_then_it_is_a_post_to_the_pods_eviction_subresource() {
        let request =
            eviction_request("shop", "web-1", &Preconditions::uid("u-1")).expect("a valid request");
        assert_eq!(request.method(), http::Method::POST);
        assert_eq!(
            request.uri().path(),
            "/api/v1/namespaces/shop/pods/web-1/eviction"
        );
        let sent: Value = serde_json::from_slice(request.body()).expect("JSON");
        assert_eq!(
            sent,
            eviction_body("shop", "web-1", &Preconditions::uid("u-1"))
        );
    }

    #[test]
    fn given_delete_options_then_grace_and_preconditions_carry_over() {
        let params = delete_params(&DeleteOptions::grace_period(30).with_uid("u-2"));
        let body = serde_json::to_value(&params).expect("JSON");
        assert_eq!(
            body,
            json!({"gracePeriodSeconds": 30, "preconditions": {"uid": "u-2"}})
        );
        let negative = delete_params(&DeleteOptions::grace_period(-5));
        assert_eq!(negative.grace_period_seconds, Some(1));
        let plain = serde_json::to_value(delete_params(&DeleteOptions::default())).expect("JSON");
        assert_eq!(plain, json!({}));
    }

    fn no_details() -> StatusDetails {
        StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        }
    }

    fn target() -> Target<'static> {
        Target {
            kind: "NodeClaim",
            namespace: None,
            name: "default-abc",
        }
    }

    #[test]
    fn given_api_statuses_then_each_maps_to_the_ports_error() {
        assert!(status_error(target(), &status(404, "NotFound", "gone")).is_not_found());
        assert!(matches!(
            status_error(target(), &status(409, "AlreadyExists", "taken")),
            ClusterError::AlreadyExists { .. }
        ));
        assert!(status_error(target(), &status(409, "Conflict", "stale")).is_conflict());
        assert!(matches!(
            status_error(target(), &status(503, "ServiceUnavailable", "down")),
            ClusterError::Unavailable(_)
        ));
    }

    #[test]
    fn given_an_invalid_object_then_every_cause_names_its_field() {
        let mut invalid = status(422, "Invalid", "NodeClaim is invalid");
        invalid.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: "FieldValueInvalid".to_owned(),
                message: "must be a label key".to_owned(),
                field: "spec.requirements[0].key".to_owned(),
            }],
            ..no_details()
        });
        let ClusterError::Invalid { causes, .. } = status_error(target(), &invalid) else {
            panic!("not Invalid");
        };
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.requirements[0].key");
    }

    #[test]
    fn given_a_429_eviction_then_it_is_blocked_by_the_budget_it_names() {
        let refused = status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        let mut with_cause = refused.clone();
        with_cause.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: "DisruptionBudget".to_owned(),
                message: "The disruption budget web needs 2 healthy pods and has 2 currently"
                    .to_owned(),
                field: String::new(),
            }],
            ..no_details()
        });
        let error = eviction_error("shop", "web-1", kube::Error::Api(Box::new(with_cause)));
        let ClusterError::TooManyRequests { pod, budget, .. } = error else {
            panic!("not TooManyRequests: {error:?}");
        };
        assert_eq!((pod.as_str(), budget.as_str()), ("shop/web-1", "web"));
        assert!(matches!(
            eviction_error("shop", "web-1", kube::Error::Api(Box::new(refused))),
            ClusterError::TooManyRequests { .. }
        ));
    }
}
