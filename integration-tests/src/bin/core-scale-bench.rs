//! `core-scale-bench`: what core's API-server adapter costs at fleet scale. Against an API
//! server holding a standing fleet (`fake-apiserver --fleet-nodes 1000 --fleet-pods-per-node
//! 20 --node-class test.karpenter.sh/v1/TestNodeClass/testnodeclasses`), it starts the same
//! `KubeCluster` `core-svc run` starts, waits for its caches, and reports the process's memory
//! with everything cached, then times disruption passes (the controller that weighs the whole
//! fleet: every node is an underutilized consolidation candidate) over those caches, with the
//! fake cloud provider offering the fleet's instance type. One JSON line per figure.
//!
//! ```sh
//! fake-apiserver --listen 127.0.0.1:0 --kubeconfig-out /tmp/fleet.kubeconfig \
//!   --node-class test.karpenter.sh/v1/TestNodeClass/testnodeclasses --fleet-nodes 1000 &
//! core-scale-bench --kubeconfig /tmp/fleet.kubeconfig
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser as _;
use core_svc::clock::SystemClock;
use core_svc::cloudprovider::{FakeCloudProvider, NodeClassKind};
use core_svc::cluster::{Cluster, KubeCluster, apiserver};
use core_svc::controllers::disruption::DisruptionController;
use core_svc::controllers::{Context, Controller, Requeue, Settings};
use core_svc::events::MemoryEvents;
use integration_tests::fleet;
use serde_json::json;

/// The longest a pass's requested requeue is waited for between measured passes.
const MAX_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, clap::Parser)]
#[command(name = "core-scale-bench")]
struct Args {
    /// The kubeconfig of the API server holding the fleet.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Disruption passes to time. The first decides (and starts validating a consolidation);
    /// a second, after the validation delay, executes the command, evictions included, so it
    /// measures the API server's answers as much as core.
    #[arg(long, default_value_t = 1)]
    passes: usize,
}

/// This process's resident memory now and at its peak, in MiB (Linux `/proc/self/status`).
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[allow(clippy::print_stdout, reason = "the figures are the output")]
fn report(figure: serde_json::Value) {
    println!("{figure}");
}

async fn run(args: Args) -> anyhow::Result<()> {
    provider_sdk::logging::init(provider_sdk::logging::LogFormat::Text)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = apiserver::client(config)?;
    let node_class = NodeClassKind {
        group: "test.karpenter.sh".into(),
        version: "v1".into(),
        kind: "TestNodeClass".into(),
    };
    let (rss, _) = memory_mib();
    report(json!({"figure": "rss_before_caches_mib", "value": rss}));
    let started = Instant::now();
    let cluster = Arc::new(KubeCluster::start(client, &[node_class]).await?);
    cluster.wait_synced().await;
    let snapshot = cluster.snapshot().await?;
    report(json!({
        "figure": "caches_synced_seconds",
        "value": started.elapsed().as_secs_f64(),
        "nodes": snapshot.nodes.len(),
        "node_claims": snapshot.node_claims.len(),
        "pods": snapshot.pods.len(),
        "pdbs": snapshot.pdbs.len(),
        "node_classes": snapshot.node_classes.len(),
    }));
    drop(snapshot);
    let (rss, peak) = memory_mib();
    report(json!({"figure": "rss_with_caches_mib", "value": rss, "peak": peak}));

    let events = Arc::new(MemoryEvents::default());
    let cloud = Arc::new(FakeCloudProvider::new());
    cloud.set_instance_types(fleet::instance_types());
    let ctx = Context {
        cluster: Arc::clone(&cluster),
        cloud,
        clock: Arc::new(SystemClock),
        events: Arc::clone(&events) as Arc<dyn core_svc::events::Events>,
        settings: Settings::default(),
    };
    let disruption = DisruptionController::new(ctx);
    let mut wait = Duration::ZERO;
    for pass in 0..args.passes {
        // Waits as the manager would when the pass asks to come back soon (a command in
        // validation), so the passes measured include the one that starts it.
        tokio::time::sleep(wait).await;
        let started = Instant::now();
        let result = disruption.reconcile().await;
        let elapsed = started.elapsed().as_secs_f64();
        wait = match &result {
            Ok(Requeue::After(after)) if *after <= MAX_WAIT => *after,
            _ => Duration::ZERO,
        };
        let mut decided: BTreeMap<String, usize> = BTreeMap::new();
        let mut example: BTreeMap<String, String> = BTreeMap::new();
        for event in events.drain() {
            example
                .entry(event.reason.as_str().to_owned())
                .or_insert_with(|| event.message.clone());
            *decided.entry(event.reason.as_str().to_owned()).or_default() += 1;
        }
        report(json!({
            "figure": "disruption_pass_seconds",
            "pass": pass,
            "value": elapsed,
            "result": format!("{result:?}"),
            "events": decided,
            "example": example,
        }));
    }
    let (rss, peak) = memory_mib();
    report(json!({"figure": "rss_after_passes_mib", "value": rss, "peak": peak}));
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            #[allow(clippy::print_stderr, reason = "a command-line tool's error")]
            {
                eprintln!("core-scale-bench: {error:#}");
            }
            ExitCode::FAILURE
        }
    }
}
