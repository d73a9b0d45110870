//! The Karpenter v1 API (`karpenter.sh/v1`) as Rust types: [`NodePool`] and [`NodeClaim`], both
//! cluster-scoped, with the CRDs generated from them ([`crd`]) and the CRDs' rules enforced again
//! in Rust ([`NodePool::validate`], [`NodeClaim::validate`]).
//!
//! The JSON is upstream's: same field names, same defaults (applied by serde where the API
//! server would apply them), same required fields. Unknown fields are ignored rather than
//! rejected: the CRDs are structural, so the API server prunes fields it does not know, and a
//! manifest written for a newer upstream still loads (its extra fields are dropped, as the API
//! server would drop them).
//!
//! - [`nodepool`], [`nodeclaim`], [`requirement`]: the types.
//! - [`duration`]: Go-syntax durations that keep the string the user wrote; `Never`.
//! - [`condition`]: status conditions.
//! - [`validation`], [`labels`], [`patterns`]: the rules, shared by the CRDs and Rust.
//! - [`schema`], [`crd`]: what the derives cannot express, and the CRDs themselves.

pub mod condition;
pub mod crd;
pub mod duration;
pub mod labels;
pub mod nodeclaim;
pub mod nodepool;
pub mod patterns;
pub mod requirement;
pub mod schema;
pub mod validation;

pub use condition::{Condition, ConditionStatus};
pub use duration::{DurationError, GoDuration, NillableDuration};
pub use labels::RestrictedDomain;
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference};
pub use nodepool::{
    Budget, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus, TemplateMetadata,
};
pub use requirement::{NodeSelectorRequirementWithMinValues, Operator};
pub use validation::{FieldPath, ValidationError, Violation};

/// The API group.
pub const GROUP: &str = "karpenter.sh";
/// The API version.
pub const VERSION: &str = "v1";
