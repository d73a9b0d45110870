//! Why an instance call failed, and the gRPC status each failure is answered with (per the
//! proto's tables).

use super::*;

/// Why an instance call failed. [`InstanceError::to_status`] is its gRPC status per the
/// proto's tables.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The request is malformed; `field` is its path in the request.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The field's path (`node_claim.spec.requirements`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No offering the NodeClaim allows could be launched.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The node class is not ready.
    #[error("{message}")]
    NodeClassNotReady {
        /// The node class's name.
        node_class: String,
        /// Why, for people.
        message: String,
    },
    /// Another Create for the same NodeClaim is running.
    #[error("a Create for NodeClaim {0} is already in progress")]
    InProgress(String),
    /// The instance is not this cluster's to terminate.
    #[error("{0}")]
    NotManaged(String),
    /// The plugin's own configuration keeps it from launching (no cluster name, no price
    /// table, an unusable CA bundle).
    #[error("the plugin cannot launch: {0}")]
    Misconfigured(String),
    /// An AWS call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl InstanceError {
    pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The gRPC status, as the proto's tables say: INVALID_ARGUMENT naming the field;
    /// RESOURCE_EXHAUSTED with `ERROR_REASON_INSUFFICIENT_CAPACITY`; FAILED_PRECONDITION with
    /// `ERROR_REASON_NODE_CLASS_NOT_READY`; ABORTED for a Create already in progress; for AWS
    /// errors UNAVAILABLE (throttled, unreachable), PERMISSION_DENIED (unauthorized), otherwise
    /// INTERNAL, always with AWS's error code in the message.
    pub fn to_status(&self) -> tonic::Status {
        use provider_sdk::status;
        let message = self.to_string();
        match self {
            Self::InvalidArgument { field, message } => status::invalid_field(field, message),
            Self::InsufficientCapacity(_) => status::insufficient_capacity(message, HashMap::new()),
            Self::NodeClassNotReady {
                node_class,
                message,
            } => status::node_class_not_ready(node_class, message.clone()),
            Self::InProgress(name) => status::create_in_progress(name),
            Self::NotManaged(_) | Self::Misconfigured(_) => {
                status::plugin_internal(tonic::Code::FailedPrecondition, message)
            }
            Self::Aws(AwsError::InsufficientCapacity { .. }) => {
                status::insufficient_capacity(message, HashMap::new())
            }
            Self::Aws(aws) => crate::provider::aws_status(aws, message),
        }
    }
}

impl From<InstanceTypeError> for InstanceError {
    fn from(error: InstanceTypeError) -> Self {
        match error {
            InstanceTypeError::Ec2(aws) => Self::Aws(aws),
            InstanceTypeError::InvalidNodeClass { field, message } => {
                Self::invalid(format!("node_class.{field}"), message)
            }
            InstanceTypeError::NoPriceTable(why) => {
                Self::Misconfigured(format!("no on-demand prices: {why}"))
            }
        }
    }
}

pub(super) fn bootstrap_error(error: BootstrapError) -> InstanceError {
    let message = error.to_string();
    match error {
        BootstrapError::InvalidMime { .. }
        | BootstrapError::BoundaryInUserData
        | BootstrapError::InvalidToml { .. } => {
            InstanceError::invalid("node_class.spec.userData", message)
        }
        BootstrapError::Kubelet(_) => InstanceError::invalid("node_class.spec.kubelet", message),
        BootstrapError::InvalidCaBundle(_) | BootstrapError::MissingClusterCidr => {
            InstanceError::Misconfigured(message)
        }
    }
}
