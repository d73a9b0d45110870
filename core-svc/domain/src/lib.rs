//! core-svc's pure domain: the decisions, as functions over plain data.
//!
//! **Architecture Invariant:** this crate knows nothing about Kubernetes clients, gRPC, AWS,
//! the clock or any I/O; its only dependencies are pure-Rust libraries (`thiserror`, and
//! `good_lp` over `microlp` for the cost bound's linear programme). Callers convert wire and
//! API types into these types at their edge. That is what lets core-svc, aws-plugin
//! and the simulator share it, and what lets it be tested and benchmarked alone.

pub mod hash;
pub mod instance_type;
pub mod labels;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod scheduler;
