//! The `core-svc` binary: see [`core_svc::cli`].

use std::process::ExitCode;

use clap::Parser as _;

#[tokio::main]
async fn main() -> ExitCode {
    core_svc::cli::run(core_svc::cli::Args::parse()).await
}
