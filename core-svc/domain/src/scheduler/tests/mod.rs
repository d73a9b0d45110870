//! Behaviour tests of the scheduler, one file per concern, through [`solve`](super::solve)
//! with the builders of [`testing`](super::testing).

mod bound;
mod cost;
mod daemons;
mod existing;
mod node_pools;
mod packing;
mod preferences;
mod results;
mod scale;
mod topology;
