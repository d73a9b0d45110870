//! [`ClusterError`]: what a cluster call answers when it fails, as the API server's status
//! reasons and field causes say it.

/// One field an invalid object gets wrong, as the API server's `details.causes` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path (`spec.template.spec.requirements[0].key`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

pub(super) fn qualified(namespace: &Option<String>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

pub(super) fn joined(causes: &[FieldError]) -> String {
    causes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a cluster call failed, as the API server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// 404: no such object.
    #[error("{kind} {} not found", qualified(namespace, name))]
    NotFound {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
    },
    /// 409 on create: the name is taken.
    #[error("{kind} {} already exists", qualified(namespace, name))]
    AlreadyExists {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
    },
    /// 409: a `resourceVersion` or UID precondition does not hold; read again and retry.
    #[error("conflict on {kind} {}: {message}", qualified(namespace, name))]
    Conflict {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
        /// Which precondition failed.
        message: String,
    },
    /// 429: the eviction would violate a PodDisruptionBudget; retry later.
    #[error("cannot evict pod {pod}: {reason}")]
    TooManyRequests {
        /// The pod, `namespace/name`.
        pod: String,
        /// The PodDisruptionBudget that refuses (in the pod's namespace).
        budget: String,
        /// The API server's explanation, naming the budget and its counts.
        reason: String,
    },
    /// 500 from the eviction subresource: the pod matches several PodDisruptionBudgets, which
    /// eviction does not support; it stays refused until the budgets change.
    #[error(
        "pod {pod} has more than one PodDisruptionBudget ({}), which the eviction subresource does not support",
        budgets.join(", ")
    )]
    MultipleDisruptionBudgets {
        /// The pod, `namespace/name`.
        pod: String,
        /// The budgets that match it.
        budgets: Vec<String>,
    },
    /// 422 (or 400): the object breaks the kind's schema or rules.
    #[error("{kind} {name:?} is invalid: {}", joined(causes))]
    Invalid {
        /// The kind.
        kind: String,
        /// The object's name (empty when it had none yet).
        name: String,
        /// Each field at fault.
        causes: Vec<FieldError>,
    },
    /// The API server could not be reached or did not answer: nothing is known about the
    /// outcome, so nothing may be concluded from it.
    #[error("the API server is unavailable: {0}")]
    Unavailable(String),
}

impl ClusterError {
    /// An [`ClusterError::Invalid`] with one cause.
    pub fn invalid(
        kind: impl Into<String>,
        name: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            kind: kind.into(),
            name: name.into(),
            causes: vec![FieldError {
                field: field.into(),
                message: message.into(),
            }],
        }
    }

    /// Whether the error is a [`ClusterError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether the error is a [`ClusterError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }
}
