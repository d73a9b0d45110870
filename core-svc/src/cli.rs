//! The command line of `core-svc`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use provider_sdk::Endpoint;
use provider_sdk::logging::LogFormat;
use provider_sdk::tls::ClientTls;

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
    /// Run the control plane: connect to the plugin, wait until it is ready, and keep
    /// watching its readiness until SIGTERM.
    Run(PluginArgs),
    /// Ask the plugin who it is, what it supports and whether it is ready, print the answer
    /// and exit (0 when ready, 1 otherwise).
    PluginInfo(PluginArgs),
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
        Command::Run(plugin) => run_control_plane(plugin).await,
        Command::PluginInfo(plugin) => plugin_info(plugin).await,
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

async fn run_control_plane(plugin: PluginArgs) -> anyhow::Result<ExitCode> {
    let connection = plugin.connection()?;
    tracing::info!(endpoint = %connection.endpoint, version = env!("CARGO_PKG_VERSION"), "core-svc starting");
    let shutdown = provider_sdk::serve::shutdown_signal();
    tokio::pin!(shutdown);
    let mut last_state: Option<PluginState> = None;
    loop {
        // Nothing acts on the cloud while the plugin is unreachable or not ready: the state
        // is reported, and the next probe tries again. Once the plugin is known and ready, a
        // probe is enough; anything else starts over with a full handshake (the plugin may
        // have been replaced by another version meanwhile).
        let state = match &last_state {
            Some(PluginState::Ready(description)) => match probe(&connection).await {
                Ok(Ok(())) => PluginState::Ready(description.clone()),
                Ok(Err(why)) => PluginState::NotReady(why),
                Err(e) => PluginState::Unavailable(e.to_string()),
            },
            _ => match handshake(&connection).await {
                Ok(handshake) => match &handshake.ready {
                    Ok(()) => PluginState::Ready(describe(&handshake)),
                    Err(why) => PluginState::NotReady(why.clone()),
                },
                Err(e) => PluginState::Unavailable(e.to_string()),
            },
        };
        if last_state.as_ref() != Some(&state) {
            match &state {
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
            last_state = Some(state);
        }
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep(PROBE_INTERVAL) => {}
        }
    }
    tracing::info!("core-svc stopped");
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
    ];
    let supported: Vec<&str> = optional
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    format!(
        "plugin {} {} (API {}); node classes: {}; optional RPCs: {}; ready: {}",
        handshake.info.name,
        handshake.info.vendor_version,
        handshake.info.api_version,
        kinds.join(", "),
        if supported.is_empty() {
            "none".to_owned()
        } else {
            supported.join(", ")
        },
        match &handshake.ready {
            Ok(()) => "yes".to_owned(),
            Err(why) => format!("no ({why})"),
        }
    )
}
