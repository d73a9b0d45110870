//! The EC2NodeClass API (`karpenter.k8s.aws/v1`, cluster-scoped) as Rust types, the CRD
//! generated from them ([`crd`]), and the CRD's rules enforced again in Rust
//! ([`EC2NodeClass::validate`]).
//!
//! The JSON is upstream's: same field names, same defaults (applied by serde where the API
//! server would apply them), same required fields. Unknown fields are ignored rather than
//! rejected, as the API server prunes them from structural CRDs; the exception is
//! `spec.kubelet`, which keeps unknown keys as upstream's newest CRD does.
//!
//! Only what is EC2NodeClass's own lives here. What every Karpenter API group shares (status
//! conditions, field paths and validation errors, schema and CRD helpers) is the `karpenter-api`
//! crate's, as upstream's AWS provider imports `sigs.k8s.io/karpenter/pkg/apis`; the plugin
//! depends on that crate, never on core-svc.
//!
//! - [`ec2nodeclass`], [`kubelet`], [`status`]: the types.
//! - [`validation`], [`patterns`]: EC2NodeClass's rules, shared by the CRD and Rust.
//! - [`crd`]: the CRD.

pub mod crd;
pub mod ec2nodeclass;
pub mod kubelet;
pub mod patterns;
pub mod status;
pub mod validation;

pub use ec2nodeclass::{
    AMIFamily, AMISelectorTerm, BlockDevice, BlockDeviceMapping, CapacityReservationSelectorTerm,
    EC2NodeClass, EC2NodeClassSpec, InstanceStorePolicy, MetadataOptions,
    SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
pub use karpenter_api::{Condition, ConditionStatus};
pub use kubelet::KubeletConfiguration;
pub use status::EC2NodeClassStatus;
pub use validation::{FieldPath, ValidationError, Violation};

/// The API group.
pub const GROUP: &str = crate::labels::AWS_GROUP;
/// The API version.
pub const VERSION: &str = "v1";
