//! The API server's `Status` answers: the body of a failure (or a bare success), the port's
//! errors as the codes and reasons the API server gives them, and the JSON response around a body.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use core_svc::cluster::ClusterError;
use serde_json::{Value, json};

pub(super) fn status_body(code: u16, reason: &str, message: &str, causes: Vec<Value>) -> Value {
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

pub(super) fn respond(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn error_response(error: &ClusterError) -> Response {
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

pub(super) fn bad_request(message: &str) -> Response {
    respond(400, &status_body(400, "BadRequest", message, Vec::new()))
}

pub(super) fn not_found(message: &str) -> Response {
    respond(404, &status_body(404, "NotFound", message, Vec::new()))
}
