//! core-svc, the control plane: it watches the cluster and decides (provisioning, NodeClaim
//! lifecycle, drift, disruption, termination); a cloud provider plugin, reached over gRPC,
//! does what only the cloud can.
//!
//! - [`apis`]: the Karpenter v1 API types (NodePool, NodeClaim), their CRDs and validation: the
//!   `karpenter-api` crate, which the AWS plugin shares (it must not depend on core-svc).
//! - [`cli`]: flags and the binary's commands.
//! - [`plugin`]: the connection to the cloud provider plugin: handshake, capabilities,
//!   per-RPC deadlines, validation of what the plugin answers.

pub use karpenter_api as apis;
pub mod cli;
pub mod plugin;
