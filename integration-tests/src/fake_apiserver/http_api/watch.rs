//! Watches: the history's events after a `resourceVersion`, bookmarks, `410 Expired` past
//! the history, and streaming lists (`sendInitialEvents`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Shared;
use super::status::status_body;
use crate::fake_apiserver::selectors::Selectors;

/// How often an idle watch gets a bookmark.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

pub(super) fn is_watch(query: &HashMap<String, String>) -> bool {
    matches!(query.get("watch").map(String::as_str), Some("true" | "1"))
}

/// A watch. With `sendInitialEvents=true` (client-go's streaming list, which kubectl's
/// `delete --wait` uses), it starts as the API server's does: an `ADDED` event per object
/// selected now, then a bookmark annotated `k8s.io/initial-events-end`, then the changes after
/// that state; a client waits for that bookmark and would wait for ever without it.
pub(super) async fn watch(
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
