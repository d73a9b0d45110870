//! The AWS configuration the plugin runs with, read the standard way through `aws-config`:
//! `AWS_REGION`/`AWS_DEFAULT_REGION` or the profile's region, credentials from the environment,
//! profiles (`AWS_PROFILE`), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, as
//! EKS Pod Identity and IRSA set them), SSO, ECS or instance metadata; and endpoint overrides
//! (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_EC2`) for emulators.

use aws_config::{BehaviorVersion, SdkConfig};

use crate::aws_error::AwsError;

/// The loaded configuration and the facts about it worth reporting.
#[derive(Debug, Clone)]
pub struct AwsSettings {
    /// What the AWS SDK clients are built from.
    pub sdk_config: SdkConfig,
    /// The region every call goes to.
    pub region: String,
    /// The EC2 endpoint override, when one is set (an emulator, a VPC endpoint).
    pub ec2_endpoint_override: Option<String>,
}

/// Why the AWS configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum AwsConfigError {
    /// No region from any source.
    #[error(
        "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or a region in the AWS profile); the plugin manages instances in exactly one region"
    )]
    NoRegion,
}

/// Loads the configuration from the environment and profile files.
pub async fn load() -> Result<AwsSettings, AwsConfigError> {
    let sdk_config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let region = sdk_config
        .region()
        .map(|r| r.to_string())
        .ok_or(AwsConfigError::NoRegion)?;
    // The service-specific variable wins over the global one, as in the SDK itself.
    let ec2_endpoint_override = ["AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    Ok(AwsSettings {
        sdk_config,
        region,
        ec2_endpoint_override,
    })
}

/// Classifies an AWS SDK error (EC2's, IAM's and SSM's are the same smithy type) as the ports'
/// [`AwsError`]: the service's answer by its code, anything else (no answer, a timeout, an
/// answer that does not parse) as transport. Here, with the SDK, so that `aws_error.rs` stays
/// free of it.
pub(crate) fn classify<E, R>(err: aws_sdk_ec2::error::SdkError<E, R>) -> AwsError
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_ec2::error::{DisplayErrorContext, SdkError};
    match &err {
        SdkError::ServiceError(context) => {
            let e = context.err();
            AwsError::from_code(
                e.code().unwrap_or("Unknown"),
                e.message().unwrap_or_default(),
            )
        }
        SdkError::TimeoutError(_) => {
            AwsError::transport("timeout", DisplayErrorContext(&err).to_string())
        }
        SdkError::DispatchFailure(_) => {
            AwsError::transport("dispatch", DisplayErrorContext(&err).to_string())
        }
        _ => AwsError::transport("response", DisplayErrorContext(&err).to_string()),
    }
}
