//! `fake-apiserver`: a Kubernetes API server for tests and demos, over core's in-memory
//! cluster, with KWOK-like kubelet and scheduler stand-ins and a Deployment controller
//! stand-in. Writes a kubeconfig for it, then serves until SIGTERM or Ctrl-C.
//!
//! ```sh
//! fake-apiserver --listen 127.0.0.1:6443 --kubeconfig-out /tmp/fake.kubeconfig
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use core_svc::clock::SystemClock;
use core_svc::cluster::InMemoryCluster;
use integration_tests::fake_apiserver::kwok::Kwok;
use integration_tests::fake_apiserver::workloads;
use integration_tests::fake_apiserver::{FakeApiServer, NodeClassResource};
use integration_tests::fleet::{self, FleetSize};
use provider_sdk::logging::LogFormat;

/// A fake Kubernetes API server with KWOK-like stand-ins for the kubelet, the scheduler and
/// the Deployment controller.
#[derive(Debug, clap::Parser)]
#[command(name = "fake-apiserver")]
struct Args {
    /// Where to listen (port 0 picks a free one; the kubeconfig says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for the server (a cluster admin: no credentials).
    #[arg(long)]
    kubeconfig_out: PathBuf,
    /// Also write a kubeconfig for a service account, as NAMESPACE/NAME=PATH (repeatable): its
    /// requests are authorized by RBAC under the Roles, ClusterRoles and bindings applied to
    /// the server; `GET /debug/rbac` (as the admin) reports what each used and was refused.
    #[arg(
        long = "service-account-kubeconfig",
        value_name = "NAMESPACE/NAME=PATH"
    )]
    service_account_kubeconfigs: Vec<String>,
    /// A node class kind to serve, as GROUP/VERSION/KIND/PLURAL (repeatable); EC2NodeClass
    /// when none is given.
    #[arg(long = "node-class")]
    node_classes: Vec<String>,
    /// How long after a NodeClaim has a provider ID its Node registers.
    #[arg(long, default_value_t = 1)]
    registration_delay_seconds: u64,
    /// Seed of generated names and UIDs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Start with a standing fleet of this many nodes (NodePool `default`, NodeClaims, Ready
    /// Nodes, running pods under PDBs; for the fake cloud provider's `TestNodeClass`), to
    /// measure clients against a cluster of realistic size.
    #[arg(long, default_value_t = 0)]
    fleet_nodes: usize,
    /// Running pods per node of that fleet.
    #[arg(long, default_value_t = 20)]
    fleet_pods_per_node: usize,
    /// Log format: text or json.
    #[arg(long, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// `NAMESPACE/NAME=PATH`.
fn service_account_kubeconfig(text: &str) -> anyhow::Result<(String, String, PathBuf)> {
    let parsed = text.split_once('=').and_then(|(account, path)| {
        let (namespace, name) = account.split_once('/')?;
        (!namespace.is_empty() && !name.is_empty() && !path.is_empty())
            .then(|| (namespace.to_owned(), name.to_owned(), PathBuf::from(path)))
    });
    parsed.with_context(|| {
        format!("--service-account-kubeconfig {text:?}: expected NAMESPACE/NAME=PATH")
    })
}

fn node_class(text: &str) -> anyhow::Result<NodeClassResource> {
    let parts: Vec<&str> = text.split('/').collect();
    let [group, version, kind, plural] = parts.as_slice() else {
        anyhow::bail!("--node-class {text:?}: expected GROUP/VERSION/KIND/PLURAL");
    };
    Ok(NodeClassResource {
        group: (*group).to_owned(),
        version: (*version).to_owned(),
        kind: (*kind).to_owned(),
        plural: (*plural).to_owned(),
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    provider_sdk::logging::init(args.log_format)?;
    let node_classes = if args.node_classes.is_empty() {
        vec![NodeClassResource::ec2_node_class()]
    } else {
        args.node_classes
            .iter()
            .map(|text| node_class(text))
            .collect::<anyhow::Result<_>>()?
    };
    let service_accounts = args
        .service_account_kubeconfigs
        .iter()
        .map(|text| service_account_kubeconfig(text))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cluster = InMemoryCluster::new(Arc::new(SystemClock), args.seed);
    if args.fleet_nodes > 0 {
        let size = FleetSize {
            nodes: args.fleet_nodes,
            pods_per_node: args.fleet_pods_per_node,
        };
        fleet::populate(&cluster, size)
            .await
            .context("writing the standing fleet")?;
        tracing::info!(
            nodes = size.nodes,
            pods = size.nodes * size.pods_per_node,
            "standing fleet written"
        );
    }
    let server = FakeApiServer::start(args.listen, cluster, node_classes)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    std::fs::write(&args.kubeconfig_out, server.kubeconfig())
        .with_context(|| format!("writing {}", args.kubeconfig_out.display()))?;
    for (namespace, name, path) in &service_accounts {
        std::fs::write(path, server.service_account_kubeconfig(namespace, name))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(url = %server.url(), kubeconfig = %args.kubeconfig_out.display(), "fake API server ready");
    let mut kwok = Kwok::new(Duration::from_secs(args.registration_delay_seconds));
    let shutdown = provider_sdk::serve::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                kwok.step(&server).await;
                workloads::step(&server).await;
            }
        }
    }
    tracing::info!("fake API server stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "fake-apiserver failed");
            #[allow(clippy::print_stderr, reason = "the logger may not be up")]
            {
                eprintln!("fake-apiserver: {error:#}");
            }
            ExitCode::FAILURE
        }
    }
}
