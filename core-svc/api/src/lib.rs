//! The Karpenter v1 API (`karpenter.sh/v1`) as Rust types: [`NodePool`] and [`NodeClaim`], both
//! cluster-scoped, with the CRDs generated from them ([`crd`]) and the CRDs' rules enforced again
//! in Rust ([`NodePool::validate`], [`NodeClaim::validate`]).
//!
//! It is a crate of its own, as upstream's `sigs.k8s.io/karpenter/pkg/apis` is a package of its
//! own, because two sides need it: core-svc, and the cloud provider plugins whose API groups build
//! on it (aws-plugin's `karpenter.k8s.aws` uses its conditions, durations, validation errors,
//! schema and CRD helpers). **Invariant:** aws-plugin uses this crate, never core-svc; and this
//! crate knows nothing of any cloud.
//!
//! The JSON is upstream's: same field names, same defaults (applied by serde where the API
//! server would apply them), same required fields. Unknown fields are ignored rather than
//! rejected: the CRDs are structural, so the API server prunes fields it does not know, and a
//! manifest written for a newer upstream still loads (its extra fields are dropped, as the API
//! server would drop them).
//!
//! - [`nodepool`], [`nodeclaim`], [`requirement`]: the karpenter.sh types.
//! - [`duration`]: Go-syntax durations that keep the string the user wrote; `Never`.
//! - [`condition`]: status conditions, as every Karpenter API group writes them.
//! - [`conversion`]: the metadata of an object converted from an older API version.
//! - [`validation`]: field paths, validation errors and the checks every API group shares;
//!   [`labels`], [`patterns`]: the karpenter.sh rules, shared by the CRDs and Rust.
//! - [`schema`], [`crd`]: what the derives cannot express, and the CRDs themselves.
//! - `testing` (feature `testing`, for dev-dependencies only): the CRD-check harness and the
//!   manifest helpers the API crates' tests share, and the fuzzing harness (`testing::fuzz`)
//!   the workspace's `tests/fuzz_*.rs` share.

pub mod condition;
pub mod conversion;
pub mod crd;
pub mod duration;
pub mod hash;
pub mod labels;
pub mod nodeclaim;
pub mod nodepool;
pub mod patterns;
pub mod requirement;
pub mod schema;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validation;

pub use condition::{Condition, ConditionStatus};
pub use core_domain::labels::LabelPolicy;
pub use duration::{DurationError, GoDuration, NillableDuration};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference};
pub use nodepool::{
    Budget, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus, TemplateMetadata,
};
pub use requirement::{NodeSelectorRequirementWithMinValues, Operator};
pub use validation::{Errors, FieldPath, ValidationError, Violation};

/// The API group.
pub const GROUP: &str = core_domain::labels::KARPENTER_GROUP;
/// The API version.
pub const VERSION: &str = "v1";
