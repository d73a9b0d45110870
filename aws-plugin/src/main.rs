//! The `aws-plugin` binary: see [`aws_plugin::cli`].

use std::process::ExitCode;

use clap::Parser as _;

#[tokio::main]
async fn main() -> ExitCode {
    aws_plugin::cli::run(aws_plugin::cli::Args::parse()).await
}
