//! The AWS cloud provider plugin: serves `karpenter.cloudprovider.v1` over EC2.
//!
//! - [`cli`]: flags, logging, AWS configuration, serving.
//! - [`identity`]: the Identity service (who the plugin is, what it supports, readiness).
//! - [`provider`]: the CloudProvider service.
//! - [`aws`]: the AWS configuration the plugin runs with.

pub mod aws;
pub mod cli;
pub mod identity;
pub mod provider;

/// The plugin's name, as `GetPluginInfo` reports it.
pub const PLUGIN_NAME: &str = "karpenter.k8s.aws";
