//! Calls on one object of the plain store (Leases, Events, Deployments): get, replace,
//! merge and JSON patches, delete.

use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use core_svc::cluster::ClusterError;
use serde_json::Value;

use super::status::{bad_request, error_response, respond, status_body};
use super::writes::{media_type, parse_body};
use super::{Shared, Target};
use crate::fake_apiserver::resources;
use crate::fake_apiserver::store::PlainCall;

/// A call on one object of the plain store (Leases, Events, Deployments).
pub(super) fn plain(
    state: &Shared,
    method: &Method,
    target: &Target,
    name: &str,
    status: bool,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let namespace = target.namespace.as_deref();
    let kind = state
        .resources
        .get(target.index)
        .map_or("", |resource| resource.kind.as_str());
    let call = |call: PlainCall<'_>| state.plain_call(target.index, namespace, name, call);
    let answer = match *method {
        Method::GET => call(PlainCall::Get),
        Method::PUT => match parse_body(body) {
            Ok(object) if status => call(PlainCall::ReplaceStatus(object)),
            Ok(object) => call(PlainCall::Replace(object)),
            Err(message) => return bad_request(&message),
        },
        Method::PATCH => {
            let patch = match parse_body(body) {
                Ok(patch) => patch,
                Err(message) => return bad_request(&message),
            };
            let content_type = media_type(headers);
            match content_type {
                // As for the typed kinds: this server's lists are replaced whole.
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                    if status {
                        call(PlainCall::MergePatchStatus(&patch))
                    } else {
                        call(PlainCall::MergePatch(&patch))
                    }
                }
                "application/json-patch+json" => {
                    json_patch_plain(state, target.index, namespace, (kind, name), status, &patch)
                }
                other => Err(ClusterError::invalid(
                    kind,
                    name,
                    "",
                    format!(
                        "unsupported patch type {other:?} (merge, strategic merge and JSON patches are)"
                    ),
                )),
            }
        }
        Method::DELETE => call(PlainCall::Delete),
        _ => return bad_request("unsupported method"),
    };
    match answer {
        Ok(Some(object)) => respond(200, &object),
        Ok(None) => respond(200, &status_body(200, "", "", Vec::new())),
        Err(error) => error_response(&error),
    }
}

/// A JSON patch of a plain object: applied to the version just read and written back with
/// that version, so a concurrent write in between is a conflict.
pub(super) fn json_patch_plain(
    state: &Shared,
    index: usize,
    namespace: Option<&str>,
    (kind, name): (&str, &str),
    status: bool,
    patch: &Value,
) -> resources::Answer {
    let mut object = state
        .plain_call(index, namespace, name, PlainCall::Get)?
        .unwrap_or(Value::Null);
    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ClusterError::invalid(kind, name, "", e.to_string()))?;
    json_patch::patch(&mut object, &operations)
        .map_err(|e| ClusterError::invalid(kind, name, "", e.to_string()))?;
    let call = if status {
        PlainCall::ReplaceStatus(object)
    } else {
        PlainCall::Replace(object)
    };
    state.plain_call(index, namespace, name, call)
}
