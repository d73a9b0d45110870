//! The command line of `core-svc`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use provider_sdk::Endpoint;
use provider_sdk::logging::LogFormat;
use provider_sdk::tls::ClientTls;
use tokio::sync::watch;

use crate::clock::{Clock, SystemClock};
use crate::cloudprovider::grpc::{CallMetrics, GrpcCloudProvider};
use crate::cloudprovider::{CloudProvider, NodeClassKind};
use crate::cluster::apiserver::events::ApiServerEvents;
use crate::cluster::{Cluster, KubeCluster, apiserver};
use crate::controllers::nodeclaim::{launched_of, request_of};
use crate::controllers::{Context, Settings};
use crate::convert::documents::{self, Format};
use crate::convert::plugin::PluginConverter;
use crate::convert::provider::{NoPlugin, convert_all};
use crate::features::FeatureGates;
use crate::http::Readiness;
use crate::inspect::{PluginDrift, inspect};
use crate::leader::{Elector, LEASE_NAME, Timings};
use crate::manager::{Manager, ManagerOptions};
use crate::metrics::{MeteredEvents, Metrics};
use crate::plugin::{Deadlines, Handshake, PluginConnection, handshake, probe};

/// core-svc, the control plane of a Karpenter-compatible node autoscaler (karpenter.sh/v1
/// NodePool and NodeClaim). It reaches its cloud provider plugin over the
/// karpenter.cloudprovider.v1 gRPC API.
#[derive(Debug, clap::Parser)]
#[command(name = "core-svc", version)]
pub struct Args {
    /// Log format: text or json.
    #[arg(long, global = true, env = "LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the control plane against the cluster: wait for the plugin, sync the caches, win
    /// the leader election, then run every controller until SIGTERM. Serves /metrics and the
    /// probes meanwhile.
    Run(RunArgs),
    /// Ask the plugin who it is, what it supports and whether it is ready, print the answer
    /// and exit (0 when ready, 1 otherwise).
    PluginInfo(PluginArgs),
    /// Say why a node is (not) being disrupted: its drift status and the plugin's IsDrifted
    /// answer, whether it is a disruption candidate, what holds it back, what happens next.
    Explain(ExplainArgs),
    /// Convert older Karpenter manifests (v1alpha5 Provisioner, v1beta1 NodePool and
    /// NodeClaim, the do-not-evict and do-not-consolidate annotations) to karpenter.sh/v1,
    /// printing the result on standard output and a warning per lossy step on standard error.
    /// Exits 2, printing nothing, when a document cannot be converted.
    Convert(ConvertArgs),
}

/// `core-svc convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Manifests: a file (YAML, several documents, or JSON; Lists are expanded), a directory
    /// (its .yaml, .yml and .json files, by name), or `-` for standard input. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
    /// Any warning is an error: nothing is printed and the exit status is 2.
    #[arg(long)]
    pub strict: bool,
    /// A running plugin (unix:///abs/path.sock or tcp://IP:PORT) to convert its node class
    /// kinds (AWSNodeTemplate, v1beta1 EC2NodeClass, inline providers) through its
    /// ConvertNodeClass RPC. Without it they pass through, each named in a warning.
    #[arg(long, env = "PLUGIN_ENDPOINT")]
    pub plugin_endpoint: Option<Endpoint>,
    /// The cluster's name, for defaults the old APIs took from the cluster (the plugin's
    /// own is used when not given).
    #[arg(long)]
    pub cluster_name: Option<String>,
}

/// How to reach the API server.
#[derive(Debug, clap::Args)]
pub struct KubeArgs {
    /// A kubeconfig file; without it, the in-cluster service account, then `KUBECONFIG`, then
    /// ~/.kube/config (kube's standard inference).
    #[arg(long, env = "CORE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl KubeArgs {
    async fn client(&self) -> anyhow::Result<kube::Client> {
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .with_context(|| format!("the kubeconfig {}", path.display()))?
            }
            None => kube::Config::infer()
                .await
                .context("no cluster configuration (in-cluster, KUBECONFIG or ~/.kube/config)")?,
        };
        Ok(apiserver::client(config)?)
    }
}

/// `core-svc run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The plugin.
    #[command(flatten)]
    pub plugin: PluginArgs,
    /// The API server.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Where /metrics is served.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,
    /// Where /healthz and /readyz are served.
    #[arg(long, env = "HEALTH_PROBE_ADDRESS", default_value = "0.0.0.0:8081")]
    pub health_probe_address: SocketAddr,
    /// The namespace of the leader election Lease (the pod's own).
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kube-system")]
    pub namespace: String,
    /// This replica's name in the Lease; the pod's name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Run the controllers without a Lease (one replica only).
    #[arg(long, env = "DISABLE_LEADER_ELECTION")]
    pub disable_leader_election: bool,
    /// Feature gates, upstream's names and defaults: `SpotToSpotConsolidation=true,...`
    /// (CapacityBuffer, NodeOverlay, NodeRepair, ReservedCapacity, SpotToSpotConsolidation,
    /// StaticCapacity). An unknown name is refused.
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: FeatureGates,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// One JSON object.
    Json,
}

/// `core-svc explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A Node's or a NodeClaim's name.
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// The API server.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The plugin, asked for its IsDrifted answer (left out when it cannot be reached).
    #[command(flatten)]
    pub plugin: PluginArgs,
}

/// How to reach the plugin.
#[derive(Debug, clap::Args)]
pub struct PluginArgs {
    /// The plugin's endpoint: unix:///abs/path.sock or tcp://IP:PORT.
    #[arg(
        long,
        env = "PLUGIN_ENDPOINT",
        default_value = "unix:///run/karpenter/plugin.sock"
    )]
    pub plugin_endpoint: Endpoint,

    /// PEM CA bundle the plugin's certificate must chain to (TLS, tcp:// only).
    #[arg(long, env = "PLUGIN_TLS_CA_FILE")]
    pub plugin_tls_ca_file: Option<PathBuf>,

    /// PEM client certificate for mutual TLS.
    #[arg(long, env = "PLUGIN_TLS_CERT_FILE", requires_all = ["plugin_tls_key_file", "plugin_tls_ca_file"])]
    pub plugin_tls_cert_file: Option<PathBuf>,

    /// PEM client key for mutual TLS.
    #[arg(long, env = "PLUGIN_TLS_KEY_FILE", requires = "plugin_tls_cert_file")]
    pub plugin_tls_key_file: Option<PathBuf>,

    /// The name the plugin's certificate must carry; defaults to the endpoint's IP.
    #[arg(long, env = "PLUGIN_TLS_SERVER_NAME", requires = "plugin_tls_ca_file")]
    pub plugin_tls_server_name: Option<String>,
}

impl PluginArgs {
    fn connection(&self) -> anyhow::Result<PluginConnection> {
        let tls = self.plugin_tls_ca_file.as_ref().map(|ca_file| ClientTls {
            ca_file: ca_file.clone(),
            cert_file: self.plugin_tls_cert_file.clone(),
            key_file: self.plugin_tls_key_file.clone(),
            server_name: self.plugin_tls_server_name.clone(),
        });
        Ok(PluginConnection::new(
            self.plugin_endpoint.clone(),
            tls.as_ref(),
            Deadlines::DEFAULT,
        )?)
    }
}

/// How often `run` probes the plugin.
const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// Runs a command; the exit status says whether it succeeded.
pub async fn run(args: Args) -> ExitCode {
    if let Err(e) = provider_sdk::logging::init(args.log_format) {
        #[allow(
            clippy::print_stderr,
            reason = "no logger to report the logger's failure"
        )]
        {
            eprintln!("core-svc: {e}");
        }
        return ExitCode::FAILURE;
    }
    let result = match args.command {
        Command::Run(run) => run_control_plane(run).await,
        Command::PluginInfo(plugin) => plugin_info(plugin).await,
        Command::Explain(explain) => explain_node(explain).await,
        Command::Convert(convert) => Ok(convert_manifests(&convert).await),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "core-svc failed");
            ExitCode::FAILURE
        }
    }
}

async fn plugin_info(plugin: PluginArgs) -> anyhow::Result<ExitCode> {
    let connection = plugin.connection()?;
    let handshake = handshake(&connection).await?;
    #[allow(clippy::print_stdout, reason = "this command's output is its answer")]
    {
        println!("{}", describe(&handshake));
    }
    Ok(if handshake.ready.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn run_control_plane(args: RunArgs) -> anyhow::Result<ExitCode> {
    let connection = args.plugin.connection()?;
    let identity = match &args.identity {
        Some(identity) => identity.clone(),
        None => hostname(),
    };
    tracing::info!(endpoint = %connection.endpoint, %identity, version = env!("CARGO_PKG_VERSION"), "core-svc starting");
    let call_metrics = Arc::new(CallMetrics::new());
    let metrics = Arc::new(Metrics::new(Some(Arc::clone(&call_metrics))));
    let (readiness, ready) = watch::channel(Readiness::NotReady(
        "waiting for the plugin's handshake".to_owned(),
    ));
    let http = tokio::spawn(crate::http::serve(
        args.metrics_address,
        args.health_probe_address,
        Arc::clone(&metrics),
        ready,
    ));
    let shutdown = provider_sdk::serve::shutdown_signal();
    tokio::pin!(shutdown);

    // Nothing acts on the cloud or the cluster before the plugin is known and ready.
    let handshake = tokio::select! {
        () = &mut shutdown => return Ok(ExitCode::SUCCESS),
        handshake = wait_for_plugin(&connection) => handshake,
        failed = &mut Box::pin(http_failed(http)) => return Err(failed),
    };
    let client = args.kube.client().await?;
    let cluster =
        Arc::new(KubeCluster::start(client.clone(), &handshake.node_class_kinds()).await?);
    readiness.send_replace(Readiness::NotReady("caches syncing".to_owned()));
    tokio::select! {
        () = &mut shutdown => return Ok(ExitCode::SUCCESS),
        () = cluster.wait_synced() => {}
    }
    readiness.send_replace(Readiness::Ready);
    tracing::info!("caches synced");
    tokio::spawn(watch_plugin(
        connection.clone(),
        describe(&handshake),
        readiness,
    ));

    let (events, _events_task) = ApiServerEvents::start(client.clone(), identity.clone());
    let events = Arc::new(MeteredEvents::new(events, Arc::clone(&metrics)));
    let provider =
        Arc::new(GrpcCloudProvider::new(&connection, &handshake).with_metrics(call_metrics));
    let ctx = Context {
        cluster: Arc::clone(&cluster),
        cloud: provider,
        clock: Arc::new(SystemClock) as Arc<dyn Clock>,
        events,
        settings: Settings::default(),
    };
    let options = ManagerOptions {
        require_ready_node_class: handshake.capabilities.resolve_node_class,
        // The plugin's labels, as it declared them: without them a pod asking for one (an
        // instance family, say) could never be scheduled.
        label_policy: handshake.label_policy(),
        metrics: Some(Arc::clone(&metrics)),
        feature_gates: args.feature_gates,
    };
    tracing::info!(feature_gates = %args.feature_gates, "feature gates");
    for unsupported in args.feature_gates.unsupported() {
        tracing::warn!(feature_gate = %unsupported, "a feature gate core does not implement");
    }

    let (stop_election, election_stopped) = tokio::sync::oneshot::channel::<()>();
    // Without an election this replica always leads; the sender lives as long as the loop, so
    // the receiver never reads as closed (which would end the run).
    let (_always_leading, always) = watch::channel(true);
    let (mut leading, election) = if args.disable_leader_election {
        (always, None)
    } else {
        let elector = Elector::new(
            client,
            &args.namespace,
            LEASE_NAME,
            &identity,
            Timings::default(),
        );
        let leading = elector.leading();
        let election = tokio::spawn(elector.run(async move {
            let _ = election_stopped.await;
        }));
        (leading, Some(election))
    };
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            led = leading.wait_for(|leading| *leading) => if led.is_err() { break },
        }
        // A new term starts with fresh controllers, as a restart would: nothing a former term
        // kept in memory (batches, nominations) outlives the lease it was decided under.
        let mut manager = Manager::new(ctx.clone(), &options);
        tracing::info!("leading: running the controllers");
        tokio::select! {
            () = &mut shutdown => break,
            lost = leading.wait_for(|leading| !*leading) => {
                tracing::warn!("lost the leader lease: controllers stopped");
                if lost.is_err() { break }
            }
            () = manager.drive(cluster.subscribe()) => {}
        }
    }
    let _ = stop_election.send(());
    if let Some(election) = election {
        let _ = election.await;
    }
    tracing::info!("core-svc stopped");
    Ok(ExitCode::SUCCESS)
}

/// The pod's name as the kernel knows it (the hostname), the Lease identity by default.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("core-svc-{}", std::process::id()))
}

async fn http_failed(http: tokio::task::JoinHandle<std::io::Result<()>>) -> anyhow::Error {
    match http.await {
        Ok(Ok(())) => anyhow::anyhow!("the metrics and probe server stopped"),
        Ok(Err(error)) => anyhow::Error::new(error).context("serving metrics and probes"),
        Err(error) => anyhow::Error::new(error).context("the metrics and probe server"),
    }
}

/// Handshakes until the plugin answers ready, reporting each change of its state.
async fn wait_for_plugin(connection: &PluginConnection) -> Handshake {
    let mut last: Option<PluginState> = None;
    loop {
        let state = match handshake(connection).await {
            Ok(handshake) if handshake.ready.is_ok() => return handshake,
            Ok(handshake) => PluginState::NotReady(handshake.ready.err().unwrap_or_default()),
            Err(e) => PluginState::Unavailable(e.to_string()),
        };
        if last.as_ref() != Some(&state) {
            report(connection, &state);
            last = Some(state);
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// Probes the plugin for ever, turning readiness off while it is not ready.
async fn watch_plugin(
    connection: PluginConnection,
    description: String,
    readiness: watch::Sender<Readiness>,
) {
    let mut last = PluginState::Ready(description.clone());
    report(&connection, &last);
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let state = match probe(&connection).await {
            Ok(Ok(())) => PluginState::Ready(description.clone()),
            Ok(Err(why)) => PluginState::NotReady(why),
            Err(e) => PluginState::Unavailable(e.to_string()),
        };
        if state != last {
            report(&connection, &state);
            readiness.send_replace(match &state {
                PluginState::Ready(_) => Readiness::Ready,
                other => Readiness::NotReady(format!("plugin {}", other.label())),
            });
            last = state;
        }
    }
}

fn report(connection: &PluginConnection, state: &PluginState) {
    match state {
        PluginState::Ready(plugin) => {
            tracing::info!(endpoint = %connection.endpoint, %plugin, "plugin ready");
        }
        PluginState::NotReady(why) | PluginState::Unavailable(why) => tracing::warn!(
            endpoint = %connection.endpoint,
            plugin = %state.label(),
            reason = %why,
            "plugin not usable; making no cloud decisions"
        ),
    }
}

async fn explain_node(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let client = args.kube.client().await?;
    // The plugin names the node class kinds; without it, none are read (drift by the plugin
    // is then not asked either).
    let connection = args.plugin.connection()?;
    let plugin = match handshake(&connection).await {
        Ok(handshake) => Some(handshake),
        Err(error) => {
            tracing::warn!(%error, "the plugin cannot be reached; explaining without it");
            None
        }
    };
    let kinds: Vec<NodeClassKind> = plugin
        .iter()
        .flat_map(Handshake::node_class_kinds)
        .collect();
    let cluster = KubeCluster::start(client, &kinds).await?;
    tokio::time::timeout(Duration::from_secs(60), cluster.wait_synced())
        .await
        .context("the caches did not sync within 60 s")?;
    let snapshot = cluster.snapshot().await?;
    let (node_claim, _) = crate::inspect::resolve(&snapshot, &args.name)?;
    let plugin_drift = match (plugin, node_claim) {
        (None, _) => PluginDrift::NotAsked {
            why: "the plugin cannot be reached".to_owned(),
        },
        (Some(_), None) => PluginDrift::NotAsked {
            why: "the node has no NodeClaim".to_owned(),
        },
        (Some(handshake), Some(claim)) => {
            let provider = GrpcCloudProvider::new(&connection, &handshake);
            match (
                launched_of(claim),
                request_of(claim),
                snapshot.node_class_for(&claim.spec.node_class_ref),
            ) {
                (None, _, _) => PluginDrift::NotAsked {
                    why: "the NodeClaim is not launched".to_owned(),
                },
                (_, Err(error), _) => PluginDrift::NotAsked {
                    why: error.to_string(),
                },
                (_, _, None) => PluginDrift::NotAsked {
                    why: "its node class does not exist".to_owned(),
                },
                (Some(launched), Ok(request), Some(class)) => {
                    let class = serde_json::to_value(class)?;
                    PluginDrift::from_answer(provider.is_drifted(&request, &launched, &class).await)
                }
            }
        }
    };
    let report = inspect(&snapshot, SystemClock.now(), &args.name, plugin_drift)?;
    #[allow(clippy::print_stdout, reason = "this command's output is its answer")]
    match args.output {
        Output::Text => println!("{report}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// What `run` last learned about the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PluginState {
    /// Ready; the description of the handshake.
    Ready(String),
    /// Healthy but not ready, and why.
    NotReady(String),
    /// Not reachable or answering errors, and what failed.
    Unavailable(String),
}

impl PluginState {
    fn label(&self) -> &'static str {
        match self {
            PluginState::Ready(_) => "ready",
            PluginState::NotReady(_) => "not ready",
            PluginState::Unavailable(_) => "unavailable",
        }
    }
}

fn describe(handshake: &Handshake) -> String {
    let kinds: Vec<String> = handshake
        .node_classes
        .iter()
        .map(|k| format!("{}/{} {}", k.group, k.version, k.kind))
        .collect();
    let capabilities = handshake.capabilities;
    let optional = [
        ("ResolveNodeClass", capabilities.resolve_node_class),
        ("Get", capabilities.get),
        ("List", capabilities.list),
        ("IsDrifted", capabilities.is_drifted),
        ("GetRepairPolicies", capabilities.get_repair_policies),
        ("ConvertNodeClass", capabilities.convert_node_class),
        ("WatchInterruptions", capabilities.watch_interruptions),
    ];
    let supported: Vec<&str> = optional
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    let vocabulary = &handshake.vocabulary;
    format!(
        "plugin {} {} (API {}); node classes: {}; optional RPCs: {}; labels: {}; ready: {}",
        handshake.info.name,
        handshake.info.vendor_version,
        handshake.info.api_version,
        kinds.join(", "),
        if supported.is_empty() {
            "none".to_owned()
        } else {
            supported.join(", ")
        },
        if vocabulary.declared {
            format!(
                "{} in domains [{}]",
                vocabulary.labels.len(),
                vocabulary.restricted_domains.join(" ")
            )
        } else {
            "none declared".to_owned()
        },
        match &handshake.ready {
            Ok(()) => "yes".to_owned(),
            Err(why) => format!("no ({why})"),
        }
    )
}

/// The exit status of a conversion that could not be done (kubectl's for bad input).
const CONVERT_FAILED: u8 = 2;

/// `core-svc convert`: every document read and converted before anything is printed, so a
/// failure leaves no partial output.
#[allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a filter: the manifests on standard output, the warnings on standard error"
)]
async fn convert_manifests(args: &ConvertArgs) -> ExitCode {
    let fail = |message: &str| {
        eprintln!("error: {message}");
        ExitCode::from(CONVERT_FAILED)
    };
    let mut objects = Vec::new();
    for (source, text) in match read_sources(&args.files) {
        Ok(sources) => sources,
        Err(message) => return fail(&message),
    } {
        match documents::parse(&source, &text) {
            Ok(parsed) => objects.extend(parsed),
            Err(message) => return fail(&message),
        }
    }
    let cluster_name = args.cluster_name.as_deref();
    let results = match &args.plugin_endpoint {
        None => convert_all(objects, &NoPlugin, cluster_name).await,
        Some(endpoint) => {
            let connection = match PluginConnection::new(endpoint.clone(), None, Deadlines::DEFAULT)
            {
                Ok(connection) => connection,
                Err(e) => return fail(&format!("plugin at {endpoint}: {e}")),
            };
            let (converter, note) = match PluginConverter::connect(connection).await {
                Ok(connected) => connected,
                Err(message) => return fail(&message),
            };
            if let Some(note) = note {
                eprintln!("warning: {note}");
            }
            convert_all(objects, &converter, cluster_name).await
        }
    };
    let results = match results {
        Ok(results) => results,
        Err(e) => return fail(&e.to_string()),
    };
    let mut converted = Vec::with_capacity(results.len());
    let mut warnings = Vec::new();
    for result in results {
        if let Err(message) = documents::validate(&result.object) {
            return fail(&message);
        }
        warnings.extend(result.warnings);
        converted.push(result.object);
    }
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    if args.strict && !warnings.is_empty() {
        return fail(&format!(
            "--strict: {} warning(s); nothing written",
            warnings.len()
        ));
    }
    match documents::render(&converted, args.output) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(message) => fail(&message),
    }
}

/// The text of every source, named: `-` is standard input, a directory its `.yaml`, `.yml`
/// and `.json` files by name.
fn read_sources(paths: &[PathBuf]) -> Result<Vec<(String, String)>, String> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let mut sources = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| format!("reading standard input: {e}"))?;
            sources.push(("(stdin)".to_owned(), text));
        } else if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                })
                .collect();
            files.sort();
            for file in files {
                sources.push((file.display().to_string(), read(&file)?));
            }
        } else {
            sources.push((path.display().to_string(), read(path)?));
        }
    }
    Ok(sources)
}
