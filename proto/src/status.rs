//! The API's machine-readable errors: a gRPC status with a `google.rpc.ErrorInfo` whose reason
//! is an [`ErrorReason`] name and whose domain is [`ERROR_DOMAIN`].
//!
//! The API asks for an ErrorInfo on every error; plugins build each status with one of the
//! builders here ([`invalid_field`], [`node_class_kind_unsupported`], [`instance_not_found`],
//! [`cloud_api_error`], [`create_in_progress`], [`plugin_internal`],
//! [`insufficient_capacity`], [`node_class_not_ready`]); core reads them with
//! [`error_reason`]. A RESOURCE_EXHAUSTED without the reason is *not* insufficient capacity
//! (gRPC itself uses that code for oversized messages).

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::ERROR_DOMAIN;
use crate::v1::ErrorReason;

/// RESOURCE_EXHAUSTED with reason `ERROR_REASON_INSUFFICIENT_CAPACITY`: no offering the
/// NodeClaim allows could be launched. `metadata` may name `instance_types`, `zones` and
/// `capacity_types` (comma-separated).
pub fn insufficient_capacity(
    message: impl Into<String>,
    metadata: HashMap<String, String>,
) -> Status {
    with_reason(
        Code::ResourceExhausted,
        message,
        ErrorReason::InsufficientCapacity,
        metadata,
    )
}

/// FAILED_PRECONDITION with reason `ERROR_REASON_NODE_CLASS_NOT_READY`.
pub fn node_class_not_ready(node_class: &str, message: impl Into<String>) -> Status {
    let metadata = HashMap::from([("node_class".to_owned(), node_class.to_owned())]);
    with_reason(
        Code::FailedPrecondition,
        message,
        ErrorReason::NodeClassNotReady,
        metadata,
    )
}

/// INVALID_ARGUMENT with reason `ERROR_REASON_INVALID_FIELD`: `field` (its path in the
/// request, for example `node_claim.spec.requirements`) is missing or malformed. The message
/// is `<field>: <problem>`.
pub fn invalid_field(field: &str, problem: impl std::fmt::Display) -> Status {
    with_reason(
        Code::InvalidArgument,
        format!("{field}: {problem}"),
        ErrorReason::InvalidField,
        HashMap::from([("field".to_owned(), field.to_owned())]),
    )
}

/// INVALID_ARGUMENT with reason `ERROR_REASON_NODE_CLASS_KIND_UNSUPPORTED`: the node class is
/// of `kind` (`group/Kind`), which the plugin does not manage.
pub fn node_class_kind_unsupported(kind: &str, message: impl Into<String>) -> Status {
    with_reason(
        Code::InvalidArgument,
        message,
        ErrorReason::NodeClassKindUnsupported,
        HashMap::from([("kind".to_owned(), kind.to_owned())]),
    )
}

/// NOT_FOUND with reason `ERROR_REASON_INSTANCE_NOT_FOUND`. `key` is `provider_id` or
/// `node_claim` (the name, when the request named no provider ID), `value` what it was.
pub fn instance_not_found(key: &str, value: &str, message: impl Into<String>) -> Status {
    with_reason(
        Code::NotFound,
        message,
        ErrorReason::InstanceNotFound,
        HashMap::from([(key.to_owned(), value.to_owned())]),
    )
}

/// `code` (UNAVAILABLE, PERMISSION_DENIED, RESOURCE_EXHAUSTED or INTERNAL) with reason
/// `ERROR_REASON_CLOUD_API_ERROR`: the cloud's API failed, with its own error code when it
/// gave one.
pub fn cloud_api_error(code: Code, cloud_code: Option<&str>, message: impl Into<String>) -> Status {
    let metadata = cloud_code
        .filter(|c| !c.is_empty())
        .map(|c| HashMap::from([("cloud_code".to_owned(), c.to_owned())]))
        .unwrap_or_default();
    with_reason(code, message, ErrorReason::CloudApiError, metadata)
}

/// ABORTED with reason `ERROR_REASON_CREATE_IN_PROGRESS`: another Create for `node_claim` is
/// running.
pub fn create_in_progress(node_claim: &str) -> Status {
    with_reason(
        Code::Aborted,
        format!("a Create for NodeClaim {node_claim} is already in progress"),
        ErrorReason::CreateInProgress,
        HashMap::from([("node_claim".to_owned(), node_claim.to_owned())]),
    )
}

/// `code` (INTERNAL, or FAILED_PRECONDITION for a plugin that is misconfigured) with reason
/// `ERROR_REASON_PLUGIN_INTERNAL`: a failure of the plugin itself.
pub fn plugin_internal(code: Code, message: impl Into<String>) -> Status {
    with_reason(code, message, ErrorReason::PluginInternal, HashMap::new())
}

/// Whether `status` carries an ErrorInfo of this API's domain, as the API asks of every error.
pub fn has_error_info(status: &Status) -> bool {
    status
        .get_details_error_info()
        .is_some_and(|info| info.domain == ERROR_DOMAIN && !info.reason.is_empty())
}

/// A status of `code` carrying an ErrorInfo with `reason` in this API's domain.
pub fn with_reason(
    code: Code,
    message: impl Into<String>,
    reason: ErrorReason,
    metadata: HashMap<String, String>,
) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason.as_str_name(), ERROR_DOMAIN, metadata),
    )
}

/// The API error reason a status carries, if it carries one of this API's domain that this
/// version knows. A reason from another domain, or one newer than this crate, is `None`.
pub fn error_reason(status: &Status) -> Option<ErrorReason> {
    let info = status.get_details_error_info()?;
    if info.domain != ERROR_DOMAIN {
        return None;
    }
    ErrorReason::from_str_name(&info.reason).filter(|reason| *reason != ErrorReason::Unspecified)
}

/// The ErrorInfo metadata `key` of a status of this API's domain (`field` of an
/// `ERROR_REASON_INVALID_FIELD`, for example).
pub fn error_metadata(status: &Status, key: &str) -> Option<String> {
    let info = status.get_details_error_info()?;
    if info.domain != ERROR_DOMAIN {
        return None;
    }
    info.metadata.get(key).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_survive_the_wire_encoding() {
        let status = insufficient_capacity(
            "InsufficientInstanceCapacity for m5.large in us-east-1a",
            HashMap::from([("zones".to_owned(), "us-east-1a".to_owned())]),
        );
        // The wire round trip is covered by the serve tests; here the details themselves.
        let received = status;
        assert_eq!(received.code(), Code::ResourceExhausted);
        assert_eq!(
            error_reason(&received),
            Some(ErrorReason::InsufficientCapacity)
        );
        assert_eq!(
            received
                .get_details_error_info()
                .map(|i| i.metadata["zones"].clone()),
            Some("us-east-1a".into())
        );
        assert_eq!(
            error_metadata(&received, "zones").as_deref(),
            Some("us-east-1a")
        );

        let status = node_class_not_ready("default", "no subnet matches subnetSelectorTerms");
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(error_reason(&status), Some(ErrorReason::NodeClassNotReady));
    }

    #[test]
    fn every_builder_attaches_its_reason_and_metadata() {
        let cases = [
            (
                invalid_field("node_claim.name", "must not be empty"),
                Code::InvalidArgument,
                ErrorReason::InvalidField,
                ("field", "node_claim.name"),
            ),
            (
                node_class_kind_unsupported("example.com/Other", "not mine"),
                Code::InvalidArgument,
                ErrorReason::NodeClassKindUnsupported,
                ("kind", "example.com/Other"),
            ),
            (
                instance_not_found("provider_id", "aws:///a/i-1", "gone"),
                Code::NotFound,
                ErrorReason::InstanceNotFound,
                ("provider_id", "aws:///a/i-1"),
            ),
            (
                cloud_api_error(Code::Unavailable, Some("RequestLimitExceeded"), "slow down"),
                Code::Unavailable,
                ErrorReason::CloudApiError,
                ("cloud_code", "RequestLimitExceeded"),
            ),
            (
                create_in_progress("default-abc"),
                Code::Aborted,
                ErrorReason::CreateInProgress,
                ("node_claim", "default-abc"),
            ),
        ];
        for (status, code, reason, (key, value)) in cases {
            assert_eq!(status.code(), code);
            assert_eq!(error_reason(&status), Some(reason));
            assert!(has_error_info(&status));
            let info = status.get_details_error_info().unwrap();
            assert_eq!(info.metadata[key], value, "{reason:?}");
        }
        let internal = plugin_internal(Code::Internal, "bug");
        assert_eq!(error_reason(&internal), Some(ErrorReason::PluginInternal));
        assert!(!has_error_info(&Status::internal("bare")));
        assert_eq!(
            invalid_field("node_claim.name", "must not be empty").message(),
            "node_claim.name: must not be empty"
        );
    }

    #[test]
    fn a_bare_resource_exhausted_is_not_insufficient_capacity() {
        let oversized = Status::resource_exhausted("message length too large");
        assert_eq!(error_reason(&oversized), None);
        let foreign = Status::with_error_details(
            Code::ResourceExhausted,
            "quota",
            ErrorDetails::with_error_info(
                "ERROR_REASON_INSUFFICIENT_CAPACITY",
                "example.com",
                HashMap::new(),
            ),
        );
        assert_eq!(
            error_reason(&foreign),
            None,
            "only this API's domain counts"
        );
    }
}
