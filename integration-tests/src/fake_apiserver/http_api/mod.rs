//! The HTTP front door: paths, methods, bodies and status codes as the API server's.
//!
//! This module routes a request by its path (the fixed documents, discovery, or a resource,
//! namespace, name and subresource) and dispatches it by method; `status.rs` builds the
//! `Status` answers, `discovery.rs` the discovery and OpenAPI documents, `list.rs` and
//! `watch.rs` serve a collection's reads, `writes.rs` the typed kinds' creations, patches and
//! evictions, `plain.rs` the calls on the plain store's objects.

mod discovery;
mod list;
mod plain;
mod status;
mod watch;
mod writes;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use self::discovery::{group_list, openapi_index, openapi_schemas, resource_list, swagger};
use self::list::list;
use self::plain::plain;
use self::status::{bad_request, error_response, not_found, respond, status_body};
use self::watch::{is_watch, watch};
use self::writes::{created, delete_options, evict, media_type, parse_body, patch_call};
use super::rbac::{Attributes, User};
use super::resources::{self, Backend, Op};
use super::selectors::Selectors;
use super::store::{State, stamp};

type Shared = Arc<State>;

pub(crate) fn router(state: Shared) -> Router {
    Router::new().fallback(handle).with_state(state)
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
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let Some(user) = User::authenticate(authorization) else {
        return respond(
            401,
            &status_body(401, "Unauthorized", "Unauthorized", Vec::new()),
        );
    };
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["debug", "rbac"] if user == User::Admin => {
            let report = state.rbac.report(&state.rbac_objects());
            return respond(200, &serde_json::to_value(report).unwrap_or(Value::Null));
        }
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
    let attributes = Attributes {
        verb: Attributes::verb(method.as_str(), name.is_some(), is_watch(&query)).to_owned(),
        api_group: group.to_owned(),
        resource: plural.to_owned(),
        subresource: target.subresource.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    };
    if !state
        .rbac
        .authorize(&state.rbac_objects(), &user, &attributes)
    {
        let message = attributes.forbidden_message(&user);
        tracing::warn!(%message, "request refused by RBAC");
        return respond(403, &status_body(403, "Forbidden", &message, Vec::new()));
    }
    let response = dispatch(&state, method.clone(), target, &headers, &query, &body).await;
    // Every write is published to the watches before its answer goes out.
    if method != Method::GET {
        state.sync().await;
    }
    response
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
