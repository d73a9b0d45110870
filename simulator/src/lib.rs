//! The simulator: core-svc's decisions and aws-plugin's provider over an in-memory cluster, an
//! in-memory EC2 and a virtual clock; also the harness the benchmarks use.
//!
//! - [`catalogue`]: the simulated cloud's instance types, built by aws-plugin's and core-svc's
//!   own code from the embedded EC2 catalogue.
//! - [`workloads`]: the pod mixes the scheduler benchmarks run.

pub mod catalogue;
pub mod workloads;
