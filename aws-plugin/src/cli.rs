//! The command line of `aws-plugin`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use provider_sdk::Endpoint;
use provider_sdk::logging::LogFormat;
use provider_sdk::serve::{ServeOptions, serve_until_signal};
use provider_sdk::tls::ServerTls;

use crate::ec2::sdk::SdkEc2;
use crate::identity::Identity;
use crate::instance_type_provider::SystemClock;
use crate::provider::AwsCloudProvider;

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

    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
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
    let ec2 = Arc::new(SdkEc2::new(&aws.sdk_config));
    let provider = AwsCloudProvider::new(ec2, &aws.region, Arc::new(SystemClock));
    serve_until_signal(
        options,
        Identity::new(&aws.region, aws.ec2_endpoint_override.as_deref()),
        provider,
    )
    .await?;
    Ok(())
}
