//! The API's machine-readable errors: a gRPC status with a `google.rpc.ErrorInfo` whose reason
//! is an [`ErrorReason`] name and whose domain is [`ERROR_DOMAIN`].
//!
//! Plugins build them with [`insufficient_capacity`] and [`node_class_not_ready`]; core reads
//! them with [`error_reason`]. A RESOURCE_EXHAUSTED without the reason is *not* insufficient
//! capacity (gRPC itself uses that code for oversized messages).

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

        let status = node_class_not_ready("default", "no subnet matches subnetSelectorTerms");
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(error_reason(&status), Some(ErrorReason::NodeClassNotReady));
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
