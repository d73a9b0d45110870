//! `provider-conformance`: runs the plugin API's conformance suite against a running plugin.
//!
//! Exit status: 0 when no check failed, 1 when one did, 2 when the suite could not run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use provider_conformance::{ALL, Config, report};
use provider_sdk::Endpoint;
use provider_sdk::tls::ClientTls;

/// Checks that a cloud provider plugin keeps every promise of karpenter.cloudprovider.v1. It
/// launches and deletes real instances (about ten of the cheapest), and deletes every one it
/// launched before it exits.
#[derive(Debug, Parser)]
#[command(name = "provider-conformance", version)]
struct Args {
    /// The plugin's endpoint: unix:///abs/path.sock or tcp://HOST:PORT.
    #[arg(long, required_unless_present = "list")]
    endpoint: Option<Endpoint>,

    /// A node class the plugin resolves ready (YAML or JSON), as you would apply it; without
    /// it, an empty one of the plugin's default kind.
    #[arg(long)]
    node_class: Option<PathBuf>,

    /// Also write the report as JUnit XML to this file.
    #[arg(long)]
    junit: Option<PathBuf>,

    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,

    /// List the checks and exit.
    #[arg(long)]
    list: bool,

    /// Seconds to wait for the plugin to be ready.
    #[arg(long, default_value_t = 60)]
    ready_timeout: u64,

    /// Seconds a launch or a termination may take.
    #[arg(long, default_value_t = 300)]
    settle_timeout: u64,

    /// The start of the names of the NodeClaims the suite makes.
    #[arg(long, default_value = "conformance")]
    name_prefix: String,

    /// PEM CA bundle the plugin's certificate must chain to (TLS, tcp:// only).
    #[arg(long)]
    tls_ca_file: Option<PathBuf>,

    /// PEM client certificate for mutual TLS.
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_file"])]
    tls_cert_file: Option<PathBuf>,

    /// PEM client key for mutual TLS.
    #[arg(long, requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,

    /// The name the plugin's certificate must carry; defaults to the endpoint's IP.
    #[arg(long, requires = "tls_ca_file")]
    tls_server_name: Option<String>,
}

fn read_node_class(path: &PathBuf) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the node class {}", path.display()))?;
    serde_yaml::from_str(&text)
        .with_context(|| format!("the node class {} is not YAML or JSON", path.display()))
}

#[allow(clippy::print_stdout, reason = "the report is the program's output")]
async fn run(args: Args) -> anyhow::Result<bool> {
    if args.list {
        for check in ALL {
            println!("{:<40} {}", check.id, check.promise);
        }
        return Ok(true);
    }
    let endpoint = args.endpoint.context("--endpoint is required")?;
    let mut config = Config::new(endpoint);
    config.node_class = args.node_class.as_ref().map(read_node_class).transpose()?;
    config.ready_timeout = Duration::from_secs(args.ready_timeout);
    config.settle_timeout = Duration::from_secs(args.settle_timeout);
    config.name_prefix = args.name_prefix;
    config.tls = args.tls_ca_file.map(|ca_file| ClientTls {
        ca_file,
        cert_file: args.tls_cert_file,
        key_file: args.tls_key_file,
        server_name: args.tls_server_name,
    });
    let report = provider_conformance::run(config).await?;
    if let Some(path) = &args.junit {
        let xml = report::junit(&report).context("rendering the JUnit report")?;
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", report::json(&report));
    } else {
        print!("{}", report::text(&report));
    }
    Ok(report.passed())
}

#[allow(clippy::print_stderr, reason = "the error is the program's output")]
fn main() -> ExitCode {
    let args = Args::parse();
    // Logs go to stderr (RUST_LOG=debug shows each check as it ends); the report is stdout.
    if let Err(error) = provider_sdk::logging::init(provider_sdk::logging::LogFormat::Text) {
        eprintln!("provider-conformance: {error}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("provider-conformance: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("provider-conformance: {error:#}");
            ExitCode::from(2)
        }
    }
}
