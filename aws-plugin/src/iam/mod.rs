//! The narrow IAM port: the instance profile calls the provider makes for an EC2NodeClass
//! that names a role (Karpenter creates and owns one instance profile per node class), in the
//! plugin's own types, with two implementations: `sdk::SdkIam` on `aws-sdk-iam` (feature
//! `aws`) and [`memory::MemoryIam`], deterministic, for the simulator and unit tests. One
//! contract suite (`contract.rs`) runs against both (the SDK one against `moto_server`).
//!
//! Boxed futures rather than `async fn`, as the EC2 port, so the provider can hold an
//! `Arc<dyn Iam>`.

pub mod memory;
#[cfg(feature = "aws")]
pub mod sdk;

#[cfg(test)]
pub(crate) mod contract;

pub use crate::aws_error::{AwsError, AwsFuture};
pub use crate::ec2::Tag;

/// An IAM instance profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceProfile {
    /// Its name, unique in the account.
    pub name: String,
    /// `arn:aws:iam::ACCOUNT:instance-profile{path}{name}`.
    pub arn: String,
    /// `/` or `/a/b/`.
    pub path: String,
    /// The names of its roles (IAM allows at most one).
    pub roles: Vec<String>,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// The IAM calls the provider needs.
pub trait Iam: Send + Sync + std::fmt::Debug {
    /// GetInstanceProfile; `Ok(None)` when IAM answers `NoSuchEntity`.
    fn get_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<InstanceProfile>>;

    /// CreateInstanceProfile with path and tags. A name already taken is
    /// [`AwsError::AlreadyExists`].
    fn create_instance_profile<'a>(
        &'a self,
        name: &'a str,
        path: &'a str,
        tags: &'a [Tag],
    ) -> AwsFuture<'a, InstanceProfile>;

    /// AddRoleToInstanceProfile. An unknown role or profile is [`AwsError::NotFound`]; a
    /// profile that already has a role is an error (IAM's `LimitExceeded`).
    fn add_role_to_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()>;

    /// RemoveRoleFromInstanceProfile.
    fn remove_role_from_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()>;

    /// DeleteInstanceProfile (must have no role).
    fn delete_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, ()>;
}
