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
    #[error("insufficient capacity: {why}")]
    InsufficientCapacity {
        /// Which step left nothing, or what CreateFleet said.
        why: String,
        /// The offerings that were wanted or tried.
        tried: Tried,
    },
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
            Self::InsufficientCapacity { tried, .. } => {
                status::insufficient_capacity(message, tried.metadata())
            }
            Self::NodeClassNotReady {
                node_class,
                message,
            } => status::node_class_not_ready(node_class, message.clone()),
            Self::InProgress(name) => status::create_in_progress(name),
            Self::NotManaged(_) | Self::Misconfigured(_) => {
                status::plugin_internal(tonic::Code::FailedPrecondition, message)
            }
            // A capacity error for the whole call rather than per offering: AWS named none.
            Self::Aws(AwsError::InsufficientCapacity { .. }) => {
                status::insufficient_capacity(message, HashMap::new())
            }
            Self::Aws(aws) => crate::provider::aws_status(aws, message),
        }
    }
}

/// The offerings an insufficient-capacity answer names, as the API's ErrorInfo metadata
/// `instance_types`, `zones` and `capacity_types` (comma-separated; an empty set is left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tried {
    /// Instance type names.
    pub instance_types: BTreeSet<String>,
    /// Zone names.
    pub zones: BTreeSet<String>,
    /// `on-demand`, `spot`, `reserved`.
    pub capacity_types: BTreeSet<String>,
}

impl Tried {
    /// What a launch plan tried: its options' types and zones, and its capacity type.
    pub(super) fn plan(plan: &Plan) -> Self {
        Tried {
            instance_types: plan
                .options
                .iter()
                .map(|o| o.instance_type.clone())
                .collect(),
            zones: plan.options.iter().map(|o| o.zone.clone()).collect(),
            capacity_types: BTreeSet::from([plan.capacity_type.as_str().to_owned()]),
        }
    }

    /// What a NodeClaim asked for: the values of its `In` requirements on the instance type,
    /// the zone and the capacity type.
    pub(super) fn asked(requirements: &core_domain::requirements::Requirements) -> Self {
        let values = |key: &str| -> BTreeSet<String> {
            requirements
                .get(key)
                .filter(|r| r.operator() == core_domain::requirements::Operator::In)
                .map(|r| r.values().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        Tried {
            instance_types: values(LABEL_INSTANCE_TYPE),
            zones: values(LABEL_TOPOLOGY_ZONE),
            capacity_types: values(LABEL_CAPACITY_TYPE),
        }
    }

    /// The ErrorInfo metadata.
    pub fn metadata(&self) -> HashMap<String, String> {
        [
            ("instance_types", &self.instance_types),
            ("zones", &self.zones),
            ("capacity_types", &self.capacity_types),
        ]
        .into_iter()
        .filter(|(_, values)| !values.is_empty())
        .map(|(key, values)| {
            let joined: Vec<&str> = values.iter().map(String::as_str).collect();
            (key.to_owned(), joined.join(","))
        })
        .collect()
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
