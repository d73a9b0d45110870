//! [`Ssm`] on `aws-sdk-ssm`. Built from the plugin's `SdkConfig` (region, credentials, the
//! `AWS_ENDPOINT_URL[_SSM]` override for emulators all come through `aws-config`). Errors are
//! classified by SSM's code ([`AwsError::from_code`]).

use aws_config::SdkConfig;
use aws_sdk_ssm::Client;

use super::{AwsError, AwsFuture, Ssm};
use crate::aws::classify;

/// SSM through the AWS SDK.
#[derive(Debug, Clone)]
pub struct SdkSsm {
    client: Client,
}

impl SdkSsm {
    /// A client from the plugin's AWS configuration.
    pub fn new(config: &SdkConfig) -> Self {
        Self {
            client: Client::new(config),
        }
    }

    /// Wraps an existing client (tests build one with their own endpoint).
    pub fn from_client(client: Client) -> Self {
        Self { client }
    }
}

impl Ssm for SdkSsm {
    fn get_parameter<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<String>> {
        Box::pin(async move {
            let answer = match self.client.get_parameter().name(name).send().await {
                Ok(answer) => answer,
                Err(err) => {
                    let err = classify(err);
                    return if err.code() == "ParameterNotFound" {
                        Ok(None)
                    } else {
                        Err(err)
                    };
                }
            };
            answer
                .parameter()
                .and_then(|p| p.value())
                .map(|v| Some(v.to_owned()))
                .ok_or_else(|| {
                    AwsError::transport("response", "GetParameter answered without a value")
                })
        })
    }
}
