//! core-svc, the control plane: it watches the cluster and decides (provisioning, NodeClaim
//! lifecycle, drift, disruption, termination); a cloud provider plugin, reached over gRPC,
//! does what only the cloud can.
//!
//! - [`apis`]: the Karpenter v1 API types (NodePool, NodeClaim), their CRDs and validation: the
//!   `karpenter-api` crate, which the AWS plugin shares (it must not depend on core-svc).
//! - [`cli`]: flags and the binary's commands.
//! - [`clock`]: the clock port: the system clock, and a fake one tests and the simulator move.
//! - [`cluster`]: the cluster API port ([`cluster::Cluster`]: a consistent snapshot, writes
//!   with Kubernetes semantics, eviction), its in-memory implementation and its kube-rs adapter
//!   (`cluster::apiserver`).
//! - [`cloudprovider`]: the port core's controllers use to reach a cloud ([`cloudprovider::CloudProvider`]),
//!   its gRPC adapter over the plugin connection and an in-process fake for tests.
//! - [`controllers`]: every controller, written once against the ports.
//! - [`disruption`]: the pure building blocks of disruption (candidates, budgets, cost, why a
//!   node is not disrupted), shared by the disruption controller and `core-svc explain`.
//! - [`events`]: the Kubernetes Events port and [`events::Reason`], every reason core records.
//! - [`features`]: the feature gates, with upstream's names and defaults.
//! - [`http`]: the metrics and probe endpoints of `core-svc run`.
//! - [`inspect`]: what `core-svc explain` says about one node (drift, blocker, what is next).
//! - [`leader`]: leader election on a Lease, client-go's protocol.
//! - [`manager`]: the one list of controllers and when each runs, driven by `core-svc run`
//!   and by the simulator alike.
//! - [`metrics`]: the Prometheus metrics, counted from events and the gRPC adapter's counters.
//! - [`objects`]: pure facts about one Kubernetes object (a pod finished, terminating, a
//!   mirror; a Node Ready, cordoned for a drain), shared by every layer above.
//! - [`pdb`]: a PodDisruptionBudget's arithmetic (how many disruptions it allows now), shared
//!   by the in-memory cluster's eviction API and disruption.
//! - [`plugin`]: the connection to the cloud provider plugin: handshake, capabilities,
//!   per-RPC deadlines, validation of what the plugin answers.

pub use karpenter_api as apis;
pub mod cli;
pub mod clock;
pub mod cloudprovider;
pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod disruption;
pub mod events;
pub mod features;
pub mod http;
pub mod inspect;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod objects;
pub mod pdb;
pub mod plugin;
