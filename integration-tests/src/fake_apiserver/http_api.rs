//! The HTTP front door: paths, methods, bodies and status codes as the API server's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use core_svc::cluster::{Cluster, ClusterError, DeleteOptions, Preconditions};
use serde_json::{Value, json};

use super::paging::{self, Continue};
use super::resources::{self, Backend, Op, Resource};
use super::selectors::Selectors;
use super::store::{PlainCall, State, stamp};

type Shared = Arc<State>;

/// How often an idle watch gets a bookmark.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

pub(crate) fn router(state: Shared) -> Router {
    Router::new().fallback(handle).with_state(state)
}

fn status_body(code: u16, reason: &str, message: &str, causes: Vec<Value>) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message,
        "reason": reason,
        "code": code,
    });
    if !causes.is_empty()
        && let Value::Object(map) = &mut body
    {
        map.insert("details".to_owned(), json!({"causes": causes}));
    }
    body
}

fn respond(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error_response(error: &ClusterError) -> Response {
    let message = error.to_string();
    let (code, reason, causes) = match error {
        ClusterError::NotFound { .. } => (404, "NotFound", Vec::new()),
        ClusterError::AlreadyExists { .. } => (409, "AlreadyExists", Vec::new()),
        ClusterError::Conflict { .. } => (409, "Conflict", Vec::new()),
        ClusterError::TooManyRequests { budget, reason, .. } => (
            429,
            "TooManyRequests",
            vec![json!({
                "reason": "DisruptionBudget",
                "message": format!("The disruption budget {budget} does not allow it: {reason}"),
            })],
        ),
        ClusterError::MultipleDisruptionBudgets { .. } => (
            500,
            "InternalError",
            Vec::new(),
        ),
        ClusterError::Invalid { causes, .. } => (
            422,
            "Invalid",
            causes
                .iter()
                .map(|cause| {
                    json!({"reason": "FieldValueInvalid", "field": cause.field, "message": cause.message})
                })
                .collect(),
        ),
        ClusterError::Unavailable(_) => (503, "ServiceUnavailable", Vec::new()),
    };
    let message = if matches!(error, ClusterError::MultipleDisruptionBudgets { .. }) {
        format!(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support. ({message})"
        )
    } else {
        message
    };
    respond(code, &status_body(code, reason, &message, causes))
}

fn bad_request(message: &str) -> Response {
    respond(400, &status_body(400, "BadRequest", message, Vec::new()))
}

fn not_found(message: &str) -> Response {
    respond(404, &status_body(404, "NotFound", message, Vec::new()))
}

/// A parsed resource path.
#[derive(Debug)]
struct Target {
    index: usize,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

async fn handle(
    AxumState(state): AxumState<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let segments: Vec<&str> = uri
        .path()
        .split('/')
        .filter(|segment| !segment.is_empty())
        .collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["version"] => {
            return respond(
                200,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "linux/amd64"}),
            );
        }
        ["healthz" | "readyz" | "livez"] => return (StatusCode::OK, "ok").into_response(),
        ["api"] => {
            return respond(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            );
        }
        ["apis"] => return respond(200, &group_list(&state.resources)),
        ["openapi", "v2"] => return respond(200, &swagger(&state.resources)),
        ["openapi", "v3"] => return respond(200, &openapi_index(&state.resources)),
        ["openapi", "v3", "api", version] => {
            return respond(200, &openapi_schemas(&state.resources, "", version));
        }
        ["openapi", "v3", "apis", group, version] => {
            return respond(200, &openapi_schemas(&state.resources, group, version));
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (group, version, rest),
        _ => return not_found(&format!("the server could not find {}", uri.path())),
    };
    if rest.is_empty() {
        return resource_list(&state.resources, group, version);
    }
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return not_found(&format!("the server could not find {}", uri.path())),
    };
    let Some(index) = state.resources.iter().position(|resource| {
        resource.group == group && resource.version == version && resource.plural == plural
    }) else {
        return not_found(&format!(
            "the server could not find the requested resource ({group}/{version} {plural})"
        ));
    };
    let target = Target {
        index,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
    };
    let response = dispatch(&state, method.clone(), target, &headers, &query, &body).await;
    // Every write is published to the watches before its answer goes out.
    if method != Method::GET {
        state.sync().await;
    }
    response
}

/// The OpenAPI v3 index kubectl reads before it validates or applies: one document per
/// group-version.
fn openapi_index(resources: &[Resource]) -> Value {
    let mut paths = serde_json::Map::new();
    for resource in resources {
        let path = if resource.group.is_empty() {
            format!("api/{}", resource.version)
        } else {
            format!("apis/{}/{}", resource.group, resource.version)
        };
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}")}),
        );
    }
    json!({"paths": paths})
}

/// The OpenAPI v2 document kubectl falls back to: every kind, as [`openapi_schemas`] has it.
fn swagger(resources: &[Resource]) -> Value {
    let mut definitions = serde_json::Map::new();
    for resource in resources {
        let document = openapi_schemas(resources, &resource.group, &resource.version);
        if let Some(Value::Object(schemas)) = document.pointer("/components/schemas") {
            definitions.extend(schemas.clone());
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "fake-apiserver", "version": "v1.33.0"},
        "paths": {},
        "definitions": definitions,
    })
}

/// A group-version's OpenAPI v3 document: each kind an object that keeps unknown fields (the
/// server's own admission checks what it stores), tagged with its group, version and kind.
fn openapi_schemas(resources: &[Resource], group: &str, version: &str) -> Value {
    let mut schemas = serde_json::Map::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        let name = if group.is_empty() {
            format!("io.k8s.api.core.{version}.{}", resource.kind)
        } else {
            format!("{group}.{version}.{}", resource.kind)
        };
        schemas.insert(
            name,
            json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [
                    {"group": group, "version": version, "kind": resource.kind}
                ],
            }),
        );
    }
    // Every write takes `fieldValidation` (it is ignored: admission checks what is stored):
    // kubectl looks for it on the kind's operations to validate on the server's side instead
    // of downloading the protobuf OpenAPI v2 document.
    let mut paths = serde_json::Map::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let collection = if resource.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", resource.plural)
        } else {
            format!("{prefix}/{}", resource.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": resource.kind});
        let operation = json!({
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "x-kubernetes-group-version-kind": gvk,
        });
        paths.insert(collection.clone(), json!({"post": operation}));
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({"put": operation, "patch": operation}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "fake-apiserver", "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn group_list(resources: &[Resource]) -> Value {
    let mut groups: Vec<(String, String)> = resources
        .iter()
        .filter(|resource| !resource.group.is_empty())
        .map(|resource| (resource.group.clone(), resource.version.clone()))
        .collect();
    groups.dedup();
    groups.sort();
    groups.dedup();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, version)| {
            let gv = format!("{group}/{version}");
            json!({
                "name": group,
                "versions": [{"groupVersion": gv, "version": version}],
                "preferredVersion": {"groupVersion": gv, "version": version},
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The short names kubectl accepts for a resource (`kubectl get deploy`), as the API server
/// and the CRDs declare them.
fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &["po"],
        ("", "nodes") => &["no"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "daemonsets") => &["ds"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        ("scheduling.k8s.io", "priorityclasses") => &["pc"],
        ("events.k8s.io", "events") => &["ev"],
        ("karpenter.k8s.aws", "ec2nodeclasses") => &["ec2nc", "ec2ncs"],
        _ => &[],
    }
}

fn resource_list(resources: &[Resource], group: &str, version: &str) -> Response {
    let mut entries = Vec::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        entries.push(json!({
            "name": resource.plural,
            "singularName": resource.kind.to_lowercase(),
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": short_names(&resource.group, &resource.plural),
        }));
        for sub in resource.subresources {
            let (kind, verbs) = if *sub == "eviction" {
                ("Eviction", json!(["create"]))
            } else {
                (resource.kind.as_str(), json!(["get", "patch", "update"]))
            };
            entries.push(json!({
                "name": format!("{}/{sub}", resource.plural),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    if entries.is_empty() {
        return not_found(&format!("no resources in {group}/{version}"));
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    respond(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}),
    )
}

fn parse_body(body: &Bytes) -> Result<Value, String> {
    serde_json::from_slice(body)
        .map_err(|error| format!("the request body is not valid JSON: {error}"))
}

async fn dispatch(
    state: &Shared,
    method: Method,
    target: Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &Bytes,
) -> Response {
    let Some(resource) = state.resources.get(target.index).cloned() else {
        return not_found("no such resource");
    };
    if resource.namespaced != target.namespace.is_some() && target.name.is_some() {
        return not_found(&format!(
            "{} is {}",
            resource.plural,
            if resource.namespaced {
                "namespaced"
            } else {
                "cluster-scoped"
            }
        ));
    }
    let namespace = target.namespace.as_deref();
    let Some(name) = target.name.clone() else {
        let selector = match Selectors::parse(
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        ) {
            Ok(selector) => selector,
            Err(message) => return bad_request(&message),
        };
        return match method {
            Method::GET if is_watch(query) => {
                watch(state, target.index, namespace, selector, query).await
            }
            Method::GET => list(state, &resource, target.index, namespace, &selector, query).await,
            Method::POST => {
                let mut object = match parse_body(body) {
                    Ok(object) => object,
                    Err(message) => return bad_request(&message),
                };
                if let (Some(namespace), Some(metadata)) = (
                    namespace,
                    object.get_mut("metadata").and_then(Value::as_object_mut),
                ) {
                    metadata
                        .entry("namespace")
                        .or_insert_with(|| Value::String(namespace.to_owned()));
                }
                let object_name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                created(
                    state,
                    &resource,
                    target.index,
                    namespace,
                    &object_name,
                    object,
                )
                .await
            }
            _ => respond(
                405,
                &status_body(
                    405,
                    "MethodNotAllowed",
                    "method not allowed on a collection",
                    Vec::new(),
                ),
            ),
        };
    };
    let subresource = target.subresource.as_deref();
    if let Some(sub) = subresource
        && !resource.subresources.contains(&sub)
    {
        return not_found(&format!("{} has no subresource {sub}", resource.plural));
    }
    if subresource == Some("eviction") {
        if method != Method::POST {
            return bad_request("the eviction subresource takes POST only");
        }
        return evict(state, namespace.unwrap_or_default(), &name, body).await;
    }
    let status = subresource == Some("status");
    if resource.backend == Backend::Plain {
        return plain(state, &method, &target, &name, status, headers, body);
    }
    let answer = match method {
        Method::GET => resources::call(&state.cluster, &resource, namespace, &name, Op::Get).await,
        Method::PUT => {
            let object = match parse_body(body) {
                Ok(object) => object,
                Err(message) => return bad_request(&message),
            };
            let op = if status {
                Op::ReplaceStatus(object)
            } else {
                Op::Replace(object)
            };
            resources::call(&state.cluster, &resource, namespace, &name, op).await
        }
        Method::PATCH => {
            let patch = match parse_body(body) {
                Ok(patch) => patch,
                Err(message) => return bad_request(&message),
            };
            let content_type = media_type(headers);
            patch_call(
                state,
                &resource,
                namespace,
                &name,
                status,
                content_type,
                &patch,
            )
            .await
        }
        Method::DELETE => {
            let options = if body.is_empty() {
                Value::Null
            } else {
                match parse_body(body) {
                    Ok(options) => options,
                    Err(message) => return bad_request(&message),
                }
            };
            let options = delete_options(&options, query);
            match resources::call(
                &state.cluster,
                &resource,
                namespace,
                &name,
                Op::Delete(options),
            )
            .await
            {
                Ok(None) => {
                    return respond(
                        200,
                        &json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success",
                            "details": {"name": name, "kind": resource.plural},
                        }),
                    );
                }
                other => other,
            }
        }
        _ => return bad_request("unsupported method"),
    };
    match answer {
        Ok(Some(mut object)) => {
            stamp(&resource, &mut object, None);
            respond(200, &object)
        }
        Ok(None) => respond(200, &status_body(200, "", "", Vec::new())),
        Err(error) => error_response(&error),
    }
}

/// A call on one object of the plain store (Leases, Events, Deployments).
fn plain(
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
fn json_patch_plain(
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

async fn created(
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
fn media_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
}

async fn patch_call(
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

fn delete_options(body: &Value, query: &HashMap<String, String>) -> DeleteOptions {
    let grace_period_seconds = body
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| query.get("gracePeriodSeconds").and_then(|v| v.parse().ok()));
    DeleteOptions {
        grace_period_seconds,
        preconditions: preconditions(body.get("preconditions")),
    }
}

fn preconditions(value: Option<&Value>) -> Preconditions {
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

async fn evict(state: &Shared, namespace: &str, name: &str, body: &Bytes) -> Response {
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

/// A list, whole or one page of it (`limit`, `continue`). A first page cuts the state it
/// reads into pages and keeps it; the next pages come from that state, whatever changed since,
/// as the API server's do from etcd's revision; a token for a state no longer kept is `410
/// Expired`, which makes a client list anew.
async fn list(
    state: &Shared,
    resource: &Resource,
    index: usize,
    namespace: Option<&str>,
    selector: &Selectors,
    query: &HashMap<String, String>,
) -> Response {
    let limit = match query.get("limit").map(|limit| limit.parse::<usize>()) {
        None => None,
        // `limit=0` is no limit, as the API server reads it.
        Some(Ok(0)) => None,
        Some(Ok(limit)) => Some(limit),
        Some(Err(_)) => return bad_request("limit must be a non-negative integer"),
    };
    let token = match query.get("continue").filter(|token| !token.is_empty()) {
        None => None,
        Some(token) => match Continue::decode(token) {
            Ok(token) => Some(token),
            Err(message) => return bad_request(&message),
        },
    };
    let (items, version) = match &token {
        Some(token) => match state.kept_list(index, token.version) {
            Some(items) => {
                state
                    .continued_lists
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (items, token.version)
            }
            None => {
                return respond(
                    410,
                    &status_body(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent \
                         list result. You can start a new list without the continue parameter.",
                        Vec::new(),
                    ),
                );
            }
        },
        None => {
            let (items, version) = state.list(index, None).await;
            (Arc::new(items), version)
        }
    };
    let after = token
        .as_ref()
        .map(|token| (token.after.0.as_str(), token.after.1.as_str()));
    let (page, next) = paging::page(&items, after, limit, |item| {
        namespace.is_none_or(|namespace| paging::key_of(item).0 == namespace)
            && selector.matches(item)
    });
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if let Some(after) = next {
        if token.is_none() {
            state.keep_list(index, version, &items);
        }
        metadata["continue"] = Value::String(Continue { version, after }.encode());
    }
    respond(
        200,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": page,
        }),
    )
}

fn is_watch(query: &HashMap<String, String>) -> bool {
    matches!(query.get("watch").map(String::as_str), Some("true" | "1"))
}

/// A watch. With `sendInitialEvents=true` (client-go's streaming list, which kubectl's
/// `delete --wait` uses), it starts as the API server's does: an `ADDED` event per object
/// selected now, then a bookmark annotated `k8s.io/initial-events-end`, then the changes after
/// that state; a client waits for that bookmark and would wait for ever without it.
async fn watch(
    state: &Shared,
    index: usize,
    namespace: Option<&str>,
    selector: Selectors,
    query: &HashMap<String, String>,
) -> Response {
    let mut from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut initial = Vec::new();
    if query.get("sendInitialEvents").map(String::as_str) == Some("true") {
        let (items, version) = state.list(index, namespace).await;
        for item in items.into_iter().filter(|item| selector.matches(item)) {
            initial.extend(
                json!({"type": "ADDED", "object": item})
                    .to_string()
                    .into_bytes(),
            );
            initial.push(b'\n');
        }
        let (kind, api_version) = state
            .resources
            .get(index)
            .map(|resource| (resource.kind.clone(), resource.api_version()))
            .unwrap_or_default();
        let bookmark = json!({"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": api_version,
            "metadata": {
                "resourceVersion": version.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }});
        initial.extend(bookmark.to_string().into_bytes());
        initial.push(b'\n');
        from = from.max(version);
    }
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(300), Duration::from_secs);
    let bookmarks = matches!(
        query.get("allowWatchBookmarks").map(String::as_str),
        Some("true")
    );
    let kind = state
        .resources
        .get(index)
        .map(|resource| (resource.kind.clone(), resource.api_version()))
        .unwrap_or_default();
    let namespace = namespace.map(str::to_owned);
    let receiver = state.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    let stream_state = WatchStream {
        state: Arc::clone(state),
        index,
        namespace,
        selector,
        initial: (!initial.is_empty()).then(|| Bytes::from(initial)),
        from,
        receiver,
        deadline,
        bookmarks,
        kind,
        done: false,
    };
    let stream = futures::stream::unfold(stream_state, |mut watch| async move {
        let chunk = watch.next_chunk().await?;
        Some((Ok::<Bytes, std::io::Error>(chunk), watch))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

struct WatchStream {
    state: Shared,
    index: usize,
    namespace: Option<String>,
    /// Events of objects it does not select are left out (unlike the API server, an object
    /// whose labels stop matching is not announced as DELETED).
    selector: Selectors,
    /// What to send before any event: the initial state of a streaming list.
    initial: Option<Bytes>,
    from: u64,
    receiver: tokio::sync::watch::Receiver<u64>,
    deadline: tokio::time::Instant,
    bookmarks: bool,
    kind: (String, String),
    done: bool,
}

impl WatchStream {
    /// The next lines to send, or `None` when the watch ends.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(initial) = self.initial.take() {
            return Some(initial);
        }
        loop {
            if self.done || tokio::time::Instant::now() >= self.deadline {
                return None;
            }
            let mut lines = Vec::new();
            {
                let history = self.state.history();
                let compacted = history.compacted.get(&self.index).copied().unwrap_or(0);
                if self.from < compacted {
                    self.done = true;
                    let status = status_body(
                        410,
                        "Expired",
                        &format!("too old resource version: {} ({compacted})", self.from),
                        Vec::new(),
                    );
                    lines.push(json!({"type": "ERROR", "object": status}));
                } else {
                    let from = self.from;
                    for event in history.events.iter().filter(|event| {
                        event.resource == self.index
                            && event.resource_version > from
                            && self
                                .namespace
                                .as_deref()
                                .is_none_or(|namespace| namespace == event.namespace)
                    }) {
                        if self.selector.matches(&event.object) {
                            lines.push(json!({"type": event.type_, "object": event.object}));
                        }
                        self.from = self.from.max(event.resource_version);
                    }
                }
            }
            if !lines.is_empty() {
                let mut chunk = Vec::new();
                for line in lines {
                    chunk.extend(line.to_string().into_bytes());
                    chunk.push(b'\n');
                }
                return Some(Bytes::from(chunk));
            }
            let wait = tokio::time::timeout_at(
                self.deadline
                    .min(tokio::time::Instant::now() + BOOKMARK_EVERY),
                self.receiver.changed(),
            )
            .await;
            match wait {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return None,
                Err(_) if self.bookmarks => {
                    let latest = self
                        .state
                        .history()
                        .latest
                        .get(&self.index)
                        .copied()
                        .unwrap_or(0)
                        .max(self.from);
                    self.from = latest;
                    let bookmark = json!({
                        "type": "BOOKMARK",
                        "object": {
                            "kind": self.kind.0,
                            "apiVersion": self.kind.1,
                            "metadata": {"resourceVersion": latest.to_string()},
                        },
                    });
                    let mut chunk = bookmark.to_string().into_bytes();
                    chunk.push(b'\n');
                    return Some(Bytes::from(chunk));
                }
                Err(_) => {}
            }
        }
    }
}
