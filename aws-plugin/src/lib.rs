//! The AWS cloud provider plugin: serves `karpenter.cloudprovider.v1` over EC2.
//!
//! - [`apis`]: the EC2NodeClass API type (`karpenter.k8s.aws/v1`), its CRD and validation.
//! - [`cli`]: flags, logging, AWS configuration, serving.
//! - [`identity`]: the Identity service (who the plugin is, what it supports, its label
//!   vocabulary, readiness).
//! - [`labels`]: the AWS labels, domains and annotations, and the vocabulary declared from them.
//! - [`provider`]: the CloudProvider service.
//! - [`catalogue`]: the embedded EC2 catalogue (DescribeInstanceTypes data, zones, prices).
//! - [`instance_type_provider`]: the cached catalogue `GetInstanceTypes` answers, from EC2.
//! - [`instance_types`]: EC2 instance types as the API's `InstanceType` (labels, capacity, overhead, offerings).
//! - [`aws`]: the AWS configuration the plugin runs with.
//! - [`bootstrap`]: the EC2 user data that makes an instance join the cluster, per AMI family.
//! - [`ec2`]: the narrow EC2 port the provider calls, on the AWS SDK or in memory; [`sqs`] the
//!   interruption queue's.
//! - [`convert`]: node classes of the provider's older APIs to v1 (ConvertNodeClass).
//! - [`interruption`]: the interruption queue WatchInterruptions streams.

pub mod apis;
#[cfg(feature = "aws")]
pub mod aws;
pub mod aws_error;
pub mod bootstrap;
pub mod catalogue;
#[cfg(feature = "aws")]
pub mod cli;
pub mod convert;
pub mod drift;
pub mod ec2;
pub mod iam;
pub mod identity;
pub mod instance;
pub mod instance_type_provider;
pub mod instance_types;
pub mod interruption;
pub mod kube_object;
pub mod labels;
pub mod memory_cloud;
pub mod node_class;
pub mod provider;
pub mod sqs;
pub mod ssm;

/// The plugin's name, as `GetPluginInfo` reports it.
pub const PLUGIN_NAME: &str = "karpenter.k8s.aws";
