//! [`Iam`] on `aws-sdk-iam`. Built from the plugin's `SdkConfig` (region, credentials, the
//! `AWS_ENDPOINT_URL[_IAM]` override for emulators all come through `aws-config`). SDK types
//! stop here: every answer is converted into the port's types, every error classified by its
//! IAM code ([`AwsError::from_code`]).

use aws_config::SdkConfig;
use aws_sdk_iam::Client;
use aws_sdk_iam::types as sdk;

use super::{AwsError, AwsFuture, Iam, InstanceProfile, Tag};
use crate::aws::classify;

/// IAM through the AWS SDK.
#[derive(Debug, Clone)]
pub struct SdkIam {
    client: Client,
}

impl SdkIam {
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

/// An answer without the instance profile IAM always sends: the response is not IAM's.
fn missing_profile(action: &str) -> AwsError {
    AwsError::transport(
        "response",
        format!("{action} answered without an instance profile"),
    )
}

fn instance_profile(p: &sdk::InstanceProfile) -> InstanceProfile {
    InstanceProfile {
        name: p.instance_profile_name().to_owned(),
        arn: p.arn().to_owned(),
        path: p.path().to_owned(),
        roles: p.roles().iter().map(|r| r.role_name().to_owned()).collect(),
        tags: p
            .tags()
            .iter()
            .map(|t| Tag::new(t.key(), t.value()))
            .collect(),
    }
}

fn sdk_tags(tags: &[Tag]) -> Result<Vec<sdk::Tag>, AwsError> {
    tags.iter()
        .map(|t| {
            sdk::Tag::builder()
                .key(&t.key)
                .value(&t.value)
                .build()
                .map_err(|e| AwsError::InvalidParameter {
                    code: "InvalidInput".to_owned(),
                    message: e.to_string(),
                })
        })
        .collect()
}

impl Iam for SdkIam {
    fn get_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<InstanceProfile>> {
        Box::pin(async move {
            let answer = match self
                .client
                .get_instance_profile()
                .instance_profile_name(name)
                .send()
                .await
            {
                Ok(answer) => answer,
                Err(err) => {
                    let err = classify(err);
                    return if err.code() == "NoSuchEntity" {
                        Ok(None)
                    } else {
                        Err(err)
                    };
                }
            };
            answer
                .instance_profile()
                .map(instance_profile)
                .map(Some)
                .ok_or_else(|| missing_profile("GetInstanceProfile"))
        })
    }

    fn create_instance_profile<'a>(
        &'a self,
        name: &'a str,
        path: &'a str,
        tags: &'a [Tag],
    ) -> AwsFuture<'a, InstanceProfile> {
        Box::pin(async move {
            let tags = sdk_tags(tags)?;
            let answer = self
                .client
                .create_instance_profile()
                .instance_profile_name(name)
                .path(path)
                .set_tags((!tags.is_empty()).then_some(tags))
                .send()
                .await
                .map_err(classify)?;
            answer
                .instance_profile()
                .map(instance_profile)
                .ok_or_else(|| missing_profile("CreateInstanceProfile"))
        })
    }

    fn add_role_to_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .add_role_to_instance_profile()
                .instance_profile_name(profile)
                .role_name(role)
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
    }

    fn remove_role_from_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .remove_role_from_instance_profile()
                .instance_profile_name(profile)
                .role_name(role)
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
    }

    fn delete_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .delete_instance_profile()
                .instance_profile_name(name)
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
    }
}
