//! Lists of a collection, whole or paged (`limit`, `continue`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use super::Shared;
use super::status::{bad_request, respond, status_body};
use crate::fake_apiserver::paging::{self, Continue};
use crate::fake_apiserver::resources::Resource;
use crate::fake_apiserver::selectors::Selectors;

/// A list, whole or one page of it (`limit`, `continue`). A first page cuts the state it
/// reads into pages and keeps it; the next pages come from that state, whatever changed since,
/// as the API server's do from etcd's revision; a token for a state no longer kept is `410
/// Expired`, which makes a client list anew.
pub(super) async fn list(
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
