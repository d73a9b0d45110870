//! The writes that take more than one call: creations (on either store), the typed kinds'
//! patches by media type (a JSON patch is a read then a replace) and evictions; and what a
//! write carries (its JSON body, its media type, delete options and preconditions).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use core_svc::cluster::{Cluster, ClusterError, DeleteOptions, Preconditions};
use serde_json::Value;

use super::Shared;
use super::status::{bad_request, error_response, respond, status_body};
use crate::fake_apiserver::resources::{self, Backend, Op, Resource};
use crate::fake_apiserver::store::{PlainCall, stamp};

pub(super) fn parse_body(body: &Bytes) -> Result<Value, String> {
    serde_json::from_slice(body)
        .map_err(|error| format!("the request body is not valid JSON: {error}"))
}

pub(super) async fn created(
    state: &Shared,
    resource: &Resource,
    index: usize,
    namespace: Option<&str>,
    name: &str,
    object: Value,
) -> Response {
    let answer = if resource.backend == Backend::Plain {
        state.plain_call(index, namespace, name, PlainCall::Create(object))
    } else {
        resources::call(
            &state.cluster,
            resource,
            namespace,
            name,
            Op::Create(object),
        )
        .await
    };
    match answer {
        Ok(Some(mut object)) => {
            stamp(resource, &mut object, None);
            respond(201, &object)
        }
        Ok(None) => respond(201, &status_body(201, "", "", Vec::new())),
        Err(error) => error_response(&error),
    }
}

/// The request's media type: its `Content-Type` without parameters (`; charset=...`).
pub(super) fn media_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
}

pub(super) async fn patch_call(
    state: &Shared,
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
    status: bool,
    media_type: &str,
    patch: &Value,
) -> resources::Answer {
    match media_type {
        // Strategic merge patches are merge patches for every field this server stores
        // (its lists are replaced whole, as a merge patch does).
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let op = if status {
                Op::MergePatchStatus(patch)
            } else {
                Op::MergePatch(patch)
            };
            resources::call(&state.cluster, resource, namespace, name, op).await
        }
        "application/json-patch+json" => {
            let current =
                resources::call(&state.cluster, resource, namespace, name, Op::Get).await?;
            let mut object = current.unwrap_or(Value::Null);
            let operations: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ClusterError::invalid(&resource.kind, name, "", e.to_string()))?;
            json_patch::patch(&mut object, &operations)
                .map_err(|e| ClusterError::invalid(&resource.kind, name, "", e.to_string()))?;
            // Applied to the version just read: a concurrent write in between is a conflict.
            let op = if status {
                Op::ReplaceStatus(object)
            } else {
                Op::Replace(object)
            };
            resources::call(&state.cluster, resource, namespace, name, op).await
        }
        other => Err(ClusterError::invalid(
            &resource.kind,
            name,
            "",
            format!(
                "unsupported patch type {other:?} (merge, strategic merge and JSON patches are)"
            ),
        )),
    }
}

pub(super) fn delete_options(body: &Value, query: &HashMap<String, String>) -> DeleteOptions {
    let grace_period_seconds = body
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| query.get("gracePeriodSeconds").and_then(|v| v.parse().ok()));
    DeleteOptions {
        grace_period_seconds,
        preconditions: preconditions(body.get("preconditions")),
    }
}

pub(super) fn preconditions(value: Option<&Value>) -> Preconditions {
    let field = |name: &str| {
        value
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Preconditions {
        uid: field("uid"),
        resource_version: field("resourceVersion"),
    }
}

pub(super) async fn evict(state: &Shared, namespace: &str, name: &str, body: &Bytes) -> Response {
    state
        .evictions
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let eviction = match parse_body(body) {
        Ok(eviction) => eviction,
        Err(message) => return bad_request(&message),
    };
    if eviction.get("kind").and_then(Value::as_str) != Some("Eviction") {
        return bad_request("the body of an eviction must be an Eviction (policy/v1)");
    }
    let preconditions = preconditions(eviction.pointer("/deleteOptions/preconditions"));
    match state.cluster.evict(namespace, name, &preconditions).await {
        Ok(()) => respond(201, &status_body(201, "", "", Vec::new())),
        Err(error) => error_response(&error),
    }
}
