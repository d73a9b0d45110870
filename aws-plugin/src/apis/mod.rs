//! The EC2NodeClass API (`karpenter.k8s.aws/v1`, cluster-scoped) as Rust types, the CRD
//! generated from them ([`crd`]), and the CRD's rules enforced again in Rust
//! ([`EC2NodeClass::validate`]).
//!
//! The JSON is upstream's: same field names, same defaults (applied by serde where the API
//! server would apply them), same required fields. Unknown fields are ignored rather than
//! rejected, as the API server prunes them from structural CRDs; the exception is
//! `spec.kubelet`, which keeps unknown keys as upstream's newest CRD does.
//!
//! - [`ec2nodeclass`], [`kubelet`], [`status`]: the types.
//! - [`validation`], [`patterns`]: the rules, shared by the CRD and Rust.
//! - [`condition`]: status conditions.
//! - [`crd`]: the CRD.

pub mod condition;
pub mod crd;
pub mod ec2nodeclass;
pub mod kubelet;
pub mod patterns;
pub mod status;
pub mod validation;

pub use condition::{Condition, ConditionStatus};
pub use ec2nodeclass::{
    AMIFamily, AMISelectorTerm, BlockDevice, BlockDeviceMapping, CapacityReservationSelectorTerm,
    EC2NodeClass, EC2NodeClassSpec, InstanceStorePolicy, MetadataOptions,
    SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
pub use kubelet::KubeletConfiguration;
pub use status::EC2NodeClassStatus;
pub use validation::{FieldPath, ValidationError, Violation};

/// The API group.
pub const GROUP: &str = "karpenter.k8s.aws";
/// The API version.
pub const VERSION: &str = "v1";
