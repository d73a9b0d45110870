//! The errors of the AWS ports (EC2, IAM, SSM), classified once at the boundary by AWS's
//! error code, so the provider decides on a kind (not found, insufficient capacity,
//! throttled...) and still reports the code AWS sent. In the ports' own terms, like the ports:
//! turning an SDK error into one is the SDK side's job (`aws.rs`).

use std::future::Future;
use std::pin::Pin;

/// What every AWS port call returns: a future that may be sent across threads (tokio).
pub type AwsFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AwsError>> + Send + 'a>>;

/// An AWS call (EC2, IAM, SSM) failed: classified by the service's error code at the
/// boundary, with the code and message kept as AWS sent them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsError {
    /// The resource does not exist (codes containing `NotFound`, `InvalidAMIID.Unavailable`).
    #[error("EC2 resource not found: {code}: {message}")]
    NotFound {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// EC2 has no capacity for the request now; other offerings may have some.
    #[error("EC2 insufficient capacity: {code}: {message}")]
    InsufficientCapacity {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// The credentials may not make the call.
    #[error("EC2 unauthorized: {code}: {message}")]
    Unauthorized {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// Rate limited; retry later.
    #[error("EC2 throttled: {code}: {message}")]
    Throttled {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// The request is wrong.
    #[error("EC2 invalid parameter: {code}: {message}")]
    InvalidParameter {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// The resource already exists (a launch template's name).
    #[error("EC2 resource already exists: {code}: {message}")]
    AlreadyExists {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
    /// No answer from EC2 (connection refused, timeout) or one that does not parse.
    #[error("EC2 unreachable: {code}: {message}")]
    Transport {
        /// What failed (`dispatch`, `timeout`, `response`).
        code: String,
        /// The SDK's description.
        message: String,
    },
    /// Any other EC2 error.
    #[error("EC2 error: {code}: {message}")]
    Other {
        /// EC2's error code.
        code: String,
        /// EC2's message.
        message: String,
    },
}

impl AwsError {
    /// An error EC2 answered with `code`, classified.
    pub fn from_code(code: impl Into<String>, message: impl Into<String>) -> Self {
        let code = code.into();
        let message = message.into();
        match code.as_str() {
            "InsufficientInstanceCapacity"
            | "InsufficientCapacity"
            | "InsufficientHostCapacity"
            | "InsufficientReservedInstanceCapacity"
            // A targeted capacity reservation is full.
            | "ReservationCapacityExceeded"
            | "InsufficientFreeAddressesInSubnet"
            | "MaxSpotInstanceCountExceeded"
            | "MaxFleetCountExceeded"
            | "UnfulfillableCapacity"
            | "SpotMaxPriceTooLow"
            | "VcpuLimitExceeded"
            | "InstanceLimitExceeded"
            | "Unsupported" => Self::InsufficientCapacity { code, message },
            "UnauthorizedOperation"
            | "AuthFailure"
            | "AccessDenied"
            | "AccessDeniedException"
            | "OptInRequired"
            | "Blocked"
            | "PendingVerification" => Self::Unauthorized { code, message },
            "RequestLimitExceeded"
            | "Throttling"
            | "ThrottlingException"
            | "TooManyRequestsException" => Self::Throttled { code, message },
            "MissingParameter"
            | "InvalidParameter"
            | "InvalidParameterValue"
            | "InvalidParameterCombination"
            | "InvalidRequest"
            | "ValidationError"
            | "InvalidAMIID.Malformed"
            | "InvalidInstanceID.Malformed"
            | "InvalidID"
            | "InvalidLaunchTemplateName.MalformedException"
            | "InvalidInput"
            | "ValidationException"
            | "MalformedPolicyDocument" => Self::InvalidParameter { code, message },
            "InvalidLaunchTemplateName.AlreadyExistsException"
            | "InvalidGroup.Duplicate"
            | "EntityAlreadyExists"
            | "ParameterAlreadyExists" => Self::AlreadyExists { code, message },
            _ if code.contains("NotFound")
                || code == "InvalidAMIID.Unavailable"
                || code == "NoSuchEntity"
                // SQS: the query protocol's code, then the JSON protocol's.
                || code == "AWS.SimpleQueueService.NonExistentQueue"
                || code == "QueueDoesNotExist" =>
            {
                Self::NotFound { code, message }
            }
            _ => Self::Other { code, message },
        }
    }

    /// A failure with no EC2 answer to classify.
    pub fn transport(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Transport {
            code: code.into(),
            message: message.into(),
        }
    }

    /// EC2's error code.
    pub fn code(&self) -> &str {
        match self {
            Self::NotFound { code, .. }
            | Self::InsufficientCapacity { code, .. }
            | Self::Unauthorized { code, .. }
            | Self::Throttled { code, .. }
            | Self::InvalidParameter { code, .. }
            | Self::AlreadyExists { code, .. }
            | Self::Transport { code, .. }
            | Self::Other { code, .. } => code,
        }
    }

    /// EC2's message.
    pub fn message(&self) -> &str {
        match self {
            Self::NotFound { message, .. }
            | Self::InsufficientCapacity { message, .. }
            | Self::Unauthorized { message, .. }
            | Self::Throttled { message, .. }
            | Self::InvalidParameter { message, .. }
            | Self::AlreadyExists { message, .. }
            | Self::Transport { message, .. }
            | Self::Other { message, .. } => message,
        }
    }

    /// Whether the resource does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether EC2 lacks capacity for the request.
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, Self::InsufficientCapacity { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_codes_are_insufficient_capacity() {
        for code in [
            "InsufficientInstanceCapacity",
            "InsufficientCapacity",
            "MaxSpotInstanceCountExceeded",
            "UnfulfillableCapacity",
        ] {
            assert!(
                AwsError::from_code(code, "m").is_insufficient_capacity(),
                "{code}"
            );
        }
    }

    #[test]
    fn codes_classify() {
        let class = |code: &str| {
            let e = AwsError::from_code(code, "m");
            assert_eq!(e.code(), code);
            assert_eq!(e.message(), "m");
            std::mem::discriminant(&e)
        };
        let kind = |e: AwsError| std::mem::discriminant(&e);
        let s = String::new;
        assert_eq!(
            class("InvalidInstanceID.NotFound"),
            kind(AwsError::NotFound {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            class("InvalidLaunchTemplateName.NotFoundException"),
            kind(AwsError::NotFound {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            class("InvalidInstanceID.Malformed"),
            kind(AwsError::InvalidParameter {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            class("UnauthorizedOperation"),
            kind(AwsError::Unauthorized {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            class("RequestLimitExceeded"),
            kind(AwsError::Throttled {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            class("InternalError"),
            kind(AwsError::Other {
                code: s(),
                message: s()
            })
        );
        assert_eq!(
            AwsError::from_code("InvalidInstanceID.NotFound", "no i-1").to_string(),
            "EC2 resource not found: InvalidInstanceID.NotFound: no i-1"
        );
    }
}
