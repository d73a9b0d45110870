//! The command line of `aws-plugin`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use provider_sdk::Endpoint;
use provider_sdk::logging::LogFormat;
use provider_sdk::serve::{ServeOptions, serve_until_signal};
use provider_sdk::tls::ServerTls;

use crate::bootstrap::ClusterSettings;
use crate::ec2::sdk::SdkEc2;
use crate::iam::sdk::SdkIam;
use crate::identity::Identity;
use crate::instance_type_provider::SystemClock;
use crate::node_class::ClusterIdentity;
use crate::provider::{AwsClients, AwsCloudProvider, ProviderSettings};
use crate::sqs::sdk::SdkSqs;
use crate::ssm::sdk::SdkSsm;

/// The AWS cloud provider plugin for core-svc: serves the karpenter.cloudprovider.v1 gRPC API
/// (with grpc.health.v1 and server reflection) over EC2.
///
/// AWS settings come from the standard sources: AWS_REGION, AWS_PROFILE, web identity
/// (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE), AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_EC2.
#[derive(Debug, clap::Parser)]
#[command(name = "aws-plugin", version)]
pub struct Args {
    /// Where to serve: unix:///abs/path.sock (created with mode 0600) or tcp://IP:PORT.
    #[arg(
        long,
        env = "PLUGIN_ENDPOINT",
        default_value = "unix:///run/karpenter/plugin.sock"
    )]
    pub endpoint: Endpoint,

    /// PEM certificate for TLS on a tcp:// endpoint.
    #[arg(long, env = "PLUGIN_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key for TLS on a tcp:// endpoint.
    #[arg(long, env = "PLUGIN_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,

    /// PEM CA bundle: require client certificates signed by it (mutual TLS).
    #[arg(long, env = "PLUGIN_TLS_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,

    /// The cluster's name: tags every instance, instance profile and launch template the
    /// plugin creates, and scopes what it lists and terminates to this cluster.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,

    /// The cluster's API server URL, written into the nodes' bootstrap configuration.
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,

    /// The cluster's CA bundle (base64 PEM, as EKS shows it), for the nodes' bootstrap.
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,

    /// The cluster's service CIDR, for the nodes' bootstrap (AL2023 needs it).
    #[arg(long, env = "CLUSTER_CIDR")]
    pub cluster_cidr: Option<String>,

    /// The cluster's Kubernetes version (`1.33`): image aliases (`al2023@latest`) resolve to
    /// the EKS-optimized image for it. Without it, node classes using an alias are not ready.
    #[arg(long, env = "KUBERNETES_VERSION", value_parser = parse_kubernetes_version)]
    pub kubernetes_version: Option<String>,

    /// How long a node class resolution (images, subnets, security groups) is reused, in
    /// seconds. New images and retagged subnets show after at most this long.
    #[arg(long, env = "NODE_CLASS_CACHE_SECONDS", default_value_t = 60)]
    pub node_class_cache_seconds: u64,

    /// The SQS queue EventBridge rules send EC2's interruption events to (spot interruption
    /// warnings, rebalance recommendations, state changes, AWS Health scheduled changes,
    /// capacity reservation interruptions): WatchInterruptions streams them to core.
    /// Without it, interruption handling is off (see deploy/interruption-queue.yaml).
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,

    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `MAJOR.MINOR`, as EKS and the SSM parameter paths spell versions.
fn parse_kubernetes_version(value: &str) -> Result<String, String> {
    let trimmed = value.trim_start_matches('v');
    let mut parts = trimmed.split('.');
    let valid = matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(major), Some(minor), None)
            if !major.is_empty() && !minor.is_empty()
                && major.bytes().all(|b| b.is_ascii_digit())
                && minor.bytes().all(|b| b.is_ascii_digit())
    );
    if valid {
        Ok(trimmed.to_owned())
    } else {
        Err(format!("{value:?} is not MAJOR.MINOR (for example 1.33)"))
    }
}

/// Runs the plugin until SIGTERM or SIGINT. Exit status 0 after a graceful shutdown, 1 when
/// the plugin cannot start or fails.
pub async fn run(args: Args) -> ExitCode {
    if let Err(e) = provider_sdk::logging::init(args.log_format) {
        // Logging is not up, so stderr is the only place left to say why.
        #[allow(
            clippy::print_stderr,
            reason = "no logger to report the logger's failure"
        )]
        {
            eprintln!("aws-plugin: {e}");
        }
        return ExitCode::FAILURE;
    }
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "aws-plugin failed");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let aws = crate::aws::load().await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        region = %aws.region,
        ec2_endpoint = aws.ec2_endpoint_override.as_deref().unwrap_or("default"),
        "AWS configuration loaded"
    );
    let tls = match (args.tls_cert_file, args.tls_key_file) {
        (Some(cert_file), Some(key_file)) => Some(ServerTls {
            cert_file,
            key_file,
            client_ca_file: args.tls_client_ca_file,
        }),
        _ => None,
    };
    let options = ServeOptions {
        endpoint: args.endpoint,
        tls,
    };
    // Building the SDK client calls nothing: EC2 is first called by the first GetInstanceTypes,
    // so the plugin starts (and answers health and identity) without network.
    let clients = AwsClients {
        ec2: Arc::new(SdkEc2::new(&aws.sdk_config)),
        iam: Arc::new(SdkIam::new(&aws.sdk_config)),
        ssm: Arc::new(SdkSsm::new(&aws.sdk_config)),
    };
    let settings = ProviderSettings {
        cluster: ClusterIdentity {
            name: args.cluster_name.clone(),
            region: aws.region.clone(),
            kubernetes_version: args.kubernetes_version.clone(),
        },
        bootstrap: ClusterSettings {
            name: args.cluster_name,
            endpoint: args.cluster_endpoint,
            ca_bundle: args.cluster_ca_bundle,
            cidr: args.cluster_cidr,
        },
        node_class_cache_ttl: Some(Duration::from_secs(args.node_class_cache_seconds)),
    };
    let ec2 = Arc::clone(&clients.ec2);
    let mut provider = AwsCloudProvider::new(clients, settings, Arc::new(SystemClock));
    let mut identity = Identity::new(&aws.region, aws.ec2_endpoint_override.as_deref());
    if let Some(queue) = args.interruption_queue.as_deref().filter(|q| !q.is_empty()) {
        tracing::info!(queue, "watching the interruption queue");
        provider =
            provider.with_interruption_queue(Arc::new(SdkSqs::new(&aws.sdk_config)), ec2, queue);
        identity = identity.with_interruption_queue(queue);
    }
    serve_until_signal(options, identity, provider).await?;
    Ok(())
}
