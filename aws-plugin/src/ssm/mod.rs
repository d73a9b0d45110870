//! The narrow SSM port: `GetParameter`, which the provider uses to resolve image aliases
//! (`al2023@latest` is the public parameter
//! `/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64` and its kin), with
//! two implementations: `sdk::SdkSsm` on `aws-sdk-ssm` (feature `aws`) and
//! [`memory::MemorySsm`], deterministic, for the simulator and unit tests. One contract suite
//! (`contract.rs`) runs against both (the SDK one against `moto_server`).
//!
//! Boxed futures rather than `async fn`, as the EC2 port, so the provider can hold an
//! `Arc<dyn Ssm>`.

pub mod memory;
#[cfg(feature = "aws")]
pub mod sdk;

#[cfg(test)]
pub(crate) mod contract;

pub use crate::aws_error::{AwsError, AwsFuture};

/// The SSM calls the provider needs.
pub trait Ssm: Send + Sync + std::fmt::Debug {
    /// GetParameter (no decryption needed): the value, or `Ok(None)` when SSM answers
    /// `ParameterNotFound`.
    fn get_parameter<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<String>>;
}
