//! The simulator: core-svc's controllers and aws-plugin's provider, joined by the real gRPC API
//! over an in-process transport, on an in-memory cluster, an in-memory EC2 and a virtual clock;
//! also the harness the benchmarks use.
//!
//! - [`scenario`]: the scenario file format (`simulator/SCENARIO.md`), read and checked.
//! - [`engine`]: the virtual-time loop running a scenario to its [`report`].
//! - [`fold`]: the human timeline's folding of repeated events.
//! - [`compare`]: two runs' figures side by side (`--vs`, `--set`).
//! - [`series`]: the report's figures over time, one point per change and minute at most.
//! - [`plot`]: a run's (or several runs') figures as an SVG picture, and an HTML page of it.
//! - [`cloud`]: the simulated cloud over aws-plugin's in-memory AWS.
//! - [`transport`]: aws-plugin served over in-process duplex streams, core connected to it.
//! - [`outage`]: the provider decorator that simulates a plugin outage or a slow plugin.
//! - [`contention`]: the cluster decorator that makes core's optimistic writes conflict.
//! - [`dump`]: `simulate --from-dump`: a cluster dumped with kubectl as a scenario.
//! - [`chaos`]: random clusters and fault schedules, run with invariants checked after every
//!   step, and failures shrunk to a minimal scenario.
//! - [`budgets`]: PodDisruptionBudgets as the disruption controller judges them.
//! - [`world`]: the stand-ins for the kube-scheduler, kubelets and workload controllers.
//! - [`clock`]: virtual time, as core, aws-plugin and the in-memory EC2 read it.
//! - [`catalogue`]: the simulated cloud's instance types, built by aws-plugin's and core-svc's
//!   own code from the embedded EC2 catalogue.
//! - [`workloads`]: the pod mixes the scheduler benchmarks run.

pub mod budgets;
pub mod catalogue;
pub mod chaos;
pub mod clock;
pub mod cloud;
pub mod compare;
pub mod contention;
pub mod dump;
pub mod engine;
pub mod fold;
pub mod outage;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod series;
pub mod transport;
pub mod workloads;
pub mod world;

/// The scenario `simulate` runs when given none.
pub const DEFAULT_SCENARIO: &str = include_str!("../scenarios/new-ami.yaml");
